"""The engine factory: one registry line per engine, and the choice of engine it makes."""

from __future__ import annotations

import os

import pytest

from draftset.engine import CHOICES, ENGINES, IN_DRIVER, engine_name
from draftset.engine.base import Engine
from draftset.engine.factory import engine_class
from draftset.engine.helper import uses_helper


def test_every_registered_engine_is_an_engine_under_its_name():
    for name in ENGINES:
        cls = engine_class(name)
        assert issubclass(cls, Engine) and cls.name == name
        assert cls.in_driver == (name == IN_DRIVER)  # the one engine without a helper
    assert set(CHOICES) == set(ENGINES) - {IN_DRIVER}  # every registered engine can be named


def test_local_with_one_worker_runs_inline_and_only_it_skips_the_helper():
    assert engine_name("local", 1) == "inline"
    assert engine_name("local", 2) == "local"
    assert engine_name("ray", 1) == "ray"  # Ray with one actor is still Ray
    cores = os.cpu_count() or 1
    assert engine_name("local", 0) == ("inline" if cores == 1 else "local")
    assert engine_name("local", None) == engine_name("local", 0)
    assert not uses_helper(1, "local")
    assert uses_helper(2, "local") and uses_helper(1, "ray")


def test_an_unknown_engine_name_is_a_key_error():
    with pytest.raises(KeyError):
        engine_class("spark")
