"""How long `make test` takes at two commits, side by side on one machine (issue 51: at most 10 minutes on 2 idle cores).

    BIOCHECK_DATA_MIRROR=../shared/datasets .venv/bin/python bench/suite_time.py --before 90d8722 --after HEAD
    .venv/bin/python bench/suite_time.py --before 90d8722 --after HEAD --repeats 2   # before, after, after, before

Clones each commit into a scratch folder and runs there the pytest command of that commit's `make test` recipe
(read from its Makefile, `$(TEST_WORKERS)` as `auto`), with this checkout's virtual environment (which must hold
what both commits need: pytest-xdist for the newer one) and the commit's own src/ first on PYTHONPATH. Runs
alternate (before, after, after, before, ...) so a drift in the machine's load falls on both. Writes
bench/results/suite_time.json: per run the commit, the command, the wall time, pytest's summary line and the
load average before it. Nothing else should run meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench/results/suite_time.json"
SUMMARY = re.compile(r"^=+ (.*(passed|failed).*) in [0-9.]+s")


def clone(rev: str, into: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(ROOT), str(into)], check=True)
    subprocess.run(["git", "-C", str(into), "checkout", "-q", rev], check=True)
    return into


def test_command(repo: Path) -> list[str]:
    """The pytest command of the commit's `make test` recipe, its make variables filled in."""
    lines = (repo / "Makefile").read_text(encoding="utf-8").splitlines()
    recipe = lines[lines.index("test: setup") + 1].strip()
    recipe = recipe.replace("$(TEST_WORKERS)", "auto").replace("$(PYTEST_ARGS)", "")
    return [sys.executable, "-m", *shlex.split(recipe), "-p", "no:cacheprovider"]


def run(rev: str, repo: Path, log) -> dict:
    cmd = test_command(repo)
    env = {**os.environ, "PYTHONPATH": str(repo / "src"), "CI": "true",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = round(time.perf_counter() - t0, 1)
    log.write(proc.stdout)
    summary = next((m.group(1) for line in proc.stdout.splitlines()[::-1] if (m := SUMMARY.match(line))), None)
    print(f"{rev:>10}  {wall:7.1f} s  load {load:.2f}  {summary}", flush=True)
    return {"rev": rev, "commit": subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                                                 capture_output=True, text=True).stdout.strip(),
            "command": " ".join(["python", "-m", *cmd[2:]]), "wall_s": wall, "exit": proc.returncode,
            "summary": summary, "load_before": round(load, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the older commit (any git revision)")
    ap.add_argument("--after", default="HEAD", help="the newer commit [HEAD]")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each commit, alternating [1]")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="suite_time_") as tmp:
        repos = {rev: clone(rev, Path(tmp) / name) for rev, name in ((a.before, "before"), (a.after, "after"))}
        order = [a.before, a.after]
        runs = []
        with open(Path(tmp) / "log.txt", "w", encoding="utf-8") as log:
            for i in range(a.repeats):
                for rev in (order if i % 2 == 0 else order[::-1]):
                    runs.append(run(rev, repos[rev], log))
    result = {"machine": {"cpus": os.cpu_count()}, "runs": runs,
              "median_s": {rev: statistics.median(r["wall_s"] for r in runs if r["rev"] == rev)
                           for rev in (a.before, a.after)}}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {a.out}")
    return 0 if all(r["exit"] == 0 for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
