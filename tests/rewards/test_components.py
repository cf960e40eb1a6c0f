"""EG-GRPO reward components on hand-built traces, with hand-computed expected values, plus a fuzz test."""

from __future__ import annotations

import json
import math
import random

import pytest

from biocheck.agent.episode import Episode, QueryRecord
from biocheck.agent.report.quotes import fuzzy_match
from biocheck.agent.report.schema import EvidenceItem, Report
from biocheck.evaluate.score import score_trace, score_traces
from biocheck.evidence.types import Article
from biocheck.labels import Label
from biocheck.rewards.components import (
    EpisodeView,
    RewardConfig,
    is_advanced_query,
    r_evidence,
    r_outcome,
    r_search,
    score,
    score_many,
)
from biocheck.rewards.grounding import check_entry, ehr

CLAIM = "Vitamin D supplementation prevents hip fractures in older adults."
LEDGER = {
    "101": Article(pmid="101", title="Vitamin D and fracture risk", source="corpus:scifact",
                   abstract="Vitamin D supplementation reduced hip fractures in older adults. The effect was dose "
                            "dependent across the twelve randomised trials pooled in this meta-analysis of women."),
    "103": Article(pmid="103", title="Aspirin in primary prevention", source="corpus:scifact",
                   abstract="Aspirin increased major bleeding. It did not reduce cardiovascular mortality."),
}


class FixedJudge:
    """A judge with fixed scores per PMID that records every call."""

    spec = "fixed:test"
    prompt_hash = "p0"

    def __init__(self, table: dict[str, dict[str, float]]):
        self.table, self.calls = table, []

    def fingerprint(self) -> str:
        return "fixed"

    def score(self, pairs):
        self.calls.append([(c, a.pmid) for c, a in pairs])
        return [dict(self.table[a.pmid]) for _, a in pairs]


JUDGE_TABLE = {"101": {"SUPPORTED": 0.8, "REFUTED": 0.1, "NEI": 0.1},
               "103": {"SUPPORTED": 0.2, "REFUTED": 0.7, "NEI": 0.1}}


def report(supporting=(), refuting=(), conclusion="SUPPORTED") -> str:
    def block(items):
        if not items:
            return "None\n"
        return "".join(f'- PMID: {p}\n  Quote: "{q}"\n  Context: because\n' for p, q in items)

    return (f"## Supporting evidence\n{block(supporting)}## Refuting evidence\n{block(refuting)}"
            "## Summary\nSupport reasons: a\nRefutation reasons: b\nConsensus and context check: c\n"
            f"Justification: d\n## Conclusion\n{conclusion}\n")


def view(text: str, gold="SUPPORTED", queries=()) -> EpisodeView:
    return EpisodeView(claim=CLAIM, gold=gold, queries=list(queries), ledger=dict(LEDGER), final_text=text)


# The formulas of docs/rewards.md, written out here so that every expected value is derived from its inputs.
def expected_evidence(counted: list[float], alpha: float = 1.0) -> float:
    """R_evidence = 1 - exp(-alpha * S), S = the sum of s over the counted entries."""
    return 1.0 - math.exp(-alpha * sum(counted))


def expected_total(outcome: float, search: float, evidence: float, hallucination: float,
                   cfg: RewardConfig | None = None) -> float:
    """eg_grpo: R_outcome + beta1 * R_search + beta2 * R_evidence - beta3 * R_hallucination."""
    cfg = cfg or RewardConfig()
    return outcome + cfg.beta1 * search + cfg.beta2 * evidence - cfg.beta3 * hallucination


S101 = JUDGE_TABLE["101"]["SUPPORTED"]  # the supporting paper's s
S103_REF = JUDGE_TABLE["103"]["REFUTED"]  # the refuting paper's s on the refuting side
S103_SUP = JUDGE_TABLE["103"]["SUPPORTED"]  # ... and on the supporting side (below the threshold)


# ----------------------------------------------------------------------------------------- grounding


