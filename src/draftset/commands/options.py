"""A job's option model (`config.schema`) as argparse options, and parsed options back as the
API's keyword arguments: the command line declares no option of its own."""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import BaseModel

from draftset.config.fields import (
    choices_of,
    cli_fields,
    cli_of,
    flag_of,
    help_of,
    scalar_type,
)


def add_options(
    parser: argparse.ArgumentParser,
    model: type[BaseModel],
    required_mutex: frozenset[str] = frozenset(),
    types: dict[str, Any] | None = None,
) -> None:
    """One ``add_argument`` per field of ``model`` that the command line has, in field order.

    Every option's argparse default is None ("not given": a recipe's value, else the model's
    default, stands). ``required_mutex``: the mutually exclusive groups of which one option
    must be given; ``types``: argparse conversions with the command's own messages.
    """
    groups: dict[str, Any] = {}
    for name in cli_fields(model):
        cli = cli_of(model, name)
        kw: dict[str, Any] = {"help": help_of(model, name)}
        choices = choices_of(model, name)
        if cli.action:
            kw["action"] = cli.action
        conversion = (types or {}).get(name) or cli.type
        if conversion is None and cli.action != "store_true":
            conversion = scalar_type(model.model_fields[name].annotation)
        if conversion is not None:
            kw["type"] = conversion
        if choices is not None:
            kw["choices"] = choices
        if cli.nargs:
            kw["nargs"] = cli.nargs
        if cli.positional:
            kw["metavar"] = cli.metavar
            parser.add_argument(name, **kw)
            continue
        kw["dest"] = name
        kw["default"] = None
        if cli.required:
            kw["required"] = True
        # a registry that loads on use: argparse formats the metavar when an option is added,
        # which would list (and import) the names; it lists them only for --help now
        lazy = choices is not None and choices.lazy and cli.metavar is None
        flags = cli.flags or (flag_of(model, name),)
        if cli.action != "store_true":  # named after its flag (``--eot-token EOT_TOKEN``)
            spelled = flags[-1].lstrip("-").replace("-", "_").upper()
            kw["metavar"] = "CHOICE" if lazy else cli.metavar or (None if choices else spelled)
        target: Any = parser
        if cli.mutex:
            if cli.mutex not in groups:
                groups[cli.mutex] = parser.add_mutually_exclusive_group(
                    required=cli.mutex in required_mutex
                )
            target = groups[cli.mutex]
        action = target.add_argument(*flags, **kw)
        if lazy:
            action.metavar = None


def parsed(args: argparse.Namespace, model: type[BaseModel]) -> dict[str, Any]:
    """The parsed options of ``model`` as keyword arguments (None: not given)."""
    return {name: getattr(args, name) for name in cli_fields(model)}
