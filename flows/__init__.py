"""Prefect flows: thin orchestration over the `biocheck` package (no logic of their own)."""
