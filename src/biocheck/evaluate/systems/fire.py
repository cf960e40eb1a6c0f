"""`fire`: iterative verification in the style of FIRE (Xie et al., 2025): answer when confident, else search.

One conversation per claim (prompts/fire_*.md). At each of at most `max_steps` steps the model replies
either "Answer: <label>" (the episode ends) or "Search: <query>"; the query runs through the agent's
own tool step (agent.budget.SearchBudget over the agent's SearchTool: the same backend, ledger and
query log) and the papers come back as the next user turn. Searching stops early, and the model is
told to answer now, when
  - the new query is >= `similarity` cosine-similar to an earlier query (it is not run), or
  - the papers it found are >= `similarity` cosine-similar to the papers of an earlier search
    (searches that found nothing are not compared: "no papers" twice is not the same evidence),
or when `max_steps` searches have run. A reply that is neither a search nor an answer is met with a
short correction turn and asked again, at most `max_retries` times per step; then the searching stops
(in the final answer: the episode ends without a label).

Deviations from FIRE, on purpose: PubMed (the agent's search tool) instead of Google search; the
similarity is a bag-of-words cosine (word counts, lower-cased) instead of a sentence-embedding model,
so it runs offline and costs nothing; the steps are one growing conversation rather than one prompt
rebuilt per step (the same information, and a retry after a correction can differ even at temperature
0); the early stop fires on one similar earlier query or evidence (FIRE's `tolerance` of repeats is 1).

stop_reason: "final_answer" (the model answered), "max_steps" / "similar_query" / "similar_evidence" /
"malformed_output" (why the searching stopped before the forced answer), "malformed_output" also when
no label could be read at the end, "llm_error: ..." when the model failed.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from biocheck.agent.budget import SearchBudget
from biocheck.agent.episode import Episode
from biocheck.agent.prompts import Prompts
from biocheck.agent.tools import TOOL_NAME
from biocheck.bounds import Count, NonNegative, PositiveShare
from biocheck.data.schema import ClaimRecord
from biocheck.evaluate.systems import prompts
from biocheck.evaluate.systems.trace import Trace, fingerprint
from biocheck.evaluate.systems.verdict import read_verdict
from biocheck.labels import Label
from biocheck.llm.base import AssistantTurn, ChatLLM

NAME = "fire"
MALFORMED = "malformed_output"
# "Search: q", "**Search:** q", "Search query = q" on a line of its own (after markdown decoration).
_SEARCH_LINE = re.compile(r"search(?:[ _-]?query)?[*_\s]*[:=][*_\s]*(?P<q>.*)$", re.I)
_WORD = re.compile(r"[^\W_]+")


@dataclass
class FIREConfig:
    max_steps: Count = 5  # searches at most (each step: answer or search), then a forced answer
    similarity: PositiveShare = 0.9  # bag-of-words cosine at or above which a query / its evidence counts as a repeat
    max_retries: NonNegative = 10  # re-asks per step after a reply that is neither a search nor an answer
    abstract_chars: Count | None = None  # cut each abstract the model reads (as agent.abstract_chars)



def bag(text: str) -> Counter[str]:
    return Counter(w.lower() for w in _WORD.findall(text))


def cosine(a: Counter[str], b: Counter[str]) -> float:
    dot = sum(n * b[w] for w, n in a.items())
    norm = math.sqrt(sum(n * n for n in a.values())) * math.sqrt(sum(n * n for n in b.values()))
    return dot / norm if norm else 0.0


def search_query(turn: AssistantTurn) -> str | None:
    """The query of a search reply: a `search_pubmed` tool call or a "Search: <query>" line."""
    for call in turn.tool_calls:
        query = call.arguments.get("query") if isinstance(call.arguments, dict) else None
        if call.name == TOOL_NAME and isinstance(query, str) and query.strip():
            return query.strip()
    text = turn.content or ""
    close = text.lower().rfind("</think>")
    body = text[close + len("</think>"):] if close >= 0 else text  # not a query thought about, one written
    for line in body.splitlines():
        m = _SEARCH_LINE.match(line.strip().lstrip("*_#>-` \t"))
        query = m.group("q").strip().strip("`").strip() if m else ""
        query = query[:-2].rstrip() if query.endswith("**") else query  # bold markup, not truncation (x*)
        if query:
            return query
    return None


class FIRE:
    """Answer-or-search steps over the agent's search tool, with FIRE's early stops and retry bound."""

    name = NAME
    writes_report = False

    def __init__(self, llm: ChatLLM, tool: Any, cfg: FIREConfig | None = None, search_backend: str = "") -> None:
        self.llm, self.tool = llm, tool
        self.cfg = cfg or FIREConfig()
        self.search_backend = search_backend
        # The agent's tool-step texts with FIRE's budget: the searches run exactly as the agent's do.
        self.tool_prompts = Prompts.for_tool(self.cfg.max_steps, tool)
        self.constants = {"max_steps": self.cfg.max_steps, "papers_per_search": self.tool_prompts.papers_per_search}
        self.llm_fingerprint = llm.fingerprint()
        self.prompt_hash = prompts.prompt_hash(NAME, **self.constants)

    def fingerprint(self) -> str:
        return fingerprint(NAME, self.llm_fingerprint, self.prompt_hash,
                           {"fire": self.cfg, "search_backend": self.search_backend,
                            "search_mode": getattr(getattr(self.tool, "backend", None), "mode", None)})

    def describe(self) -> dict[str, Any]:
        return {"llm": self.llm.spec, "model_fingerprint": self.llm_fingerprint, "prompt_hash": self.prompt_hash}

    def _reply(self, trace: Trace, final: bool) -> tuple[str, Any, list[str]]:
        """Ask until the reply reads: ("search", query) | ("answer", label) | (MALFORMED | "error", None)."""
        correction = prompts.fill(f"{NAME}_final" if final else f"{NAME}_retry")
        problems: list[str] = []
        for attempt in range(self.cfg.max_retries + 1):
            if attempt:
                trace.say("user", correction)
            turn = trace.ask()
            if turn is None:
                return "error", None, problems
            query = search_query(turn)
            if query is not None and not final:
                return "search", query, []
            if query is None:  # a search line is never an answer, even when its words name a label
                label, problems = read_verdict(turn.content, strict=not final)
                if label is not None:
                    return "answer", label, problems
        return MALFORMED, None, problems

    def run(self, claim: ClaimRecord) -> Episode:
        trace = Trace(self.llm, self.llm_fingerprint, claim)
        budget = SearchBudget(self.tool, self.tool_prompts, self.cfg.max_steps, self.cfg.abstract_chars)
        trace.say("system", prompts.fill(f"{NAME}_system", **self.constants))
        trace.say("user", prompts.fill(f"{NAME}_user", claim=claim.claim))
        queries: list[Counter[str]] = []
        evidence: list[Counter[str]] = []
        label: Label | None = None
        problems: list[str] = []
        stop = "max_steps"
        ask_final = True  # whether the final-answer instruction still needs a turn of its own
        for _step in range(self.cfg.max_steps):
            kind, value, problems = self._reply(trace, final=False)
            if kind == "answer":
                label, stop, ask_final = value, "final_answer", False
                break
            if kind in ("error", MALFORMED):
                stop = MALFORMED
                break
            q = bag(value)
            if any(cosine(q, earlier) >= self.cfg.similarity for earlier in queries):
                stop = "similar_query"
                break
            queries.append(q)
            text = budget.call(TOOL_NAME, {"query": value})
            # The agent's "write the report now" notice is for the report-writing agent; FIRE's own
            # final prompt says when to stop.
            text = text.removesuffix("\n\n" + self.tool_prompts.intervention())
            turn = prompts.fill(f"{NAME}_evidence", query=value, results=text)
            found = bag(text) if budget.queries and budget.queries[-1].n_results else None
            if found is not None and any(cosine(found, earlier) >= self.cfg.similarity for earlier in evidence):
                stop = "similar_evidence"
            elif found is not None:
                evidence.append(found)
            last = stop == "similar_evidence" or budget.exhausted
            trace.say("user", turn + "\n\n" + prompts.fill(f"{NAME}_final" if last else f"{NAME}_next"))
            if last:
                ask_final = False  # the instruction rode on the evidence turn
                break
        if trace.error is None and label is None:
            if ask_final:
                trace.say("user", prompts.fill(f"{NAME}_final"))
            kind, value, problems = self._reply(trace, final=True)
            if kind == "answer":
                label = value
            else:
                stop = MALFORMED
        final_text = next((m.get("content", "") for m in reversed(trace.messages) if m["role"] == "assistant"), "")
        return trace.episode(final_text=final_text, label=label, problems=problems, stop_reason=stop,
                             prompt_hash=self.prompt_hash, config=self.cfg, search_backend=self.search_backend,
                             searches=budget.searches, queries=budget.queries, ledger=budget.ledger,
                             tool_errors=budget.errors, search_seconds=budget.search_seconds,
                             search_times=budget.search_times)
