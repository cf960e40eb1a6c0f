"""Measuring the agent: metrics over labels and evidence (biocheck.measures) and scoring saved traces (score.py)."""
