"""The evidence judge: real next-token log-probabilities of the tiny model, the OpenAI logprobs reader, the cache."""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing as mp
import random

import httpx
import pytest

from biocheck.evidence.types import Article
from biocheck.rewards.components import EpisodeView, RewardConfig, score
from biocheck.rewards.judge import (
    ANSWER_WORDS,
    KEYS,
    CachedJudge,
    JudgeCache,
    JudgeError,
    OpenAIJudge,
    TransformersJudge,
    clean_scores,
    judge_prompt_hash,
    make_judge,
    pair_key,
    render_prompt,
)
from biocheck.rewards.judge import transformers_judge as judge_transformers
from biocheck.rewards.judge.base import zero_scores
from biocheck.rewards.judge.openai_judge import label_of, scores_from_logprobs
from tests.helpers.tiny import small_config, write_corpus

CLAIM = "Vitamin D supplementation prevents hip fractures."
ARTICLES = [Article(pmid=str(100 + i), title=f"Trial {i} of vitamin D", source="corpus:test",
                    abstract="Vitamin D supplementation reduced hip fractures. " * (1 + i % 4)) for i in range(7)]
PAIRS = [(CLAIM, a) for a in ARTICLES] + [("Aspirin prevents stroke.", ARTICLES[0])]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from biocheck.agent.prompts import prompt_texts
    from biocheck.base_model.tiny import build_tiny_model

    tmp = tmp_path_factory.mktemp("judge")
    corpus = write_corpus(tmp / "corpus.jsonl", n_docs=60)
    cfg = small_config(tmp, corpus, vocab_size=600, prompt_repeats=5, hidden_size=32, intermediate_size=64,
                       num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    build_tiny_model(cfg, prompt_texts())
    return cfg.out_dir


@pytest.fixture(scope="module")
def judge(model_dir) -> TransformersJudge:
    return TransformersJudge(model_dir, batch_size=3)


def reference(judge: TransformersJudge, claim: str, article: Article) -> dict[str, float]:
    """p(first answer token) from a plain unpadded forward pass over the rendered prompt."""
    import torch

    ids = torch.tensor([judge.prompt_ids(claim, article)])
    with torch.inference_mode():
        logp = judge.model(input_ids=ids).logits[0, -1].double().log_softmax(-1)
    return {k: float(logp[judge.answer_ids[k]].exp()) for k in KEYS}


LOG_TOL = 1e-6  # batching and padding move a log-probability by ~3e-8 on CPU


def assert_same_logprobs(got: dict[str, float], want: dict[str, float], tol: float = LOG_TOL) -> None:
    """Equal as LOG-probabilities: whole-word scores are ~1e-20 to 1e-50, where any absolute tolerance on the
    probability itself would accept 0 (or any other tiny number); a zero never passes."""
    assert set(got) == set(want) == set(KEYS)
    for k in KEYS:
        assert got[k] > 0.0 and want[k] > 0.0, (k, got[k], want[k])
        assert math.log(got[k]) == pytest.approx(math.log(want[k]), rel=0, abs=tol), k


# ------------------------------------------------------------------------------------------ base layer


def test_clean_scores_rules():
    assert clean_scores({"SUPPORTED": 0.25}) == {"SUPPORTED": 0.25, "REFUTED": 0.0, "NEI": 0.0}  # missing -> 0
    assert clean_scores({"SUPPORTED": float("nan"), "REFUTED": -0.5, "NEI": float("-inf")}) == zero_scores()
    assert clean_scores({"SUPPORTED": float("inf"), "REFUTED": 0.0, "NEI": 0.0})["SUPPORTED"] == 0.0  # not finite
    assert clean_scores({"SUPPORTED": 3.0, "REFUTED": 0.0, "NEI": 0.0})["SUPPORTED"] == 1.0  # above 1 -> 1
    # a sum above 1 is scaled back proportionally
    assert clean_scores({"SUPPORTED": 0.9, "REFUTED": 0.6, "NEI": 0.0}) == pytest.approx(
        {"SUPPORTED": 0.9 / 1.5, "REFUTED": 0.6 / 1.5, "NEI": 0.0}, rel=1e-12, abs=0)
    assert clean_scores({"SUPPORTED": 0.4, "REFUTED": 0.3, "NEI": 0.2}) == {"SUPPORTED": 0.4, "REFUTED": 0.3,
                                                                             "NEI": 0.2}  # valid: untouched
    rng = random.Random(3)
    for _ in range(2000):  # division can round the sum up by an ulp: it never ends above 1
        raw = {k: rng.uniform(0.0, 1.0) for k in KEYS}
        cleaned = clean_scores(raw)
        assert sum(cleaned.values()) <= 1.0 and all(0.0 <= v <= 1.0 for v in cleaned.values())
        if sum(raw.values()) <= 1.0:
            assert cleaned == raw


def test_render_prompt_fills_claim_title_and_abstract():
    empty = render_prompt("  A claim.  ", Article(pmid="1", title="", abstract=""))
    assert "Claim: A claim.\n" in empty and "Abstract: (no abstract)" in empty  # stripped; no abstract said
    long = Article(pmid="1", title="T", abstract="y" * 7000)
    assert "y" * 7000 in render_prompt(CLAIM, long, max_abstract_chars=None)  # None: never cut
    assert "y" * 6000 + " ..." in render_prompt(CLAIM, long) and "y" * 6001 not in render_prompt(CLAIM, long)
    exact = Article(pmid="1", title="T", abstract="z" * 10)
    assert "z" * 10 + " ..." not in render_prompt(CLAIM, exact, max_abstract_chars=10)  # at the limit: whole


def test_prompt_hash_follows_every_setting():
    assert judge_prompt_hash("openai", 20, 6000) == judge_prompt_hash("openai", 20, 6000)
    hashes = {judge_prompt_hash(), judge_prompt_hash("openai", 20, 6000), judge_prompt_hash("openai", 5, 6000),
              judge_prompt_hash("openai", 20, None), judge_prompt_hash("transformers", "first_token", 6000),
              judge_prompt_hash("transformers", "sequence", 6000)}
    assert len(hashes) == 6
    assert OpenAIJudge("m", base_url="http://x/v1", top_logprobs=5).prompt_hash == judge_prompt_hash("openai", 5, 6000)
    assert OpenAIJudge("m", base_url="http://x/v1", max_abstract_chars=100).prompt_hash == judge_prompt_hash(
        "openai", 20, 100)


# ------------------------------------------------------------------------------------------ transformers


def test_answer_tokens_are_the_distinct_first_tokens_of_the_label_words(judge):
    assert judge.mode == "first_token"
    ids = [judge.answer_ids[k] for k in KEYS]
    assert len(set(ids)) == 3
    for k in KEYS:
        assert ANSWER_WORDS[k].startswith(judge.tokenizer.decode([judge.answer_ids[k]]))
        assert judge.tokenizer.decode(judge.continuations[k]) == ANSWER_WORDS[k]


def test_probabilities_are_real_logprobs_batched_and_deterministic(judge):
    got = judge.score(PAIRS)
    assert len(got) == len(PAIRS)
    for (claim, article), s in zip(PAIRS, got, strict=True):
        assert set(s) == set(KEYS)
        assert all(0.0 < v < 1.0 for v in s.values()) and sum(s.values()) <= 1.0
        assert_same_logprobs(s, reference(judge, claim, article))  # batched and padded: the numbers of one alone
    assert judge.score(PAIRS) == got  # deterministic for a fixed model (bit for bit)
    one_by_one = [judge.score([p])[0] for p in PAIRS]
    for a, b in zip(got, one_by_one, strict=True):
        assert_same_logprobs(a, b)
    assert judge.score([]) == []
    assert got[0] != got[-1]  # the claim is in the prompt


@pytest.mark.parametrize("mode", ["first_token", "sequence"])
def test_left_padded_fallback_gives_the_same_numbers(model_dir, mode):
    fast = TransformersJudge(model_dir, batch_size=4, mode=mode)
    slow = TransformersJudge(model_dir, batch_size=4, mode=mode)
    slow._per_row_keep = False  # what an older transformers gets: left padding + attention mask
    for a, b in zip(fast.score(PAIRS), slow.score(PAIRS), strict=True):
        assert_same_logprobs(a, b)


def test_prompt_contains_claim_title_and_abstract_and_the_hash_is_stable(judge, model_dir):
    text = render_prompt(CLAIM, ARTICLES[1])
    assert CLAIM in text and ARTICLES[1].title in text and "reduced hip fractures" in text
    assert "{" not in text and "SUPPORTED, REFUTED, NOT ENOUGH INFORMATION" in text
    assert TransformersJudge(model_dir).prompt_hash == judge.prompt_hash == judge_prompt_hash("transformers", "first_token",
                                                                                        6000)
    assert TransformersJudge(model_dir, max_abstract_chars=100).prompt_hash != judge.prompt_hash
    assert TransformersJudge(model_dir, mode="sequence").prompt_hash != judge.prompt_hash
    cut = render_prompt(CLAIM, Article(pmid="1", abstract="x" * 50), max_abstract_chars=10)
    assert "x" * 10 + " ..." in cut and "x" * 11 not in cut
    assert len(judge.fingerprint()) == 12


def test_sequence_mode_scores_whole_label_words(judge, model_dir):
    import torch

    seq = TransformersJudge(model_dir, batch_size=2, mode="sequence")
    got = seq.score(PAIRS[:3])
    first = judge.score(PAIRS[:3])
    for (claim, article), s, f in zip(PAIRS[:3], got, first, strict=True):
        prompt = seq.prompt_ids(claim, article)
        for k in KEYS:
            cont = seq.continuations[k]
            ids = torch.tensor([prompt + cont])
            with torch.inference_mode():
                logp = seq.model(input_ids=ids).logits[0].double().log_softmax(-1)
            # log p(word) = sum of its tokens' log-probabilities, teacher-forced after the prompt
            expected = sum(float(logp[len(prompt) - 1 + t, tok]) for t, tok in enumerate(cont))
            assert s[k] > 0.0, k  # ~1e-20 for a random model, never rounded to 0
            assert math.log(s[k]) == pytest.approx(expected, rel=0, abs=LOG_TOL), k
            assert math.log(s[k]) <= math.log(f[k]) + LOG_TOL  # a whole word is never likelier than its first token
        assert sum(s.values()) <= 1.0


def test_shared_first_tokens_fall_back_to_sequences(model_dir, monkeypatch):
    clash = {"SUPPORTED": [7, 8], "REFUTED": [7, 9], "NEI": [10]}
    monkeypatch.setattr(judge_transformers, "answer_continuations", lambda tok: clash)
    assert TransformersJudge(model_dir).mode == "sequence"
    with pytest.raises(JudgeError, match="share a first token"):
        TransformersJudge(model_dir, mode="first_token")
    monkeypatch.setattr(judge_transformers, "answer_continuations",
                        lambda tok: {"SUPPORTED": [7], "REFUTED": [7, 9], "NEI": [10]})
    with pytest.raises(JudgeError, match="prefix"):
        TransformersJudge(model_dir)


def test_loaded_model_and_tokenizer(judge):
    live = TransformersJudge(judge.model, judge.tokenizer, batch_size=8)
    for a, b in zip(live.score(PAIRS[:2]), judge.score(PAIRS[:2]), strict=True):
        assert_same_logprobs(a, b)
    assert len(live.fingerprint()) == 12 and live.fingerprint() == live.fingerprint()
    assert TransformersJudge(judge.model, judge.tokenizer, fingerprint="step-7").fingerprint() == "step-7"
    with pytest.raises(JudgeError):
        TransformersJudge(judge.model)


def test_reward_with_the_tiny_judge(judge):
    text = ('## Supporting evidence\n- PMID: 101\n  Quote: "reduced hip fractures"\n  Context: x\n'
            "## Refuting evidence\nNone\n## Summary\nJustification: y\n## Conclusion\nSUPPORTED\n")
    v = EpisodeView(claim=CLAIM, gold="SUPPORTED", queries=["vitamin AND fracture"],
                    ledger={"101": ARTICLES[1]}, final_text=text)
    b = score(v, RewardConfig(), judge)
    s = judge.score([(CLAIM, ARTICLES[1])])[0]["SUPPORTED"]
    assert s > 0.0 and b.entries[0].s == b.eqs == s  # the same single-pair forward pass: the same float
    assert not b.entries[0].counted and b.evidence == 0.0  # a random model is far below 0.5
    assert b.total == 1.0 + RewardConfig().beta1 * 1.0  # right label + one advanced search, nothing else


# ------------------------------------------------------------------------------------------------ openai


def _answer(top: list, chosen: tuple[str, float] | None = None) -> dict:
    chosen = chosen or top[0]
    return {"choices": [{"message": {"role": "assistant", "content": chosen[0]}, "logprobs": {"content": [
        {"token": chosen[0], "logprob": chosen[1],
         "top_logprobs": [{"token": x[0], "logprob": x[1]} if isinstance(x, tuple) else x for x in top]}]}}]}


def test_openai_logprobs_to_scores():
    s = scores_from_logprobs(_answer([("SUP", math.log(0.6)), (" SUP", math.log(0.1)), ("REF", math.log(0.2)),
                                      ("The", math.log(0.05))]))
    assert s == pytest.approx({"SUPPORTED": 0.7, "REFUTED": 0.2, "NEI": 0.0})  # missing label -> 0
    s = scores_from_logprobs(_answer([("NOT", math.log(0.9))], chosen=("NOT", math.log(0.9))))
    assert s == pytest.approx({"SUPPORTED": 0.0, "REFUTED": 0.0, "NEI": 0.9})  # generated token counted once
    assert [label_of(t) for t in ["SUPPORTED", " REFUTED", "N", "NOT ENOUGH", "Supported", "", " ", "REFUTED."]] == [
        "SUPPORTED", "REFUTED", "NEI", "NEI", None, None, None, "REFUTED"]
    with pytest.raises(JudgeError, match="logprobs"):
        scores_from_logprobs({"choices": [{"message": {"content": "SUPPORTED"}}]})
    # the generated token counts even when the top list leaves it out; broken entries are skipped
    s = scores_from_logprobs(_answer([("REF", math.log(0.3)), ("NOT", float("nan")), ("SUP", None), "junk"],
                                     chosen=("SUPPORTED", math.log(0.5))))
    assert s == pytest.approx({"SUPPORTED": 0.5, "REFUTED": 0.3, "NEI": 0.0}, rel=1e-12, abs=0)
    # a server whose probabilities add up to more than 1 is scaled back
    s = scores_from_logprobs(_answer([("SUP", math.log(0.8)), ("REF", math.log(0.7))]))
    assert s == pytest.approx({"SUPPORTED": 0.8 / 1.5, "REFUTED": 0.7 / 1.5, "NEI": 0.0}, rel=1e-12, abs=0)


def test_openai_judge_against_a_fake_server():
    requests = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        requests.append(body)
        top = [("REF", math.log(0.75)), ("SUP", math.log(0.2))] if "Aspirin" in body["messages"][0]["content"] \
            else [("SUPPORTED", math.log(0.9))]
        return httpx.Response(200, json=_answer(top))

    j = OpenAIJudge("gpt-test", base_url="http://fake/v1", api_key="k", workers=2)
    j._chat._client = httpx.Client(transport=httpx.MockTransport(handler))
    got = j.score(PAIRS[-2:])
    assert got[0] == pytest.approx({"SUPPORTED": 0.9, "REFUTED": 0.0, "NEI": 0.0})
    assert got[1] == pytest.approx({"SUPPORTED": 0.2, "REFUTED": 0.75, "NEI": 0.0})
    assert all(r["max_tokens"] == 1 and r["logprobs"] is True and r["top_logprobs"] == 20 and r["temperature"] == 0
               for r in requests)
    assert j.spec == "openai:gpt-test" and len(j.fingerprint()) == 16
    # another model or another server is another judge (another cache key)
    assert OpenAIJudge("gpt-other", base_url="http://fake/v1").fingerprint() != j.fingerprint()
    assert OpenAIJudge("gpt-test", base_url="http://other/v1").fingerprint() != j.fingerprint()
    assert OpenAIJudge("openai:gpt-test", base_url="http://fake/v1").fingerprint() == j.fingerprint()


def test_openai_judge_server_error_is_a_judge_error():
    j = OpenAIJudge("gpt-test", base_url="http://fake/v1", api_key="k", workers=1)
    j._chat._client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(400, text="bad model")))
    with pytest.raises(JudgeError, match=r"openai:gpt-test: .*HTTP 400"):
        j.score(PAIRS[:1])
    assert j.score([]) == []
    with pytest.raises(JudgeError, match="empty model"):
        OpenAIJudge("openai:")


