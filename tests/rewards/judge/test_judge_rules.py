"""The judge's plumbing rules without a model: the OpenAI request, make_judge's wiring, the cache's file and errors."""

from __future__ import annotations

import json
import math
import random
import sqlite3
import threading

import httpx
import pytest

from biocheck.evidence.types import Article
from biocheck.llm.openai_backend import OpenAIChat
from biocheck.rewards import judge as judge_mod
from biocheck.rewards.judge import (
    KEYS,
    CachedJudge,
    JudgeCache,
    JudgeCacheError,
    JudgeError,
    OpenAIJudge,
    clean_scores,
    judge_prompt_hash,
    make_judge,
    render_prompt,
)
from biocheck.rewards.judge.openai_judge import scores_from_logprobs

CLAIM = "Vitamin D supplementation prevents hip fractures."
LONG = Article(pmid="1", title="A long trial", abstract="Fractures fell. " * 20, source="corpus:test")
SHORT = Article(pmid="2", title="A short trial", abstract="Fractures rose.", source="corpus:test")


def _answer(token: str, logprob: float, top: list | None = None) -> dict:
    return {"choices": [{"message": {"role": "assistant", "content": token}, "logprobs": {"content": [
        {"token": token, "logprob": logprob, "top_logprobs": top if top is not None else [
            {"token": token, "logprob": logprob}]}]}}]}


# ------------------------------------------------------------------------------------------------ openai


def test_openai_request_is_one_user_message_with_the_rendered_prompt():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, json.loads(request.content)))
        return httpx.Response(200, json=_answer("SUP", math.log(0.5)))

    j = OpenAIJudge("openai:gpt-test", base_url="http://fake/v1", api_key="k", workers=1, max_abstract_chars=40)
    j._chat._client = httpx.Client(transport=httpx.MockTransport(handler))
    assert j.score([(CLAIM, LONG), (CLAIM, SHORT)]) == [{"SUPPORTED": 0.5, "REFUTED": 0.0, "NEI": 0.0}] * 2
    assert [path for path, _ in seen] == ["/v1/chat/completions"] * 2
    assert [body for _, body in seen] == [
        {"model": "gpt-test", "messages": [{"role": "user", "content": render_prompt(CLAIM, a, 40)}], "max_tokens": 1,
         "temperature": 0.0, "logprobs": True, "top_logprobs": 20} for a in (LONG, SHORT)]
    assert "Fractures fell. " * 20 not in seen[0][1]["messages"][0]["content"]  # the abstract was cut at 40


def test_openai_client_settings_are_passed_on():
    j = OpenAIJudge("m", base_url="http://fake/v1", api_key="secret", timeout=7.0, max_attempts=3)
    assert j._chat._client.headers["Authorization"] == "Bearer secret"
    assert j._chat._client.timeout == httpx.Timeout(7.0) and j._chat.max_attempts == 3
    # by default the judge retries like the agent's own OpenAI backend, and runs as many requests as make_judge
    plain, agent = OpenAIJudge("m", base_url="http://fake/v1"), OpenAIChat("m", base_url="http://fake/v1")
    assert plain._chat._client.timeout == agent._client.timeout and plain._chat.max_attempts == agent.max_attempts
    assert plain.workers == make_judge("openai:m", base_url="http://fake/v1").workers
    assert OpenAIJudge("m", base_url="http://x/v1", workers=1).workers == 1
    assert OpenAIJudge("m", base_url="http://x/v1", workers=0).workers == 1  # at least one request at a time


