"""`transformers:<path or hub id>`: a local causal LM as the evidence judge (one forward pass per batch).

Each pair becomes one user message (the judge prompt), rendered with the model's chat template and its
generation prompt (thinking switched off where the template supports it). The prompts of a batch go through
the model in one forward pass, right-padded without an attention mask (causal attention never looks ahead, so
each row's result is that of the prompt alone), and only the last real position of each row is projected to
the vocabulary; its log-softmax, read at the three answer tokens, gives s = exp(logprob) per label. (With a
transformers that cannot keep one position per row, the batch is left-padded with a mask instead.)

Answer tokens: the FIRST token of each label word ("SUPPORTED", "REFUTED", "NOT ENOUGH INFORMATION") as the
tokenizer encodes it right after the assistant header. The words start with different letters, so with any
ordinary tokenizer the three first tokens differ. If they do not (a tokenizer that merges the word with the
header, say), the judge falls back to `mode="sequence"`: the probability of each label's whole token
sequence (teacher-forced, one more forward pass with the three continuations), still summing to <= 1.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from biocheck.rewards.judge.base import (
    ANSWER_WORDS,
    DEFAULT_MAX_ABSTRACT_CHARS,
    KEYS,
    JudgeError,
    Pair,
    Scores,
    clean_scores,
    judge_prompt_hash,
    render_prompt,
)

log = logging.getLogger(__name__)

SPEC_PREFIX = "transformers:"  # a judge handed a loaded model names itself like one it loaded
Mode = Literal["auto", "first_token", "sequence"]


def answer_continuations(tokenizer: Any) -> dict[str, list[int]]:
    """Each label word's token ids as they follow the assistant header (label key -> ids)."""
    header = _chat(tokenizer, "x", tokenize=False)
    head_ids = tokenizer(header, add_special_tokens=False)["input_ids"]
    out = {}
    for key in KEYS:
        ids = tokenizer(header + ANSWER_WORDS[key], add_special_tokens=False)["input_ids"]
        if ids[: len(head_ids)] == head_ids and len(ids) > len(head_ids):
            out[key] = ids[len(head_ids):]
        else:  # the word merged with the header's last token: use the word on its own
            out[key] = tokenizer(ANSWER_WORDS[key], add_special_tokens=False)["input_ids"]
        if not out[key]:
            raise JudgeError(f"the tokenizer encodes {ANSWER_WORDS[key]!r} to no tokens")
    return out


def _chat(tokenizer: Any, content: str, tokenize: bool) -> Any:
    kwargs: dict[str, Any] = {"add_generation_prompt": True, "tokenize": tokenize, "enable_thinking": False}
    if tokenize:
        kwargs["return_dict"] = True
    return tokenizer.apply_chat_template([{"role": "user", "content": content}], **kwargs)


def _weights_fingerprint(model: Any) -> str:
    """sha256 (12 hex) over parameter names, shapes and bytes: for a model handed over already loaded."""
    import torch

    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"\0{name}\0{tuple(t.shape)}\0{t.dtype}".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:12]


def _has_per_row_logits_to_keep() -> bool:
    """transformers >= 5 slices `logits_to_keep` per row (a [batch, n] tensor of positions)."""
    try:
        from transformers.modeling_utils import slice_logits_to_keep  # noqa: F401
    except ImportError:
        return False
    return True


