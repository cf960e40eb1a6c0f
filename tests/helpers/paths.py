"""Where the repository is, for tests that read its files (params.yaml, dvc.yaml, docs, profiles)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