def test_entry_checks_unretrieved_whitespace_case_and_paraphrase():
    ok = check_entry(EvidenceItem(pmid="101", quote="VITAMIN D  supplementation\n reduced HIP fractures"),
                     "supporting", LEDGER)
    assert (ok.pmid_retrieved, ok.quote_found_strict, ok.quote_found_fuzzy, ok.hallucinated) == (True, True, True,
                                                                                                   False)
    never = check_entry(EvidenceItem(pmid="999", quote="Aspirin increased major bleeding."), "refuting", LEDGER)
    assert (never.pmid_retrieved, never.quote_found_strict, never.hallucinated) == (False, False, True)
    para = check_entry(EvidenceItem(pmid="103", quote="Aspirin raised the risk of serious bleeding."), "refuting",
                       LEDGER)
    assert (para.pmid_retrieved, para.quote_found_strict, para.quote_found_fuzzy, para.hallucinated) == (
        True, False, False, True)
    # a real quote from the wrong paper: the PMID was retrieved, the quote is not in it
    wrong = check_entry(EvidenceItem(pmid="103", quote="reduced hip fractures"), "supporting", LEDGER)
    assert (wrong.pmid_retrieved, wrong.quote_found_strict, wrong.hallucinated) == (True, False, True)


def test_fuzzy_rule_one_changed_word_in_ten_passes_fuzzy_but_not_strict():
    text = LEDGER["101"].abstract
    # 14 tokens, one changed ("eleven" for "twelve"): 13/14 = 0.93 >= 0.9 fuzzy; strict fails
    quote = "The effect was dose dependent across the eleven randomised trials pooled in this meta-analysis"
    assert fuzzy_match(quote, text)
    c = check_entry(EvidenceItem(pmid="101", quote=quote), "supporting", LEDGER)
    assert c.quote_found_fuzzy and not c.quote_found_strict and c.hallucinated  # strict is what counts
    # short quotes: one changed word of 4 is 3/4 = 0.75 < 0.9
    assert not fuzzy_match("Aspirin increased serious bleeding.", LEDGER["103"].abstract)
    # reordering the same words in a window passes (bag of tokens); blank / symbol-only quotes never do
    assert fuzzy_match("bleeding major increased Aspirin", LEDGER["103"].abstract)
    assert not fuzzy_match("", text) and not fuzzy_match("...", text)
    assert not fuzzy_match("a much longer quote than the text has words at all", "short text")


def test_ehr_zero_citations_is_zero():
    assert ehr([]) == 0.0
    checks = [check_entry(EvidenceItem(pmid=p, quote="Aspirin increased major bleeding."), "refuting", LEDGER)
              for p in ("103", "999", "101")]
    assert ehr(checks) == pytest.approx(2 / 3)


# ---------------------------------------------------------------------------------------- components


@pytest.mark.parametrize("query,advanced", [
    ('("vitamin D" OR cholecalciferol) AND fractur*', True),
    ("vitamin D AND fracture", True),
    ("aspirin NOT bleeding", True),
    ("aspirin[tiab]", True),
    ('"hip fracture"[ti]', True),
    ("aspirin[all]", True),  # any field tag, as written
    ("vitamin D fractures", False),  # implicit AND is not a Boolean operator
    ("vitamin and fracture", False),  # lower-case "and" is a word
    ('"vitamin D"', False),  # a phrase alone
    ("fractur*", False),  # truncation alone
    ("aspirin AND (bleeding", False),  # does not parse
    ("aspirin[foo]", False),  # unknown tag: does not parse
    ("\u201caspirin AND bleeding\u201d", False),  # curly-quoted phrase: AND is inside it
    ("", False),
])
def test_advanced_query_rule(query, advanced):
    assert is_advanced_query(query) is advanced


def test_r_search_share_and_no_search():
    assert r_search([]) == 0.0
    assert r_search(["a AND b", "a b", "a[ti]", "a AND (b"]) == 0.5
    assert r_search(["x OR y"]) == 1.0


def test_r_outcome_rules():
    assert r_outcome(Label.SUPPORTED, Label.SUPPORTED) == 1.0
    assert r_outcome(Label.NEI, Label.NEI) == 1.0  # NEI gold is a label like the others
    assert r_outcome(Label.SUPPORTED, Label.NEI) == 0.0
    assert r_outcome(None, Label.REFUTED) == 0.0  # unparseable
    assert r_outcome(Label.REFUTED, None) == 0.0  # no gold label


