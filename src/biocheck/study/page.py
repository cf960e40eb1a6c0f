"""The study's page (reports/study/index.html) and its forest plot: each difference with its interval.

The page is drawn in the evaluation gallery's style (its templates, CSS and provenance header; inline SVG, no
network): one row per dataset, metric and comparison (the reference variant minus another variant, and minus
the start), the difference as a dot and its t interval over seeds as a line around it, then the plain
sentence of what the study can and cannot say. `forest_rows` is also the CSV `dvc plots` draws.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from markupsafe import Markup

from biocheck.evaluate.gallery import Provenance, _readme_link
from biocheck.evaluate.gallery_static import env
from biocheck.evaluate.gallery_svg import number
from biocheck.io import write_text_atomic


def forest_rows(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per (dataset, metric, comparison): the difference, its interval, p, MDD and sentence."""
    ref, rows = report["reference"], []
    for d, result in report["datasets"].items():
        for metric, entry in result["metrics"].items():
            for other, x in entry["differences"].items():
                rows.append({"comparison": f"{d} {metric}: {ref} - {other}", "dataset": d, "metric": metric,
                             "other": other, **{k: x.get(k) for k in ("diff", "lo", "hi", "p", "mdd")},
                             "seeds": x.get("seeds"), "claims": x.get("claims"), "sentence": x.get("sentence"),
                             "mcnemar": x.get("mcnemar"), "seeds_needed": x.get("seeds_needed")})
    return rows


PLOTTED = ("diff", "lo", "hi", "p")  # forest.csv's numbers (with `comparison`, `dataset`, `metric`)


def write_forest_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """The forest plot's data for `dvc plots`: the differences that have a value and an interval. One without
    (a metric a system has nothing to count for) is left out: a blank cell would be drawn as 0."""
    from biocheck.evaluate.compare import write_plot_csv

    header = ["comparison", "dataset", "metric", *PLOTTED]
    kept = [[r[k] for k in header] for r in rows if all(r.get(k) is not None for k in PLOTTED)]
    return write_plot_csv(Path(path), header, kept)


def forest_svg(rows: Sequence[Mapping[str, Any]]) -> Markup:
    """The differences on one symmetric axis around 0: a dot each, its interval a line, 0 a dashed rule."""
    label_w, plot_w, row_h, top = 300, 360, 22, 28
    ends = [abs(v) for r in rows for v in (number(r.get("lo")), number(r.get("hi")), number(r.get("diff")))
            if v is not None]
    span = max(ends, default=1.0) or 1.0
    x = lambda v: label_w + plot_w * (0.5 + v / (2 * span))  # noqa: E731  (-span..span -> pixels)
    marks = []
    for i, r in enumerate(rows):
        y, diff, lo, hi = top + i * row_h, number(r.get("diff")), number(r.get("lo")), number(r.get("hi"))
        tip = r["comparison"] + ("" if diff is None else f" {diff:+.3f}") + (
            f" [{lo:+.3f}, {hi:+.3f}]" if lo is not None and hi is not None else "")
        marks.append({"y": y, "label": r["comparison"], "tip": tip, "cx": None if diff is None else f"{x(diff):.1f}",
                      "x1": None if lo is None else f"{x(lo):.1f}", "x2": None if hi is None else f"{x(hi):.1f}",
                      "excludes_zero": lo is not None and hi is not None and (lo > 0 or hi < 0)})
    ticks = [{"x": f"{x(t):.1f}", "text": f"{t:+.2g}" if t else "0"} for t in (-span, -span / 2, 0.0, span / 2, span)]
    height = top + len(rows) * row_h + 24
    return Markup(env().get_template("forest.svg.jinja").render(
        width=label_w + plot_w + 20, height=height, zero=f"{x(0.0):.1f}", top=top - 12, bottom=height - 20,
        marks=marks, ticks=ticks))


def _p_label(x: object) -> str:
    """A p-value as the project prints one (headline.p_text: never "0", "<0.001" below it); "n/a" for none."""
    from biocheck.evaluate.headline import p_text

    shown = p_text(x)
    return "n/a" if shown is None else shown[0]


def write_page(page_dir: Path, report: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
               gallery: Path | None = None) -> Path:
    """reports/study/index.html: the study's size, its units, the forest plot and the table of differences;
    `gallery`: the evaluation gallery's index.html, linked from the page when it exists."""
    page_dir = Path(page_dir)
    about = Provenance.now(report.get("profile"))
    link = (Path(os.path.relpath(Path(gallery).resolve(), page_dir.resolve())).as_posix()
            if gallery is not None and Path(gallery).is_file() else None)
    html = env().get_template("study.html.jinja").render(
        title=f"BioCheck study {report['study']}", report=report, rows=rows, forest=forest_svg(rows), about=about,
        readme=_readme_link(page_dir), gallery=link, fmt=_fmt, p_label=_p_label)
    write_text_atomic(page_dir / "index.html", html)
    return page_dir / "index.html"


def _fmt(x: object, digits: int = 3, sign: bool = False) -> str:
    v = number(x)
    return "n/a" if v is None else f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"


__all__ = ["forest_rows", "forest_svg", "write_forest_csv", "write_page"]
