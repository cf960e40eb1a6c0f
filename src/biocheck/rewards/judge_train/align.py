"""The `align` recipe: alignment features of a frozen backbone (rewards/judge/align_judge.py), a logistic
regression over them, the layer and the L2 weight chosen by grouped cross-validation on the training pairs.

One forward pass per training prompt gives the features after every layer (hooks; no backward pass). The fit
is a convex problem over 30 numbers per pair: full-batch L-BFGS, well under a second.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from biocheck.rewards.judge.align_judge import AlignHead

L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1)  # weight of |W|^2 (features standardised): chosen by cross-validation


def fit(x: Any, y: Any, l2: float, layer: int, steps: int = 100) -> AlignHead:
    """Standardise x [N, F] and fit softmax(W z + b) to y by L-BFGS: the head for features of `layer`."""
    import torch

    mean, scale = x.mean(0), x.std(0).clamp(min=1e-6)
    z = (x - mean) / scale
    w = torch.zeros((3, x.shape[1]), requires_grad=True)
    b = torch.zeros(3, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=steps, history_size=20, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(z @ w.T + b, y) + l2 * w.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return AlignHead(layer=layer, mean=mean.tolist(), scale=scale.tolist(), weight=w.detach().tolist(),
                     bias=b.detach().tolist())


def choose(x: Any, y: Any, folds: Sequence[int], layers: Sequence[int] | None = None
           ) -> tuple[int, float, dict[str, float]]:
    """(1-based layer, l2, cv accuracies "layer/l2") with the best accuracy over the given folds (pairs.claim_folds:
    a claim's pairs in one fold); ties go to the deeper layer and the larger l2 (the simpler fit)."""
    import torch

    fold = torch.tensor(list(folds))
    scores: dict[tuple[int, float], float] = {}
    for layer in layers or range(1, x.shape[1] + 1):
        for l2 in L2_GRID:
            correct = 0
            for f in sorted(set(fold.tolist())):
                tr, te = fold != f, fold == f
                if not tr.any():
                    continue
                head = fit(x[tr, layer - 1], y[tr], l2, layer)
                correct += int((head.probs(x[te, layer - 1]).argmax(-1) == y[te]).sum())
            scores[(layer, l2)] = correct / len(fold)
    layer, l2 = max(scores, key=lambda k: (round(scores[k], 6), k[0], k[1]))
    return layer, l2, {f"{k[0]}/{k[1]:g}": v for k, v in scores.items()}
