"""Concurrent greedy turns generated as one batch (llm.transformers_backend._Batcher): the same tokens as one
at a time, every caller gets its own, errors reach every caller, sampled turns are never batched."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from biocheck.llm.base import GenerationConfig
from biocheck.llm.transformers_backend import TransformersChat, _Batcher

CLAIMS = ["Aspirin lowers the risk of a first heart attack.", "Vitamin D prevents fractures in older adults.",
          "Statins cause memory loss.", "Coffee raises blood pressure for hours.", "Zinc shortens colds.",
          "Smoking causes lung cancer in most smokers."]


def _messages(claim: str) -> list[dict]:
    return [{"role": "system", "content": "You check biomedical claims."}, {"role": "user", "content": claim}]


def test_batched_greedy_turns_are_the_tokens_of_one_turn_at_a_time(tiny_model):
    gen = GenerationConfig(max_new_tokens=24, temperature=0.0)
    alone = TransformersChat(tiny_model, gen)
    batched = TransformersChat(tiny_model, gen, batch=len(CLAIMS))
    expected = [alone.chat(_messages(c), []) for c in CLAIMS]
    calls: list[int] = []
    many = batched._generate_many

    def counted(prompts, max_new):
        calls.append(len(prompts))
        return many(prompts, max_new)

    batched._batcher._generate_many = counted
    barrier = threading.Barrier(len(CLAIMS))

    def one(claim: str):
        barrier.wait()  # all turns arrive together: they must go out as one batch
        return batched.chat(_messages(claim), [])

    with ThreadPoolExecutor(len(CLAIMS)) as pool:
        got = list(pool.map(one, CLAIMS))
    assert max(calls) > 1, calls  # batched for real
    assert sum(calls) == len(CLAIMS)
    assert [t.raw for t in got] == [t.raw for t in expected]
    assert [t.usage for t in got] == [t.usage for t in expected]  # each its own prompt and completion length


def test_a_batch_gives_each_prompt_its_own_limit_and_stop(tiny_model):
    chat = TransformersChat(tiny_model, GenerationConfig(temperature=0.0), batch=4)
    prompts = [chat.render(_messages(c), []) for c in CLAIMS[:3]]
    limits = [1, 7, 30]
    rows = chat._generate_many(prompts, limits)
    for prompt, limit, row in zip(prompts, limits, rows, strict=True):
        assert row == chat._generate(prompt, limit, GenerationConfig(temperature=0.0))
        assert len(row) <= limit
        assert not any(t in chat.stop_ids for t in row[:-1])  # nothing past the first stop token


def test_an_error_reaches_every_turn_of_the_batch_and_nobody_waits_forever():
    def boom(prompts, max_new):
        raise RuntimeError("out of memory")

    b = _Batcher(boom, size=3, gather_s=0.2)
    errors: list[str] = []

    def one(i: int):
        try:
            b.run([i], 4)
        except RuntimeError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads)
    assert errors == ["out of memory"] * 3


def test_more_waiting_turns_than_the_batch_size_are_served_in_order():
    seen: list[list[int]] = []

    def echo(prompts, max_new):
        seen.append([p[0] for p in prompts])
        return [[p[0] * 10] for p in prompts]

    b = _Batcher(echo, size=2, gather_s=0.2)
    with ThreadPoolExecutor(5) as pool:
        got = list(pool.map(lambda i: b.run([i], 1), range(5)))
    assert got == [[i * 10] for i in range(5)]  # each caller its own answer
    assert all(len(s) <= 2 for s in seen) and sorted(x for s in seen for x in s) == list(range(5))


@pytest.mark.parametrize("temperature", [0.7])
def test_sampled_turns_are_generated_alone(tiny_model, temperature):
    chat = TransformersChat(tiny_model, GenerationConfig(max_new_tokens=8, temperature=temperature, seed=3), batch=4)
    chat._batcher._generate_many = lambda *a: pytest.fail("a sampled turn was batched")
    one = chat.chat(_messages(CLAIMS[0]), [])
    again = TransformersChat(tiny_model, GenerationConfig(max_new_tokens=8, temperature=temperature, seed=3))
    assert one.raw == again.chat(_messages(CLAIMS[0]), []).raw  # its seed gives its own tokens


def test_bfloat16_weights_are_another_model_to_the_episode_cache(tiny_model):
    from biocheck.llm import make_llm
    from biocheck.llm.load import model_fingerprint

    fp32 = make_llm(f"transformers:{tiny_model}", GenerationConfig(max_new_tokens=4))
    bf16 = make_llm(f"transformers:{tiny_model}", GenerationConfig(max_new_tokens=4, dtype="bfloat16"))
    assert fp32.fingerprint() == model_fingerprint(tiny_model)  # the default: the folder's own fingerprint
    assert str(bf16.model.dtype) == "torch.bfloat16"
    assert bf16.fingerprint() != fp32.fingerprint() and len(bf16.fingerprint()) == len(fp32.fingerprint())
    assert bf16.chat(_messages(CLAIMS[0]), []).usage["completion_tokens"] >= 1


def test_evaluation_batches_the_turns_of_its_claims_in_flight(monkeypatch):
    import biocheck.evaluate.systems as systems
    from biocheck.agent.episode import AgentConfig
    from biocheck.evaluate.config import EvaluateConfig

    built = []
    monkeypatch.setattr(systems, "_build", lambda *a: built.append(a))
    for batch_turns, expected in ((True, 6), (False, 1)):
        cfg = EvaluateConfig(workers=6, batch_turns=batch_turns)
        system = systems.make_system("no_retrieval", llm="transformers:x", agent_cfg=AgentConfig(), search_cfg=None,
                                     eval_cfg=cfg)
        system._build()
        assert built[-1][-1] == expected  # the batch: the claims in flight, or one turn at a time


def test_a_static_cache_gives_the_tokens_of_the_dynamic_one(tiny_model):
    """agent.cache static (a preallocated KV cache, issue 32): the same greedy tokens, one turn or a batch."""
    dynamic = TransformersChat(tiny_model, GenerationConfig(max_new_tokens=24, temperature=0.0))
    static = TransformersChat(tiny_model, GenerationConfig(max_new_tokens=24, temperature=0.0, cache="static"))
    prompts = [dynamic.render(_messages(c), []) for c in CLAIMS]
    used = []
    generate = static.model.generate

    def spy(*args, generation_config, **kwargs):
        used.append(generation_config.cache_implementation)
        return generate(*args, generation_config=generation_config, **kwargs)

    static.model.generate = spy
    alone = [static._generate(p, 24, GenerationConfig(temperature=0.0)) for p in prompts]
    assert alone == [dynamic._generate(p, 24, GenerationConfig(temperature=0.0)) for p in prompts]
    assert static._generate_many(prompts, [24] * len(prompts)) == dynamic._generate_many(prompts, [24] * len(prompts))
    assert used == ["static"] * (len(prompts) + 1)  # every call, the batch too
    assert dynamic.fingerprint() == static.fingerprint()  # the same model: one episode cache


def _agent_prompts(chat) -> list[list[int]]:
    """Turn-0 prompts of an agent: a long system prompt every claim shares, then the claim."""
    system = "You check biomedical claims against PubMed. " * 12
    return [chat.render([{"role": "system", "content": system}, {"role": "user", "content": c}], []) for c in CLAIMS]


def test_a_cached_prompt_prefix_gives_the_tokens_of_the_whole_prompt(tiny_model):
    """agent.cache prefix (issue 32): the prefix every turn shares is computed once; in float32 each turn,
    alone or in a batch laid out [prefix][pads][rest], gets the tokens of its whole prompt."""
    plain = TransformersChat(tiny_model, GenerationConfig(max_new_tokens=24, temperature=0.0))
    cached = TransformersChat(tiny_model, GenerationConfig(max_new_tokens=24, temperature=0.0, cache="prefix"))
    prompts = _agent_prompts(plain)
    given: list[tuple[int, int]] = []  # per generate: the cached tokens it was given, and the batch
    generate = cached.model.generate

    def spy(*args, cache=None, **kwargs):
        given.append((0 if cache is None else cache.get_seq_length(), kwargs["input_ids"].shape[0]))
        return generate(*args, cache=cache, **kwargs)

    cached.model.generate = spy
    expected = [plain._generate(p, 24, GenerationConfig(temperature=0.0)) for p in prompts]
    alone = [cached._generate(p, 24, GenerationConfig(temperature=0.0)) for p in prompts]
    assert alone == expected
    shared = next(i for i, (a, b) in enumerate(zip(prompts[0], prompts[1], strict=False)) if a != b)
    assert cached._prefix == prompts[0][:shared] and len(cached._prefix) >= 64  # found at the second prompt
    assert cached._generate_many(prompts, [24] * len(prompts)) == plain._generate_many(prompts, [24] * len(prompts))
    assert cached._generate_many(prompts, [24] * len(prompts)) == expected
    assert cached._prefix == prompts[0][:shared]  # settled: never rebuilt longer
    n = len(cached._prefix)
    assert given == [(0, 1)] + [(n, 1)] * (len(prompts) - 1) + [(n, len(prompts))] * 2  # the prefix, really used


def test_the_prefix_is_used_where_it_is_shared_and_only_shortens(tiny_model):
    chat = TransformersChat(tiny_model, GenerationConfig(max_new_tokens=4, temperature=0.0, cache="prefix"))
    prompts = _agent_prompts(chat)
    assert chat._shared_prefix([prompts[0]]) == 0  # nothing to compare with yet
    n = chat._shared_prefix([prompts[1]])
    assert n == len(chat._prefix) >= 64
    assert chat._shared_prefix([prompts[2], prompts[3]]) == n
    assert chat._shared_prefix([list(range(5, 50))]) == 0 and len(chat._prefix) == n  # unrelated: kept, not used
    short = prompts[0][:70] + [7] * 30  # shares 70 tokens: the prefix shortens to them
    assert chat._shared_prefix([short]) == 70 == len(chat._prefix)
    assert chat._shared_prefix([prompts[0][:70]]) == 69 == len(chat._prefix)  # a prompt keeps one token of its own
    off = TransformersChat(tiny_model, GenerationConfig(max_new_tokens=4, temperature=0.0))
    assert off._shared_prefix([prompts[0]]) == off._shared_prefix([prompts[1]]) == 0 and off._prefix is None
