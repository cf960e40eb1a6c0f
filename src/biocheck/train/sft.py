"""Supervised warm start on demonstration episodes (quickstart only; off in the paper profile).

Loss only on the assistant's tokens (tool calls and the report); the prompt and tool results are
masked, as they are in RL. Assistant spans are found by rendering the conversation with the model's
own chat template up to each assistant turn, so the tokens trained on are the tokens the policy
will produce during rollouts.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from biocheck.bounds import Count, Positive

log = logging.getLogger(__name__)


@dataclass
class SFTConfig:
    enabled: bool = True
    epochs: Count = 3
    learning_rate: Positive = 1e-3
    max_length: Count = 4096  # tokens; longer demonstrations are skipped
    max_examples: Count | None = None
    out_dir: Path = Path("models/sft")
    # How a demonstration searches and which ones are trained on (train/demos.py): "and" and "first" are the
    # warm start before issue 48 (most demonstrations conclude NEI); "or" and "citing" teach what the reward asks.
    query: Literal["and", "or"] = "and"
    demos: Literal["first", "citing"] = "first"
    nei_examples: Count = 0  # with demos "citing": NEI demonstrations of NEI-gold training claims, added

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        if self.nei_examples and self.demos != "citing":
            raise ValueError("nei_examples needs demos: citing (demos: first already takes claims as they come)")


def render_ids(tokenizer, messages: list[dict[str, Any]], add_generation_prompt: bool,
               tools: list[dict[str, Any]]) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                        tokenize=True, return_dict=False)
    return list(ids)


def assistant_labels(tokenizer, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """(input_ids, labels) with labels = -100 everywhere except the assistant turns."""
    full = render_ids(tokenizer, messages, add_generation_prompt=False, tools=tools)
    labels = [-100] * len(full)
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        start = len(render_ids(tokenizer, messages[:i], add_generation_prompt=True, tools=tools))
        end = len(render_ids(tokenizer, messages[: i + 1], add_generation_prompt=False, tools=tools))
        if full[:end] != render_ids(tokenizer, messages[: i + 1], add_generation_prompt=False, tools=tools):
            raise ValueError("the chat template is not prefix-preserving; cannot locate assistant turns")
        labels[start:end] = full[start:end]
    return full, labels


def train_sft(model, tokenizer, conversations: list[list[dict[str, Any]]], cfg: SFTConfig,
              tools: list[dict[str, Any]], seed: int = 0,
              progress: bool = True) -> dict[str, Any]:
    """Fine-tune `model` in place on the conversations; return stats (examples, steps, first/last loss).

    `progress`: a bar (a terminal), else a short log line about every tenth of the run."""
    import torch

    from biocheck.train.callbacks import Progress

    examples = []
    for conv in conversations[: cfg.max_examples]:
        ids, labels = assistant_labels(tokenizer, conv, tools)
        if len(ids) <= cfg.max_length:
            examples.append((ids, labels))
    if not examples:
        raise ValueError("no demonstration fits sft.max_length")
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
    losses: list[float] = []
    t0 = time.perf_counter()
    steps = cfg.epochs * len(examples)
    shown = Progress("sft", steps, bar=progress, keys=("epoch", "loss"), every=max(1, steps // 10))
    try:
        for epoch in range(1, cfg.epochs + 1):
            order = list(range(len(examples)))
            rng.shuffle(order)
            for i in order:
                shown.start()
                ids, labels = examples[i]
                out = model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels]))
                out.loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
                losses.append(out.loss.item())
                shown.advance(len(losses))
                recent = losses[-shown.every:]  # the mean since the last line, not one noisy example
                shown.note(epoch=epoch, loss=sum(recent) / len(recent))
                if shown.due():
                    shown.emit()
    finally:
        shown.close()
    model.eval()
    k = max(1, len(examples) // 2)
    return {"examples": len(examples), "steps": steps, "loss_first_epoch": sum(losses[:k]) / k,
            "loss_last_epoch": sum(losses[-k:]) / k, "seconds": round(time.perf_counter() - t0, 1)}
