"""Prefect flow `biocheck-data`: the data area of dvc.yaml (`validate` and every stage upstream of it: fetch ->
prepare -> validate today), each its DVC stage in DVC's order (biocheck/orchestration/plan.py, flows/tasks.py).

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

from biocheck.orchestration import dvc, entry, plan  # noqa: E402
from flows.tasks import DataValidationError, main, run_stages  # noqa: E402

__all__ = ["DataValidationError", "data_flow"]


@flow(name="biocheck-data", log_prints=True)
def data_flow(params: str = "params.yaml", root: str = ".") -> dict:
    """Fetch the releases, prepare the splits and validate them; fails if validation fails."""
    with entry.redacted():  # secrets blanked in this run's log lines and in any error leaving it
        root = str(dvc.params_file(root, params).parent)
        return run_stages(plan.areas(dvc.pipeline(root))["data"], root)


if __name__ == "__main__":
    main(data_flow)
