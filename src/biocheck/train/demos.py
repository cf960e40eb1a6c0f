"""Demonstration episodes for the supervised warm start (SFT), and which training claims credit can reach.

A random tiny model cannot discover the tool-call and report formats by RL in minutes, so it is
first shown episodes built from SciFact train: the claim, a Boolean query (`sft.query`: "and", its three
longest content words joined by AND, relaxed once if nothing is found; "or", its content words in the
claim's order, up to eight, joined by OR, which BM25 then ranks), the *actual* tool output of that query
through the same environment the RL rollouts use, and a report that quotes the gold rationale sentences of a
retrieved gold abstract with the gold label, or concludes NOT ENOUGH INFORMATION when no gold sentence was shown.

Which demonstrations (`sft.demos`): "first", the first `max_examples` training claims of the profile's split
(most of them conclude NEI when their search shows no rationale: a warm start that teaches abstention);
"citing", only demonstrations that quote a shown gold rationale on its side, as many SUPPORTED as REFUTED,
drawn in a seeded order from every training claim of the release (`data/prepared/full`, split train: never
a validation or test claim), plus `sft.nei_examples` NEI demonstrations of claims whose gold label is NEI.
`reachable` keeps the training claims on which a demonstration's search shows a gold rationale: the
curriculum `train.curriculum: reachable`, the same for every reward variant.
A demonstration quotes only what its own tool output showed the model (an abstract longer than
`agent.abstract_chars` is shown as an excerpt): quoting a retrieved sentence the model never saw would
teach it to write quotes from memory, i.e. to paraphrase and invent.
"""

from __future__ import annotations

import re
from typing import Any

from biocheck.agent.report.quotes import find_quote
from biocheck.agent.report.schema import EvidenceItem, Report, Summary
from biocheck.agent.report.writer import format_report
from biocheck.data.schema import ClaimRecord, CorpusDoc
from biocheck.evidence.types import Article
from biocheck.labels import Label

# Bump when the demonstrations change for the same inputs: it is part of the warm start's key (sft_key).
# 1 quoted any rationale sentence of a retrieved abstract; 2 only sentences the tool output showed;
# 3 one item per paper (its first shown rationale sentence), so no two items share a context line
DEMO_FORMAT = 3
QUERY_STYLES = ("and", "or")
OR_TERMS = 8  # the "or" query's most content words

STOPWORDS = frozenset(["a", "an", "the", "of", "in", "on", "at", "to", "for", "from", "by", "with", "without", "and", "or", "not", "no", "is", "are", "was", "were", "be", "been", "being", "has", "have", "had", "do", "does", "did", "can", "could", "may", "might", "will", "would", "shall", "should", "this", "that", "these", "those", "it", "its", "their", "there", "than", "then", "as", "into", "about", "after", "before", "over", "under", "between", "among", "during", "through", "via", "vs", "versus", "per", "which", "who", "whom", "whose", "what", "when", "where", "why", "how", "all", "any", "both", "each", "few", "more", "most", "other", "some", "such", "only", "own", "same", "so", "too", "very", "just", "also", "increase", "increases", "increased", "decrease", "decreases", "decreased", "reduce", "reduces", "reduced", "associated", "association", "risk", "effect", "effects", "patients", "people", "individuals"])


def content_words(claim: str) -> list[str]:
    """The claim's words of 3+ characters that are not stopwords, lower-cased, once each, in the claim's order."""
    seen: list[str] = []
    for w in (w.lower() for w in re.findall(r"[A-Za-z][A-Za-z0-9-]{2,}", claim)):
        if w not in STOPWORDS and w not in seen:
            seen.append(w)
    return seen


def key_terms(claim: str, k: int = 3) -> list[str]:
    """The k longest content words of the claim (long words are usually the specific ones)."""
    seen = content_words(claim)
    return sorted(seen, key=lambda w: (-len(w), seen.index(w)))[:k]


def queries(claim: str, style: str = "and", max_searches: int = 2) -> list[str]:
    """The searches a demonstration tries, in order, until one retrieves something."""
    if style == "or":
        return [" OR ".join(f"{t}[tiab]" for t in content_words(claim)[:OR_TERMS])]
    if style != "and":
        raise ValueError(f"sft.query {style!r}: one of {', '.join(QUERY_STYLES)}")
    terms = key_terms(claim)
    return [boolean_query(terms[: max(1, len(terms) - i)]) for i in range(max(1, min(2, max_searches)))]


def boolean_query(terms: list[str]) -> str:
    # Field-tagged terms joined by AND: the "advanced search" the reward asks for.
    return " AND ".join(f"{t}[tiab]" for t in terms)


def _call(query: str, i: int) -> dict[str, Any]:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": f"call_{i}", "type": "function",
                            "function": {"name": "search_pubmed", "arguments": {"query": query}}}]}


