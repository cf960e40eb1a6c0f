"""The Prefect flow runs the same stage functions, without a Prefect server of our own."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.builders import write_raw
from tests.conftest import REPO


@pytest.fixture(scope="module")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def _params(tmp_path, expected_healthfc: int):
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"].update(raw_dir=str(tmp_path / "raw"), out_dir=str(tmp_path / "prepared"))
    params["validate"]["expected_rows"] = {"healthfc": {"test": expected_healthfc}}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def test_data_flow_fetches_prepares_validates(prefect_harness, tmp_path, monkeypatch):
    from flows.data import DataValidationError, data_flow

    monkeypatch.setenv("BIOCHECK_DATA_MIRROR", str(write_raw(tmp_path / "mirror")))
    monkeypatch.chdir(tmp_path)
    result = data_flow(str(_params(tmp_path, expected_healthfc=7)))
    assert result["validation"]["failed"] == 0
    assert result["stats"]["full"]["healthfc"]["test"]["total"] == 7
    assert (tmp_path / "raw" / "manifest.json").is_file()
    assert json.loads((tmp_path / "reports" / "validation.json").read_text())["success"] is True

    with pytest.raises(DataValidationError, match=r"healthfc/full\[test\].*observed 7"):
        data_flow(str(_params(tmp_path, expected_healthfc=750)))


def test_evidence_flow_builds_the_index(prefect_harness, tmp_path, monkeypatch):
    from flows.evidence import evidence_flow

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "1", "title": "Aspirin and bleeding", "abstract": ["Aspirin raised bleeding."]}\n'
                      '{"id": "2", "title": "Coffee", "abstract": ["Coffee was fine."]}\n')
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["evidence"].update(corpus=str(corpus), index_dir=str(tmp_path / "index"), store=str(tmp_path / "e.sqlite"))
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    stats = evidence_flow(str(path))
    assert stats["index"]["docs"] == 2 and stats["store"]["queries"] == 0
    assert json.loads((tmp_path / "metrics" / "evidence.json").read_text())["index"]["docs"] == 2
