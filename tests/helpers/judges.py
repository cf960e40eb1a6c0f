"""Judges without a model, for tests that need known evidence scores."""

from __future__ import annotations


class HalfJudge:
    """Every pair is SUPPORTED with probability 0.75 (EQS of a report citing one retrieved paper: 0.75)."""

    spec, prompt_hash = "half", "h"

    def fingerprint(self):
        return "half"

    def score(self, pairs):
        return [{"SUPPORTED": 0.75, "REFUTED": 0.05, "NEI": 0.2} for _ in pairs]