def demonstration(record: ClaimRecord, env, corpus: dict[str, CorpusDoc], max_searches: int,
                  query: str = "and") -> list[dict[str, Any]]:
    """The assistant/tool messages of one demo episode (the caller prepends system + user)."""
    env.reset()
    messages: list[dict[str, Any]] = []
    for i, q in enumerate(queries(record.claim, query, max_searches)):  # "and": the second relaxes by one term
        messages.append(_call(q, i))
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "name": "search_pubmed",
                         "content": env.search_pubmed(q)})
        if env.budget.ledger:
            break
    shown = "\n\n".join(m["content"] for m in messages if m["role"] == "tool")
    messages.append({"role": "assistant", "content": format_report(_report(record, env.budget.ledger, corpus, shown))})
    return messages


def _report(record: ClaimRecord, ledger: dict, corpus: dict[str, CorpusDoc], shown: str) -> Report:
    # One item per paper. With two quotes of one paper under one boilerplate context line, the SFT model
    # (smol) learned to loop: the repeated line cues a copy of what followed it, so the list never ended.
    items: list[EvidenceItem] = []
    for ev in record.evidence:
        doc, article = corpus.get(ev.doc_id), ledger.get(ev.doc_id)
        if doc is None or article is None or any(i.pmid == ev.doc_id for i in items):
            continue  # not retrieved in this episode (never quoted), or already cited
        for s in ev.sentences:
            # in the abstract (the reward's rule) AND in what the tool output showed (what the model can copy)
            if (0 <= s < len(doc.abstract) and find_quote(doc.abstract[s], article.abstract)
                    and find_quote(doc.abstract[s], shown)):
                items.append(EvidenceItem(pmid=ev.doc_id, quote=doc.abstract[s].strip(),
                                          context=_context(article)))
                break
    label = record.label if items else Label.NEI
    side = "supporting" if label is Label.SUPPORTED else "refuting"
    summary = Summary(
        support_reasons="The quoted finding agrees with the claim." if label is Label.SUPPORTED else "None found.",
        refutation_reasons="The quoted finding contradicts the claim." if label is Label.REFUTED else "None found.",
        consensus_context_check="One retrieved study addresses the claim." if items else "No retrieved study addresses the claim.",
        justification=f"The evidence leads to {label.display}." if items else "The retrieved papers do not settle the claim.",
    )
    report = Report(summary=summary, conclusion=label)
    if items:
        setattr(report, side, items)
    return report


def cites(messages: list[dict[str, Any]]) -> bool:
    """Whether a demonstration's report quotes evidence (it found and was shown a gold rationale)."""
    from biocheck.agent.report.parse import parse_report

    report = parse_report(messages[-1]["content"]).report
    return bool(report.supporting or report.refuting)


def choose(candidates: list[tuple[ClaimRecord, list[dict[str, Any]]]], kind: str, n: int | None, nei: int = 0,
           seed: int = 0) -> list[tuple[ClaimRecord, list[dict[str, Any]]]]:
    """The demonstrations to train on, from (claim, messages) candidates in the training split's order:
    "first": the first n; "citing": in a seeded order, citing ones only, n // 2 SUPPORTED and n - n // 2
    REFUTED (the other label fills what one lacks), then `nei` NEI ones of NEI-gold claims (see the module
    docstring). The chosen keep the candidates' order."""
    if kind == "first":
        return candidates[:n]
    if kind != "citing":
        raise ValueError(f"sft.demos {kind!r}: one of first, citing")
    import random

    order = list(range(len(candidates)))
    random.Random(seed).shuffle(order)
    pools: dict[Label, list[int]] = {Label.SUPPORTED: [], Label.REFUTED: [], Label.NEI: []}
    for i in order:
        record, messages = candidates[i]
        if record.label is Label.NEI:
            pools[Label.NEI].append(i)
        elif cites(messages):
            pools[record.label].append(i)
    total = n if n is not None else len(pools[Label.SUPPORTED]) + len(pools[Label.REFUTED])
    want_s = min(total // 2, len(pools[Label.SUPPORTED]))
    want_r = min(total - want_s, len(pools[Label.REFUTED]))
    want_s = min(total - want_r, len(pools[Label.SUPPORTED]))  # the other label fills what one lacks
    keep = set(pools[Label.SUPPORTED][:want_s] + pools[Label.REFUTED][:want_r] + pools[Label.NEI][:nei])
    return [candidates[i] for i in sorted(keep)]


def reachable(records: list[ClaimRecord], env, corpus: dict[str, CorpusDoc], max_searches: int,
              query: str = "and") -> list[ClaimRecord]:
    """The claims on which a demonstration's search shows a gold rationale sentence of a retrieved gold paper
    (its demonstration cites): where R_evidence's credit is within reach of a policy that searches that way."""
    return [r for r in records if cites(demonstration(r, env, corpus, max_searches, query))]


def _context(article: Article) -> str:
    # the paper's own title makes each item's context line differ (no quote marks: those delimit quotes)
    title = article.title.strip().replace('"', "'").rstrip(".")
    return f"Reported in {title} (PMID {article.pmid})." if title else f"Reported in PMID {article.pmid}."
