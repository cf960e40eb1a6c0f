"""The evidence judge (the scorer behind R_evidence and EQS), chosen by the agent's spec strings.

  transformers:<path or hub id>   `TransformersJudge`: next-token log-probabilities, one forward pass per batch
  openai:<model>                  `OpenAIJudge`: logprobs / top_logprobs of the first generated token
  none | off | "" | None          no judge: the reward code uses s = 0 and says the judge was off

The judge may be the policy itself, its frozen base, or any other model: it is a param. With `cache=PATH`
the judge is wrapped in `CachedJudge` over a `JudgeCache`, so a pair is never scored twice.
docs/rewards.md gives the prompt, the answer tokens and the cache key.
"""

from __future__ import annotations

import os
from typing import Any

from biocheck.llm.spec import split_spec
from biocheck.rewards.judge.align_judge import AlignJudge, is_align_judge
from biocheck.rewards.judge.base import (
    ANSWER_WORDS,
    KEYS,
    Judge,
    JudgeError,
    Pair,
    Scores,
    clean_scores,
    judge_prompt_hash,
    prompt_template,
    render_prompt,
)
from biocheck.rewards.judge.cache import CachedJudge, JudgeCache, JudgeCacheError, pair_key
from biocheck.rewards.judge.openai_judge import OpenAIJudge  # imports httpx only when built
from biocheck.rewards.judge.transformers_judge import TransformersJudge  # imports torch only when built

OFF = ("", "none", "off", "null", "false")


def make_judge(spec: str | None, *, batch_size: int = 8, cache: str | os.PathLike[str] | JudgeCache | None = None,
               **kwargs: Any) -> Judge | None:
    """The judge for a spec string (None for "none"/"off"/""), cached when `cache` is a path or a JudgeCache.

    Extra keyword arguments go to the backend (`TransformersJudge`: device, dtype, mode, max_abstract_chars;
    `OpenAIJudge`: base_url, api_key, top_logprobs, workers, ...).
    """
    if spec is None or str(spec).strip().lower() in OFF:
        return None
    kind, ref = split_spec(spec)
    judge: Judge
    if kind == "transformers" and ref:
        if is_align_judge(ref):  # a folder written by `judge train` (recipe align): same protocol, other read-out
            kwargs.pop("mode", None)
            judge = AlignJudge(ref, batch_size=batch_size, **kwargs)
        else:
            judge = TransformersJudge(ref, batch_size=batch_size, **kwargs)
    elif kind == "openai" and ref:
        kwargs.setdefault("workers", batch_size)
        judge = OpenAIJudge(ref, **kwargs)
    else:
        raise JudgeError(f"bad judge spec {spec!r}: expected transformers:<path or hub id>, openai:<model>, or none")
    if cache is None:
        return judge
    return CachedJudge(judge, cache if isinstance(cache, JudgeCache) else JudgeCache(cache))


__all__ = [
    "ANSWER_WORDS",
    "AlignJudge",
    "KEYS",
    "CachedJudge",
    "Judge",
    "JudgeCache",
    "OpenAIJudge",
    "TransformersJudge",
    "JudgeCacheError",
    "JudgeError",
    "Pair",
    "Scores",
    "clean_scores",
    "make_judge",
    "pair_key",
    "judge_prompt_hash",
    "prompt_template",
    "render_prompt",
]