# ------------------------------------------------------------------------------------------------- cache


class CountingJudge:
    spec, prompt_hash = "count:test", "ph"

    def __init__(self, fp: str = "fp"):
        self.fp, self.scored = fp, []

    def fingerprint(self) -> str:
        return self.fp

    def score(self, pairs):
        self.scored += [(c, a.pmid) for c, a in pairs]
        return [{"SUPPORTED": (len(c) % 10) / 10, "REFUTED": 0.05, "NEI": 0.05} for c, a in pairs]


def test_cached_judge_scores_each_pair_once_across_epochs_and_runs(tmp_path):
    inner = CountingJudge()
    cached = CachedJudge(inner, JudgeCache(tmp_path))
    epoch = PAIRS + PAIRS[:3]  # repeats inside one call are scored once too
    first = cached.score(epoch)
    assert len(inner.scored) == len(PAIRS) and cached.stats()["misses"] == len(PAIRS)
    cached.reset_stats()
    assert cached.score(epoch) == first
    assert cached.stats() == {"hits": len(epoch), "misses": 0, "hit_rate": 1.0}
    again = CachedJudge(CountingJudge(), JudgeCache(tmp_path / "judge_cache.sqlite"))  # a later run
    assert again.score(epoch) == first and again.judge.scored == []
    # another judge, prompt or paper text is another key
    other = CachedJudge(CountingJudge("fp2"), JudgeCache(tmp_path))
    other.score(PAIRS[:1])
    assert other.stats()["misses"] == 1
    edited = ARTICLES[0].model_copy(update={"abstract": "changed"})
    assert pair_key("fp", "ph", CLAIM, edited) != pair_key("fp", "ph", CLAIM, ARTICLES[0])
    assert pair_key("fp", "ph2", CLAIM, ARTICLES[0]) != pair_key("fp", "ph", CLAIM, ARTICLES[0])
    assert len(JudgeCache(tmp_path)) == len(PAIRS) + 1


