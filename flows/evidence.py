"""Prefect flow `biocheck-evidence`: the evidence area of dvc.yaml (the `evidence` stage: local search index,
evidence store, and any stage upstream of it that the data flow does not run), through DVC.

`python flows/evidence.py [params.yaml]`. (Re-running recorded live queries is flows/refresh.py.)
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ != "flows":  # run as a script: make the `flows` package (the repo root) importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prefect import flow  # noqa: E402

from biocheck.orchestration import dvc, entry, plan  # noqa: E402
from flows.tasks import main, run_stages  # noqa: E402


@flow(name="biocheck-evidence", log_prints=True)
def evidence_flow(params: str = "params.yaml", root: str = ".") -> dict:
    """Index the prepared corpus (and any baseline files) and open the evidence store."""
    with entry.redacted():  # secrets blanked in this run's log lines and in any error leaving it
        root = str(dvc.params_file(root, params).parent)
        return run_stages(plan.areas(dvc.pipeline(root))["evidence"], root)


if __name__ == "__main__":
    main(evidence_flow)
