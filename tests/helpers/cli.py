"""How a CLI failure must look (one `error:` line naming what, where and how to fix), and a project with a
scripted model for `biocheck check` (`check_workdir`)."""

from __future__ import annotations

import json

import pytest

from tests.helpers.turns import REPORT, search


@pytest.fixture
def check_workdir(evidence_workdir):
    script = [search("vitamin D AND fracture*"), {"content": REPORT}]
    (evidence_workdir / "script.json").write_text(json.dumps(script))
    return evidence_workdir


def error_lines(r) -> list[str]:
    return [line for line in r.stderr.splitlines() if line.startswith("error:")]


def assert_one_clear_line(r, *phrases: str) -> str:
    """Exit non-zero through typer (no exception escaped), no traceback, exactly one error line naming the problem."""
    assert r.exit_code != 0, r.output
    assert isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.output
    lines = error_lines(r)
    assert len(lines) == 1, r.stderr
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    return lines[0]


def one_error_line(r, *needles: str) -> str:
    """The run failed cleanly: exit != 0, no exception escaped, one `error:` line on stderr holding every needle
    (stdout stays for results: a pipe reading it never gets an error as data)."""
    assert r.exit_code != 0, r.output
    assert isinstance(r.exception, SystemExit), repr(r.exception)  # anything else would be a traceback
    assert r.stdout.strip() == "", f"on stdout: {r.stdout}"
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]
