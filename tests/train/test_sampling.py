"""train/sampling.py: one uniform a row draws from the distribution `torch.multinomial` draws from."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
stats = pytest.importorskip("scipy.stats")


def _probs(scores, temperature):
    return torch.softmax(scores.double() / temperature, dim=-1)


def test_the_sampler_draws_from_the_tempered_softmax():
    from biocheck.train.sampling import InverseCDFSampler

    g = torch.Generator().manual_seed(0)
    scores = torch.randn(1, 12, generator=g) * 2
    scores[0, 3] = float("-inf")  # a token the distribution excludes is never drawn
    sampler = InverseCDFSampler(0.8)
    torch.manual_seed(1)
    n = 20_000
    out = sampler(None, scores.expand(n, -1).contiguous())
    assert bool((torch.isfinite(out).sum(dim=1) == 1).all())  # one finite score a row: greedy picks the draw
    drawn = out.argmax(dim=1)
    counts = torch.bincount(drawn, minlength=12).double()
    expected = _probs(scores[0], 0.8) * n
    assert counts[3] == 0
    keep = expected > 0
    _, p = stats.chisquare(counts[keep].numpy(), expected[keep].numpy())
    assert p > 1e-3, p
    # ... and the temperature matters: the untempered softmax is rejected
    _, p_wrong = stats.chisquare(counts[keep].numpy(), (_probs(scores[0], 1.0) * n)[keep].numpy())
    assert p_wrong < 1e-6


def test_plain_sampling_is_a_temperature_alone():
    from transformers import GenerationConfig

    from biocheck.train.sampling import plain_sampling

    base = {"do_sample": True, "temperature": 0.8, "top_k": 0, "top_p": 1.0}
    assert plain_sampling(GenerationConfig(**base))
    for other in ({"do_sample": False}, {"top_k": 50}, {"top_p": 0.9}, {"min_p": 0.1}, {"num_beams": 2},
                  {"typical_p": 0.5}, {"epsilon_cutoff": 1e-4}):
        assert not plain_sampling(GenerationConfig(**{**base, **other})), other


def test_generate_through_the_sampler_follows_the_model(tiny_model):
    """`sampled` turns a sampling generate into a greedy one whose draws come from the sampler; the first
    token's frequencies over many rows match the model's tempered distribution."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    from biocheck.train.sampling import sampled

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    prompt = torch.tensor([[5, 17, 42, 99, 7]])
    with torch.no_grad():
        logits = model(input_ids=prompt).logits[0, -1]
    config = GenerationConfig(max_new_tokens=1, do_sample=True, temperature=0.7, top_k=0, top_p=1.0, pad_token_id=0)
    seen = []

    def generate(*args, **kwargs):
        seen.append(kwargs["generation_config"])
        return model.generate(*args, **kwargs)

    n = 4000
    torch.manual_seed(3)
    with torch.no_grad():
        out = sampled(generate, model)(input_ids=prompt.expand(n, -1), attention_mask=torch.ones(n, 5, dtype=torch.long),
                                       generation_config=config)
    assert not seen[0].do_sample and config.do_sample and config.temperature == 0.7  # the caller's config unchanged
    drawn = out[:, -1]
    expected = _probs(logits, 0.7) * n
    keep = expected >= 5  # chi-square's rule of thumb; the rest pooled
    counts = torch.bincount(drawn, minlength=logits.size(0)).double()
    observed = torch.cat([counts[keep], counts[~keep].sum()[None]])
    wanted = torch.cat([expected[keep], expected[~keep].sum()[None]])
    _, p = stats.chisquare(observed.numpy(), wanted.numpy() * observed.sum().item() / wanted.sum().item())
    assert p > 1e-3, p


def test_other_sampling_goes_to_transformers_as_given(tiny_model):
    from transformers import AutoModelForCausalLM, GenerationConfig

    from biocheck.train.sampling import sampled

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    seen = []

    def generate(*args, **kwargs):
        seen.append((kwargs["generation_config"], kwargs.get("logits_processor")))
        return None

    config = GenerationConfig(do_sample=True, top_p=0.9)
    sampled(generate, model)(input_ids=None, generation_config=config)
    assert seen == [(config, None)]


def test_the_sampler_runs_after_every_other_logits_processor(tiny_model):
    """The caller's processors (a ban) and generate's own from the config (repetition penalty, bad words) shape the
    scores the sampler draws from: it is the last processor generate runs. Nearly greedy (temperature 1e-3), the
    draws are then greedy decoding under the same processors; a sampler that ran first would pick the banned token."""
    from transformers import AutoModelForCausalLM, GenerationConfig, LogitsProcessorList

    from biocheck.train.sampling import InverseCDFSampler, sampled

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    prompt = torch.tensor([[5, 17, 42, 99, 7], [8, 19, 33, 250, 61]])
    mask = torch.ones_like(prompt)
    with torch.no_grad():
        first = model(input_ids=prompt).logits[:, -1].argmax(-1)
    banned = sorted(set(first.tolist()))  # each row's favourite first token

    class Ban:
        def __call__(self, input_ids, scores):
            scores = scores.clone()
            scores[:, banned] = float("-inf")
            return scores

    built = []
    real = model._get_logits_processor

    def spy(*args, **kwargs):  # the list generate builds: its own processors merged with the caller's
        built.append(real(*args, **kwargs))
        return built[-1]

    model._get_logits_processor = spy
    common = {"max_new_tokens": 6, "pad_token_id": 0, "repetition_penalty": 1.5, "bad_words_ids": [[11]]}
    with torch.no_grad():
        greedy = model.generate(input_ids=prompt, attention_mask=mask, logits_processor=LogitsProcessorList([Ban()]),
                                generation_config=GenerationConfig(do_sample=False, **common))
        built.clear()
        torch.manual_seed(0)
        drawn = sampled(model.generate, model)(
            input_ids=prompt, attention_mask=mask, logits_processor=LogitsProcessorList([Ban()]),
            generation_config=GenerationConfig(do_sample=True, temperature=1e-3, top_k=0, **common))
    names = [type(p).__name__ for p in built[0]]
    assert names[-1] == InverseCDFSampler.__name__, names
    assert {"RepetitionPenaltyLogitsProcessor", "NoBadWordsLogitsProcessor", "Ban"} <= set(names[:-1])
    assert torch.equal(drawn, greedy)
    assert not any(t in banned for t in drawn[:, prompt.size(1)].tolist())
