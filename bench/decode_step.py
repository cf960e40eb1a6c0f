"""Milliseconds per decoding step of `generate`, by weight dtype and KV cache, side by side in one process.

    python bench/decode_step.py --model models/base --prompt 1000 --new 64 --batch 4     # smol: after `dvc repro model`

For each setting: the prefill alone (one new token) and a full generation of --new tokens (min_new_tokens, so
every setting decodes the same count) on --batch prompts of --prompt random token ids; the decoding step is
(generation - prefill) / (new - 1). Settings: float32; float32 weights under bf16 autocast (what TRL's generation
does under `train.bf16`); bfloat16 weights with transformers' dynamic cache; bfloat16 weights with a static
cache (`train.generation_dtype` + `train.cache_implementation`, docs/benchmarks.md). One timing per setting:
run it twice to see this machine's drift. Writes OUT (one entry per --label).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench/results/decode_step.json"
SETTINGS = {  # name: (weights' dtype, autocast, cache_implementation)
    "float32": ("float32", False, None),
    "float32_autocast_bf16": ("float32", True, None),
    "bfloat16_dynamic": ("bfloat16", False, None),
    "bfloat16_static": ("bfloat16", False, "static"),
}


def timed(model, ids, new: int, autocast: bool, cache: str | None) -> float:
    import torch
    from transformers import GenerationConfig

    cfg = GenerationConfig(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0, eos_token_id=0,
                           disable_compile=True, **({"cache_implementation": cache} if cache else {}))
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    t0 = time.perf_counter()
    with torch.inference_mode(), ctx:
        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=cfg)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/base", help="a causal LM folder (default models/base)")
    ap.add_argument("--prompt", type=int, default=1000, help="prompt tokens per row")
    ap.add_argument("--new", type=int, default=64, help="tokens generated per row")
    ap.add_argument("--batch", type=int, default=4, help="rows generated together")
    ap.add_argument("--label", default="smol")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    models = {}
    rows = {}
    for name, (dtype, autocast, cache) in SETTINGS.items():
        if dtype not in models:
            models[dtype] = AutoModelForCausalLM.from_pretrained(a.model, dtype=getattr(torch, dtype)).eval()
        model = models[dtype]
        vocab = model.config.vocab_size
        ids = torch.randint(100, vocab - 1, (a.batch, a.prompt))
        timed(model, ids, 2, autocast, cache)  # warm-up
        prefill = timed(model, ids, 1, autocast, cache)
        whole = timed(model, ids, a.new, autocast, cache)
        rows[name] = {"prefill_s": round(prefill, 3), "generate_s": round(whole, 3),
                      "decode_ms_per_step": round((whole - prefill) / (a.new - 1) * 1000, 1)}
        print(json.dumps({"setting": name, **rows[name]}), flush=True)
    results = json.loads(a.out.read_text()) if a.out.exists() else {}
    results[a.label] = {"model": a.model, "prompt": a.prompt, "new": a.new, "batch": a.batch, "settings": rows,
                        "torch_threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