class EchoJudge:
    """Scores that depend on every input the cache key must hold, so a wrong cache hit shows as a wrong number."""

    spec = "echo:test"

    def __init__(self, fp: str = "fp", prompt_hash: str = "ph"):
        self.fp, self.prompt_hash, self.scored = fp, prompt_hash, []

    def fingerprint(self) -> str:
        return self.fp

    def expected(self, claim: str, article: Article) -> dict[str, float]:
        h = hashlib.sha256("|".join([self.fp, self.prompt_hash, claim, article.pmid, article.title,
                                     article.abstract]).encode()).digest()
        return {"SUPPORTED": h[0] / 1024, "REFUTED": h[1] / 1024, "NEI": h[2] / 1024}  # exact floats, sum < 1

    def score(self, pairs):
        self.scored += list(pairs)
        return [self.expected(c, a) for c, a in pairs]


BASE = Article(pmid="100", title="Vitamin D trial", abstract="Fractures fell.", source="corpus:test")


KEY_CASES = [
    ("title", {}, CLAIM, BASE.model_copy(update={"title": "Another title"})),
    ("abstract", {}, CLAIM, BASE.model_copy(update={"abstract": "Fractures rose."})),
    # the same characters split differently between title and abstract: a different prompt
    ("title/abstract boundary", {}, CLAIM, BASE.model_copy(update={"title": BASE.title + "Fractures fell",
                                                                   "abstract": "."})),
    ("claim", {}, "Vitamin D causes hip fractures.", BASE),
    ("pmid", {}, CLAIM, BASE.model_copy(update={"pmid": "200"})),
    ("prompt hash", {"prompt_hash": "ph2"}, CLAIM, BASE),
    ("judge fingerprint", {"fp": "fp2"}, CLAIM, BASE),
]


