"""The CPU serving path: evaluation throughput through `transformers serve`, with and without
`--continuous-batching`, at 1 and 8 workers, side by side in one run.

For each server mode this script starts transformers' own OpenAI-compatible server on 127.0.0.1
(`transformers serve MODEL --device cpu [--continuous-batching]`, from `pip install 'transformers[serving]'`),
waits for /health, runs the real harness (evaluate.harness.run_system, via bench/eval_throughput.measure) for
each system with `openai:<MODEL>`, and stops the server. The model answers in real time, so the numbers are
what a CPU user gets; tokens/s counts prompt + completion tokens as the server reports them.

    .venv/bin/pip install 'transformers[serving]'
    .venv/bin/python bench/serve_throughput.py --model PATH [--claims 8] [--workers 1 8] [--max-new-tokens 64]

--model defaults to the tests' tiny Qwen3 (its template has tools, but its random text never calls one).
SmolLM2-135M-Instruct (docs/benchmarks.md says how it was converted) writes real text but its own
chat template has no tools, so the agent answers in one turn without searching. The server returns no
logprobs, so the evidence judge (EQS) is not part of this path: it stays in-process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from eval_throughput import RESULTS, build_index, make_claims, measure, table, tiny_model  # noqa: E402

from biocheck.agent.episode import AgentConfig  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: Path, batching: bool, log: Path, timeout: float = 180.0) -> tuple[subprocess.Popen, str]:
    """`transformers serve` on a free port, up when /health answers; raises with the log's tail otherwise."""
    exe = shutil.which("transformers", path=str(Path(sys.executable).parent)) or shutil.which("transformers")
    if exe is None:
        raise SystemExit("transformers CLI not found: pip install 'transformers[serving]'")
    port = free_port()
    cmd = [exe, "serve", str(model), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
           "--continuous-batching" if batching else "--no-continuous-batching"]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url + "/v1"
        except OSError:
            time.sleep(0.5)
    proc.kill()
    tail = log.read_text(errors="replace")[-1500:]
    raise SystemExit(f"transformers serve did not come up on {url} (exit {proc.poll()}):\n{tail}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, help="model folder to serve (default: the tests' tiny Qwen3)")
    ap.add_argument("--claims", type=int, default=8, help="claims per run (default 8)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--systems", nargs="+", default=["no_retrieval", "base"])
    ap.add_argument("--max-new-tokens", type=int, default=64, help="tokens per model turn (default 64)")
    ap.add_argument("--modes", nargs="+", default=["plain", "continuous"], choices=["plain", "continuous"],
                    help="server modes, run one after the other")
    ap.add_argument("--corpus", type=Path, default=ROOT / "data/prepared/corpus.jsonl",
                    help="prepared corpus to index (the tests' tiny corpus when missing)")
    ap.add_argument("--json", type=Path, default=RESULTS / "serve_throughput.json")
    args = ap.parse_args()

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("OPENAI_API_KEY", "bench-no-secret")
    result: dict = {"machine": {"cpus": os.cpu_count(), "loadavg_before": [round(x, 2) for x in os.getloadavg()]},
                    "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                    "modes": {}}
    with tempfile.TemporaryDirectory(prefix="serve-throughput-") as tmp:
        workdir = Path(tmp)
        model = (args.model or tiny_model(workdir)).resolve()
        result["model"] = model.name if args.model else "tests tiny Qwen3"
        search = build_index(args.corpus, workdir)
        claims = make_claims(args.claims)
        cfg = AgentConfig(max_searches=5, max_new_tokens=args.max_new_tokens)
        for mode in args.modes:
            t0 = time.perf_counter()
            proc, url = start_server(model, mode == "continuous", workdir / f"serve-{mode}.log")
            result["modes"][mode] = {"startup_s": round(time.perf_counter() - t0, 1)}
            os.environ["OPENAI_BASE_URL"] = url
            try:
                for name in args.systems:
                    rows = measure(name, f"openai:{model}", cfg, search, claims, args.workers, workdir)
                    for r in rows.values():
                        r["tokens_per_s"] = round(r["tokens_per_claim"] * r["claims_per_s"], 1)
                    result["modes"][mode][name] = rows
                    print(table(f"transformers serve ({mode}), {result['model']}, {name}, {args.claims} claims",
                                rows, None), flush=True)
                    print("tokens/s: " + ", ".join(f"{w} workers {r['tokens_per_s']}" for w, r in rows.items()),
                          flush=True)
            finally:
                stop(proc)
    result["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nload average before / after: {result['machine']['loadavg_before']} / "
          f"{result['machine']['loadavg_after']}; written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
