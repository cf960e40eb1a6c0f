"""Rollouts that compute the rows' shared prompt once per optimizer step, not once per row and turn.

Every row of a rollout batch starts with the same tokens (the system prompt and tool schema; within a group
the whole prompt, 841 tokens for smol), and TRL's tool loop generates each turn from scratch: turn 0
prefills the prompt once per row, turn 1 prefills it again under the search results. About 60% of a smol
step's generation was that prefill. Here the rows' longest common prefix runs once (batch 1, no gradients)
and is kept for later turns until the weights change. Each row's own tokens after it (its first answer, the
search results) then run on top of it one row at a time, so the left padding TRL adds up to the longest row is
never computed (up to a third of a turn's prefill). All of it is placed after each row's padding in the cache
`generate` starts from, and `generate` prefills only the last column. A static cache (`UsedStaticCache`) is
preallocated for the turn but attends over the positions written so far.

Exact up to float rounding: TRL pads prompts on the left and `generate` numbers positions from the attention
mask, so a prompt token's keys and values do not depend on its row's padding (tests/train/test_prompt_cache.py).
"""

from __future__ import annotations

import contextlib
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
        """`model.generate` from a cache that holds every row but its last token (`generate`: the original)."""
        import torch
        from transformers import DynamicCache

        found = None if args or kwargs.get("cache") is not None or input_ids is None or attention_mask is None \
            else plan(input_ids, attention_mask)
        config = generation_config or model.generation_config
        if found is None or config.cache_implementation not in (None, "dynamic", "static"):
            return generate(*args, input_ids=input_ids, attention_mask=attention_mask,
                            generation_config=generation_config, **kwargs)
        pads, common = found
        first = pads.index(min(pads))
        shared = self.prefix(model, version, input_ids[first:first + 1, pads[first]:pads[first] + common])
        last = input_ids.size(1) - 1  # each row's last token goes through `generate` (its first logits)
        rows = own_rows(model, shared, [input_ids[r, pad + shared[0][0].size(2):last] for r, pad in enumerate(pads)])
        if config.cache_implementation == "static":
            longest = max(n for n in (config.max_new_tokens, model.generation_config.max_new_tokens,
                                      getattr(config, "max_length", None)) if n)
            cache = used_static_cache()(config=model.config, max_cache_len=last + 1 + longest)
        else:
            cache = DynamicCache(config=model.config)
        for i, (k, v) in enumerate(shared):
            keys = k.new_zeros(len(pads), k.size(1), last, k.size(3))
            values = v.new_zeros(len(pads), v.size(1), last, v.size(3))
            for r, pad in enumerate(pads):  # a row's tokens start after its padding
                keys[r, :, pad:], values[r, :, pad:] = rows[r][i]
            cache.update(keys, values, i)
        config = copy.deepcopy(config)
        config.cache_implementation = None  # the cache is given
        with torch.no_grad():
            return generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config,
                            cache=cache, **kwargs)


def own_rows(model, shared: list[tuple[Any, Any]], tails: list) -> list[list[tuple[Any, Any]]]:
    """Each row's keys and values: the shared prefix's, then its own tokens (`tails`, 1-d) run on top of them
    one row at a time, so no padding is computed (TRL pads a turn's rows to the longest: search results differ in
    length). Identical tails (a group's rows before their first answer) run once."""
    import torch
    from transformers import DynamicCache

    done: dict[tuple[int, ...], list[tuple[Any, Any]]] = {}
    out = []
    for tail in tails:
        key = tuple(tail.tolist())
        if key not in done:
            if not key:
                done[key] = shared
            else:
                cache = DynamicCache(config=model.config)
                for i, (k, v) in enumerate(shared):
                    cache.update(k, v, i)
                with torch.no_grad():  # positions follow the prefix's: a row's own tokens are not padded here
                    cache = model(input_ids=tail[None], cache=cache, use_cache=True, logits_to_keep=1).cache
                done[key] = [(layer.keys, layer.values) for layer in cache.layers]
        out.append(done[key])
    return out


@functools.cache
def used_static_cache():
    """The class (transformers is imported on first use)."""
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer

    class UsedLayer(StaticLayer):
        """A static layer whose attention reads the positions written so far, not all it holds: a decoding
        step's attention reads the whole cache, so preallocating a turn's 384 tokens cost up to a third more."""

        def update(self, key_states, value_states, *args, **kwargs):
            keys, values = super().update(key_states, value_states, *args, **kwargs)
            n = int(self.cumulative_length)
            return keys[:, :, :n], values[:, :, :n]

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return (int(self.cumulative_length) if self.is_initialized else 0) + query_length, 0

    class UsedStaticCache(StaticCache):
        """transformers' StaticCache (preallocated, written in place: no copy of the cache at every token) with
        attention over the written positions only (UsedLayer). Full-attention layers only, as SmolLM2 and Qwen3."""

        def __init__(self, config, max_cache_len: int, **kwargs) -> None:
            super().__init__(config=config, max_cache_len=max_cache_len, **kwargs)
            if all(type(layer) is StaticLayer for layer in self.layers):
                self.layers = [UsedLayer(max_cache_len=max_cache_len) for _ in self.layers]

    return UsedStaticCache


@contextlib.contextmanager
def generate_wrapped(model, wrapper):
    """`model.generate` replaced by `wrapper(model.generate)` for one rollout turn; what stood there before (another
    mixin's wrapper, or none: the class's method) is put back after it."""
    before = model.__dict__.get("generate")
    model.generate = wrapper(model.generate)
    try:
        yield
    finally:
        if before is None:
            del model.generate
        else:
            model.generate = before


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
        with generate_wrapped(model, lambda generate: functools.partial(store.generate, generate, model, version)):
            return super()._generate_single_turn(*args, **kwargs)  # type: ignore[misc]


__all__ = ["PromptCache", "PromptCacheMixin", "generate_wrapped", "own_rows", "plan", "used_static_cache"]
