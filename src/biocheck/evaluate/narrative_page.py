"""The passage benchmark's report folder (reports/narratives/): its table as Markdown (table.md) and as a gallery
page (index.html, in the evaluation gallery's style, linking to it), the per-claim rows every number comes from
(claims.jsonl, extracted.jsonl), and each passage's narrative report for the extracted arm (passages/<id>.html,
narrative/report.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from biocheck.evaluate.gallery import Provenance, _readme_link
from biocheck.evaluate.gallery_static import env
from biocheck.evaluate.gallery_svg import number
from biocheck.evaluate.narrative_scores import ARM_TITLES
from biocheck.io import dump_jsonl, write_text_atomic
from biocheck.outputs import output_dir

OUTPUT = ("biocheck narratives", "narratives.report_dir", ("index.html", "table.md"))
# The columns of the table: (key in an arm's metrics, heading, what its n counts)
COLUMNS = (
    ("precision", "extraction precision", "extracted claims"),
    ("recall", "extraction recall", "gold claims"),
    ("claim_accuracy", "per-claim accuracy", "gold claims"),
    ("passage_accuracy", "passage accuracy", "passages"),
    ("ehr", "EHR", "cited items"),
    ("eqs", "EQS", "judged reports"),
    ("non_claim_left_out", "non-claim left out", "passages"),
)


def cell(m: Mapping[str, Any] | None, digits: int = 3) -> str:
    """`0.667 [0.300, 0.900] n=9`; `n/a n=0` where undefined; the interval only when there is one."""
    if not m:
        return "n/a"
    n = m.get("den", m.get("n"))
    value = number(m.get("value"))
    if value is None:
        return f"n/a (n={n})"
    lo, hi = number(m.get("lo")), number(m.get("hi"))
    ci = f" [{lo:.{digits}f}, {hi:.{digits}f}]" if lo is not None and hi is not None else ""
    return f"{value:.{digits}f}{ci} (n={n})"


def table_rows(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per arm: its title and each column's cell, what extraction costs it, a model's fallback share."""
    out = []
    for arm, m in metrics.get("arms", {}).items():
        cost = metrics.get("extraction_cost", {}).get(arm)
        out.append({"arm": arm, "title": ARM_TITLES.get(arm, arm), "cells": [cell(m.get(k)) for k, _, _ in COLUMNS],
                    "cost": cell(cost, 3) if cost else "—", "fallback": cell(m.get("fallback")) if m.get("fallback")
                    else "—"})
    return out


def markdown_table(metrics: Mapping[str, Any]) -> str:
    """The table a terminal (or docs) shows: `cat reports/narratives/table.md`."""
    if metrics.get("skipped"):
        return f"Passage benchmark not run: {metrics['skipped']}\n"
    head = ["arm", *[h for _, h, _ in COLUMNS], "extraction cost", "model fell back"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table_rows(metrics):
        lines.append("| " + " | ".join([r["title"], *r["cells"], r["cost"], r["fallback"]]) + " |")
    const = metrics.get("constant_answer") or {}
    about = metrics.get("about") or {}
    lines += ["", f"Each cell: value [95% interval] (n). {NOTE}",
              f"Always answering {const.get('label')}: per-claim accuracy {cell(const)}.",
              f"System {about.get('system')} ({about.get('model')}), extractor {about.get('extractor')}, "
              f"{about.get('passages')} passages (seed {about.get('seed')})."]
    return "\n".join(lines) + "\n"


NOTE = ("Intervals resample passages (BCa bootstrap of the ratio of sums; exact binomial for a share of "
        "passages, and for a share whose every resample is equal, of its pooled counts): the claims of one passage "
        "are not independent. Extraction cost: accuracy on the gold claims "
        "minus the arm's, paired over the same passages. A gold claim no checked claim matches (content-word F1 "
        "below 0.6) counts as wrong; the whole-passage arm gives its one verdict to every gold claim.")


def write_report(report_dir: Path, metrics: Mapping[str, Any], claim_rows: Sequence[Mapping[str, Any]] = (),
                 extracted_rows: Sequence[Mapping[str, Any]] = (), passages: Mapping[str, str] | None = None,
                 gallery: Path | None = None) -> Path:
    """Replace `report_dir` with the benchmark's report (module docstring); `passages`: passage id -> its
    narrative report's HTML; `gallery`: the evaluation gallery's index.html, linked when it exists."""
    report_dir = Path(report_dir)
    about = Provenance.now((metrics.get("about") or {}).get("profile"))
    with output_dir(report_dir, *OUTPUT) as tmp:
        dump_jsonl(tmp / "claims.jsonl", [dict(r) for r in claim_rows])
        dump_jsonl(tmp / "extracted.jsonl", [dict(r) for r in extracted_rows])
        write_text_atomic(tmp / "table.md", markdown_table(metrics))
        links = {}
        for pid, html in sorted((passages or {}).items()):
            write_text_atomic(tmp / "passages" / f"{pid}.html", html)
            links[pid] = f"passages/{pid}.html"
        link = None
        if gallery is not None and Path(gallery).is_file():
            link = Path(os.path.relpath(Path(gallery).resolve(), report_dir.resolve())).as_posix()
        html = env().get_template("narratives.html.jinja").render(
            title="BioCheck passage benchmark", metrics=metrics, rows=table_rows(metrics), columns=COLUMNS,
            about=about, readme=_readme_link(report_dir), gallery=link, links=links, note=NOTE, cell=cell)
        write_text_atomic(tmp / "index.html", html)
    return report_dir / "index.html"
