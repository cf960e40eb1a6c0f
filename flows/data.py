"""Prefect flow `biocheck-data`: fetch -> prepare -> validate, each its DVC stage (flows/tasks.py).

Fails with the validation summary (also a markdown artifact, key `validation`) when the data does not pass.
`python flows/data.py [params.yaml]` runs it on that project without a Prefect server (Prefect starts a
temporary one), or on the server PREFECT_API_URL names.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ != "flows":  # run as a script: make the `flows` package (the repo root) importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prefect import flow  # noqa: E402

from biocheck.orchestration import dvc, entry  # noqa: E402
from flows.tasks import DataValidationError, fetch_task, main, prepare_task, validate_task  # noqa: E402

__all__ = ["DataValidationError", "data_flow"]


@flow(name="biocheck-data", log_prints=True)
def data_flow(params: str = "params.yaml", root: str = ".") -> dict:
    """Fetch the releases, prepare the splits and validate them; fails if validation fails."""
    with entry.redacted():  # secrets blanked in this run's log lines and in any error leaving it
        root = str(dvc.params_file(root, params).parent)
        return {"fetch": fetch_task(root), "prepare": prepare_task(root), "validate": validate_task(root)}


if __name__ == "__main__":
    main(data_flow)
