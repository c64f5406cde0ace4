"""The inline engine (`--workers 1`): the row step runs in the driver, on the template the
driver already loaded (no worker process, no second template load)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from draftset.engine.base import Batch, Engine, EnginePlan, WorkerTask, unpack
from draftset.mask.template import Renderer


class InlineEngine(Engine):
    name = "inline"
    in_driver = True

    @classmethod
    def open(cls, plan: EnginePlan) -> InlineEngine:
        assert plan.template is not None, "the inline engine runs on the driver's template"
        return cls(plan.template)

    def __init__(self, template: Renderer) -> None:
        self.template = template
        self.step: Any = None

    def start(self, config: WorkerTask) -> None:
        self.step = config.build(template=self.template)

    def map(self, batches: Iterable[Batch], max_rows: int | None = None) -> Iterator[Any]:
        assert self.step is not None, "start() first"
        for batch in batches:
            yield self.step(unpack(batch))


ENGINE = InlineEngine