def test_r_evidence_threshold_and_saturation():
    assert r_evidence([]) == 0.0
    assert r_evidence([0.5, 0.5]) == 0.0  # exactly at the threshold: not counted
    assert r_evidence([0.8]) == pytest.approx(expected_evidence([0.8]))
    assert r_evidence([0.8, 0.9], alpha=2.0) == pytest.approx(expected_evidence([0.8, 0.9], alpha=2.0))
    assert r_evidence([0.8, 0.3, 0.5], alpha=1.5) == pytest.approx(expected_evidence([0.8], alpha=1.5))  # > 0.5 only
    assert r_evidence([0.7, 0.9], threshold=0.75) == pytest.approx(expected_evidence([0.9]))
    assert r_evidence([0.4], threshold=0.0) == pytest.approx(expected_evidence([0.4]))
    # broken numbers are cleaned first: NaN -> 0, above 1 -> 1, negative -> 0
    assert r_evidence([float("nan"), 7.0, -2.0]) == pytest.approx(expected_evidence([1.0]))
    assert 0.999 < r_evidence([0.9] * 100) <= 1.0  # saturates; rounds to 1.0 at most, never above


def test_full_trace_hand_computed():
    text = report(
        supporting=[("101", "VITAMIN D  supplementation reduced hip  FRACTURES"),  # whitespace/case: grounded
                    ("999", "Vitamin D supplementation reduced hip fractures")],  # PMID never retrieved
        refuting=[("103", "Aspirin raised the risk of serious bleeding.")],  # paraphrase: fails strict
        conclusion="SUPPORTED")
    queries = ['("vitamin D" OR cholecalciferol) AND fractur*', "vitamin D fractures", "aspirin[tiab]",
               "aspirin AND (bleeding"]
    judge = FixedJudge(JUDGE_TABLE)
    b = score(view(text, "SUPPORTED", queries), RewardConfig(), judge)
    assert judge.calls == [[(CLAIM, "101")]]  # hallucinated entries are never sent to the judge
    assert b.outcome == 1.0
    assert b.search == 0.5  # 2 of 4 executed queries are advanced
    assert b.evidence == pytest.approx(expected_evidence([S101]))  # only the grounded entry counts
    assert b.hallucination == b.ehr == pytest.approx(2 / 3)
    assert b.eqs == pytest.approx((S101 + 0 + 0) / 3)  # hallucinated entries count 0
    assert b.total == pytest.approx(expected_total(1.0, 2 / 4, expected_evidence([S101]), 2 / 3))
    assert (b.n_cited, b.n_hallucinated, b.n_searches, b.n_advanced) == (3, 2, 4, 2)
    assert b.judge_used and b.conclusion is Label.SUPPORTED and b.gold is Label.SUPPORTED
    assert [(e.side, e.pmid, e.pmid_retrieved, e.strict, e.hallucinated, e.s, e.counted) for e in b.entries] == [
        ("supporting", "101", True, True, False, S101, True),
        ("supporting", "999", False, False, True, 0.0, False),
        ("refuting", "103", True, False, True, 0.0, False),
    ]


def test_both_sides_scored_by_their_own_label():
    text = report(supporting=[("103", "Aspirin increased major bleeding.")],  # s = p(SUPPORTED) = 0.2: not counted
                  refuting=[("103", "It did not reduce cardiovascular mortality.")],  # s = p(REFUTED) = 0.7
                  conclusion="REFUTED")
    b = score(view(text, "REFUTED", ["aspirin AND mortality"]), RewardConfig(), FixedJudge(JUDGE_TABLE))
    assert [(e.s, e.counted) for e in b.entries] == [(S103_SUP, False), (S103_REF, True)]
    assert b.evidence == pytest.approx(expected_evidence([S103_REF]))
    assert b.eqs == pytest.approx((S103_SUP + S103_REF) / 2)  # EQS has no threshold
    assert b.ehr == 0.0
    assert b.total == pytest.approx(expected_total(1.0, 1.0, expected_evidence([S103_REF]), 0.0))


