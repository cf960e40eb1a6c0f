"""`cer`: retrieve-then-verify in the style of CER: BM25 abstracts -> ranked sentences -> one verdict prompt.

1. One search with the claim as the query: `retrieve` abstracts (20) from the agent's search tool in
   BM25 mode (`SearchConfig(mode="bm25", max_results >= retrieve)` through biocheck.wiring.make_search_tool;
   with live PubMed, PubMed's own relevance order). The search is kept in the trace like the agent's.
2. Every sentence of those abstracts (the title counts as one) is ranked against the claim by the
   configured ranker (rankers.py: the local BM25 by default, an encoder when configured).
3. The best `sentences` (60), best first, each with its PMID, go into one zero-shot prompt
   (prompts/cer_*.md); the label is read from the reply.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from biocheck.agent.budget import QueryRecord
from biocheck.agent.episode import Episode
from biocheck.bounds import Count
from biocheck.data.schema import ClaimRecord
from biocheck.evaluate.systems import prompts
from biocheck.evaluate.systems.rankers import make_ranker
from biocheck.evaluate.systems.trace import Trace, fingerprint
from biocheck.evaluate.systems.verdict import read_verdict
from biocheck.evidence.types import Article
from biocheck.llm.base import ChatLLM
from biocheck.secrets import redact
from biocheck.text import split_sentences

NAME = "cer"
NO_EVIDENCE = "(no sentences were retrieved)"


@dataclass
class CERConfig:
    retrieve: Count = 20  # abstracts retrieved for the claim
    sentences: Count = 60  # ranked sentences kept for the verdict prompt
    ranker: str = "bm25"  # bm25 | encoder:<hf model id or path>

    def __post_init__(self) -> None:
        make_ranker(self.ranker)  # a misspelt ranker fails here, not on the first claim


def candidates(articles: list[Article]) -> list[tuple[str, str]]:
    """(pmid, sentence) for every title and abstract sentence, in retrieval order."""
    out = []
    for a in articles:
        for s in ([a.title.strip()] if a.title.strip() else []) + split_sentences(a.abstract):
            out.append((a.pmid, s))
    return out


class CER:
    """BM25 retrieval, sentence ranking, one zero-shot verdict."""

    name = NAME
    writes_report = False

    def __init__(self, llm: ChatLLM, tool: Any, cfg: CERConfig | None = None, search_backend: str = "") -> None:
        self.llm, self.tool = llm, tool
        self.cfg = cfg or CERConfig()
        self.search_backend = search_backend
        limit = getattr(tool, "max_results", None)
        if isinstance(limit, int) and limit < self.cfg.retrieve:
            raise ValueError(f"cer.retrieve is {self.cfg.retrieve} but the search tool returns at most {limit} "
                             f"papers: build it with SearchConfig(mode='bm25', max_results={self.cfg.retrieve})")
        mode = getattr(getattr(tool, "backend", None), "mode", None)
        if mode is not None and mode != "bm25":  # a claim is free text, not a Boolean query
            raise ValueError(f"cer needs the search tool in bm25 mode, not {mode!r}: build it with "
                             "SearchConfig(mode='bm25')")
        self.ranker = make_ranker(self.cfg.ranker)
        if hasattr(self.ranker, "load"):
            self.ranker.load()  # a missing encoder is a settings error: say so now, once
        self.llm_fingerprint = llm.fingerprint()
        self.prompt_hash = prompts.prompt_hash(NAME)

    def fingerprint(self) -> str:
        return fingerprint(NAME, self.llm_fingerprint, self.prompt_hash,
                           {"cer": self.cfg, "search_backend": self.search_backend,
                            "search_mode": getattr(getattr(self.tool, "backend", None), "mode", None)})

    def describe(self) -> dict[str, Any]:
        return {"llm": self.llm.spec, "model_fingerprint": self.llm_fingerprint, "prompt_hash": self.prompt_hash}

    def evidence(self, claim: str, articles: list[Article]) -> tuple[list[tuple[str, str]], list[str]]:
        """The kept (pmid, sentence) pairs, best first, and any ranker error (then retrieval order is kept)."""
        pool = candidates(articles)
        try:
            order = self.ranker.rank(claim, [s for _, s in pool], self.cfg.sentences)
        except Exception as e:  # a ranker failure costs the ranking, not the claim
            return pool[: self.cfg.sentences], [f"sentence ranking failed ({type(e).__name__}: {redact(e)}); "
                                                "retrieval order kept"]
        return [pool[i] for i in order], []

    def run(self, claim: ClaimRecord) -> Episode:
        trace = Trace(self.llm, self.llm_fingerprint, claim)
        t0, began = time.perf_counter(), time.time_ns()
        out = self.tool.run(claim.claim, self.cfg.retrieve)
        search_s, searched = time.perf_counter() - t0, (began, time.time_ns())
        record = QueryRecord(query=claim.claim, pmids=[r["pmid"] for r in out.results], n_results=len(out.results),
                             error=out.error, backend=out.backend, translation=out.translation)
        errors = [out.error] if out.error else []
        kept, rank_errors = self.evidence(claim.claim, list(out.articles))
        lines = "\n".join(f"[{i}] (PMID {pmid}) {s}" for i, (pmid, s) in enumerate(kept, 1)) or NO_EVIDENCE
        trace.say("system", prompts.fill(f"{NAME}_system"))
        trace.say("user", prompts.fill(f"{NAME}_user", claim=claim.claim, evidence=lines))
        turn = trace.ask()
        text = turn.content if turn else ""
        label, problems = read_verdict(text) if turn else (None, [])
        ledger: dict[str, Article] = {}
        for a in out.articles:
            ledger.setdefault(a.pmid, a)
        return trace.episode(final_text=text, label=label, problems=problems, stop_reason="final_answer",
                             prompt_hash=self.prompt_hash, config=self.cfg, search_backend=self.search_backend,
                             searches=1, queries=[record], ledger=ledger, tool_errors=errors + rank_errors,
                             search_seconds=search_s, search_times=[searched])
