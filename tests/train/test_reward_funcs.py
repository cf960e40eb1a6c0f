"""The training reward's weighted total equals rewards.score()'s, with distinct betas (pinned in issue 30)."""

from __future__ import annotations

import pytest

from tests.helpers.judges import HalfJudge


def test_the_weighted_training_reward_equals_score_with_distinct_betas(evidence):
    from biocheck.labels import Label
    from biocheck.rewards.components import EpisodeView, RewardConfig, score
    from biocheck.train.reward_funcs import COMPONENTS, RewardBank
    from tests.helpers.checkpoints import rollouts

    cfg = RewardConfig(beta1=0.3, beta2=0.7, beta3=1.9)
    envs, completions = rollouts(evidence)
    claims, labels = ["Vitamin D prevents fractures."] * 3, ["SUPPORTED", "SUPPORTED", "REFUTED"]
    bank = RewardBank(cfg, judge=HalfJudge())
    assert bank.weights() == [1.0, 0.3, 0.7, -1.9, 0.0]
    values = {f.__name__: f(completions, environments=envs, label=labels, claim=claims) for f in bank.functions()}
    # TRL's total: sum of reward_weights[i] * reward_funcs[i] (grpo.make_trainer sets reward_weights = weights())
    trl_total = [sum(w * values[n][i] for w, n in zip(bank.weights(), COMPONENTS, strict=True)) for i in range(3)]
    library = [score(EpisodeView(claim=c, gold=Label(g), queries=e.budget.query_texts(), ledger=dict(e.budget.ledger),
                                 final_text=comp[-1]["content"]), cfg, HalfJudge())
               for c, g, e, comp in zip(claims, labels, envs, completions, strict=True)]
    assert trl_total == pytest.approx([b.total for b in library])
    # the test has teeth only if evidence and hallucination are non-zero somewhere and not equal
    assert any(b.evidence for b in library) and any(b.hallucination for b in library)
    swapped = [b.outcome + 0.3 * b.search + 1.9 * b.evidence - 0.7 * b.hallucination for b in library]
    assert swapped != pytest.approx(trl_total)