@pytest.mark.parametrize("what, judge_args, claim, article", KEY_CASES, ids=[c[0] for c in KEY_CASES])
def test_cache_key_separates_every_input(tmp_path, what, judge_args, claim, article):
    first = CachedJudge(EchoJudge(), JudgeCache(tmp_path))
    base_scores = first.score([(CLAIM, BASE)])[0]
    assert base_scores == first.judge.expected(CLAIM, BASE)
    inner = EchoJudge(**judge_args)
    other = CachedJudge(inner, JudgeCache(tmp_path))
    got = other.score([(claim, article)])[0]
    assert inner.scored == [(claim, article)], f"changing the {what} must miss the cache"
    assert got == inner.expected(claim, article) != base_scores
    assert len(JudgeCache(tmp_path)) == 2
    # and the first entry is still there, unchanged: the original pair is a hit
    again = CachedJudge(EchoJudge(), JudgeCache(tmp_path))
    assert again.score([(CLAIM, BASE)]) == [base_scores] and again.judge.scored == []


def test_cached_judge_cleans_scores_before_storing_and_returns_copies(tmp_path):
    class Dirty(EchoJudge):
        def score(self, pairs):
            self.scored += list(pairs)
            return [{"SUPPORTED": float("nan"), "REFUTED": 1.5, "NEI": -0.25} for _ in pairs]

    cached = CachedJudge(Dirty(), JudgeCache(tmp_path))
    want = {"SUPPORTED": 0.0, "REFUTED": 1.0, "NEI": 0.0}  # NaN and negatives -> 0, above 1 -> 1
    got = cached.score([(CLAIM, BASE), (CLAIM, BASE)])
    assert got == [want, want] and len(cached.judge.scored) == 1
    got[0]["REFUTED"] = 0.5  # each result is the caller's own copy: a repeat in the call is not changed with it
    assert got[1] == want and cached.score([(CLAIM, BASE)]) == [want]
    assert cached.stats() == {"hits": 2, "misses": 1, "hit_rate": 2 / 3}
    assert cached.score([]) == [] and cached.stats()["hits"] == 2


