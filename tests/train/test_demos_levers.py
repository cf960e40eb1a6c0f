"""The levers that make R_evidence's credit reachable (issue 48): how a demonstration searches (sft.query), which
demonstrations the warm start learns from (sft.demos, sft.nei_examples), which training claims GRPO learns from
(train.curriculum) and a validation set a constant answer cannot win (data.balanced)."""

from __future__ import annotations

import json

import pytest

from biocheck.agent.prompts import Prompts
from biocheck.agent.report.parse import parse_report
from biocheck.data.schema import ClaimRecord, CorpusDoc, GoldEvidence
from biocheck.data.split import stratified_subset
from biocheck.evidence.search import ToolOutput, article_dict
from biocheck.evidence.types import Article
from biocheck.labels import Label
from biocheck.train.demos import choose, cites, content_words, demonstration, queries, reachable
from biocheck.train.env import make_env
from biocheck.train.sft import SFTConfig
from tests.helpers.paths import REPO

S, R, NEI = Label.SUPPORTED, Label.REFUTED, Label.NEI


def test_the_two_query_styles():
    claim = "Vitamin D supplementation reduces the risk of hip fractures in older adults."
    assert content_words(claim) == ["vitamin", "supplementation", "hip", "fractures", "older", "adults"]  # "reduces", "risk": stopwords
    assert queries(claim, "and", 3) == ["supplementation[tiab] AND fractures[tiab] AND vitamin[tiab]",
                                        "supplementation[tiab] AND fractures[tiab]"]
    assert queries(claim, "or", 3) == [" OR ".join(f"{w}[tiab]" for w in content_words(claim))]
    long = " ".join(f"word{i}xx" for i in range(12))
    assert queries(long, "or")[0].count(" OR ") == 7  # at most 8 terms
    with pytest.raises(ValueError, match="sft.query 'xor'"):
        queries(claim, "xor")


class Tool:
    """Answers every query with the papers whose abstract contains one of the query's words (OR), or all of
    them (AND): enough of a search engine to tell the two styles apart."""

    def __init__(self, articles):
        self.articles = articles

    def run(self, query: str) -> ToolOutput:
        words = [w.split("[")[0] for w in query.replace("(", " ").replace(")", " ").split() if w not in ("AND", "OR")]
        need = any if " OR " in query else all
        hits = [a for a in self.articles if need(w in a.abstract.lower() for w in words)]
        return ToolOutput(query=query, results=[article_dict(a) for a in hits], articles=hits)


DOCS = {"1": CorpusDoc(id="1", title="Zinc trial", abstract=["Zinc shortened colds in children.", "Nothing else."]),
        "2": CorpusDoc(id="2", title="Statin trial", abstract=["Statins did not lower mortality.", "Adverse events."])}
ARTICLES = [Article(pmid=k, title=d.title, abstract=" ".join(d.abstract), source="corpus:test") for k, d in DOCS.items()]


def _claim(i: str, text: str, label: Label, doc: str | None = None) -> ClaimRecord:
    ev = [GoldEvidence(doc_id=doc, sentences=[0], label=label)] if doc else []
    return ClaimRecord(id=i, dataset="scifact", split="train", claim=text, label=label, evidence=ev)


def _env():
    return make_env(Tool(ARTICLES), Prompts(max_searches=2), 2, abstract_chars=None)


def test_an_or_query_reaches_a_gold_paper_the_and_query_misses():
    claim = _claim("1", "Zinc lozenges shorten colds.", S, "1")  # "lozenges" and "shorten" are not in the paper
    and_demo, or_demo = (demonstration(claim, _env(), DOCS, 2, q) for q in ("and", "or"))
    assert not cites(and_demo) and cites(or_demo)
    assert parse_report(or_demo[-1]["content"]).report.conclusion is S
    assert reachable([claim], _env(), DOCS, 2, "or") == [claim] and reachable([claim], _env(), DOCS, 2, "and") == []


def _candidates(n_s: int, n_r: int, n_nei: int, citing_every: int = 1):
    """(claim, messages) pairs: the i-th of each label cites when i % citing_every == 0."""
    out = []
    for lab, n in ((S, n_s), (R, n_r), (NEI, n_nei)):
        for i in range(n):
            c = _claim(f"{lab.value}{i}", "x", lab)
            side = "Supporting" if lab is S else "Refuting"
            item = '- PMID: 1\n  Quote: "q"\n  Context: c' if lab is not NEI and i % citing_every == 0 else "None"
            text = (f"## {side} evidence\n{item}\n## Summary\nJustification: j\n## Conclusion\n{lab.value}")
            out.append((c, [{"role": "assistant", "content": text}]))
    return out


def test_citing_demonstrations_are_balanced_and_keep_the_splits_order():
    cands = _candidates(20, 8, 5)
    got = choose(cands, "citing", 12, nei=2, seed=0)
    labels = [c.label for c, _ in got]
    assert labels.count(S) == 6 and labels.count(R) == 6 and labels.count(NEI) == 2
    assert all(cites(m) for c, m in got if c.label is not NEI)
    assert [cands.index(x) for x in got] == sorted(cands.index(x) for x in got)  # the candidates' order
    assert choose(cands, "citing", 12, nei=2, seed=0) == got and choose(cands, "citing", 12, seed=1) != got


