"""Mutation testing of the modules that decide correctness, and a score per module.

mutmut (configured in pyproject.toml, [tool.mutmut]) copies the package into `mutants/`, makes
small semantic changes ("mutants") one at a time in the modules listed in `only_mutate`, and runs
the tests that cover each changed function. A mutant no test notices "survives": a behaviour the
suite does not pin. This script runs mutmut and turns its results into one table per module.

  make mutation                                     # run everything (about an hour on 2 cores), then report
  .venv/bin/python bench/mutation.py run 'biocheck.evidence.*'   # (re)run the mutants of some modules
  .venv/bin/python bench/mutation.py report         # the table of the last run; --json FILE, --survivors FILE

Score = killed / (mutants - judged equivalent - not yet checked). Timeouts count as killed (the mutant made a test
hang, and the test's timeout noticed). A mutant with no covering test counts as survived.
Equivalent mutants (no behaviour can tell them apart) are listed with the reason, by mutant name, in
the YAML files of bench/mutation_equivalents/; the report says when a listed name is stale.
Log statements are not mutated at all (pyproject: do_not_mutate_patterns): their text is not behaviour.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
EQUIVALENTS = REPO / "bench" / "mutation_equivalents"  # one YAML file per module group

# mutmut's exit-code meanings (mutmut.stats.status_by_exit_code), folded into what the score needs.
_STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 36: "timeout",
           24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", None: "not checked"}


def module_of(mutant: str) -> str:
    """'biocheck.evidence.transport.xǁRetryPolicyǁdelay__mutmut_3' -> 'biocheck.evidence.transport'."""
    head = mutant.split("__mutmut_")[0]
    parts = head.split(".")
    # the function part starts with "x_" (function) or "xǁ" (method); everything before is the module
    idx = next(i for i, p in enumerate(parts) if p.startswith(("x_", "xǁ")))
    return ".".join(parts[:idx])


def load_results(mutants_dir: Path) -> dict[str, str]:
    """{mutant name: status} from mutmut's per-file .meta records."""
    results: dict[str, str] = {}
    for meta in sorted(mutants_dir.rglob("*.py.meta")):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            results[name] = _STATUS.get(code, "suspicious")
    return results


def load_equivalents(folder: Path = EQUIVALENTS) -> dict[str, str]:
    """{mutant name: why it is equivalent} from every YAML list in `folder`."""
    found: dict[str, str] = {}
    for path in sorted(folder.glob("*.yaml")):
        for entry in yaml.safe_load(path.read_text()) or []:
            found[str(entry["mutant"])] = str(entry["why"])
    return found


def score_table(results: dict[str, str], equivalents: dict[str, str]) -> dict[str, dict]:
    by_module: dict[str, Counter] = defaultdict(Counter)
    for name, status in results.items():
        module = module_of(name)
        if status == "survived" and name in equivalents:
            status = "equivalent"
        by_module[module][status] += 1
    table = {}
    for module, c in sorted(by_module.items()):
        total = sum(c.values())
        detected = c["killed"] + c["timeout"]
        counted = total - c["equivalent"] - c["not checked"]
        table[module] = {
            "mutants": total, "killed": c["killed"], "timeout": c["timeout"], "survived": c["survived"],
            "no_tests": c["no tests"], "equivalent": c["equivalent"], "not_checked": c["not checked"],
            "score": round(detected / counted, 4) if counted else None,
        }
    return table


def markdown(table: dict[str, dict]) -> str:
    rows = ["| module | mutants | killed | timeout | survived | no tests | equivalent | not checked | score |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    totals: Counter = Counter()
    for module, r in table.items():
        score = "-" if r["score"] is None else f"{100 * r['score']:.1f}%"
        rows.append(f"| `{module}` | {r['mutants']} | {r['killed']} | {r['timeout']} | {r['survived']} | "
                    f"{r['no_tests']} | {r['equivalent']} | {r['not_checked']} | {score} |")
        totals.update({k: v for k, v in r.items() if k != "score"})
    counted = totals["mutants"] - totals["equivalent"] - totals["not_checked"]
    overall = (totals["killed"] + totals["timeout"]) / counted if counted else 0.0
    rows.append(f"| **all** | {totals['mutants']} | {totals['killed']} | {totals['timeout']} | {totals['survived']} "
                f"| {totals['no_tests']} | {totals['equivalent']} | {totals['not_checked']} | **{100 * overall:.1f}%** |")
    return "\n".join(rows)


def survivors_text(results: dict[str, str], equivalents: dict[str, str], where: dict[str, Path]) -> str:
    """Every undetected mutant with its diff (`mutmut show`), for review."""
    out = []
    for name, status in sorted(results.items()):
        if status in ("survived", "no tests") and name not in equivalents:
            diff = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=where[name],
                                  capture_output=True, text=True).stdout
            out.append(f"## {name} ({status})\n{diff.strip()}\n")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run mutmut (all modules, or the mutants matching the patterns), then report")
    run.add_argument("patterns", nargs="*", help="mutant name patterns, e.g. 'biocheck.evidence.*'")
    run.add_argument("--max-children", type=int, default=2)
    rep = sub.add_parser("report", help="the per-module table of the last run")
    for p in (run, rep):
        p.add_argument("--root", type=Path, action="append",
                       help="where mutmut ran (holds mutants/); repeat to merge runs of separate module groups "
                            "(default: the repository)")
        p.add_argument("--json", type=Path, help="also write the table as JSON here")
        p.add_argument("--survivors", type=Path, help="write every surviving mutant's diff here")
    args = ap.parse_args(argv)
    roots = args.root or [REPO]

    if args.cmd == "run":
        cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children), *args.patterns]
        # mutmut forks each test run from a parent that has imported torch: with several OpenMP/tokenizer
        # threads the fork can deadlock, which mutmut would count as a timeout, i.e. a false kill.
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        proc = subprocess.run(cmd, cwd=roots[0], env=env)
        if proc.returncode not in (0, 1):  # mutmut exits 1 when mutants survived
            print(f"mutmut failed (exit {proc.returncode}); see the output above", file=sys.stderr)
            return proc.returncode
    results: dict[str, str] = {}
    where: dict[str, Path] = {}  # mutant -> the run that holds it (for `mutmut show`)
    for root in roots:
        if not (root / "mutants").is_dir():
            print(f"no mutation results in {root / 'mutants'}: run `make mutation` first", file=sys.stderr)
            return 2
        found = load_results(root / "mutants")
        results.update(found)
        where.update(dict.fromkeys(found, root))
    equivalents = load_equivalents()
    measured = {module_of(n) for n in results}  # a partial run says nothing of the other modules
    stale = sorted(n for n in equivalents if module_of(n) in measured
                   and results.get(n) not in ("survived", "not checked"))
    table = score_table(results, equivalents)
    print(markdown(table))
    if stale:
        print(f"\n{len(stale)} listed equivalent mutant(s) are no longer survivors (killed, renamed or gone): "
              f"{', '.join(stale[:10])}; update {EQUIVALENTS.relative_to(REPO)}")
    if args.json:
        args.json.write_text(json.dumps(table, indent=2) + "\n")
    if args.survivors:
        args.survivors.write_text(survivors_text(results, equivalents, where))
    return 0


if __name__ == "__main__":
    sys.exit(main())
