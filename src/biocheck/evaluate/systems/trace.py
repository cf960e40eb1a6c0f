"""What the baselines share: an episode in the making (`Trace`) and the fingerprint.

A baseline's trace is the agent's own `Episode`: the messages it sent and received, the searches and
the papers they retrieved (when it searches), the final text, a report that holds only the conclusion,
the model and prompt fingerprints. A model failure (LLMError) ends the episode with stop_reason
"llm_error: ..." exactly as the agent's graph does; nothing is raised.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import asdict, is_dataclass
from typing import Any

from biocheck.agent.budget import QueryRecord
from biocheck.agent.episode import Episode
from biocheck.agent.graph import LLM_ERROR
from biocheck.agent.report.schema import Report
from biocheck.data.schema import ClaimRecord
from biocheck.evidence.types import Article
from biocheck.io import json_digest
from biocheck.labels import Label
from biocheck.llm.base import AssistantTurn, ChatLLM, LLMError
from biocheck.secrets import redact


def fingerprint(name: str, llm_fingerprint: str, prompt_hash: str, settings: Any) -> str:
    """16 hex digits over everything that changes a baseline's answers."""
    settings = asdict(settings) if is_dataclass(settings) else settings
    key = {"system": name, "llm_fingerprint": llm_fingerprint, "prompt_hash": prompt_hash, "settings": settings}
    return json_digest(key)


class Trace:
    """One claim's messages, model calls and timing; `episode(...)` seals it."""

    def __init__(self, llm: ChatLLM, llm_fingerprint: str, claim: ClaimRecord) -> None:
        self.llm, self.llm_fingerprint, self.claim = llm, llm_fingerprint, claim
        self.messages: list[dict[str, Any]] = []
        self.llm_calls = 0
        self.llm_seconds = 0.0
        self.llm_times: list[tuple[int, int]] = []  # each turn's wall-clock start and end (ns since the epoch)
        self.error: str | None = None  # "llm_error: ..." once the model failed
        self.started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self._t0, self._began = time.perf_counter(), time.time_ns()

    def say(self, role: str, content: str) -> None:
        self.messages.append({"role": role, "content": content})

    def ask(self) -> AssistantTurn | None:
        """One model turn on the conversation so far (appended to it); None when the model failed."""
        t0, began = time.perf_counter(), time.time_ns()
        self.llm_calls += 1
        try:
            turn = self.llm.chat(list(self.messages), [])  # no tools: the baselines read plain text
        except LLMError as e:  # a dead server ends this episode, not the evaluation
            self.error = f"{LLM_ERROR}: {redact(e)}"
            return None
        finally:
            self.llm_seconds += time.perf_counter() - t0
            self.llm_times.append((began, time.time_ns()))
        msg = turn.to_message()
        if turn.raw is not None:
            msg["raw"] = turn.raw
        if turn.usage:
            msg["usage"] = dict(turn.usage)  # tokens per claim (chat templates ignore unknown keys)
        self.messages.append(msg)
        return turn

    def episode(self, *, final_text: str, label: Label | None, problems: list[str], stop_reason: str,
                prompt_hash: str, config: Any, search_backend: str = "", searches: int = 0,
                queries: list[QueryRecord] | None = None, ledger: dict[str, Article] | None = None,
                tool_errors: list[str] | None = None, search_seconds: float = 0.0,
                search_times: list[tuple[int, int]] | None = None) -> Episode:
        c = self.claim
        return Episode(
            claim=c.claim, claim_id=c.id, dataset=c.dataset, gold_label=c.label,
            messages=self.messages, queries=list(queries or []), ledger=dict(ledger or {}),
            tool_errors=list(tool_errors or []), final_text=final_text,
            report=Report(conclusion=label), parse_problems=list(problems),
            stop_reason=self.error or stop_reason, searches=searches, llm_calls=self.llm_calls,
            llm=self.llm.spec, llm_fingerprint=self.llm_fingerprint, prompt_hash=prompt_hash,
            search_backend=search_backend, config=asdict(config) if is_dataclass(config) else dict(config or {}),
            timing={"total_s": round(time.perf_counter() - self._t0, 4), "llm_s": round(self.llm_seconds, 4),
                    "search_s": round(search_seconds, 4)},
            clock={"episode": [(self._began, time.time_ns())], "llm": list(self.llm_times),
                   "search": list(search_times or [])},
            started_at=self.started,
        )
