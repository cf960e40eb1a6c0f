"""Options more than one command takes, and the fixed values of options that list their choices in --help."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

ParamsOpt = Annotated[Path, typer.Option("--params", help="Parameters file (one section per stage).")]


# Options with a fixed set of values show them in --help instead of `<str>`. The values are those of the
# modules named (not imported here: `biocheck --help` stays fast); tests/cli/test_usage.py checks that they agree.
# They are Literal types (Click choices): a value not among them is a one-line usage error (_UsageError)
# before any work.
VARIANTS = ("eg_grpo", "outcome_only")  # biocheck.rewards.components.Variant
BACKENDS = ("local", "entrez", "replay")  # biocheck.evidence.search.BACKENDS
SEARCH_MODES = ("boolean", "bm25")  # biocheck.evidence.local: LocalIndex.search(mode=...)
FORMATS = ("md", "html", "json")  # check._render
GOLD_LABELS = ("SUPPORTED", "REFUTED", "NEI")  # biocheck.labels.Label's names


VariantOpt = Annotated[Literal[VARIANTS] | None, typer.Option(
    "--variant", help="Reward variant: eg_grpo or outcome_only [default: reward.variant]. A variant other than "
                      "reward.variant (the outcome-only comparison) uses paths with a _<variant> suffix.")]
