"""Fuzzing the search command over a real local index: any query text (operators, brackets, quotes, field tags,
truncation, any script) prints results, or a bad query's error in its JSON (exit 1) — never a traceback."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from biocheck.cli import app
from biocheck.evidence.article_xml import parse_efetch
from biocheck.evidence.local import LocalIndex
from tests.helpers.fake_eutils import CORPUS, pubmed_xml
from tests.helpers.paths import REPO

runner = CliRunner()
pieces = st.sampled_from(["AND", "OR", "NOT", "(", ")", '"', "*", "[tiab]", "[ti]", "[mh]", "[all]", "[xx]",
                          "vitamin", "coffee", "D", "metformin", "生", "😀", ":", "-", "\\", "", " "])
queries = st.one_of(st.lists(pieces, max_size=8).map(" ".join),
                    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40))


@pytest.fixture(scope="module")
def params(tmp_path_factory):
    root = tmp_path_factory.mktemp("search")
    LocalIndex.build(parse_efetch(pubmed_xml(CORPUS)), path=root / "index")
    p = yaml.safe_load((REPO / "params.yaml").read_text())
    p["search"]["backend"] = "local"
    p["evidence"].update(index_dir=str(root / "index"), store=str(root / "ev.sqlite"))
    (root / "params.yaml").write_text(yaml.safe_dump(p))
    return root / "params.yaml"


@given(query=queries)
def test_any_query_prints_results_or_its_error(params, query):
    r = runner.invoke(app, ["search", "--json", "--params", str(params), "--", query])  # "--": "-x" is a query
    assert isinstance(r.exception, SystemExit) or r.exception is None, repr(r.exception)
    lines = [json.loads(x) for x in r.stdout.split("\n") if x.strip()]  # JSON lines end at "\n" only
    assert len(lines) == 1 and lines[0]["query"] == query, r.output
    if r.exit_code == 0:
        assert not lines[0]["error"] and all(isinstance(x["pmid"], str) for x in lines[0]["results"])
    else:
        assert r.exit_code == 1 and lines[0]["error"] and not lines[0]["results"], r.output
