"""Rollouts that compute the rows' shared prompt once per optimizer step, not once per row and turn.

Every row of a rollout batch starts with the same tokens (the system prompt and tool schema; within a group
the whole prompt, 841 tokens for smol), and TRL's tool loop generates each turn from scratch: turn 0
prefills the prompt once per row, turn 1 prefills it again under the search results. About 60% of a smol
step's generation was that prefill. Here the rows' longest common prefix runs once (batch 1, no gradients),
its keys and values are placed under each row's left padding in the cache `generate` starts from, and
`generate` prefills only the rest. The prefix is kept for later turns until the weights change.

Exact up to float rounding: TRL pads prompts on the left and `generate` numbers positions from the attention
mask, so a prompt token's keys and values do not depend on its row's padding (tests/test_prompt_cache.py).
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from biocheck.llm.transformers_backend import common_prefix

MIN_PREFIX = 16  # shorter common prefixes are not worth a separate forward pass


def plan(input_ids, attention_mask) -> tuple[list[int], int] | None:
    """(each row's left padding, the common prefix's length) for a left-padded batch; None when the rows share
    fewer than MIN_PREFIX tokens or the padding is not all on the left."""
    import torch

    mask = attention_mask.bool()
    pads = (~mask).sum(dim=1)
    width = input_ids.size(1)
    if not bool((mask == (torch.arange(width, device=mask.device) >= pads[:, None])).all()):
        return None
    rows = [ids[int(pad):].tolist() for ids, pad in zip(input_ids, pads, strict=True)]
    shortest = min(map(len, rows))
    common = min((common_prefix(rows[0], row) for row in rows[1:]), default=shortest)
    # at least one token of every row goes through `generate`'s own prefill (its first logits)
    common = min(common, shortest - 1)
    return (pads.tolist(), common) if common >= MIN_PREFIX else None


class PromptCache:
    """One prefix's keys and values, for one version of the weights."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.layers: list[tuple[Any, Any]] = []

    def prefix(self, model, version: Any, tokens) -> list[tuple[Any, Any]]:
        """Keys and values of a prefix of `tokens` (1 x n): all of them, or as many as a kept prefix for the
        same weights shares with them when that is at least MIN_PREFIX (a later turn of the same prompt)."""
        import torch

        ids = tuple(tokens[0].tolist())
        if self.key is not None and self.key[0] == version:
            same = common_prefix(self.key[1], ids)
            if same >= MIN_PREFIX:
                return [(k[:, :, :same], v[:, :, :same]) for k, v in self.layers]
        with torch.no_grad():
            cache = model(input_ids=tokens, use_cache=True, logits_to_keep=1).cache
        self.key, self.layers = (version, ids), [(layer.keys, layer.values) for layer in cache.layers]
        return self.layers

    def generate(self, generate, model, version, *args, input_ids=None, attention_mask=None,
                 generation_config=None, **kwargs):
        """`model.generate` from a cache that holds the rows' common prefix (`generate`: the original)."""
        import torch
        from transformers import DynamicCache, StaticCache

        found = None if args or kwargs.get("cache") is not None or input_ids is None or attention_mask is None \
            else plan(input_ids, attention_mask)
        config = generation_config or model.generation_config
        if found is None or config.cache_implementation not in (None, "dynamic", "static"):
            return generate(*args, input_ids=input_ids, attention_mask=attention_mask,
                            generation_config=generation_config, **kwargs)
        pads, common = found
        first = pads.index(min(pads))
        layers = self.prefix(model, version, input_ids[first:first + 1, pads[first]:pads[first] + common])
        common = layers[0][0].size(2)
        start = min(pads) + common  # positions [0, start) of every row come from the cache
        rows, width = input_ids.size(0), input_ids.size(1)
        if config.cache_implementation == "static":
            longest = max(n for n in (config.max_new_tokens, model.generation_config.max_new_tokens,
                                      getattr(config, "max_length", None)) if n)
            cache = StaticCache(config=model.config, max_cache_len=width + longest)
        else:
            cache = DynamicCache(config=model.config)
        for i, (k, v) in enumerate(layers):
            keys = k.new_zeros(rows, k.size(1), start, k.size(3))
            values = v.new_zeros(rows, v.size(1), start, v.size(3))
            for r, pad in enumerate(pads):  # a row's prompt starts after its padding
                n = max(0, min(start - pad, common))
                if n:
                    keys[r, :, pad:pad + n] = k[0, :, :n]
                    values[r, :, pad:pad + n] = v[0, :, :n]
            cache.update(keys, values, i)
        config = copy.deepcopy(config)
        config.cache_implementation = None  # the cache is given
        with torch.no_grad():
            return generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config,
                            cache=cache, **kwargs)


class PromptCacheMixin:
    """GRPOTrainer mixin: each rollout turn's `generate` starts from the rows' shared prompt (module docstring).
    Placed after GenerationCopyMixin, it wraps whichever model generates: the bfloat16 copy or the policy."""

    prompt_cache: bool = False

    def _generate_single_turn(self, *args, **kwargs):  # type: ignore[override]
        from transformers import PreTrainedModel

        model = self.accelerator.unwrap_model(self.model_wrapped)
        if (not self.prompt_cache or self.use_vllm or self.use_transformers_continuous_batching
                or self.accelerator.num_processes != 1 or not isinstance(model, PreTrainedModel)):
            return super()._generate_single_turn(*args, **kwargs)  # type: ignore[misc]
        store = self.__dict__.setdefault("_prompt_cache", PromptCache())
        # the weights change at each optimizer step; the copy and the policy hold different tensors
        version = (self.state.global_step, id(model))
        model.generate = functools.partial(store.generate, model.generate, model, version)
        try:
            return super()._generate_single_turn(*args, **kwargs)  # type: ignore[misc]
        finally:
            del model.generate


__all__ = ["PromptCache", "PromptCacheMixin", "plan"]
