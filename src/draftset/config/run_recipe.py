"""A run recipe's sections of its own (docs/run.md): ``generate:`` (the server that answers)
and ``verify:`` (a render server), checked before any work as `draftset run` reads them.
"""

from __future__ import annotations

import re
from typing import Any

from draftset.config.fields import strings, unknown_keys, validated
from draftset.config.recipe import GENERATE_WORDS, places
from draftset.config.schema import GenerateSection, VerifySection
from draftset.core.errors import UsageError


def api_key_env_problem(value: Any) -> str | None:
    """Why a recipe's ``generate.api_key_env`` is no variable's name, or None. The key itself
    written there (``sk-proj-...``) was said back as "names $sk-proj-..., which is not set" and
    kept in the run's state: it is never shown."""
    if not isinstance(value, str) or re.fullmatch(r"[A-Za-z_]\w*", value, re.ASCII):
        return None  # not a string: the schema names the type
    bare = value[1:].strip("{}")
    if value.startswith("$") and re.fullmatch(r"[A-Za-z_]\w*", bare, re.ASCII):
        return f"takes the variable's name without the $: api_key_env: {bare}"
    return (
        "takes the name of an environment variable (letters, digits and _, e.g. MY_KEY), and"
        " this is none (not shown: a key itself?): export the key as a variable and name that"
    )


def refuse_unknown_generate_keys(section: Any, recipe: str, error: type[UsageError]) -> None:
    """``error`` (`run`'s usage error) for a key the recipe's ``generate:`` mapping may not
    hold, saying where it goes (a build key such as ``tokenizer:`` written there, generate's
    own words)."""
    unknown = set(section) - set(GenerateSection.model_fields) if isinstance(section, dict) else ()
    if unknown:
        known = GenerateSection.model_fields
        said = unknown_keys(unknown, known, {**GENERATE_WORDS, **places(known)})
        raise error(f"recipe {recipe}: generate: {said}")


def generate_section(section: Any, recipe: str, error: type[UsageError]) -> GenerateSection:
    """The recipe's ``generate:`` mapping, typed by `config.schema.GenerateSection`
    (``error``: `run`'s usage error, raised for a section it cannot use)."""
    if not isinstance(section, dict):
        raise error(
            f"recipe {recipe} needs a `generate:` mapping for `draftset run`: the server that"
            " answers, e.g. generate: {endpoints: [http://127.0.0.1:8000/v1]}"
            " (examples/run.yaml; docs/run.md)"
        )
    refuse_unknown_generate_keys(section, recipe, error)
    if problem := api_key_env_problem(section.get("api_key_env")):
        raise error(f"recipe key generate.api_key_env: {problem}")
    values = {k: v for k, v in section.items() if v is not None}
    gen = validated(GenerateSection, values, recipe="generate.", strict=True, error=error)
    thinking = gen.thinking  # YAML's `thinking: off` is a boolean
    return gen.model_copy(
        update={
            "endpoints": list(strings(gen.endpoints)),
            "extra_body": dict(gen.extra_body or {}),
            "thinking": ("on" if thinking else "off") if isinstance(thinking, bool) else thinking,
        }
    )


def render_server_url(section: Any, where: str, error: type[UsageError]) -> str | None:
    """The recipe's `verify: {render_server: URL}`, checked (`checks.serving.connect` then
    checks it answers, before any work)."""
    if section is None:
        return None
    known = set(VerifySection.model_fields)
    if not isinstance(section, dict) or set(section) - known:
        unknown = set(section) - known if isinstance(section, dict) else set()
        bad = f" ({unknown_keys(unknown, known, places(known))})" if unknown else ""
        raise error(f"{where}: `verify:` takes only `render_server: URL`{bad}")
    return validated(
        VerifySection, section, recipe="verify.", strict=True, error=error
    ).render_server
