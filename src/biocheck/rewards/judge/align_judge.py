"""The alignment judge: how well the claim's tokens find a match in the paper, read from a backbone layer.

A 135M model cannot answer the judge prompt, and the states at its last position barely separate the labels
(docs/rewards.md, "Training the judge"). What it does encode is which of the paper's tokens, in context, mean
what a claim token means. So this judge reads, after one forward pass of the same prompt through a backbone cut
to `layer` layers, the cosine similarity of every claim token to every paper token (title + abstract) and turns
it into 15 numbers (how well each claim token is matched, how well the paper is matched back, their quantiles).
Similarity finds a refuting paper as readily as a supporting one, so 15 more numbers (cues.py) count negation
and direction words in the claim and in the two paper sentences whose tokens match the claim best. A small
multinomial logistic regression over the 30 gives the probability of each label. The protocol is every
judge's: (claim, paper) -> s per label, summing to 1, through the same prompt and the same cache.

A checkpoint folder with `judge_head.json` beside the (cut) model is such a judge: `make_judge` loads it for
`transformers:<folder>`. `judge_train` writes one (recipe `align`).
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from biocheck.io import write_json_atomic
from biocheck.llm.spec import spec_ref
from biocheck.rewards.judge.base import (
    DEFAULT_MAX_ABSTRACT_CHARS,
    KEYS,
    JudgeError,
    Pair,
    Scores,
    clean_scores,
    judge_prompt_hash,
    prompt_spans,
)
from biocheck.rewards.judge.cues import N_CUES, counts, cue_features
from biocheck.rewards.judge.transformers_judge import TransformersJudge, _chat
from biocheck.text import sentence_spans

HEAD_FILE = "judge_head.json"
FEATURES = "align-v2"  # the feature set below; a head made for another is refused
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
TOP_K = 10
TOP_SENTENCES = 2  # the paper sentences whose cues are read
N_ALIGN = 4 + 2 * len(QUANTILES) + 1
N_FEATURES = N_ALIGN + N_CUES


@dataclass
class AlignHead:
    """The classifier over the alignment features: standardise, then softmax(weight · x + bias) over KEYS."""

    layer: int  # the backbone layer whose output is read (the saved model has exactly this many)
    mean: list[float]
    scale: list[float]
    weight: list[list[float]]  # [3, N_FEATURES], rows in KEYS order
    bias: list[float]
    features: str = FEATURES

    def __post_init__(self) -> None:
        shapes = (len(self.mean), len(self.scale), len(self.bias), len(self.weight),
                  {len(row) for row in self.weight})
        if self.features != FEATURES or shapes != (N_FEATURES, N_FEATURES, len(KEYS), len(KEYS), {N_FEATURES}):
            raise ValueError(f"a {FEATURES!r} head has {N_FEATURES} features and {len(KEYS)} labels; this one is "
                             f"{self.features!r} with shapes {shapes}")
        if any(s <= 0 for s in self.scale):
            raise ValueError("every feature scale must be > 0")

    def probs(self, x: Any) -> Any:
        """[N, N_FEATURES] features -> [N, 3] probabilities."""
        import torch

        mean, scale = torch.tensor(self.mean), torch.tensor(self.scale)
        w, b = torch.tensor(self.weight), torch.tensor(self.bias)
        return (((x.float() - mean) / scale) @ w.T + b).softmax(-1)

    def save(self, folder: Path) -> None:
        write_json_atomic(Path(folder) / HEAD_FILE, asdict(self), indent=1)

    @classmethod
    def load(cls, folder: Path) -> AlignHead:
        path = Path(folder) / HEAD_FILE
        try:
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as e:
            raise JudgeError(f"{path}: not a readable alignment-judge head ({e}); retrain it with "
                             "`biocheck judge train`") from None


def is_align_judge(ref: str | Path) -> bool:
    return (Path(ref) / HEAD_FILE).is_file()


def judge_fingerprint(folder: Path) -> str:
    """The weights' fingerprint, and the head's bytes where there is one: retraining either changes every score."""
    from biocheck.llm.load import model_fingerprint

    base = model_fingerprint(folder)
    if not is_align_judge(folder):
        return base
    return hashlib.sha256(base.encode() + b"\0" + (folder / HEAD_FILE).read_bytes()).hexdigest()[:12]


@dataclass(frozen=True)
class Row:
    """One judge prompt as the features read it."""

    ids: list[int]  # the prompt's token ids (chat template + generation prompt)
    claim_idx: list[int]  # positions of the claim's tokens
    paper_idx: list[int]  # positions of the paper's tokens (title through abstract)
    sentence_of: list[int]  # per paper token, the index of its sentence in `sentences`
    claim: str
    sentences: list[str]  # the paper (title through abstract) cut into sentences

    @cached_property
    def negations(self) -> int:
        """Negation words in the whole paper: text only, so counted once per prompt, not once per layer hooked."""
        return sum(counts(s)[0] for s in self.sentences)


def prompt_rows(tokenizer: Any, claim: str, article: Any, max_abstract_chars: int | None) -> Row:
    """The judge prompt's tokens, which of them are the claim and the paper, and the paper's sentences (a token
    counts when it lies wholly inside a span; it belongs to the sentence its first character is in or precedes)."""
    content, (c0, c1), (p0, p1) = prompt_spans(claim, article, max_abstract_chars)
    text = _chat(tokenizer, content, tokenize=False)
    at = text.index(content)
    paper = content[p0:p1]
    spans = sentence_spans(paper)
    ends = [e for _, e in spans]
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    claim_idx, paper_idx, sentence_of = [], [], []
    for i, (s, e) in enumerate(enc["offset_mapping"]):
        if at + c0 <= s and e <= at + c1 and e > s:
            claim_idx.append(i)
        elif at + p0 <= s and e <= at + p1 and e > s:
            paper_idx.append(i)
            sentence_of.append(min(bisect.bisect_right(ends, s - at - p0), len(spans) - 1))
    return Row(list(enc["input_ids"]), claim_idx, paper_idx, sentence_of, content[c0:c1],
               [paper[a:b] for a, b in spans])


def alignment(sim: Any) -> Any:
    """[N_ALIGN] from the cosine similarities [claim tokens, paper tokens]."""
    import torch

    best = sim.max(1).values  # how well each claim token is found in the paper
    back = sim.max(0).values  # how well each paper token is found in the claim
    q = torch.tensor(QUANTILES)
    return torch.cat([torch.stack([best.mean(), best.min(), sim.mean(), back.mean()]), torch.quantile(best, q),
                      torch.quantile(back, q), back.topk(min(TOP_K, back.numel())).values.mean()[None]])


def features(states: Any, row: Row) -> Any:
    """[N_FEATURES] from one prompt's normed states [T, H]: the alignment numbers, then the cues (cues.py) of the
    claim and of the TOP_SENTENCES sentences whose tokens match the claim's best (mean over claim tokens of the
    best similarity inside the sentence)."""
    import torch

    if not row.claim_idx or not row.paper_idx:
        return torch.zeros(N_FEATURES)
    unit = torch.nn.functional.normalize(states.float(), dim=-1)
    sim = unit[row.claim_idx] @ unit[row.paper_idx].T  # [claim tokens, paper tokens]
    of = torch.tensor(row.sentence_of)
    score = {n: float(sim[:, of == n].max(1).values.mean()) for n in sorted(set(row.sentence_of))}
    top = sorted(score, key=lambda n: -score[n])[:TOP_SENTENCES]
    cues = cue_features(row.claim, [row.sentences[n] for n in top], len(row.sentences), row.negations)
    return torch.cat([alignment(sim), torch.tensor(cues)])


class AlignJudge(TransformersJudge):
    """`transformers:<folder>` where the folder holds a cut backbone and `judge_head.json`."""

    def __init__(self, model: str | Path, *, batch_size: int = 8, device: str = "auto", dtype: str | None = None,
                 max_abstract_chars: int | None = DEFAULT_MAX_ABSTRACT_CHARS) -> None:
        ref = spec_ref(model, "transformers")
        self.head = AlignHead.load(Path(ref))
        super().__init__(ref, batch_size=batch_size, device=device, dtype=dtype, max_abstract_chars=max_abstract_chars)
        if not getattr(self.tokenizer, "is_fast", False):
            raise JudgeError(f"{self.spec}: the alignment judge needs a fast tokenizer (token offsets)")
        self.prompt_hash = judge_prompt_hash("align", FEATURES, self.max_abstract_chars)

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = judge_fingerprint(Path(str(self.path)))
        return self._fingerprint

    def rows(self, pairs: Sequence[Pair]) -> list[Row]:
        out = [prompt_rows(self.tokenizer, claim, article, self.max_abstract_chars) for claim, article in pairs]
        for row in out:
            if self.max_positions is not None and len(row.ids) > self.max_positions:
                raise JudgeError(f"{self.spec}: a judge prompt is {len(row.ids)} tokens but the model handles "
                                 f"{self.max_positions} positions; lower max_abstract_chars")
        return out

    def score(self, pairs: Sequence[Pair]) -> list[Scores]:
        if not pairs:
            return []
        with self._lock:
            was_training = self.model.training
            self.model.eval()
            try:
                x = batch_features(self.model, self.rows(pairs), self.pad_id, self.batch_size, device=self.device,
                                   last_only=True)  # the saved model ends at the head's layer
            finally:
                self.model.train(was_training)
        probs = self.head.probs(x[:, -1]).tolist()
        return [clean_scores(dict(zip(KEYS, row, strict=True))) for row in probs]


def batch_features(model: Any, rows: Sequence[Row], pad_id: int,
                   batch_size: int = 8, *, device: Any = None, progress: bool = False, last_only: bool = False) -> Any:
    """[N, layers, N_FEATURES]: the alignment features after every decoder layer (the final norm applied), from
    forward passes of the decoder alone, right-padded without a mask (causal: a row never sees its pads).
    `last_only`: after the last layer only ([N, 1, N_FEATURES]), as a judge reads them."""
    import torch
    from tqdm.auto import tqdm

    inner = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    layers, norm = inner.layers, inner.norm
    order = sorted(range(len(rows)), key=lambda i: len(rows[i].ids))
    read = list(layers)[-1:] if last_only else list(layers)
    out = torch.zeros((len(rows), len(read), N_FEATURES), dtype=torch.float32)
    chunk: list[int] = []

    def hook(index: int):
        def fn(_module, _inputs, output):
            h = output[0] if isinstance(output, tuple) else output
            normed = norm(h).float().cpu()
            for j, i in enumerate(chunk):
                out[i, index] = features(normed[j, : len(rows[i].ids)], rows[i])
        return fn

    handles = [layer.register_forward_hook(hook(k)) for k, layer in enumerate(read)]
    try:
        for start in tqdm(range(0, len(order), batch_size), desc="judge features", disable=not progress):
            chunk[:] = order[start:start + batch_size]
            width = max(len(rows[i].ids) for i in chunk)
            ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
            for j, i in enumerate(chunk):
                ids[j, : len(rows[i].ids)] = torch.tensor(rows[i].ids, dtype=torch.long)
            with torch.inference_mode():
                inner(input_ids=ids.to(device) if device is not None else ids)
    finally:
        for h in handles:
            h.remove()
    return out