def test_s_exactly_at_threshold_is_not_counted():
    text = report(supporting=[("101", "reduced hip fractures")])
    at = FixedJudge({"101": {"SUPPORTED": 0.5, "REFUTED": 0.25, "NEI": 0.25}})
    b = score(view(text), RewardConfig(), at)
    assert b.entries[0].s == 0.5 and not b.entries[0].counted and b.evidence == 0.0
    assert b.eqs == 0.5 and b.total == expected_total(1.0, 0.0, 0.0, 0.0)  # no search, no counted evidence
    above = FixedJudge({"101": {"SUPPORTED": 0.5000001, "REFUTED": 0.25, "NEI": 0.25}})
    assert score(view(text), RewardConfig(), above).entries[0].counted


def test_correct_label_with_no_evidence():
    b = score(view(report(conclusion="REFUTED"), "REFUTED"), RewardConfig(), FixedJudge(JUDGE_TABLE))
    assert (b.outcome, b.search, b.evidence, b.hallucination, b.total) == (1.0, 0.0, 0.0, 0.0, 1.0)
    assert b.n_cited == 0 and b.eqs is None  # zero citations: EHR 0 (nothing invented), EQS undefined


def test_unparseable_report():
    b = score(view("I think it is probably fine, trust me.", "SUPPORTED", ["aspirin AND bleeding"]), RewardConfig(),
              FixedJudge(JUDGE_TABLE))
    assert b.conclusion is None and b.outcome == 0.0 and b.n_cited == 0 and b.parse_problems > 0
    assert b.search == 1.0 and b.total == expected_total(0.0, 1.0, 0.0, 0.0)


def test_nei_gold_and_missing_gold():
    nei = report(conclusion="NOT ENOUGH INFORMATION")
    assert score(view(nei, "NEI")).outcome == 1.0
    assert score(view(nei, "SUPPORTED")).outcome == 0.0
    assert score(view(report(), None)).outcome == 0.0


def test_judge_off_gives_zero_s_and_says_so():
    text = report(supporting=[("101", "reduced hip fractures")])
    b = score(view(text), RewardConfig(), None)
    assert not b.judge_used and b.entries[0].s == 0.0 and b.evidence == 0.0 and b.eqs == 0.0
    assert b.ehr == 0.0 and b.total == 1.0


def test_outcome_only_variant_total_is_the_outcome():
    text = report(supporting=[("999", "made up")], conclusion="SUPPORTED")
    cfg = RewardConfig(variant="outcome_only")
    b = score(view(text, "SUPPORTED", ["a AND b"]), cfg, FixedJudge(JUDGE_TABLE))
    assert b.total == 1.0 and b.hallucination == 1.0 and b.search == 1.0  # components still reported
    assert cfg.bounds() == (0.0, 1.0) and RewardConfig().bounds() == (-1.0, 2.5)


def test_unique_papers_counts_a_repeated_citation_once():
    items = [("101", "reduced hip fractures"), ("101", "The effect was dose dependent")]
    text = report(supporting=items)
    assert score(view(text), RewardConfig(), FixedJudge(JUDGE_TABLE)).evidence == pytest.approx(
        expected_evidence([S101, S101]))  # each entry counts by default
    b = score(view(text), RewardConfig(unique_papers=True), FixedJudge(JUDGE_TABLE))
    assert b.evidence == pytest.approx(expected_evidence([S101])) and [e.counted for e in b.entries] == [True, False]


def test_weights_alpha_and_threshold_come_from_the_config():
    cfg = RewardConfig(beta1=2.0, beta2=3.0, beta3=0.5, alpha=2.0, threshold=0.75)
    text = report(supporting=[("101", "reduced hip fractures"), ("999", "made up")],  # s 0.8 > 0.75; hallucinated
                  refuting=[("103", "Aspirin increased major bleeding.")],  # s 0.7: grounded but below 0.75
                  conclusion="SUPPORTED")
    b = score(view(text, "SUPPORTED", ["a AND b", "a b"]), cfg, FixedJudge(JUDGE_TABLE))
    assert [(e.s, e.counted) for e in b.entries] == [(S101, True), (0.0, False), (S103_REF, False)]
    assert b.evidence == pytest.approx(expected_evidence([S101], alpha=cfg.alpha))
    assert b.hallucination == pytest.approx(1 / 3) and b.search == 1 / 2
    assert b.total == pytest.approx(expected_total(1.0, 1 / 2, expected_evidence([S101], alpha=2.0), 1 / 3, cfg))
    assert cfg.bounds() == (-cfg.beta3, 1.0 + cfg.beta1 + cfg.beta2)
    assert RewardConfig(variant="outcome_only", beta1=2.0).bounds() == (0.0, 1.0)