@pytest.mark.parametrize("n", [2, 4])
def test_openai_requests_run_in_parallel_up_to_workers(n):
    threads = set()
    together = threading.Barrier(2, timeout=10)  # requests go out two at a time: alone, one would wait in vain

    def handler(request: httpx.Request) -> httpx.Response:
        threads.add(threading.get_ident())
        together.wait()
        return httpx.Response(200, json=_answer("REF", math.log(0.25)))

    j = OpenAIJudge("m", base_url="http://fake/v1", workers=2)
    j._chat._client = httpx.Client(transport=httpx.MockTransport(handler))
    pairs = [(CLAIM, Article(pmid=str(i), title="t", abstract="a")) for i in range(n)]
    assert j.score(pairs) == [{"SUPPORTED": 0.0, "REFUTED": 0.25, "NEI": 0.0}] * n
    assert len(threads) == 2  # `workers` threads, no more


def test_openai_reader_messages_and_broken_entries():
    with pytest.raises(JudgeError, match=r"^the server returned no logprobs for the first token \(does it support "
                                         r"logprobs/top_logprobs\?\)$"):
        scores_from_logprobs({"choices": []})
    with pytest.raises(JudgeError, match=r"^openai judge: empty model name$"):
        OpenAIJudge("", base_url="http://x/v1")
    # a broken entry early in the list does not hide the ones after it
    top = ["junk", None, {"token": "SUP", "logprob": math.log(0.5)}, {"token": "NOT", "logprob": math.log(0.25)}]
    assert scores_from_logprobs(_answer("junk", 0.0, top)) == pytest.approx(
        {"SUPPORTED": 0.5, "REFUTED": 0.0, "NEI": 0.25}, rel=1e-12, abs=0)


# --------------------------------------------------------------------------------------------- scores


def test_clean_scores_caps_each_value_before_scaling_the_sum():
    assert clean_scores({"SUPPORTED": 1.5, "REFUTED": 0.5}) == pytest.approx(
        {"SUPPORTED": 1.0 / 1.5, "REFUTED": 0.5 / 1.5, "NEI": 0.0}, rel=1e-12, abs=0)  # 1.5 -> 1 first


def test_clean_scores_takes_a_rounding_excess_off_the_largest_score():
    rng, seen = random.Random(5), 0
    for _ in range(3000):
        raw = {k: rng.uniform(0.4, 1.0) for k in KEYS}
        total = sum(raw.values())
        if total <= 1.0 or sum(v / total for v in raw.values()) <= 1.0:
            continue  # not scaled, or scaled without a rounding excess
        top = max(raw, key=raw.__getitem__)
        seen += top != "SUPPORTED"
        cleaned = clean_scores(raw)
        assert sum(cleaned.values()) <= 1.0
        assert all(cleaned[k] == raw[k] / total for k in KEYS if k != top)  # the others are exactly scaled
    assert seen > 20


# --------------------------------------------------------------------------------------------- prompt


def test_prompt_with_an_empty_title_and_its_hash():
    text = render_prompt(CLAIM, Article(pmid="1", title="", abstract="Fractures fell."))
    assert "Title: \nAbstract: Fractures fell." in text  # an empty title stays empty
    assert len(judge_prompt_hash()) == 16 and set(judge_prompt_hash("x")) <= set("0123456789abcdef")


# ------------------------------------------------------------------------------------------- make_judge


def test_make_judge_passes_the_model_id_and_settings_on(monkeypatch, tmp_path):
    made = []

    class Recorder:
        spec, prompt_hash = "transformers:rec", "ph"

        def __init__(self, ref, **kwargs):
            made.append((ref, kwargs))

        def fingerprint(self) -> str:
            return "fp"

    monkeypatch.setattr(judge_mod, "TransformersJudge", Recorder)
    j = make_judge("transformers:org/model", batch_size=2, mode="sequence", device="cpu")
    assert isinstance(j, Recorder) and made == [("org/model", {"batch_size": 2, "mode": "sequence", "device": "cpu"})]
    # a model id may itself hold a colon: only the first one separates the kind
    assert make_judge("openai:ns:model", base_url="http://x/v1").model == "ns:model"
    # cache: a path opens a JudgeCache there; a JudgeCache is used as it is
    by_path = make_judge("transformers:m", cache=tmp_path / "c.sqlite")
    assert isinstance(by_path, CachedJudge) and isinstance(by_path.cache, JudgeCache)
    assert by_path.cache.path == tmp_path / "c.sqlite" and by_path.judge.__class__ is Recorder
    shared = JudgeCache(tmp_path / "shared")
    assert make_judge("transformers:m", cache=shared).cache is shared


