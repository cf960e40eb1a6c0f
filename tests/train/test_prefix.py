"""train/prefix.py against TRL's own loss forward: the same log-probs, entropies and gradients."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")


def _trainer(share: bool):
    from accelerate import Accelerator
    from trl import GRPOTrainer

    from biocheck.train.prefix import SharedPrefixMixin

    class Trainer(SharedPrefixMixin, GRPOTrainer):
        share_prompt = share

    t = object.__new__(Trainer)  # the two methods under test read only these
    t.accelerator = Accelerator(cpu=True)
    t.args = SimpleNamespace(activation_checkpointing=False)
    return t


def _model(tiny_model):
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).train()
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    return model


def _batches():
    """Two micro-batches of one group: one prompt, completions of other lengths (right padding in the second)."""
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(5, 500, (1, 40), generator=g)
    completions = torch.randint(5, 500, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[2, 7:] = 0  # an episode that ended early
    batches = []
    for rows in ([0], [1, 2]):
        ids = torch.cat([prompt.expand(len(rows), -1), completions[rows]], dim=1)
        attn = torch.cat([torch.ones(len(rows), 40, dtype=torch.long), mask[rows]], dim=1)
        batches.append((ids, attn, mask[rows]))
    return batches


def _run(tiny_model, share: bool, flush: bool = True):
    """Per micro-batch: a masked sum of log-probs and entropies, backward, as the loss does; then the flush."""
    trainer, model = _trainer(share), _model(tiny_model)
    outs = []
    for ids, attn, mask in _batches():
        logps, ent, _ = trainer._get_per_token_logps_and_entropies(model, ids, attn, 12, compute_entropy=True)
        ((logps * mask).sum() * 0.3 + (ent * mask).sum() * 0.1).backward()
        outs.append((logps.detach() * mask, ent.detach() * mask))
    used = bool(trainer._prefixes)
    if flush:
        trainer.flush_prefixes()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return outs, grads, used


def test_the_shared_prompt_gives_trls_log_probs_entropies_and_gradients(tiny_model):
    whole, whole_grads, used_whole = _run(tiny_model, share=False)
    shared, shared_grads, used_shared = _run(tiny_model, share=True)
    assert used_shared and not used_whole  # the shared path ran, and only when asked
    for (lw, ew), (ls, es) in zip(whole, shared, strict=True):
        assert torch.allclose(lw, ls, atol=1e-5) and torch.allclose(ew, es, atol=1e-5)
    assert whole_grads.keys() == shared_grads.keys() and len(whole_grads) > 5
    for name, g in whole_grads.items():  # every weight, the embeddings and the prompt's attention included
        assert torch.allclose(g, shared_grads[name], rtol=1e-4, atol=1e-6), name
    emb = next(n for n in whole_grads if "embed" in n)
    assert whole_grads[emb].abs().sum() > 0


def test_without_the_flush_the_prompts_share_of_the_gradient_is_missing(tiny_model):
    """The test above can fail: the prompt's path carries a real part of every weight's gradient."""
    _, whole_grads, _ = _run(tiny_model, share=False)
    _, partial, _ = _run(tiny_model, share=True, flush=False)
    name = next(n for n in whole_grads if "layers.0.self_attn.k_proj" in n)
    assert not torch.allclose(partial[name], whole_grads[name], rtol=1e-2, atol=1e-6)


@pytest.mark.parametrize("case", ["padded prompt", "two prompts", "no grad", "checkpointing"])
def test_other_batches_take_trls_path(tiny_model, case):
    trainer, model = _trainer(True), _model(tiny_model)
    ids, attn, _ = _batches()[1]
    if case == "padded prompt":
        attn = attn.clone()
        attn[0, 0] = 0
    if case == "two prompts":
        ids = ids.clone()
        ids[1, 3] += 1
    if case == "checkpointing":
        trainer.args.activation_checkpointing = True
    with torch.set_grad_enabled(case != "no grad"):
        trainer._get_per_token_logps_and_entropies(model, ids, attn, 12)
    assert not trainer._prefixes


def _tool_masks():
    """The loss's mask per micro-batch of _batches(): completion_mask * tool_mask, a search result in each row."""
    masks = []
    for _, _, mask in _batches():
        tool = torch.ones_like(mask)
        tool[:, 3:8] = 0  # positions 3-7 of the completion were the tool's output
        masks.append(mask * tool)
    return masks


