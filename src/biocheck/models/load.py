"""Load a causal LM and its tokenizer on the right device (shared by the agent backend and the judge)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_causal_lm(path: Path, device: str = "auto", dtype: Any = None) -> tuple[Any, Any, Any]:
    """(model in eval mode on its device, tokenizer, torch.device). bf16 on CUDA, fp32 on CPU by default.

    Loading errors (OSError, ValueError, KeyError) propagate for the caller to word.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    dev = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
    if dtype is None:
        dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    elif isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    hf_logging.disable_progress_bar()  # no "Loading weights" bar between a CLI's own output lines
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model.to(dev).eval(), tokenizer, dev
