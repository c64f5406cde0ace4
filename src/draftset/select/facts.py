"""Selection on facts: the run's ordered, stateful choices made without the rows' bytes (issue 27).

What the selection steps decide on is a few facts a row: its kind, its id, its content digest
(exact dedup), the benchmark item it shares an n-gram with (decontamination), its prompt's
MinHash values (near dedup), whether it can train (`can_train`: a copy that cannot is never kept
over one that can). `Scanner` computes them where the row is read: a build's worker
reading its own block of a source, or the driver for a source it reads itself. `Decider` is the
ordered part, run by the driver in input order: unique ids, the first copy kept, the steps'
counters; it turns each row's facts into a `Decision` (a reject, a new id, or nothing), and
`apply` makes it on the row wherever the row is. `select.mix.Selection` and the build's blocks
go through the same three, so a row is decided the same way whoever read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from draftset.core import reasons, rules
from draftset.core.ids import IdRegistry, duplicate_id_message
from draftset.core.records import (
    NOT_TRAINED,
    Conversation,
    Normalized,
    PreTokenized,
    PromptOnly,
    Reject,
)
from draftset.select.dedup import ExactDeduper, NearDeduper

if TYPE_CHECKING:  # the filters hold the steps; mix.py imports this module
    from draftset.select.mix import Filters

CONVERSATION, PROMPT, PRETOKENIZED, REJECT = range(4)
"""A row's kind, as normalized."""


class RowFacts(NamedTuple):
    """What the selection decides a row on (never its text)."""

    kind: int
    id: str | None  # as normalized (a reject's own id; None for a row that could not be parsed)
    file: str | None  # the file inside a source of several (ids of two files never collide)
    key: int = 0  # exact dedup: the content digest (0: not asked for)
    bench: int | None = None  # decontamination: the benchmark item it shares an n-gram with
    hashes: np.ndarray | None = None  # near dedup: its prompt's MinHash values
    trains: bool = True  # dedup: `can_train`


Decision = Reject | str | None
"""A selection reject, the row's new (source-prefixed) id, or None: kept as it is."""


def can_train(
    item: Normalized, turns: str, placeholders: tuple[str, ...], answered: str | None
) -> bool:
    """Whether the row can give a supervised token, judged before any render (so a worker or the
    driver can, on the row alone): a conversation with an answer ``turns`` supervises that no
    rule rules out (`rules.may_supervise`: not "OK.", not its prompt copied, not cut off, not
    weighted 0). ``answered``: `draftset run`'s ``regenerate`` (None in a build): the target
    answers prompt-only and padded rows, and with ``all`` every row not weighted 0, so those
    can train too. The row step may still reject a row that can (too long, a template error):
    those are decided on the rendered row, which dedup never sees."""
    if isinstance(item, PromptOnly):
        return answered is not None
    if not isinstance(item, Conversation):
        return True
    if (  # in `run`, the rows the target answers (a build skips this at its first test)
        answered is not None
        and not item.meta.get(NOT_TRAINED)
        and (answered == "all" or rules.all_padded_answers(item, placeholders))
    ):
        return True
    return rules.may_supervise(item.messages, item.meta, turns, placeholders)


def kind_of(item: Normalized) -> int:
    if isinstance(item, Conversation):
        return CONVERSATION
    if isinstance(item, PromptOnly):
        return PROMPT
    if isinstance(item, PreTokenized):
        return PRETOKENIZED
    return REJECT


class Scanner:
    """Computes a row's facts (pure per row: any worker, any order)."""

    def __init__(self, filters: Filters) -> None:
        self.decontaminator = filters.decontaminator
        self.exact = any(isinstance(d, ExactDeduper) for d in filters.dedupers)
        self.near = next((d for d in filters.dedupers if isinstance(d, NearDeduper)), None)
        self.trains = filters.spec.trains if filters.dedupers else None

    def facts(self, item: Normalized, file: str | None) -> RowFacts:
        kind = kind_of(item)
        if kind == REJECT:
            return RowFacts(kind, item.id, file)
        assert not isinstance(item, Reject)
        if kind == PRETOKENIZED:
            return RowFacts(kind, item.id, file)
        assert isinstance(item, Conversation | PromptOnly)
        return RowFacts(
            kind,
            item.id,
            file,
            ExactDeduper.key(item) if self.exact else 0,
            self.decontaminator.find(item) if self.decontaminator is not None else None,
            self.near.hashes(item) if self.near is not None else None,
            self.trains is None or self.trains(item),
        )


class Decider:
    """The ordered choices of one pass, made on facts in input order: a row's id, or its
    source-prefixed id when taken (`IdRegistry`), then decontamination, exact and near dedup
    (the first copy in input order that can train is kept). The counters stay in ``filters``."""

    def __init__(self, filters: Filters) -> None:
        self.filters = filters
        self.registry = IdRegistry()

    def decide(self, source: str, row: int, facts: RowFacts) -> Decision:
        if facts.kind == REJECT:
            # its id (or made-up key) is taken as `generate` takes it: the ids after it agree
            self.registry.claim_key(facts.id, source, row, facts.file)
            return None
        if facts.id is None:
            return None
        rid, own = self.registry.claim_key(facts.id, source, row, facts.file)
        if not own:
            msg = duplicate_id_message(facts.id)
            return Reject(source, row, facts.id, reasons.DUPLICATE_ID, msg)
        if facts.kind in (CONVERSATION, PROMPT):
            reject = self._filter(source, row, rid, facts)
            if reject is not None:
                return reject
        return rid if rid != facts.id else None

    def _filter(self, source: str, row: int, rid: str, facts: RowFacts) -> Reject | None:
        filters = self.filters
        if filters.decontaminator is not None:
            reject = filters.decontaminator.record(source, row, rid, facts.bench)
            if reject is not None:
                return reject
        for step in filters.dedupers:
            if isinstance(step, ExactDeduper):
                reject = step.check_key(source, row, rid, facts.key, facts.trains)
            else:
                reject = step.check_hashes(source, row, rid, facts.hashes, facts.trains)
            if reject is not None:
                return reject
        return None


def apply(item: Normalized, decision: Decision) -> Normalized:
    """The decision made on the row itself."""
    if decision is None or isinstance(item, Reject):
        return item
    if isinstance(decision, Reject):
        return decision
    item.id = decision
    return item