def test_unique_papers_is_per_side_and_keeps_the_first_counted_entry():
    text = report(supporting=[("101", "made up"),  # hallucinated: does not use up paper 101
                              ("101", "reduced hip fractures"), ("101", "The effect was dose dependent")],
                  refuting=[("101", "The effect was dose dependent")])  # the same paper on the other side
    cfg = RewardConfig(unique_papers=True, threshold=0.05)
    b = score(view(text), cfg, FixedJudge(JUDGE_TABLE))
    s101_ref = JUDGE_TABLE["101"]["REFUTED"]
    assert [(e.side, e.s, e.counted) for e in b.entries] == [
        ("supporting", 0.0, False), ("supporting", S101, True), ("supporting", S101, False),
        ("refuting", s101_ref, True)]
    assert b.evidence == pytest.approx(expected_evidence([S101, s101_ref]))


def test_judge_scores_are_cleaned_before_use():
    text = report(supporting=[("101", "reduced hip fractures")], refuting=[("103", "Aspirin increased")])
    raw = {"101": {"SUPPORTED": 0.9, "REFUTED": 0.6, "NEI": 0.0},  # sums to 1.5: scaled back to 1
           "103": {"SUPPORTED": 0.1, "REFUTED": float("nan"), "NEI": 0.1}}  # NaN -> 0
    b = score(view(text), RewardConfig(), FixedJudge(raw))
    assert [e.s for e in b.entries] == pytest.approx([0.9 / 1.5, 0.0], rel=1e-12, abs=0)
    assert [e.counted for e in b.entries] == [True, False]
    assert b.evidence == pytest.approx(expected_evidence([0.9 / 1.5]))


def test_judge_pairs_are_claim_and_paper_text_not_just_the_pmid():
    other_text = dict(LEDGER, **{"101": LEDGER["101"].model_copy(update={"abstract": "It reduced hip fractures."})})
    views = [view(report(supporting=[("101", "reduced hip fractures")])),
             EpisodeView(claim=CLAIM, gold="SUPPORTED", ledger=other_text,  # same PMID, another record of it
                         final_text=report(supporting=[("101", "reduced hip fractures")])),
             EpisodeView(claim="Another claim.", gold="SUPPORTED", ledger=dict(LEDGER),
                         final_text=report(supporting=[("101", "reduced hip fractures")])),
             view(report(supporting=[("101", "Vitamin D supplementation")]))]  # same pair as the first: deduplicated
    judge = FixedJudge(JUDGE_TABLE)
    score_many(views, RewardConfig(), judge)
    assert judge.calls == [[(CLAIM, "101"), (CLAIM, "101"), ("Another claim.", "101")]]


def test_a_judge_that_drops_pairs_is_an_error():
    class Short(FixedJudge):
        def score(self, pairs):
            return []

    with pytest.raises(RuntimeError, match=r"judge fixed:test returned 0 scores for 1 pairs"):
        score(view(report(supporting=[("101", "reduced hip fractures")])), RewardConfig(), Short({}))


def test_episode_view_accepts_plain_data():
    v = EpisodeView(claim=CLAIM, gold="REFUTED", ledger={"101": LEDGER["101"].model_dump()})
    assert v.gold is Label.REFUTED and v.ledger == {"101": LEDGER["101"]}
    with pytest.raises(ValueError):
        EpisodeView(claim=CLAIM, gold="MAYBE")


def test_config_validation():
    with pytest.raises(ValueError):
        RewardConfig(variant="grpo")
    from biocheck.io import InputError
    from biocheck.wiring import reward_config

    for bad in ({"beta1": -1}, {"alpha": 0}, {"threshold": 1.5}, {"beta2": float("nan")}):  # bounds.py
        with pytest.raises(InputError, match=rf"reward\.{next(iter(bad))} must be "):
            reward_config({"reward": bad})


