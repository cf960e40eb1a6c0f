"""Reward rules at their edges: config errors that say what is wrong, episode views from traces, odd judge output."""

from __future__ import annotations

import math

import pytest

from biocheck.agent.episode import Episode, QueryRecord
from biocheck.agent.report.schema import Report
from biocheck.evidence.types import Article
from biocheck.io import InputError
from biocheck.labels import Label
from biocheck.rewards.components import EpisodeView, RewardConfig, r_evidence, score
from biocheck.wiring import reward_config

CLAIM = "Vitamin D supplementation prevents hip fractures in older adults."
PAPER = Article(pmid="101", title="Vitamin D and fracture risk", source="corpus:scifact",
                abstract="Vitamin D supplementation reduced hip fractures in older adults.")
OTHER = Article(pmid="103", title="Aspirin", source="corpus:scifact", abstract="Aspirin increased major bleeding.")


def report(pmid: str = "101", quote: str = "reduced hip fractures", conclusion: str = "SUPPORTED") -> str:
    return (f'## Supporting evidence\n- PMID: {pmid}\n  Quote: "{quote}"\n  Context: c\n## Refuting evidence\nNone\n'
            f"## Summary\nSupport reasons: a\nRefutation reasons: b\nConsensus and context check: c\n"
            f"Justification: d\n## Conclusion\n{conclusion}\n")


def test_a_variant_that_does_not_exist_is_named():
    with pytest.raises(ValueError, match=r"^reward.variant='grpo': expected one of eg_grpo, outcome_only$"):
        RewardConfig(variant="grpo")


# The bounds are the fields' types (bounds.py), checked where params.yaml's `reward:` is read.
@pytest.mark.parametrize("bad, message", [
    ({"beta1": "0.5"}, "reward.beta1 must be a number, not '0.5'"),
    ({"beta2": float("nan")}, "reward.beta2 must be >= 0, not nan"),
    ({"alpha": float("inf")}, "reward.alpha must be a finite number, not inf"),
    ({"threshold": None}, "reward.threshold must be a number, not None"),
    ({"beta3": -0.5}, "reward.beta3 must be >= 0, not -0.5"),
    ({"beta1": -1e-9}, "reward.beta1 must be >= 0, not -1e-09"),
    ({"alpha": 0}, "reward.alpha must be > 0, not 0"),
    ({"alpha": -1.0}, "reward.alpha must be > 0, not -1.0"),
    ({"threshold": 1.5}, "reward.threshold must be <= 1, not 1.5"),
    ({"threshold": -0.1}, "reward.threshold must be >= 0, not -0.1"),
])
def test_config_errors_name_the_setting_and_the_rule(bad, message):
    with pytest.raises(InputError) as e:
        reward_config({"reward": bad})
    assert str(e.value).endswith(message), str(e.value)


def test_config_edges_that_are_allowed():
    edges, _ = reward_config({"reward": {"beta1": 0, "beta2": 0.0, "beta3": 0, "alpha": 1e-9, "threshold": 0.0}})
    assert edges.bounds() == (0.0, 1.0)  # -beta3, 1 + beta1 + beta2
    assert RewardConfig(threshold=1.0).threshold == 1.0 and RewardConfig(alpha=2).alpha == 2


def test_episode_view_from_a_trace_keeps_claim_queries_ledger_and_text():
    ep = Episode(claim=CLAIM, claim_id="c1", gold_label=None, messages=[], report=Report(), final_text=report(),
                 queries=[QueryRecord(query="a AND b"), QueryRecord(query="c")], ledger={"101": PAPER})
    v = EpisodeView.from_episode(ep)
    assert (v.claim, v.gold, v.queries, v.ledger, v.final_text) == (CLAIM, None, ["a AND b", "c"], {"101": PAPER},
                                                                    report())
    assert EpisodeView.from_episode(ep, gold="REFUTED").gold is Label.REFUTED
    assert EpisodeView.from_episode(ep.model_copy(update={"gold_label": "NEI"})).gold is Label.NEI


def test_a_ledger_mixing_articles_and_plain_records_is_read_whole():
    v = EpisodeView(claim=CLAIM, gold=Label.SUPPORTED, ledger={"101": PAPER, "103": OTHER.model_dump()})
    assert v.ledger == {"101": PAPER, "103": OTHER}
    assert score(v).n_cited == 0  # usable by the reward code as it is


def test_values_that_are_not_numbers_count_as_zero():
    assert r_evidence(["x", None, [1], 0.8]) == pytest.approx(1.0 - math.exp(-0.8))  # junk -> 0, 0.8 counts
    assert r_evidence(["0.9"]) == pytest.approx(1.0 - math.exp(-0.9))  # a numeric string is a number
    assert r_evidence([float("-inf"), 2]) == pytest.approx(1.0 - math.exp(-1.0))  # -inf -> 0, above 1 -> 1
    assert r_evidence([float("inf"), float("nan")]) == 0.0  # not finite: 0, never 1


def test_a_query_that_is_not_text_is_not_advanced():
    from biocheck.rewards.components import is_advanced_query, r_search

    assert is_advanced_query(None) is False and is_advanced_query(["a AND b"]) is False
    assert r_search([None, "a AND b"]) == 0.5
