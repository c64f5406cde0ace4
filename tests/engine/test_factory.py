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


def _torch_imported() -> bool:
    import sys

    return "torch" in sys.modules


def test_the_helper_loads_the_template_without_torch(tmp_path):
    """transformers 5 imports torch with ``AutoTokenizer`` whenever it is installed (~230 MB
    that stay); the local engine's helper is one of the row-step workers, so it carried torch
    through the whole run (issue 27: summed RSS over 1 GiB). The helper loads the template with
    torch kept out and never imports it (token_freq.pt needs none: `output.pt_file`), and
    loads the same template the driver would."""
    from conftest import qwen3_tokenizer_dir

    from draftset.engine.factory import open_stage
    from draftset.mask.template import TemplateSpec, load_template_info

    spec = TemplateSpec(str(qwen3_tokenizer_dir()))
    with open_stage(spec, "local", 2) as stage:
        info = stage.loaded()
        assert stage.side is not None
        assert stage.side.call("asking", _torch_imported) is False
        stage.engine.finish()
    assert info == load_template_info(spec)  # loaded here, torch imported: the same template


def test_a_pool_worker_starting_without_torch_says_nothing():
    """torch is an extra: without it, each pool worker's start-up import of transformers'
    template compiler printed transformers' "PyTorch was not found" advisory into a
    ``--workers 2`` build's output (the driver and the helper, which load the template, keep
    transformers' verbosity at errors; the workers did not)."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from draftset.mask.template import import_template_compiler\n"
        "import_template_compiler()\n"
    )
    from pathlib import Path

    import draftset

    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_VERBOSITY"}
    env["PYTHONPATH"] = str(Path(draftset.__file__).parents[1])  # this tree's draftset
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and done.stdout == ""


def test_a_helper_killed_while_the_template_loads_is_a_dead_process_not_a_bad_tokenizer():
    """The helper killed (the out-of-memory killer) while it loaded the template ended the
    build as a `TokenizerError`: ``draftset: error: the helper process died ...``, exit 2, the
    code of a bad argument, where a helper killed later was exit 1 (docs/output.md, errors.md)."""
    import signal

    from conftest import qwen3_tokenizer_dir

    from draftset.core.errors import UsageError
    from draftset.engine.factory import open_stage
    from draftset.engine.helper import Sidecar, SidecarError
    from draftset.mask.template import TemplateSpec

    spec = TemplateSpec(str(qwen3_tokenizer_dir()))
    side = Sidecar()
    pid = side.call("asking", os.getpid)
    with open_stage(spec, "local", 2, helper=side) as stage:
        os.kill(pid, signal.SIGKILL)  # while the load runs: it takes a second or more
        with pytest.raises(SidecarError) as caught:
            stage.loaded()
    assert not isinstance(caught.value, UsageError)
    assert str(caught.value) == (
        f"the helper process died while loading tokenizer {spec.tokenizer!r}"
        " (killed, or out of memory?)"
    )