def _head_rows(monkeypatch) -> list[int]:
    """Positions that reach the LM head, per call of TRL's chunked log-prob function, from now on."""
    import trl.trainer.utils as tu

    rows = []
    apply = tu._ChunkedLogProbFunction.apply
    monkeypatch.setattr(tu._ChunkedLogProbFunction, "apply",
                        lambda hidden, *a: (rows.append(hidden.size(0)), apply(hidden, *a))[1])
    return rows


def _run_masked(tiny_model, share: bool, only: bool, rows: list[int]):
    """As _run, with the loss's mask excluding a search result; returns also the positions the LM head scored."""
    rows.clear()
    trainer, model = _trainer(share), _model(tiny_model)
    trainer.loss_tokens_only = only
    outs = []
    for (ids, attn, _), mask in zip(_batches(), _tool_masks(), strict=True):
        trainer._loss_mask = mask
        logps, ent, _ = trainer._get_per_token_logps_and_entropies(model, ids, attn, 12, compute_entropy=True)
        ((logps * mask).sum() * 0.3 + (ent * mask).sum() * 0.1).backward()
        outs.append((logps.detach() * mask, ent.detach() * mask))
    trainer.flush_prefixes()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return outs, grads, sum(rows)


def test_the_head_on_the_losss_tokens_only_gives_trls_loss_and_gradients(tiny_model, monkeypatch):
    """train.loss_tokens_only: the LM head skips the tool's output and padding, and the masked loss, its
    entropies and every weight's gradient are TRL's own."""
    rows = _head_rows(monkeypatch)
    whole, whole_grads, _ = _run_masked(tiny_model, share=False, only=True, rows=rows)
    every, _, every_rows = _run_masked(tiny_model, share=True, only=False, rows=rows)
    only, only_grads, only_rows = _run_masked(tiny_model, share=True, only=True, rows=rows)
    counted = sum(int(m.sum()) for m in _tool_masks())
    assert only_rows == counted < every_rows == 3 * 12  # only the loss's own positions went through the head
    assert counted == 7 + 7 + 3  # rows of 12: 5 tool positions each; the third padded from position 7
    for (lw, ew), (lo, eo), (le, ee) in zip(whole, only, every, strict=True):
        assert torch.allclose(lw, lo, atol=1e-5) and torch.allclose(ew, eo, atol=1e-5)
        assert torch.allclose(le, lo, atol=1e-5) and torch.allclose(ee, eo, atol=1e-5)
        assert lo.abs().sum() > 0
    for name, g in whole_grads.items():
        assert torch.allclose(g, only_grads[name], rtol=1e-4, atol=1e-6), name


def test_a_mask_of_another_shape_scores_every_position(tiny_model, monkeypatch):
    """A mask that is not this batch's (another micro-batch's shape) is not applied: every position is scored."""
    scored = _head_rows(monkeypatch)
    trainer, model = _trainer(True), _model(tiny_model)
    trainer.loss_tokens_only = True
    ids, attn, _ = _batches()[1]
    trainer._loss_mask = torch.ones(1, 12, dtype=torch.long)  # one row; the batch has two
    trainer._get_per_token_logps_and_entropies(model, ids, attn, 12)
    assert scored == [2 * 12]  # both rows, every completion position (padding included)


def test_the_loss_hands_its_own_mask_to_the_forward_and_takes_it_back():
    """_compute_loss holds completion_mask * tool_mask while TRL's loss runs, and only then."""
    from biocheck.train.prefix import SharedPrefixMixin

    seen = []

    class Loss:
        def _compute_loss(self, model, inputs):
            seen.append(self._loss_mask)
            raise RuntimeError("the loss failed")

    class Trainer(SharedPrefixMixin, Loss):
        pass

    t = Trainer()
    completion = torch.tensor([[1, 1, 1, 0]])
    tool = torch.tensor([[1, 0, 1, 1]])
    with pytest.raises(RuntimeError):
        t._compute_loss(None, {"completion_mask": completion, "tool_mask": tool})
    with pytest.raises(RuntimeError):
        t._compute_loss(None, {"completion_mask": completion})  # no tool in the batch
    with pytest.raises(RuntimeError):  # old log-probs TRL scored at every position: the ratio needs them all
        t._compute_loss(None, {"completion_mask": completion, "tool_mask": tool,
                               "old_per_token_logps": torch.full((1, 4), -100.0)})
    assert seen[0].tolist() == [[1, 0, 1, 0]] and seen[1].tolist() == [[1, 1, 1, 0]] and seen[2] is None
    assert t._loss_mask is None  # not left for a no-grad pass that scores another batch
