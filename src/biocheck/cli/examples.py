"""An example command line at the end of every command's --help; `_with_examples`, which adds them, also gives every
command and group its one-line usage errors (`usage`)."""

from __future__ import annotations

import typer

from biocheck.cli.usage import _Command, _Group

# One or more command lines per command, printed at the end of its --help (tests/cli/test_usage.py checks that
# every command has one and that its options exist).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "": ('biocheck check "Vitamin D supplementation prevents fractures in older adults."',),
    "version": ("biocheck version",),
    "search": ("biocheck search '(statin OR statins) AND myopathy[tiab]' --backend local -n 5",),
    "check": ('biocheck check "Aspirin lowers the risk of a first heart attack." --search replay --trace trace.json',
              'biocheck check "Statins cause myopathy." --llm transformers:models/selected   # the newest selection',
              "biocheck check --claims data/prepared/scifact/test.jsonl --out runs/check --workers 4",
              "biocheck check --text passage.txt --out runs/passage --extractor sentences --format html",
              "biocheck check --passages data/narratives/passages.jsonl --out runs/passages"),
    "score": ("biocheck score trace.json --json", "biocheck score --traces runs/check --out runs/check/scores.json"),
    "sft": ("biocheck sft --no-progress",),
    "train": ("biocheck train --variant outcome_only --max-steps 2 --out-dir /tmp/ckpt",),
    "select": ("biocheck select --variant outcome_only --no-register",),
    "evaluate": ("biocheck evaluate --systems eg_grpo,outcome_only --datasets scifact --limit 50 --out runs/cmp",
                 "biocheck evaluate --systems eg_grpo --model champion --out runs/champion",
                 "biocheck evaluate --eqs-judge transformers:models/judge_eqs --out runs/second-judge"),
    "data fetch": ("BIOCHECK_DATA_MIRROR=/mnt/mirror biocheck data fetch", "biocheck data fetch --force"),
    "data prepare": ("biocheck data prepare --out-dir /tmp/prepared",),
    "data validate": ("biocheck data validate --report /tmp/validation.json",),
    "evidence build": ("biocheck evidence build --baseline 'pubmed/pubmed25n*.xml.gz'",),
    "evidence stats": ("biocheck evidence stats",),
    "evidence refresh": ("biocheck evidence refresh --limit 100",),
    "model init": ("biocheck model init --base tiny --out-dir /tmp/base",),
    "model promote": ("biocheck model promote                  # the challenger becomes the champion",
                      "biocheck model promote 3 --name biocheck-agent"),
    "judge train": ("biocheck judge train --eqs",),
    "profile list": ("biocheck profile list",),
    "profile use": ("biocheck profile use smol",),
    "profile show": ("biocheck profile show --params profiles/paper.yaml   # base.yaml with paper's values",),
    "profile explain": ("biocheck profile explain agent.max_searches",
                        "biocheck profile explain train.sft   # every key of a section"),
    "profile doc": ("biocheck profile doc --out docs/parameters.md",),
    "reward audit": ("biocheck reward audit                       # the profile's audit (DVC stage `audit`)",
                     "biocheck reward audit --judge transformers:models/judge_eqs --out /tmp/audit_other_judge.json"),
    "narratives passages": ("biocheck narratives passages        # narratives.passages passages from narratives.seed",
                            "dvc repro narrative_passages        # the same, as the DVC stage"),
    "narratives evaluate": ("biocheck narratives evaluate                          # every arm, narratives.system's agent",
                            "biocheck narratives evaluate --extractor sentences    # no model extraction",
                            "cat reports/narratives/table.md                       # the table again"),
    "study run": ("biocheck study run                  # the gate, every unit of params.yaml `study:`, the analysis",
                  "biocheck study run --ignore-gate    # even where the start gives R_evidence no signal",
                  "dvc repro study/dvc.yaml            # the units as DVC stages (no gate)"),
    "study train": ("biocheck study train --variant outcome_only --seed 1",),
    "study evaluate": ("biocheck study evaluate --variant eg_grpo --seed 0", "biocheck study evaluate   # the start"),
    "study analyze": ("biocheck study analyze",),
    "study export": ("biocheck study export --to bench/results/study_pilot",),
    "study recompute": ("biocheck study recompute bench/results/study_pilot",),
    "study status": ("biocheck study status",),
    "report pr": ("dvc status dvc.yaml --json > /tmp/status.json && dvc repro evaluate",
                  "biocheck report pr --base origin/main --status /tmp/status.json --out comment.md"),
}


def _epilog(key: str) -> str | None:
    lines = EXAMPLES.get(key)
    # \b: Click prints the paragraph as written instead of re-wrapping the lines into one.
    return "\b\nExample:\n" + "\n".join(f"  {line}" for line in lines) if lines else None


def _with_examples(typer_app: typer.Typer, prefix: str = "") -> None:
    for info in typer_app.registered_commands:
        key = f"{prefix}{info.name or info.callback.__name__.replace('_', '-')}"
        info.epilog = info.epilog or _epilog(key)
        if info.cls in (None, typer.core.TyperCommand):  # a command's own class is kept
            info.cls = _Command
    for group in typer_app.registered_groups:
        group.typer_instance.info.cls = _Group
        _with_examples(group.typer_instance, f"{prefix}{group.name} ")