class TransformersJudge:
    """A Hugging Face causal LM scoring (claim, paper) pairs from next-token log-probabilities; thread-safe.

    `model` is a path / hub id / "transformers:<ref>" spec, or an already loaded model (then pass `tokenizer`,
    and a `fingerprint` if the weights will change: the policy itself during training must not be cached
    under one fingerprint).
    """

    def __init__(self, model: str | Path | Any, tokenizer: Any = None, *, batch_size: int = 8,
                 device: str = "auto", dtype: str | None = None, mode: Mode = "auto",
                 max_abstract_chars: int | None = DEFAULT_MAX_ABSTRACT_CHARS, fingerprint: str | None = None) -> None:
        import torch

        if batch_size < 1:
            raise ValueError(f"judge batch_size={batch_size}: must be >= 1")
        self.batch_size = batch_size
        self.max_abstract_chars = max_abstract_chars
        self._fingerprint = fingerprint
        self.path: Path | None = None
        if isinstance(model, str | Path):
            self._load(str(model), device, dtype)
        else:
            if tokenizer is None:
                raise JudgeError("TransformersJudge: a loaded model needs its tokenizer")
            self.model, self.tokenizer = model, tokenizer
            self.spec = f"{SPEC_PREFIX}{getattr(model, 'name_or_path', '') or type(model).__name__}"
            self.device = next(model.parameters()).device
        if not getattr(self.tokenizer, "chat_template", None):
            raise JudgeError(f"{self.spec}: the tokenizer has no chat template (an instruct/chat model is needed)")
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.tokenizer.eos_token_id
        if self.pad_id is None:
            raise JudgeError(f"{self.spec}: the tokenizer has neither a pad nor an eos token")
        self.max_positions = int(getattr(self.model.config, "max_position_embeddings", 0) or 0) or None
        self.continuations = answer_continuations(self.tokenizer)
        firsts = [ids[0] for ids in self.continuations.values()]
        distinct = len(set(firsts)) == len(firsts)
        if mode == "auto":
            mode = "first_token" if distinct else "sequence"
            if not distinct:
                log.warning("%s: the answer words share a first token (%s); scoring whole label sequences",
                            self.spec, firsts)
        elif mode == "first_token" and not distinct:
            raise JudgeError(f"{self.spec}: the three answer words share a first token ({firsts}); use mode='sequence'")
        if mode == "sequence":
            seqs = list(self.continuations.values())
            if any(a != b and b[: len(a)] == a for a in seqs for b in seqs):
                raise JudgeError(f"{self.spec}: one answer word's tokens are a prefix of another's; cannot score")
        self.mode: Literal["first_token", "sequence"] = mode
        self.answer_ids = {key: ids[0] for key, ids in self.continuations.items()}
        self.prompt_hash = judge_prompt_hash("transformers", self.mode, self.max_abstract_chars)
        self._lock = threading.Lock()
        self._torch = torch
        self._per_row_keep = _has_per_row_logits_to_keep()

    def _load(self, ref: str, device: str, dtype: str | None) -> None:
        from biocheck.io import InputError
        from biocheck.llm.load import load_model

        try:
            loaded = load_model(ref, device, dtype)
        except InputError as e:
            raise JudgeError(str(e)) from None
        self.spec, self.path = loaded.spec, loaded.path
        self.model, self.tokenizer, self.device = loaded.model, loaded.tokenizer, loaded.device

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            from biocheck.llm.load import model_fingerprint

            if self.path is not None:
                self._fingerprint = model_fingerprint(self.path)
            else:
                log.warning("%s: judge fingerprint from the current weights; in-place updates are not tracked",
                            self.spec)
                self._fingerprint = _weights_fingerprint(self.model)
        return self._fingerprint

    # ------------------------------------------------------------------------------------------- scoring

    def prompt_ids(self, claim: str, article: Any) -> list[int]:
        enc = _chat(self.tokenizer, render_prompt(claim, article, self.max_abstract_chars), tokenize=True)
        ids = enc["input_ids"]
        ids = list(ids[0] if ids and isinstance(ids[0], list) else ids)
        if self.max_positions is not None and len(ids) + 32 > self.max_positions:
            raise JudgeError(f"{self.spec}: a judge prompt is {len(ids)} tokens but the model handles "
                             f"{self.max_positions} positions; lower max_abstract_chars")
        return ids

    def score(self, pairs: Sequence[Pair]) -> list[Scores]:
        """s per label for every pair: one forward pass per `batch_size` prompts (sorted by length)."""
        if not pairs:
            return []
        with self._lock:  # the fast tokenizer is not re-entrant, and one forward at a time bounds memory
            prompts = [self.prompt_ids(claim, article) for claim, article in pairs]
            order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
            out: list[Scores | None] = [None] * len(prompts)
            was_training = self.model.training  # the policy as judge may be mid-training: no dropout here
            self.model.eval()
            try:
                for start in range(0, len(order), self.batch_size):
                    chunk = order[start:start + self.batch_size]
                    batch = [prompts[i] for i in chunk]
                    scores = self._first_token(batch) if self.mode == "first_token" else self._sequences(batch)
                    for i, s in zip(chunk, scores, strict=True):
                        out[i] = s
            finally:
                self.model.train(was_training)
        return [s for s in out if s is not None]

    def _forward(self, rows: list[list[int]], keep: int):
        """Log-softmax (float64) of the last `keep` positions of every row: [rows, keep, vocab]."""
        torch = self._torch
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        if self._per_row_keep:
            # Right padding and no attention mask: causal attention never looks ahead, so a row's own tokens
            # never see its pads, and the plain causal kernel is several times faster than a padded mask on CPU.
            for j, r in enumerate(rows):
                input_ids[j, : len(r)] = torch.tensor(r, dtype=torch.long)
            keep_at = torch.tensor([[len(r) - keep + t for t in range(keep)] for r in rows], dtype=torch.long)
            with torch.inference_mode():
                logits = self.model(input_ids=input_ids.to(self.device), logits_to_keep=keep_at.to(self.device)).logits
            return logits.double().log_softmax(-1).cpu()
        # Older transformers (no per-row logits_to_keep): left padding, so every row ends at the last column.
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for j, r in enumerate(rows):
            input_ids[j, width - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[j, width - len(r):] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # a padded row sees the same positions as alone
        with torch.inference_mode():
            logits = self.model(input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device),
                                position_ids=positions.to(self.device), logits_to_keep=keep).logits
        return logits[:, -keep:, :].double().log_softmax(-1).cpu()

    def _first_token(self, batch: list[list[int]]) -> list[Scores]:
        logp = self._forward(batch, 1)[:, -1, :]
        ids = [self.answer_ids[k] for k in KEYS]
        probs = logp[:, ids].exp().tolist()
        return [clean_scores(dict(zip(KEYS, row, strict=True))) for row in probs]

    def _sequences(self, batch: list[list[int]]) -> list[Scores]:
        """p(whole label word | prompt) per label: each prompt extended by each continuation (minus its last
        token, which predicts nothing we need), one forward pass over all of them."""
        conts = [self.continuations[k] for k in KEYS]
        keep = max(len(c) for c in conts)
        rows = [prompt + cont[:-1] for prompt in batch for cont in conts]
        # The kept window is the last `keep` positions of each row, so continuation token t of a label with n
        # tokens is predicted at index keep - n + t of it.
        logp = self._forward(rows, keep)
        out = []
        for b in range(len(batch)):
            raw = {}
            for k, cont in enumerate(conts):
                r, n = b * len(conts) + k, len(cont)
                raw[KEYS[k]] = math.exp(sum(float(logp[r, keep - n + t, tok]) for t, tok in enumerate(cont)))
            out.append(clean_scores(raw))
        return out