def test_citing_fills_from_the_other_label_and_skips_what_does_not_cite():
    cands = _candidates(20, 6, 0, citing_every=2)  # R: 3 of 6 cite
    labels = [c.label for c, _ in choose(cands, "citing", 12)]
    assert labels.count(R) == 3 and labels.count(S) == 9  # REFUTED has 3 citing: SUPPORTED fills the rest
    assert [c.id for c, _ in choose(cands, "first", 4)] == ["SUPPORTED0", "SUPPORTED1", "SUPPORTED2", "SUPPORTED3"]
    with pytest.raises(ValueError, match="sft.demos 'all'"):
        choose(cands, "all", 4)


def test_nei_examples_need_citing_demonstrations():
    assert SFTConfig(demos="citing", nei_examples=4).nei_examples == 4
    with pytest.raises(ValueError, match="nei_examples needs demos: citing"):
        SFTConfig(nei_examples=4)


def test_a_balanced_subset_has_as_many_of_each_label_as_it_can():
    recs = [_claim(str(i), "x", S if i < 66 else R) for i in range(101)]  # 66 S, 35 R: the val split's mix
    mixed = stratified_subset(recs, 16, seed=13)
    even = stratified_subset(recs, 16, seed=13, balanced=True)
    assert sum(r.label is S for r in mixed) == 10 and sum(r.label is S for r in even) == 8
    few = [_claim(str(i), "x", S if i < 20 else R) for i in range(23)]  # 3 R: S fills
    assert sum(r.label is R for r in stratified_subset(few, 10, seed=0, balanced=True)) == 3
    assert [r.id for r in even] == sorted((r.id for r in even), key=int)  # input order kept


def _bench_levers():
    import importlib.util

    spec = importlib.util.spec_from_file_location("levers", REPO / "bench" / "levers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_judge_lever_trains_its_judge_into_scratch_and_points_the_reward_at_it(tmp_path):
    levers = _bench_levers()
    base = {"reward": {"judge": "transformers:models/judge"}, "judge": {"out_dir": "models/judge", "level": "abstract"},
            "train": {"sft": {"out_dir": "models/sft"}}}
    p = levers.lever_params(base, {"judge.level": "sentence", "judge.layer": None, "reward.judge_reads": "quote"},
                            tmp_path)
    folder = tmp_path / "judge-layer=None-level=sentence"
    assert p["judge"]["out_dir"] == str(folder) and p["judge"]["level"] == "sentence" and p["judge"]["layer"] is None
    assert p["reward"] == {"judge": f"transformers:{folder}", "judge_reads": "quote"}
    assert p["judge"]["metrics_path"] == str(tmp_path / "judge-layer=None-level=sentence.json")
    assert base["judge"] == {"out_dir": "models/judge", "level": "abstract"}  # PROJECT's params untouched
    # a lever that changes no judge setting keeps PROJECT's judge and trains none
    q = levers.lever_params(base, {"reward.judge_reads": "quote"}, tmp_path)
    assert q["reward"]["judge"] == "transformers:models/judge"
    assert levers.lever_judge(q, {"reward.judge_reads": 1}) == (None, None)
    # a judge already trained with the lever's settings is reused, not retrained: its test metrics, and its
    # training time only where its stats kept one (they no longer do: the folder is a DVC output)
    folder.mkdir()
    settings = {k: v for k, v in p["judge"].items() if k not in ("metrics_path", "out_dir")}
    (folder / "judge_train.json").write_text(json.dumps({"config": settings, "test": {"accuracy": 0.5}}))
    assert levers.lever_judge(p, {"judge.level": "sentence"}) == ({"accuracy": 0.5}, None)


def test_the_judge_table_counts_credited_citations_per_side():
    levers = _bench_levers()
    cite = lambda n, credited: {"n": n, "credited": credited / n if n else None, "s_mean": 0.5}  # noqa: E731
    sig = {"SUPPORTED": {"varying": 4, "groups": 8}, "REFUTED": {"varying": 6, "groups": 8}}
    result = {"levers": {
        "old": {"evidence_signal": sig},  # measured before the judge's credit was kept: no row
        "quote": {"evidence_signal": sig, "params": {"reads": "quote", "level": "sentence", "layer": 4},
                  "judge": {"accuracy": 0.4644, "macro_f1": 0.4613, "recall": {"REFUTED": 0.3649}, "n": 222},
                  "judge_credit": {"citations": {
                      "SUPPORTED": {"gold_correct_side": cite(11, 5), "gold_wrong_side": cite(7, 0)},
                      "REFUTED": {"gold_correct_side": cite(11, 8), "gold_wrong_side": cite(15, 6)}}}}}}
    lines = levers.judge_table(result).splitlines()
    assert len(lines) == 3
    assert lines[2] == ("| quote | quote | sentence, 4 | 0.464 / 0.461 / 0.36 (222) | 5/11 / 0/7 | 8/11 / 6/15 | "
                        "4/8 / 6/8 |")
