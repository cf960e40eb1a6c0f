"""`StageRun`: what every stage runner does around its work (params loaded and checked, the MLflow context made
before the work, one run after it)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biocheck import tracking
from biocheck.params import plain
from biocheck.wiring import (
    params_of,
    tracked,
)


@dataclass
class StageRun:
    """What every stage runner does around its work: the params loaded and checked (`p`), the MLflow context
    made before the work (a bad `tracking:` section fails in seconds, not after hours), and after it one run
    with the profile and the stage's configs as params. A stage whose own code opens its runs (sft, train,
    select, evaluate) enters `track` instead."""

    p: dict[str, Any]
    track: Any

    @classmethod
    def of(cls, params: Path | str | dict[str, Any], **values: Any) -> StageRun:
        p = params_of(params)
        return cls(p, tracked(p, **values))

    @contextlib.contextmanager
    def record(self, stage: str, run_name: str | None = None, tags: dict[str, Any] | None = None,
               **params: Any) -> Iterator[Any]:
        """The stage's MLflow run: params are the profile and `params` (a config is logged as plain data)."""
        logged = {"profile": self.p.get("profile"),
                  **{k: plain(v) if dataclasses.is_dataclass(v) else v for k, v in params.items()}}
        with self.track, tracking.run(stage, run_name=run_name, params=logged, tags=tags) as active:
            yield active
