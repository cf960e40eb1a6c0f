"""Does a study's nominal 95% interval hold its level? Null studies simulated at a study's design, two methods.

    python bench/study_calibration.py                         # the grid below, 2000 null studies a cell
    python bench/study_calibration.py --studies 500 --quick   # fewer cells and studies: a minute

Each simulated study has S seeds x C claims of per-claim right answers for two systems with no true difference:
a claim's difficulty (a logit, N(0, 1.5)) is shared by every unit, and each unit shifts every logit by its seed
effect, N(0, seed_sd) (tests/test_study_stats.null_studies, the same simulator the test uses). Against the start,
the start is one unit whose value is the variant's expected value over seeds. A cell reports the share of
studies whose 95% interval excludes 0 (nominal: 5%) for:

- `t`: the study's method now (biocheck.study.analysis.difference: the t interval over per-seed differences);
- `bootstrap`: the two-level percentile bootstrap the study used before issue 48 (seeds and claims resampled
  with replacement, crossed; reproduced here from commit 9d6e066's evaluate/study.py, 1000 resamples).

Writes bench/results/study_calibration.json (each cell with its 95% binomial interval) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers.null_studies import null_studies  # noqa: E402

from biocheck.study.analysis import Table, difference  # noqa: E402

SEEDS = (2, 3, 6)
SPREADS = (0.3, 1.0, 2.0, 3.0)


def bootstrap_excludes(a: np.ndarray, b: np.ndarray, rng: np.random.Generator, resamples: int = 1000) -> bool:
    """The pre-issue-48 two-level bootstrap: seeds and claims drawn with replacement (claims shared by every seed
    and both systems), each resample's difference the mean over drawn seeds of per-seed ratios; percentile 95%."""
    s, c = a.shape
    seeds = rng.integers(0, s, (resamples, s))
    claims = rng.integers(0, c, (resamples, c))
    va = a[seeds[:, :, None], claims[:, None, :]].mean(-1).mean(-1)
    b_seeds = seeds if b.shape[0] == s else np.zeros_like(seeds[:, :1])
    vb = b[b_seeds[:, :, None], claims[:, None, :]].mean(-1).mean(-1)
    lo, hi = np.quantile(va - vb, [0.025, 0.975])
    return bool(lo > 0 or hi < 0)


def cell(seeds: int, spread: float, against_start: bool, studies: int, seed: int) -> dict:
    import biocheck.study.analysis as study

    rng = np.random.default_rng(seed)
    a, b = null_studies(studies, seeds, 100, spread, rng, against_start=against_start)
    keep, study.mdd = study.mdd, lambda *x, **k: None  # the MDD is not part of the interval (and is the slow part)
    try:
        t = [difference(Table(x, np.ones_like(x)), Table(y, np.ones_like(y))) for x, y in zip(a, b, strict=True)]
    finally:
        study.mdd = keep
    t_rate = float(np.mean([d["lo"] is not None and (d["lo"] > 0 or d["hi"] < 0) for d in t]))
    boot_rate = float(np.mean([bootstrap_excludes(x, y, rng) for x, y in zip(a, b, strict=True)]))
    return {"seeds": seeds, "claims": 100, "seed_sd": spread, "against": "start" if against_start else "variant",
            "studies": studies, "t": _rate(t_rate, studies), "bootstrap": _rate(boot_rate, studies)}


def _rate(rate: float, n: int) -> dict:
    from scipy.stats import binomtest

    ci = binomtest(round(rate * n), n).proportion_ci(0.95)
    return {"rate": rate, "lo": float(ci.low), "hi": float(ci.high)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--studies", type=int, default=2000)
    ap.add_argument("--quick", action="store_true", help="3 seeds only, two spreads")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "study_calibration.json")
    args = ap.parse_args()
    seeds, spreads = ((3,), (0.3, 3.0)) if args.quick else (SEEDS, SPREADS)
    t0, cells = time.time(), []
    for k, (s, sd, start) in enumerate((s, sd, st) for s in seeds for sd in spreads for st in (False, True)):
        c = cell(s, sd, start, args.studies, seed=1000 + k)
        cells.append(c)
        print(f"{s} seeds, seed sd {sd:3.1f}, vs {c['against']:7}: t {c['t']['rate']:.3f} "
              f"[{c['t']['lo']:.3f}, {c['t']['hi']:.3f}]   bootstrap {c['bootstrap']['rate']:.3f} "
              f"[{c['bootstrap']['lo']:.3f}, {c['bootstrap']['hi']:.3f}]", flush=True)
    args.out.write_text(json.dumps({"nominal": 0.05, "seconds": round(time.time() - t0, 1), "cells": cells},
                                   indent=2) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
