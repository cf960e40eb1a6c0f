"""Redaction speed: `secrets.redact` runs on every file written, every line printed or logged.

A trace-sized text (about 65 kB of abstract-like words, with `&amp;`, `%20` and `95%` in it) is redacted with
three secrets set (an OpenAI key, an NCBI key, a URL password), by this checkout's `biocheck.secrets` and,
with `--against REV`, by the `secrets.py` of git revision REV (e.g. the one before a change to it).

    .venv/bin/python bench/redact_speed.py [--calls 50] [--against HEAD~1]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECRETS = {"OPENAI_API_KEY": "sk-proj-Zq7Xw3Vt9Ku5Rs1Pn8Lm4Jh2Gf6Dc0Ba", "NCBI_API_KEY": "0123456789abcdef0123456789ab",
           "OPENAI_BASE_URL": "https://ann:pw-Zx81Kq40Lm@llm.example.org/v1"}
WORDS = ["vitamin", "D", "fractures", "patients", "randomized", "trial", "&amp;", "p<0.05", "95%", "CI", "PMID",
         "%20", "supplementation", "sk-", "0.70-0.91", "ann", "\\n"]


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ms_per_call(redact, text: str, calls: int) -> float:
    redact(text)  # compiles and caches the pattern
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        redact(text)
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--against", help="a git revision whose src/biocheck/secrets.py is timed too")
    args = ap.parse_args()
    os.environ.update(SECRETS)
    rng = random.Random(0)
    text = " ".join(rng.choice(WORDS) for _ in range(10_000))
    versions = {"this checkout": ROOT / "src" / "biocheck" / "secrets.py"}
    with tempfile.TemporaryDirectory() as tmp:
        if args.against:
            old = Path(tmp) / "secrets_old.py"
            old.write_text(subprocess.run(["git", "show", f"{args.against}:src/biocheck/secrets.py"], cwd=ROOT,
                                          check=True, capture_output=True, text=True).stdout)
            versions[args.against] = old
        for i, (name, path) in enumerate(versions.items()):
            secrets = load(path, f"secrets_{i}")
            print(f"{name}: {ms_per_call(secrets.redact, text, args.calls):.2f} ms per call "
                  f"({len(text) / 1000:.0f} kB text, {len(SECRETS)} secrets, median of {args.calls})")


if __name__ == "__main__":
    sys.exit(main())
