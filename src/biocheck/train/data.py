"""Prepared claims -> the datasets TRL trains and evaluates on (prompts built by the agent's own code)."""

from __future__ import annotations

from typing import Any

from biocheck.agent.prompts import Prompts
from biocheck.data.schema import ClaimRecord


def prompt_messages(prompts: Prompts, claim: str) -> list[dict[str, str]]:
    # Exactly Agent.initial_messages: the policy is trained on the prompt it is evaluated with.
    return [{"role": "system", "content": prompts.system()}, {"role": "user", "content": prompts.user(claim)}]


def to_rows(records: list[ClaimRecord], prompts: Prompts) -> list[dict[str, Any]]:
    return [{"prompt": prompt_messages(prompts, r.claim), "claim": r.claim, "label": r.label.value,
             "claim_id": r.id, "dataset": r.dataset} for r in records]


def to_dataset(records: list[ClaimRecord], prompts: Prompts):
    from datasets import Dataset

    return Dataset.from_list(to_rows(records, prompts))
