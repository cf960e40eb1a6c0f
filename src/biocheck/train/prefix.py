"""The loss's forward and backward pass over a group's shared prompt, once per optimizer step.

The episodes of a GRPO group start from the same prompt (system prompt, tool schema, claim: 841 of an
episode's ~1500 tokens for smol), and TRL's loss runs every episode from its first token. Here the prompt
(all but its last token) runs once with gradients on; each episode then runs only its own tokens on top of
that prompt's KV cache, whose keys and values enter as leaf tensors. Their gradients add up over the
episodes of the step, and one backward pass through the prompt, before the optimizer steps, carries the sum
into the weights. By linearity that is the same gradient as running every episode whole: the same update
up to float rounding (tests/train/test_training.py), with the prompt computed once instead of once per episode.

On top of that prompt, the LM head scores only the tokens the loss learns from (`loss_tokens_only`): the
model's own, not the search results it read nor padding. TRL's fused head does that on CUDA; on any other
device it scores every position of the completion, most of them search results (5 abstracts a search).
Measured on smol, one episode of 1300 positions of which 260 the model's: the loss's passes 8.7 s -> 5.0 s.
Exact: the loss, its entropy term and the logged entropy all multiply the other positions by zero
(`completion_mask * tool_mask`). Not where TRL scored old log-probs everywhere (several iterations per
generation, vLLM's importance sampling): the ratio to them at an unscored position could overflow.

It applies where it is exact and cheap to check: a batch whose rows carry one prompt without padding, no
images, no activation checkpointing (which discards the prompt's cache), one process (DDP would reduce the
gradients before the prompt's share is in). Any other batch takes TRL's own path.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Any


@contextmanager
def scored_positions_only():
    """TRL's fused LM head (`add_fused_lm_head`) scoring only the positions whose label is not -100, as it does
    on CUDA; elsewhere it scores them all, to keep compiled tile shapes fixed (not a concern in eager mode)."""
    from unittest import mock

    import trl.trainer.utils

    with mock.patch.object(trl.trainer.utils, "_use_triton", lambda device: True):
        yield


class SharedPrefixMixin:
    """GRPOTrainer mixin: `_get_per_token_logps_and_entropies` over a shared prompt (module docstring)."""

    share_prompt: bool = False
    loss_tokens_only: bool = False
    _prefixes: dict[bytes, tuple[list, list]] | None = None
    _loss_mask = None  # the loss's own mask of the batch being scored (completion_mask * tool_mask)

    def _shared_prompt_applies(self, input_ids, attention_mask, logits_to_keep, compute_aux_loss, extra) -> bool:
        import torch

        prompt = input_ids.size(1) - logits_to_keep
        return (self.share_prompt and torch.is_grad_enabled() and prompt > 1 and not compute_aux_loss
                and all(v is None for v in extra.values())
                and self.accelerator.num_processes == 1
                and not self.args.activation_checkpointing
                and bool(attention_mask[:, :prompt].all())
                and bool((input_ids[:, :prompt] == input_ids[:1, :prompt]).all()))

    def _prefix_leaves(self, model, prefix) -> list:
        """The prompt's keys and values as leaf tensors, computed once per prompt and optimizer step."""
        key = prefix.cpu().numpy().tobytes()
        self._prefixes = self._prefixes if self._prefixes is not None else {}
        if key not in self._prefixes:
            with self.accelerator.autocast():  # the dtype TRL's own forward runs in
                cache = model(input_ids=prefix, use_cache=True, logits_to_keep=1).cache
            graph = [t for layer in cache.layers for t in (layer.keys, layer.values)]
            self._prefixes[key] = (graph, [t.detach().requires_grad_() for t in graph])
        return self._prefixes[key][1]

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep,  # type: ignore[override]
                                           batch_size=None, compute_entropy=False, compute_aux_loss=False,
                                           **extra: Any):
        if not self._shared_prompt_applies(input_ids, attention_mask, logits_to_keep, compute_aux_loss, extra):
            return super()._get_per_token_logps_and_entropies(  # type: ignore[misc]
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                **extra)
        from transformers import DynamicCache

        prompt, rows = input_ids.size(1) - logits_to_keep, input_ids.size(0)
        leaves = self._prefix_leaves(model, input_ids[:1, :prompt - 1])
        cache = DynamicCache(config=self.accelerator.unwrap_model(model).config)
        for layer in range(len(leaves) // 2):  # expand: each row reads the one prompt; its gradients add up
            k, v = leaves[2 * layer], leaves[2 * layer + 1]
            cache.update(k.expand(rows, *k.shape[1:]), v.expand(rows, *v.shape[1:]), layer)
        # the prompt's last token and the completion: the first label is the first completion token
        rest = input_ids[:, prompt - 1:]
        labels = rest.masked_fill(attention_mask[:, prompt - 1:] == 0, -100)
        mask = self._loss_mask if self.loss_tokens_only else None
        if mask is not None and mask.shape == (rows, logits_to_keep):
            labels[:, 1:] = labels[:, 1:].masked_fill(mask == 0, -100)
        else:
            mask = None
        with self.accelerator.autocast(), scored_positions_only() if mask is not None else nullcontext():
            out = model(input_ids=rest, attention_mask=attention_mask, cache=cache, labels=labels,
                        fused_lm_head=True)
        logps = out.log_probs[:, -logits_to_keep:]
        entropies = out.entropy[:, -logits_to_keep:] if compute_entropy else None
        return logps, entropies, None

    def _compute_loss(self, model, inputs):  # type: ignore[override]
        mask = inputs["completion_mask"]
        # Not with old log-probs TRL scored everywhere: the ratio exp(0 - old) at an unscored position could be inf,
        # and inf * 0 is NaN. Without them (one iteration, no vLLM) TRL takes the ratio to these very log-probs.
        if inputs.get("old_per_token_logps") is None:
            self._loss_mask = mask * inputs["tool_mask"] if "tool_mask" in inputs else mask  # as TRL's loss masks
        try:
            return super()._compute_loss(model, inputs)  # type: ignore[misc]
        finally:
            self._loss_mask = None

    def training_step(self, model, inputs, num_items_in_batch):  # type: ignore[override]
        loss = super().training_step(model, inputs, num_items_in_batch)  # type: ignore[misc]
        if self._prefixes and self.accelerator.sync_gradients:  # the last micro-batch before the optimizer step
            self.flush_prefixes()
        return loss

    def flush_prefixes(self) -> None:
        """Carry the episodes' summed gradients of each prompt's keys and values into the weights."""
        import torch

        prefixes, self._prefixes = self._prefixes or {}, {}
        for graph, leaves in prefixes.values():
            pairs = [(t, leaf.grad) for t, leaf in zip(graph, leaves, strict=True) if leaf.grad is not None]
            if pairs:
                torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])


__all__ = ["SharedPrefixMixin", "scored_positions_only"]
