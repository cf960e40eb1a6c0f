"""Orchestration: running the DVC stages from Prefect, the DVC remote, and scale-out on Dask."""
