"""The gallery's plots as inline SVG: metric bars with interval whiskers, and confusion matrices.

Drawn without a plotting library so that the gallery needs no network: the geometry is computed here, the
markup is the templates bars.svg.jinja and confusion.svg.jinja (autoescaped, so every text from the input
is escaped); numbers are formatted here, never taken as text from the input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from markupsafe import Markup

from biocheck.evaluate.gallery_static import env

BAR_METRICS = (("accuracy", "accuracy", "#4a6fa5"), ("macro_f1", "macro-F1", "#e0a030"))


def number(x: object) -> float | None:
    """A finite float, or None for anything else (a missing or malformed metric is drawn as absent)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) else None


def interval(x: object) -> tuple[float, float] | None:
    """An interval as compare.py writes it ({"lo", "hi"}) or as a pair; None when either end is missing."""
    if isinstance(x, Mapping):
        x = (x.get("lo"), x.get("hi"))
    if not isinstance(x, list | tuple) or len(x) != 2:
        return None
    lo, hi = number(x[0]), number(x[1])
    return (lo, hi) if lo is not None and hi is not None else None


def bar_chart(dataset: str, rows: Sequence[tuple[str, Mapping]]) -> Markup:
    """Accuracy and macro-F1 per system (bars on a 0–1 axis) with their 95% intervals as whiskers.

    `rows`: (system, metrics[system][dataset]) for the systems that have this dataset.
    """
    bw, gap, left, top, height = 16, 18, 40, 24, 180
    group = len(BAR_METRICS) * bw + gap
    width = max(left + max(1, len(rows)) * group + 10, 40 + 90 * len(BAR_METRICS))  # room for the legend
    y = lambda v: top + height * (1 - min(max(v, 0.0), 1.0))  # noqa: E731  (0..1 -> pixels)
    ticks = [{"y": f"{y(t):.1f}", "label_y": f"{y(t) + 4:.1f}", "text": f"{t:g}"} for t in (0, 0.25, 0.5, 0.75, 1.0)]
    groups = []
    for i, (system, m) in enumerate(rows):
        x0 = left + gap / 2 + i * group
        ci = m.get("ci") if isinstance(m.get("ci"), Mapping) else {}
        bars = []
        for j, (key, title, colour) in enumerate(BAR_METRICS):
            v = number(m.get(key))
            if v is None:
                continue
            x = x0 + j * bw
            lo_hi = interval(ci.get(key))
            tip = f"{system} · {title} {v:.3f}" + (f" [{lo_hi[0]:.3f}, {lo_hi[1]:.3f}]" if lo_hi else "")
            whisker = ""
            if lo_hi:
                cx = x + (bw - 2) / 2
                whisker = (f"M{cx:.1f} {y(lo_hi[0]):.1f}V{y(lo_hi[1]):.1f}"
                           f"M{cx - 4:.1f} {y(lo_hi[0]):.1f}h8M{cx - 4:.1f} {y(lo_hi[1]):.1f}h8")
            bars.append({"x": f"{x:.1f}", "y": f"{y(v):.1f}", "width": bw - 2, "height": f"{top + height - y(v):.1f}",
                         "colour": colour, "tip": tip, "whisker": whisker})
        groups.append({"system": system, "bars": bars, "label_x": f"{x0 + len(BAR_METRICS) * bw / 2:.1f}",
                       "label_y": top + height + 12})
    legend = [{"x": left + 90 * k, "y": top + height + 56, "colour": colour, "title": title}
              for k, (_key, title, colour) in enumerate(BAR_METRICS)]
    return Markup(env().get_template("bars.svg.jinja").render(
        dataset=dataset, width=width, height=top + height + 70, left=left, ticks=ticks, groups=groups, legend=legend))


def confusion_svg(title: str, rows: Sequence[str], cols: Sequence[str],
                  counts: Mapping[tuple[str, str], int]) -> Markup:
    """A gold × predicted grid; each cell shaded by its share of the gold row, with the count written in it."""
    cell, left, top = 46, 92, 50
    cells = []
    for i, row in enumerate(rows):
        total = sum(counts.get((row, c), 0) for c in cols)
        for j, col in enumerate(cols):
            n = counts.get((row, col), 0)
            share = n / total if total else 0.0
            x, yy = left + j * cell, top + i * cell
            cells.append({"row": row, "col": col, "n": n, "x": x, "y": yy, "text_x": x + cell / 2,
                          "text_y": yy + cell / 2 + 4, "ink": "#fff" if share > 0.55 else "#1d2330",
                          "fill": f"rgba(74,111,165,{0.08 + 0.85 * share:.3f})" if n else "#fafbfc"})
    return Markup(env().get_template("confusion.svg.jinja").render(
        title=title, width=left + cell * len(cols) + 8, height=top + cell * len(rows) + 22, left=left, top=top,
        cell=cell, cells=cells, col_labels=[{"x": left + j * cell + cell / 2, "text": _short(c)} for j, c in enumerate(cols)],
        row_labels=[{"y": top + i * cell + cell / 2 + 4, "text": _short(r)} for i, r in enumerate(rows)]))


def _short(label: str) -> str:
    return {"SUPPORTED": "S", "REFUTED": "R", "NEI": "NEI"}.get(label, label)
