"""Prepared claims -> the datasets TRL trains and evaluates on (the prompt is `Prompts.messages`, exactly the agent's)."""

from __future__ import annotations

from typing import Any

from biocheck.agent.prompts import Prompts
from biocheck.data.schema import ClaimRecord


def to_rows(records: list[ClaimRecord], prompts: Prompts) -> list[dict[str, Any]]:
    return [{"prompt": prompts.messages(r.claim), "claim": r.claim, "label": r.label.value,
             "claim_id": r.id, "dataset": r.dataset} for r in records]


def to_dataset(records: list[ClaimRecord], prompts: Prompts):
    from datasets import Dataset

    return Dataset.from_list(to_rows(records, prompts))