def _worker(path: str, start: int, out) -> None:
    judge = CachedJudge(CountingJudge(), JudgeCache(path))
    pairs = [(f"claim {i}", Article(pmid=str(i), title="t", abstract="a")) for i in range(start, start + 40)]
    for i in range(0, 40, 5):
        judge.score(pairs[i:i + 5])
    out.put(judge.stats()["misses"])


def test_cache_is_safe_for_several_processes(tmp_path):
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), start, out)) for start in (0, 20, 30)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    misses = [out.get(timeout=5) for _ in procs]
    assert sum(misses) >= 70  # 70 distinct pairs; overlaps may race, never fail
    assert len(JudgeCache(tmp_path)) == 70


# -------------------------------------------------------------------------------------------- make_judge


def test_make_judge_specs(model_dir, tmp_path):
    assert make_judge(None) is None and make_judge("none") is None and make_judge("") is None
    assert all(make_judge(off) is None for off in (" OFF ", "None", "null", "false", "  "))
    for bad in ("vllm:foo", "openai:", "transformers:", "transformers", "openai"):
        with pytest.raises(JudgeError, match="bad judge spec"):
            make_judge(bad)
    assert make_judge("openai:m", base_url="http://x/v1", batch_size=3).workers == 3  # parallel requests = batch
    assert make_judge("openai:m", base_url="http://x/v1", batch_size=3, workers=5).workers == 5
    with pytest.raises(JudgeError):
        make_judge("transformers:" + str(tmp_path / "missing/"))
    j = make_judge(f"transformers:{model_dir}", batch_size=2, cache=tmp_path / "c")
    assert isinstance(j, CachedJudge) and isinstance(j.judge, TransformersJudge) and j.judge.batch_size == 2
    assert isinstance(make_judge("openai:gpt-x", base_url="http://localhost:1/v1"), OpenAIJudge)
