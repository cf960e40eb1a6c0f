"""The judge cache keeps the first score for a key (pinned in issue 30)."""

from __future__ import annotations


def test_the_judge_cache_keeps_the_first_score_for_a_key(tmp_path):
    from biocheck.evidence.types import Article
    from biocheck.rewards.judge.cache import CachedJudge, JudgeCache, pair_key

    article = Article(pmid="7", title="T", abstract="A.")
    key = pair_key("fp", "ph", "claim", article)
    first = {"SUPPORTED": 0.9, "REFUTED": 0.05, "NEI": 0.05}
    cache = JudgeCache(tmp_path)
    cache.put_many({key: first})
    cache.put_many({key: {"SUPPORTED": 0.1, "REFUTED": 0.8, "NEI": 0.1}})
    assert JudgeCache(tmp_path).get_many([key]) == {key: first} and len(cache) == 1

    class Flipped:  # same fingerprint and prompt, another answer: the stored one is what every run sees
        spec, prompt_hash = "x", "ph"

        def fingerprint(self):
            return "fp"

        def score(self, pairs):
            raise AssertionError("a cached pair must not be scored again")

    assert CachedJudge(Flipped(), JudgeCache(tmp_path)).score([("claim", article)]) == [first]
