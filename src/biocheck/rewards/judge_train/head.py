"""The `head` recipe: a label head on a frozen backbone, written into the LM head so the judge protocol holds.

The judge reads p(first answer token | prompt) = softmax(lm_head · norm(h_last))[token]. With the backbone
frozen, h_last of every training prompt is computed once (one forward pass, no backward: several times
cheaper than fine-tuning), and the three answer tokens' rows of the LM head are fitted to the gold labels by
full-batch logistic regression whose softmax also holds every other token of the vocabulary (their log-sum-exp
is a constant per prompt), so the fitted rows also take the probability mass away from the rest of the
vocabulary and s > 0.5 becomes possible. The layer the head reads may be an earlier one (the model is then cut
to that many layers): features of middle layers often separate labels better, and a shorter model judges faster.
The result is an ordinary checkpoint (embeddings untied so the prompt's own tokens keep their embeddings).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def backbone(model: Any) -> tuple[Any, Any]:
    """(decoder layers, final norm) of a Llama/Qwen-style causal LM."""
    inner = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    return inner.layers, inner.norm


def last_states(model: Any, rows: Sequence[list[int]], pad_id: int, batch_size: int = 4,
                progress: bool = False) -> Any:
    """[N, L, H] float32: the final norm of each prompt's last position after every layer (index l = after
    layer l + 1), from forward passes of the decoder alone (no LM head: it is the costly part we do not need)."""
    import torch
    from tqdm.auto import tqdm

    layers, norm = backbone(model)
    n_layers = len(layers)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    out = torch.zeros((len(rows), n_layers, model.config.hidden_size), dtype=torch.float32)
    grabbed: list[Any] = [None] * n_layers
    last_at: list[Any] = [None]

    def hook(index):
        def fn(_module, _inputs, output):
            h = output[0] if isinstance(output, tuple) else output
            grabbed[index] = h[torch.arange(h.shape[0]), last_at[0]].float()
        return fn

    handles = [layer.register_forward_hook(hook(i)) for i, layer in enumerate(layers)]
    model.eval()
    try:
        bar = tqdm(range(0, len(order), batch_size), desc="judge features", disable=not progress)
        for start in bar:
            chunk = order[start:start + batch_size]
            width = max(len(rows[i]) for i in chunk)
            ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
            for j, i in enumerate(chunk):  # right padding, no mask: causal attention never sees the pads
                ids[j, : len(rows[i])] = torch.tensor(rows[i], dtype=torch.long)
            last_at[0] = torch.tensor([len(rows[i]) - 1 for i in chunk])
            with torch.inference_mode():
                (model.get_decoder() if hasattr(model, "get_decoder") else model.model)(input_ids=ids)
                states = torch.stack([norm(g) for g in grabbed], dim=1).float()
            out[chunk] = states
    finally:
        for h in handles:
            h.remove()
    return out


def other_lse(model: Any, states: Any, answer_ids: Sequence[int]) -> Any:
    """log-sum-exp over the non-answer vocabulary of lm_head · state: [N, L] (the fixed part of the softmax)."""
    import torch

    w = model.get_output_embeddings().weight.detach().float()
    keep = torch.ones(w.shape[0], dtype=torch.bool)
    keep[list(answer_ids)] = False
    w = w[keep]
    with torch.inference_mode():
        return torch.stack([(states[:, layer] @ w.T).logsumexp(-1) for layer in range(states.shape[1])], dim=1)


def fit_head(x: Any, lse: Any, y: Any, init: Any, weight_decay: float = 1e-3, steps: int = 100) -> tuple[Any, list[float]]:
    """Answer-token rows W [3, H] minimising cross-entropy over [W x, lse] (lse = the rest of the vocabulary)
    plus weight_decay * |W - init|^2 (a convex problem: full-batch L-BFGS). Returns (W, losses per step)."""
    import torch

    w = init.detach().clone().float().requires_grad_(True)
    opt = torch.optim.LBFGS([w], lr=1.0, max_iter=steps, history_size=20, line_search_fn="strong_wolfe")
    losses: list[float] = []

    def closure():
        opt.zero_grad()
        logits = torch.cat([x @ w.T, lse[:, None]], dim=1)
        loss = torch.nn.functional.cross_entropy(logits, y) + weight_decay * (w - init).pow(2).sum()
        loss.backward()
        losses.append(float(loss.detach()))
        return loss

    opt.step(closure)
    return w.detach(), losses


def head_probs(x: Any, lse: Any, w: Any) -> Any:
    """p(answer token) per label, [N, 3], exactly as the judge will read it from the written model."""
    import torch

    with torch.inference_mode():
        return torch.cat([x @ w.T, lse[:, None]], dim=1).softmax(-1)[:, :3]


def cut_layers(model: Any, n_layers: int) -> None:
    """Keep the first `n_layers` decoder layers (the final norm and LM head then read layer n_layers)."""
    layers, _ = backbone(model)
    del layers[n_layers:]
    model.config.num_hidden_layers = n_layers
    value = getattr(model.config, "layer_types", None)  # Qwen3 keeps one entry per layer
    if isinstance(value, list):
        model.config.layer_types = value[:n_layers]


def install_head(model: Any, w: Any, answer_ids: Sequence[int], n_layers: int) -> None:
    """Cut the model to its first `n_layers` layers and write W into the (untied) answer-token rows."""
    import torch

    cut_layers(model, n_layers)
    head = model.get_output_embeddings()
    if head.weight is model.get_input_embeddings().weight:  # tied: give the head its own copy
        head.weight = torch.nn.Parameter(head.weight.detach().clone())
    model.config.tie_word_embeddings = False
    with torch.no_grad():
        for row, token in zip(w, answer_ids, strict=True):
            head.weight[token] = row.to(head.weight.dtype)
