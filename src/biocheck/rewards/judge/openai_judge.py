"""`openai:<model>`: an OpenAI-compatible server (`vllm serve`, hosted APIs) as the evidence judge.

One chat completion per pair, `max_tokens=1`, `temperature=0`, `logprobs=true`, `top_logprobs=k`. The first
generated position's candidates (the top-k list plus the token actually generated) are mapped to labels: a
token counts for a label when, stripped of whitespace, it is a non-empty prefix of the label word (or starts
with the whole word), case-sensitive: "SUP", "SUPPORTED" -> SUPPORTED; "NOT" -> NOT ENOUGH INFORMATION. The
words start with different letters, so a token maps to at most one label and the sums stay <= 1. Several
tokens for one label (" SUP" and "SUP") add up; a label with no token among the candidates gets 0.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from biocheck.rewards.judge.base import (
    ANSWER_WORDS,
    DEFAULT_MAX_ABSTRACT_CHARS,
    KEYS,
    JudgeError,
    Pair,
    Scores,
    clean_scores,
    judge_prompt_hash,
    render_prompt,
)
from biocheck.secrets import redact

log = logging.getLogger(__name__)

KIND = "openai"


def label_of(token: str) -> str | None:
    """The label key a first answer token stands for, or None."""
    t = (token or "").strip()
    if not t:
        return None
    for key in KEYS:
        word = ANSWER_WORDS[key]
        if word.startswith(t) or t.startswith(word):
            return key
    return None


def scores_from_logprobs(data: dict[str, Any]) -> Scores:
    """s per label from a chat-completions answer with logprobs (see the module docstring)."""
    try:
        first = data["choices"][0]["logprobs"]["content"][0]
    except (KeyError, IndexError, TypeError):
        raise JudgeError("the server returned no logprobs for the first token (does it support "
                         "logprobs/top_logprobs?)") from None
    candidates: dict[str, float] = {}
    for entry in [first, *(first.get("top_logprobs") or [])]:
        if not isinstance(entry, dict):
            continue
        token, lp = entry.get("token"), entry.get("logprob")
        if isinstance(token, str) and isinstance(lp, int | float) and math.isfinite(lp):
            candidates.setdefault(token, float(lp))  # the generated token is also in the top list: count it once
    raw = dict.fromkeys(KEYS, 0.0)
    for token, lp in candidates.items():
        key = label_of(token)
        if key is not None:
            raw[key] += math.exp(lp)
    return clean_scores(raw)


class OpenAIJudge:
    """Scores pairs through an OpenAI-compatible chat-completions endpoint, `workers` requests at a time."""

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 top_logprobs: int = 20, workers: int = 8, timeout: float = 120.0, max_attempts: int = 4,
                 max_abstract_chars: int | None = DEFAULT_MAX_ABSTRACT_CHARS) -> None:
        from biocheck.llm.openai_backend import OpenAIChat
        from biocheck.llm.spec import spec_ref

        model = spec_ref(model, KIND)
        if not model:
            raise JudgeError("openai judge: empty model name")
        self.spec = f"{KIND}:{model}"
        self.model = model
        self.top_logprobs = top_logprobs
        self.workers = max(1, workers)
        self.max_abstract_chars = max_abstract_chars
        # Reuse the agent backend's client: base URL and key from the environment, retries with backoff.
        self._chat = OpenAIChat(model, base_url=base_url, api_key=api_key, timeout=timeout,
                                max_attempts=max_attempts)
        self.prompt_hash = judge_prompt_hash("openai", self.top_logprobs, self.max_abstract_chars)

    def fingerprint(self) -> str:
        return self._chat.fingerprint()

    def score(self, pairs: Sequence[Pair]) -> list[Scores]:
        if not pairs:
            return []
        prompts = [render_prompt(claim, article, self.max_abstract_chars) for claim, article in pairs]
        if self.workers == 1 or len(prompts) == 1:
            return [self._one(p) for p in prompts]
        with ThreadPoolExecutor(min(self.workers, len(prompts))) as pool:
            return list(pool.map(self._one, prompts))

    def _one(self, prompt: str) -> Scores:
        body = {"model": self.model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 1,
                "temperature": 0.0, "logprobs": True, "top_logprobs": self.top_logprobs}
        from biocheck.llm.base import LLMError

        try:
            data = self._chat._post("/chat/completions", body)
        except LLMError as e:
            raise JudgeError(redact(f"{self.spec}: {e}")) from None
        return scores_from_logprobs(data)
