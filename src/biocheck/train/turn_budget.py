"""A turn after a tool call generates at most what the episode's budget leaves, not a whole turn's limit.

`max_completion_length` caps an episode's completion, tool results included. TRL's tool loop generates each
later turn to `max_new_tokens` (the agent's per-turn limit) and then cuts every row to what its budget leaves:
an episode that loops in its second turn decoded up to a whole turn's tokens past its cut, and those are the
slowest steps of a run. Here a later turn's `max_new_tokens` is the most any of its rows may keep. From the same
random state each row keeps the same tokens: decoding stops only after every row's cut, and a token never
depends on later ones (tests/test_turn_budget.py). Not bitwise neutral over a run: the skipped tokens drew no
random numbers, so every later turn samples from another point of the seed's stream (the same distribution).
"""

from __future__ import annotations

import copy
from typing import Any


def turn_limit(rows: list[list[int]], prompts: list[list[int]], budget: int) -> int | None:
    """The most tokens any of `rows` (prompt + completion + tool results) may still keep under `budget`; None
    when a row starts with none of `prompts` (then its budget is unknown)."""
    lengths = sorted({len(p) for p in prompts}, reverse=True)
    by_length = {n: {tuple(p) for p in prompts if len(p) == n} for n in lengths}
    left = []
    for row in rows:
        n = next((n for n in lengths if n <= len(row) and tuple(row[:n]) in by_length[n]), None)
        if n is None:
            return None
        left.append(budget - (len(row) - n))
    return max(1, max(left, default=1))


class TurnBudgetMixin:
    """GRPOTrainer mixin: each later turn of the tool loop generates at most what its rows' budgets leave."""

    turn_budget: bool = False
    _loop_prompts: list[list[int]] | None = None

    def _tool_call_loop(self, prompts, prompt_ids, *args: Any, **kwargs: Any):  # type: ignore[override]
        self._loop_prompts = prompt_ids if self.turn_budget else None
        try:
            return super()._tool_call_loop(prompts, prompt_ids, *args, **kwargs)  # type: ignore[misc]
        finally:
            self._loop_prompts = None

    def _generate_single_turn(self, prompt_ids, *args: Any, **kwargs: Any):  # type: ignore[override]
        limit = None if self._loop_prompts is None else turn_limit(prompt_ids, self._loop_prompts,
                                                                   self.max_completion_length)
        config = getattr(self, "generation_config", None)
        if limit is None or config is None or self.use_vllm or not config.max_new_tokens \
                or limit >= config.max_new_tokens:
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)  # type: ignore[misc]
        full = config
        self.generation_config = copy.deepcopy(config)
        self.generation_config.max_new_tokens = limit
        try:
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)  # type: ignore[misc]
        finally:
            self.generation_config = full


__all__ = ["TurnBudgetMixin", "turn_limit"]