# ------------------------------------------------------------------------------------------------- cache


class Counting:
    spec, prompt_hash = "count:test", "ph"

    def __init__(self):
        self.scored = []

    def fingerprint(self) -> str:
        return "fp"

    def score(self, pairs):
        self.scored += list(pairs)
        return [{"SUPPORTED": 0.5, "REFUTED": 0.25, "NEI": 0.125} for _ in pairs]


def test_cache_file_location_and_timeouts(tmp_path):
    for name in ("c.sqlite", "c.sqlite3", "c.db"):  # a database file name is used as it is
        assert JudgeCache(tmp_path / name).path == tmp_path / name
    assert JudgeCache(tmp_path / "dir").path == tmp_path / "dir" / "judge_cache.sqlite"  # a folder gets the default
    c = JudgeCache(tmp_path / "t.sqlite", busy_timeout=5.0, lock_timeout=7.0)
    assert (c.busy_timeout, c.lock_timeout) == (5.0, 7.0)
    d = JudgeCache(tmp_path / "d.sqlite")
    assert (d.busy_timeout, d.lock_timeout) == (30.0, 120.0)


def test_cached_judge_mirrors_the_judge_and_counts_from_zero(tmp_path):
    inner = Counting()
    cached = CachedJudge(inner, JudgeCache(tmp_path))
    assert (cached.spec, cached.prompt_hash, cached.fingerprint()) == ("count:test", "ph", "fp")
    assert cached.stats() == {"hits": 0, "misses": 0, "hit_rate": 0.0}  # nothing asked yet


def test_claims_and_texts_that_are_not_valid_unicode_are_cached(tmp_path):
    odd = "Vitamin D \ud800 prevents fractures."  # a lone surrogate (seen in scraped text) cannot be UTF-8 encoded
    paper = Article(pmid="9", title="t \udfff", abstract="a")
    cached = CachedJudge(Counting(), JudgeCache(tmp_path))
    first = cached.score([(odd, paper)])
    assert cached.score([(odd, paper)]) == first and cached.stats()["misses"] == 1 and cached.stats()["hits"] == 1


def test_cache_rows_are_stamped_in_utc(tmp_path):
    cache = JudgeCache(tmp_path)
    CachedJudge(Counting(), cache).score([(CLAIM, SHORT)])
    with sqlite3.connect(cache.path) as conn:
        [(stamp,)] = conn.execute("SELECT created_at FROM scores").fetchall()
    assert stamp.endswith("+00:00")


def test_a_broken_cache_file_says_what_failed(tmp_path):
    cache = JudgeCache(tmp_path)
    with sqlite3.connect(cache.path) as conn:
        conn.execute("DROP TABLE scores")
    with pytest.raises(JudgeCacheError, match=rf"^judge cache {cache.path}: could not read: no such table: scores"):
        CachedJudge(Counting(), cache).score([(CLAIM, SHORT)])
    with pytest.raises(JudgeCacheError, match=rf"^judge cache {cache.path}: could not count: no such table"):
        len(cache)


def test_a_judge_that_drops_pairs_is_an_error_and_nothing_is_cached(tmp_path):
    class Short(Counting):
        def score(self, pairs):
            return super().score(pairs)[:-1]

    cache = JudgeCache(tmp_path)
    with pytest.raises(JudgeError, match=r"^judge count:test returned 1 scores for 2 pairs$"):
        CachedJudge(Short(), cache).score([(CLAIM, SHORT), (CLAIM, LONG)])
    assert len(cache) == 0
