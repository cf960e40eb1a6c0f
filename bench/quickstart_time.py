"""How long `make quickstart` takes on a fresh clone, stage by stage.

    BIOCHECK_DATA_MIRROR=../shared/datasets python bench/quickstart_time.py
    python bench/quickstart_time.py --repo . --keep /tmp/qs     # keep the clone (its mlflow.db, models, reports)

Clones REPO's committed HEAD into a scratch folder (uncommitted changes are not in it: commit first), then runs the
README's two steps there as a user does: `make setup` (the virtual environment from the hashed lock; pip's own
download cache is used when the machine has one, as it would for a user's second clone) and `dvc repro`, with
each DVC stage's wall time read off dvc's "Running stage" lines as they are printed. Writes
bench/results/quickstart_time.json (the stage times, the total, the machine's load before the run) and prints a
table. The target (issue 32): <= 12 minutes in all on 2 idle cores. Nothing else should run meanwhile: the
load average before the run is recorded so a busy machine shows.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench/results/quickstart_time.json"
STAGE = re.compile(r"^Running stage '([^']+)'")


def timed(cmd: list[str], cwd: Path, env: dict[str, str], log) -> tuple[float, list[tuple[str, float]]]:
    """Run `cmd`, echoing its output to `log`; (seconds, [(stage, seconds)] for each 'Running stage' line)."""
    t0 = time.perf_counter()
    marks: list[tuple[str, float]] = []
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        log.write(line)
        m = STAGE.match(line)
        if m:
            marks.append((m.group(1), time.perf_counter()))
    rc = proc.wait()
    end = time.perf_counter()
    if rc:
        raise SystemExit(f"quickstart_time: `{' '.join(cmd)}` failed with exit status {rc} in {cwd} (its log: "
                         f"{log.name})")
    stages = [(name, round((marks[i + 1][1] if i + 1 < len(marks) else end) - t, 1))
              for i, (name, t) in enumerate(marks)]
    return round(end - t0, 1), stages


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", type=Path, default=ROOT, help="the repository to clone (its committed HEAD)")
    ap.add_argument("--keep", type=Path, default=None, help="clone here and keep it (must not exist)")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    if a.keep is not None and a.keep.exists():
        ap.error(f"--keep {a.keep}: already exists; name a new folder")
    work = a.keep or Path(tempfile.mkdtemp(prefix="quickstart_time_"))
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "MLFLOW_TRACKING_URI")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    load = os.getloadavg()
    commit = subprocess.run(["git", "-C", str(a.repo), "rev-parse", "--short", "HEAD"], check=True,
                            stdout=subprocess.PIPE, text=True).stdout.strip()
    log_path = work.parent / f"{work.name}.log"
    try:
        t0 = time.perf_counter()
        subprocess.run(["git", "clone", "-q", str(a.repo.resolve()), str(work)], check=True)
        clone_s = round(time.perf_counter() - t0, 1)
        with log_path.open("w") as log:
            setup_s, _ = timed(["make", "setup"], work, env, log)
            print(f"make setup: {setup_s} s", file=sys.stderr, flush=True)
            repro_s, stages = timed(["make", "quickstart"], work, env, log)
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    total = round(clone_s + setup_s + repro_s, 1)
    result = {"commit": commit, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "cpus": os.cpu_count(),
              "loadavg_before": [round(x, 2) for x in load], "clone_s": clone_s, "setup_s": setup_s,
              "repro_s": repro_s, "total_s": total, "total_min": round(total / 60, 2), "stages_s": dict(stages),
              "target_min": 12}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    width = max(len(s) for s, _ in stages) if stages else 10
    print(f"{'clone':<{width}}  {clone_s:7.1f} s\n{'make setup':<{width}}  {setup_s:7.1f} s")
    for name, s in stages:
        print(f"{name:<{width}}  {s:7.1f} s")
    print(f"{'total':<{width}}  {total:7.1f} s  ({total / 60:.1f} min; target 12)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
