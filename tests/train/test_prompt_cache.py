"""train/prompt_cache.py: generation from the rows' shared prompt is generation from scratch."""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")


def _batch(shared: int = 30, tails=(9, 4, 14)):
    """Left-padded rows: one shared prompt, then tokens of their own (as TRL pads a turn's prompts)."""
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(5, 500, (shared,), generator=g).tolist()
    rows = [prompt + torch.randint(5, 500, (n,), generator=g).tolist() for n in tails]
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def _model(tiny_model):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()



def _plain_and_cached(model, ids, mask, config):
    """Generation from scratch, then through the prompt cache with every forward pass's input shape recorded: the
    two must agree token for token and in every row's logits at every step. (plain output, recorded shapes)"""
    from biocheck.train.prompt_cache import PromptCache

    plain = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    calls = []
    real_forward = model.forward

    @functools.wraps(real_forward)
    def forward(*args, **kwargs):
        calls.append(tuple(kwargs.get("input_ids", args[0] if args else None).shape))
        return real_forward(*args, **kwargs)

    model.forward = forward
    cached = PromptCache().generate(model.generate, model, 0, input_ids=ids, attention_mask=mask,
                                    generation_config=config)
    assert torch.equal(cached.sequences, plain.sequences)
    for mine, theirs in zip(cached.scores, plain.scores, strict=True):
        assert torch.allclose(mine, theirs, atol=1e-4)
    return plain, calls

def test_the_plan_finds_the_padding_and_the_common_prefix():
    from biocheck.train.prompt_cache import MIN_PREFIX, plan

    ids, mask = _batch()
    pads, common = plan(ids, mask)
    assert pads == [5, 10, 0] and common == 30
    same = ids[2:3].expand(3, -1)  # identical rows: all but the last token, which generate must see
    assert plan(same, torch.ones_like(same)) == ([0, 0, 0], same.size(1) - 1)
    right = mask.flip(1)  # padding on the right: not TRL's layout, not planned
    assert plan(ids, right) is None
    short, smask = _batch(shared=MIN_PREFIX - 1)
    assert plan(short, smask) is None


@pytest.mark.parametrize("cache", [None, "static"])
def test_generation_from_the_prompt_cache_is_generation_from_scratch(tiny_model, cache):
    from transformers import GenerationConfig

    from biocheck.train.prompt_cache import PromptCache

    model = _model(tiny_model)
    ids, mask = _batch()
    config = GenerationConfig(max_new_tokens=12, do_sample=False, pad_token_id=0, cache_implementation=cache,
                              output_scores=True, return_dict_in_generate=True)
    plain = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    store, calls = PromptCache(), []
    real_forward = model.forward

    @functools.wraps(real_forward)  # generate reads forward's signature (position_ids)
    def forward(*args, **kwargs):
        calls.append(kwargs.get("input_ids", args[0] if args else None).shape)
        return real_forward(*args, **kwargs)

    model.forward = forward
    cached = store.generate(model.generate, model, "v1", input_ids=ids, attention_mask=mask, generation_config=config)
    assert torch.equal(cached.sequences, plain.sequences)
    for mine, theirs in zip(cached.scores, plain.scores, strict=True):  # every row's logits at every token
        assert torch.allclose(mine, theirs, atol=1e-4)
    assert tuple(calls[0]) == (1, 30)  # the prefix, once, at batch 1
    # each row's own tokens but its last, alone (no padding computed), then generate's prefill: the last column
    assert [tuple(c) for c in calls[1:5]] == [(1, 8), (1, 3), (1, 13), (3, 1)]
    assert config.cache_implementation == cache  # the caller's config is left as it was
    # a later turn under the same weights: the prompt is not computed again
    calls.clear()
    again = store.generate(model.generate, model, "v1", input_ids=ids, attention_mask=mask, generation_config=config)
    assert torch.equal(again.sequences, plain.sequences) and tuple(calls[0]) == (1, 8)
    calls.clear()
    store.generate(model.generate, model, "v2", input_ids=ids, attention_mask=mask, generation_config=config)
    assert tuple(calls[0]) == (1, 30)  # new weights: computed again


def test_sampled_generation_from_the_prompt_cache_matches_with_one_seed(tiny_model):
    from transformers import GenerationConfig

    from biocheck.train.prompt_cache import PromptCache

    model = _model(tiny_model)
    ids, mask = _batch()
    config = GenerationConfig(max_new_tokens=16, do_sample=True, temperature=1.0, top_k=0, pad_token_id=0)
    torch.manual_seed(3)
    plain = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    torch.manual_seed(3)
    cached = PromptCache().generate(model.generate, model, 0, input_ids=ids, attention_mask=mask,
                                    generation_config=config)
    assert torch.equal(cached, plain)


