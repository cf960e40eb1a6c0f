"""Measuring the agent: metrics over labels and evidence (metrics.py) and scoring saved traces (score.py)."""
