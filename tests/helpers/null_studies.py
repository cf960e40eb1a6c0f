"""Simulated studies with no true difference between two systems: per-claim right answers over seeds, to check
the study's intervals are calibrated (tests/study/test_analysis.py, bench/study_calibration.py)."""

from __future__ import annotations

import numpy as np


def null_studies(n_studies: int, seeds: int, claims: int, seed_sd: float, rng: np.random.Generator,
                 against_start: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) per-claim right answers [studies, seeds, claims] of two systems with no true difference. A claim's
    difficulty (logit) is shared by every unit, each unit shifts every logit by its seed effect, N(0, seed_sd).
    `against_start`: b is one start per study whose expected accuracy equals the variant's, a's seeds vary
    around it (the study's `minus start`, conditional on the start)."""
    logit = rng.normal(0.0, 1.5, (n_studies, 1, claims))
    shift_a = rng.normal(0.0, seed_sd, (n_studies, seeds, 1))
    a = rng.random((n_studies, seeds, claims)) < 1 / (1 + np.exp(-(logit + shift_a)))
    if against_start:  # the start's value: the expectation of a unit's accuracy over seed effects, per study
        draws = rng.normal(0.0, seed_sd, (1, 400, 1))
        p = (1 / (1 + np.exp(-(logit + draws)))).mean(axis=1, keepdims=True)  # [studies, 1, claims]
        return a.astype(float), p
    shift_b = rng.normal(0.0, seed_sd, (n_studies, seeds, 1))
    b = rng.random((n_studies, seeds, claims)) < 1 / (1 + np.exp(-(logit + shift_b)))
    return a.astype(float), b.astype(float)