def test_a_batch_without_a_common_prefix_is_generated_as_given(tiny_model):
    from transformers import GenerationConfig

    from biocheck.train.prompt_cache import PromptCache

    model = _model(tiny_model)
    ids, mask = _batch()
    ids = ids.clone()
    ids[1, 10] += 1  # row 1 differs at its first token
    seen = []

    def generate(*args, **kwargs):
        seen.append(kwargs.get("cache"))
        return model.generate(*args, **kwargs)

    config = GenerationConfig(max_new_tokens=2, do_sample=False, pad_token_id=0)
    PromptCache().generate(generate, model, 0, input_ids=ids, attention_mask=mask, generation_config=config)
    assert seen == [None]


def test_identical_rows_run_their_own_tokens_once(tiny_model):
    """A group's rows share their whole prompt before the first answer; in validation, claims come in pairs."""
    from transformers import GenerationConfig


    model = _model(tiny_model)
    ids, mask = _batch(tails=(9, 9, 14))
    ids, mask = torch.cat([ids, ids[2:]]), torch.cat([mask, mask[2:]])
    ids[1] = ids[0]  # rows 0 and 1 alike, rows 2 and 3 alike
    config = GenerationConfig(max_new_tokens=6, do_sample=False, pad_token_id=0, output_scores=True,
                              return_dict_in_generate=True)
    _, calls = _plain_and_cached(model, ids, mask, config)
    assert calls[:4] == [(1, 30), (1, 8), (1, 13), (4, 1)]


@pytest.mark.parametrize("cache", [None, "static"])
def test_rows_whose_own_tokens_differ_at_equal_length_are_computed_apart(tiny_model, cache):
    """Tails of one length (search results cut to one size, claims of one length) are no identical tails: each
    row runs its own, and the result is generation from scratch (a cache keyed by length would mix rows)."""
    from transformers import GenerationConfig


    model = _model(tiny_model)
    ids, mask = _batch(tails=(9, 9, 9))
    assert int(mask.sum()) == 3 * 39 and len({tuple(row[30:].tolist()) for row in ids}) == 3  # no padding
    config = GenerationConfig(max_new_tokens=10, do_sample=False, pad_token_id=0, cache_implementation=cache,
                              output_scores=True, return_dict_in_generate=True)
    plain, calls = _plain_and_cached(model, ids, mask, config)
    assert len({tuple(row.tolist()) for row in plain.sequences[:, ids.size(1):]}) > 1  # the rows answer apart
    assert calls[:5] == [(1, 30), (1, 8), (1, 8), (1, 8), (3, 1)]  # three tails of 8 tokens, three passes


def test_the_static_cache_attends_over_what_it_holds(tiny_model):
    """UsedStaticCache: preallocated like transformers' StaticCache, but a step's attention and mask cover the
    positions written so far; the logits are StaticCache's."""
    from transformers import GenerationConfig, StaticCache

    from biocheck.train.prompt_cache import used_static_cache

    model = _model(tiny_model)
    ids, mask = _batch()
    config = GenerationConfig(max_new_tokens=10, do_sample=False, pad_token_id=0, output_scores=True,
                              return_dict_in_generate=True)
    room = ids.size(1) + 50
    cache = used_static_cache()(config=model.config, max_cache_len=room)
    widths = []
    real = type(cache.layers[0]).update

    def update(self, *args, **kwargs):
        keys, values = real(self, *args, **kwargs)
        widths.append(keys.size(2))
        return keys, values

    type(cache.layers[0]).update = update
    try:
        mine = model.generate(input_ids=ids, attention_mask=mask, generation_config=config, cache=cache)
    finally:
        type(cache.layers[0]).update = real
    theirs = model.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                            cache=StaticCache(config=model.config, max_cache_len=room))
    assert torch.equal(mine.sequences, theirs.sequences)
    for a, b in zip(mine.scores, theirs.scores, strict=True):
        assert torch.allclose(a, b, atol=1e-4)
    layers = model.config.num_hidden_layers
    assert widths[::layers] == list(range(ids.size(1), ids.size(1) + 10))  # not `room` at every step
    assert cache.layers[0].keys.size(2) == room  # still one preallocated tensor, written in place