def test_score_many_sends_every_needed_pair_in_one_call():
    texts = [report(supporting=[("101", "reduced hip fractures")]),
             report(supporting=[("101", "The effect was dose dependent")], refuting=[("103", "Aspirin increased")]),
             report(supporting=[("999", "nothing")])]
    judge = FixedJudge(JUDGE_TABLE)
    bs = score_many([view(t) for t in texts], RewardConfig(), judge)
    assert len(judge.calls) == 1 and sorted(judge.calls[0]) == [(CLAIM, "101"), (CLAIM, "103")]  # deduplicated
    assert [b.model_dump() for b in bs] == [score(view(t), RewardConfig(), FixedJudge(JUDGE_TABLE)).model_dump()
                                            for t in texts]
    assert score_many([], RewardConfig(), judge) == []


# ------------------------------------------------------------------------------------ traces on disk


def episode(claim_id: str, text: str, gold: str | None, queries: list[str]) -> Episode:
    return Episode(claim=CLAIM, claim_id=claim_id, gold_label=gold, messages=[], report=Report(), final_text=text,
                   queries=[QueryRecord(query=q) for q in queries], ledger=dict(LEDGER))


def test_score_trace_and_traces_from_files(tmp_path):
    good = episode("c1", report(supporting=[("101", "reduced hip fractures")]), "SUPPORTED", ["a AND b"])
    bad = episode("c2", "no idea", "REFUTED", ["a b"])
    nei = episode("c3", report(conclusion="NOT ENOUGH INFORMATION"), "NEI", [])
    for ep in (good, bad, nei):
        (tmp_path / f"{ep.claim_id}.json").write_text(ep.model_dump_json())
    (tmp_path / "summary.json").write_text(json.dumps({"episodes": 3}))
    judge = FixedJudge(JUDGE_TABLE)
    b = score_trace(tmp_path / "c1.json", RewardConfig(), judge)
    good_total = expected_total(1.0, 1.0, expected_evidence([S101]), 0.0)
    assert b.total == pytest.approx(good_total)
    assert score_trace(good, RewardConfig(), judge, gold="REFUTED").outcome == 0.0  # gold override
    result = score_traces(tmp_path, RewardConfig(), FixedJudge(JUDGE_TABLE), n_resamples=50,
                          per_episode=tmp_path / "scores.jsonl")
    assert result["n"] == 3
    assert result["reward"]["outcome"] == pytest.approx(2 / 3)
    assert result["reward"]["total"] == pytest.approx((good_total + expected_total(0.0, 0.0, 0.0, 0.0)
                                                       + expected_total(1.0, 0.0, 0.0, 0.0)) / 3)
    assert result["3way"]["n"] == 3 and result["3way"]["accuracy"] == pytest.approx(2 / 3)
    assert result["2way"]["n"] == 2 and result["2way"]["accuracy"] == 0.5  # the NEI claim is not 2-way
    assert result["evidence"]["eqs"] == pytest.approx(S101) and result["evidence"]["ehr"] == 0.0
    assert len((tmp_path / "scores.jsonl").read_text().splitlines()) == 3
    json.dumps(result, allow_nan=False)


# ------------------------------------------------------------------------------------------------ fuzz

_ATOMS = ["## Supporting evidence", "## Refuting evidence", "## Summary", "## Conclusion", "SUPPORTED", "REFUTED",
          "NOT ENOUGH INFORMATION", "None", "- PMID: 101", "- PMID: 103", "PMID: 999", "PMID:", 'Quote: "',
          "Quote: Vitamin D supplementation reduced hip fractures", '"Aspirin increased major bleeding."',
          "Context:", "**Conclusion:** REFUTED", "```json", "```", '{"conclusion": "SUPPORTED", "supporting": [',
          '{"pmid": "101", "quote": "reduced hip fractures"}', "]}", "<think>", "</think>", "\u201c", "\u2014",
          "\x00", "\ud800", "\ufeff", "###", "*", "|", "\t", "\n", "  ", "ﬁ", "é", "🙂", "{", "}", "[", "]"]


def _mutate(rng: random.Random, text: str) -> str:
    chars = list(text)
    for _ in range(rng.randrange(0, 12)):
        op = rng.random()
        pos = rng.randrange(len(chars) + 1)
        if op < 0.3 and chars:
            del chars[min(pos, len(chars) - 1)]
        elif op < 0.6:
            chars[pos:pos] = list(rng.choice(_ATOMS))
        elif op < 0.8 and chars:
            a = rng.randrange(len(chars))
            chars[a:a] = chars[a:a + rng.randrange(1, 40)]  # duplicate a run
        else:
            chars[pos:pos] = [chr(rng.randrange(0x20, 0x3000))]
    return "".join(chars)


def _random_text(rng: random.Random) -> object:
    kind = rng.random()
    items = [(rng.choice(["101", "103", "999", "", "abc"]), rng.choice(
        ["reduced hip fractures", "Aspirin increased major bleeding.", "made up", "", "\u201cquoted\u201d"]))
        for _ in range(rng.randrange(0, 5))]
    base = report(items[: len(items) // 2], items[len(items) // 2:],
                  rng.choice(["SUPPORTED", "REFUTED", "NOT ENOUGH INFORMATION", "maybe", ""]))
    if kind < 0.55:
        return _mutate(rng, base)
    if kind < 0.75:
        return "".join(rng.choice(_ATOMS) + rng.choice(["", " ", "\n"]) for _ in range(rng.randrange(0, 40)))
    if kind < 0.9:
        return "".join(chr(rng.randrange(0, 0x10FFFF)) for _ in range(rng.randrange(0, 300))
                       ).encode("utf-8", "replace").decode("utf-8", "replace")
    return rng.choice([None, b"## Conclusion\nREFUTED", 42, "", base * 20])


class ChaosJudge(FixedJudge):
    """Any numbers at all, broken ones included: the reward must stay in bounds."""

    def __init__(self, rng):
        super().__init__({})
        self.rng = rng

    def score(self, pairs):
        vals = [0.0, 0.5, 1.0, 0.51, -3.0, 7.0, float("nan"), float("inf"), -float("inf"), 1e-300]
        return [{k: self.rng.choice(vals + [self.rng.random()]) for k in ("SUPPORTED", "REFUTED", "NEI")}
                for _ in pairs]


def test_fuzz_1000_reports_never_raise_and_stay_in_bounds():
    rng = random.Random(1234)
    queries_pool = ["a AND b", "a b", "x[tiab]", "(((", "AND", '"', "a[zz]", "", "b OR", "\x00", "aspirin NOT x"]
    views = []
    for _ in range(1000):
        qs = [rng.choice(queries_pool) + rng.choice(["", " c", ")", "*"]) for _ in range(rng.randrange(0, 6))]
        views.append(EpisodeView(claim=CLAIM, gold=rng.choice([None, "SUPPORTED", "REFUTED", "NEI"]), queries=qs,
                                 ledger=dict(LEDGER), final_text=_random_text(rng)))
    seen = {"cited": 0, "counted": 0, "unparsed": 0, "advanced": 0}
    for cfg in (RewardConfig(), RewardConfig(variant="outcome_only"),
                RewardConfig(beta1=2.0, beta2=3.0, beta3=0.5, alpha=5.0, threshold=0.0)):
        lo, hi = cfg.bounds()
        for start in range(0, len(views), 100):
            chunk = views[start:start + 100]
            judge = ChaosJudge(rng) if start % 200 == 0 else None
            for b in score_many(chunk, cfg, judge):
                for name in ("outcome", "search", "evidence", "hallucination", "total", "ehr"):
                    assert math.isfinite(getattr(b, name)), name
                assert b.outcome in (0.0, 1.0)
                assert 0.0 <= b.search <= 1.0 and 0.0 <= b.evidence <= 1.0 and 0.0 <= b.hallucination <= 1.0
                assert lo <= b.total <= hi
                assert b.eqs is None or (math.isfinite(b.eqs) and 0.0 <= b.eqs <= 1.0)
                assert b.eqs is None or b.n_cited > 0
                assert 0 <= b.n_hallucinated <= b.n_cited == len(b.entries)
                assert all(0.0 <= e.s <= 1.0 and (not e.counted or not e.hallucinated) for e in b.entries)
                json.dumps(b.model_dump(mode="json"), allow_nan=False)
                seen["cited"] += b.n_cited
                seen["counted"] += sum(e.counted for e in b.entries)
                seen["unparsed"] += b.conclusion is None
                seen["advanced"] += b.n_advanced
    assert min(seen.values()) > 50, seen  # the fuzz reaches every branch, not just the parser's error path


class TextJudge(FixedJudge):
    """Records the text each pair shows the judge; scores a pair REFUTED when that text says 'did not'."""

    def score(self, pairs):
        self.calls.append([(c, a.pmid, a.title, a.abstract) for c, a in pairs])
        return [{"SUPPORTED": 0.1, "REFUTED": 0.8, "NEI": 0.1} if "did not" in a.abstract else
                {"SUPPORTED": 0.8, "REFUTED": 0.1, "NEI": 0.1} for _, a in pairs]


def test_judge_reads_the_quote_with_its_title_or_the_whole_paper():
    text = report(refuting=[("103", "It did not reduce cardiovascular mortality."),
                            ("103", "Aspirin increased major bleeding.")], conclusion="REFUTED")
    paper = TextJudge({})
    b = score(view(text, gold="REFUTED"), RewardConfig(), paper)
    # the paper: one pair for both citations of 103, whose abstract says "did not": both credited
    assert paper.calls == [[(CLAIM, "103", LEDGER["103"].title, LEDGER["103"].abstract)]]
    assert [e.counted for e in b.entries] == [True, True]
    quote = TextJudge({})
    b = score(view(text, gold="REFUTED"), RewardConfig(judge_reads="quote"), quote)
    # the quote: one pair per quote, titled as its paper; only the quote that refutes is credited
    assert quote.calls == [[(CLAIM, "103", LEDGER["103"].title, "It did not reduce cardiovascular mortality."),
                            (CLAIM, "103", LEDGER["103"].title, "Aspirin increased major bleeding.")]]
    assert [e.s for e in b.entries] == [0.8, 0.1] and [e.counted for e in b.entries] == [True, False]
    assert b.evidence == pytest.approx(expected_evidence([0.8]))


def test_a_judge_of_quotes_reads_the_whole_sentence_in_the_papers_words_and_never_the_title():
    text = report(refuting=[("103", "did NOT reduce"),  # a fragment, in the model's own case
                            ("103", "it did not reduce cardiovascular mortality"),  # another spelling of it
                            ("103", "Aspirin in primary prevention")],  # the title: no credit
                  conclusion="REFUTED")
    judge = TextJudge({})
    b = score(view(text, gold="REFUTED"), RewardConfig(judge_reads="quote"), judge)
    # one pair: the abstract's own sentence that holds both spellings; nothing for the title quote
    assert judge.calls == [[(CLAIM, "103", LEDGER["103"].title, "It did not reduce cardiovascular mortality.")]]
    assert not any(e.hallucinated for e in b.entries)  # the title quote is grounded, only never judged
    assert [e.s for e in b.entries] == [0.8, 0.8, 0.0] and [e.counted for e in b.entries] == [True, True, False]
    # a quote across two sentences is judged as both
    judge = TextJudge({})
    score(view(report(refuting=[("103", "major bleeding. It did not")], conclusion="REFUTED"), gold="REFUTED"),
          RewardConfig(judge_reads="quote"), judge)
    assert judge.calls == [[(CLAIM, "103", LEDGER["103"].title, LEDGER["103"].abstract)]]


def test_an_invented_quote_is_never_shown_to_a_judge_that_reads_quotes():
    text = report(supporting=[("101", "Vitamin D did not prevent anything at all.")])
    judge = TextJudge({})
    b = score(view(text), RewardConfig(judge_reads="quote"), judge)
    assert judge.calls == [] and b.entries[0].hallucinated and b.entries[0].s == 0.0 and b.evidence == 0.0


def test_judge_reads_must_be_paper_or_quote():
    with pytest.raises(ValueError, match=r"reward.judge_reads='abstract': expected one of paper, quote"):
        RewardConfig(judge_reads="abstract")
