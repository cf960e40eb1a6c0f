"""The gallery's plots as inline SVG strings: metric bars with interval whiskers, and confusion matrices.

Drawn by hand so that the gallery needs no plotting library and no network. Every text goes through
html.escape; numbers are formatted here, never taken as text from the input.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

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


def bar_chart(dataset: str, rows: Sequence[tuple[str, Mapping]]) -> str:
    """Accuracy and macro-F1 per system (bars on a 0–1 axis) with their 95% intervals as whiskers.

    `rows`: (system, metrics[system][dataset]) for the systems that have this dataset.
    """
    e = html.escape
    bw, gap, left, top, height = 16, 18, 40, 24, 180
    group = len(BAR_METRICS) * bw + gap
    width = max(left + max(1, len(rows)) * group + 10, 40 + 90 * len(BAR_METRICS))  # room for the legend
    y = lambda v: top + height * (1 - min(max(v, 0.0), 1.0))  # noqa: E731  (0..1 -> pixels)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + height + 70}" '
           f'role="img" aria-label="{e(dataset)}: accuracy and macro-F1 per system">',
           f'<text x="{left}" y="14" font-size="13" font-weight="600">{e(dataset)}</text>']
    for t in (0, 0.25, 0.5, 0.75, 1.0):
        out.append(f'<line x1="{left}" x2="{width - 6}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#e3e6eb"/>'
                   f'<text x="{left - 4}" y="{y(t) + 4:.1f}" font-size="10" text-anchor="end">{t:g}</text>')
    for i, (system, m) in enumerate(rows):
        x0 = left + gap / 2 + i * group
        parts = [f'<g data-filter="" data-system="{e(system)}" data-dataset="{e(dataset)}">']
        ci = m.get("ci") if isinstance(m.get("ci"), Mapping) else {}
        for j, (key, title, colour) in enumerate(BAR_METRICS):
            v = number(m.get(key))
            if v is None:
                continue
            x = x0 + j * bw
            lo_hi = interval(ci.get(key))
            tip = f"{system} · {title} {v:.3f}" + (f" [{lo_hi[0]:.3f}, {lo_hi[1]:.3f}]" if lo_hi else "")
            parts.append(f'<rect class="bar" x="{x:.1f}" y="{y(v):.1f}" width="{bw - 2}" '
                         f'height="{top + height - y(v):.1f}" fill="{colour}"><title>{e(tip)}</title></rect>')
            if lo_hi:
                cx = x + (bw - 2) / 2
                parts.append(f'<path class="whisker" d="M{cx:.1f} {y(lo_hi[0]):.1f}V{y(lo_hi[1]):.1f}'
                             f'M{cx - 4:.1f} {y(lo_hi[0]):.1f}h8M{cx - 4:.1f} {y(lo_hi[1]):.1f}h8" '
                             'stroke="#1d2330" fill="none"/>')
        lx = x0 + len(BAR_METRICS) * bw / 2
        parts.append(f'<text x="{lx:.1f}" y="{top + height + 12}" font-size="11" text-anchor="end" '
                     f'transform="rotate(-35 {lx:.1f} {top + height + 12})">{e(system)}</text></g>')
        out += parts
    lx = left
    for _key, title, colour in BAR_METRICS:
        out.append(f'<rect x="{lx}" y="{top + height + 56}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{lx + 14}" y="{top + height + 65}" font-size="11">{e(title)}</text>')
        lx += 90
    out.append("</svg>")
    return "".join(out)


def confusion_svg(title: str, rows: Sequence[str], cols: Sequence[str], counts: Mapping[tuple[str, str], int]) -> str:
    """A gold × predicted grid; each cell shaded by its share of the gold row, with the count written in it."""
    e = html.escape
    cell, left, top = 46, 92, 50
    width, height = left + cell * len(cols) + 8, top + cell * len(rows) + 22
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="{e(title)}">', f'<text x="4" y="14" font-size="12" font-weight="600">{e(title)}</text>',
           f'<text x="{left}" y="{top - 22}" font-size="10" fill="#5b6472">predicted →</text>']
    for j, col in enumerate(cols):
        out.append(f'<text x="{left + j * cell + cell / 2}" y="{top - 6}" font-size="10" '
                   f'text-anchor="middle">{e(_short(col))}</text>')
    for i, row in enumerate(rows):
        total = sum(counts.get((row, c), 0) for c in cols)
        out.append(f'<text x="{left - 6}" y="{top + i * cell + cell / 2 + 4}" font-size="10" '
                   f'text-anchor="end">gold {e(_short(row))}</text>')
        for j, col in enumerate(cols):
            n = counts.get((row, col), 0)
            share = n / total if total else 0.0
            fill = f"rgba(74,111,165,{0.08 + 0.85 * share:.3f})" if n else "#fafbfc"
            ink = "#fff" if share > 0.55 else "#1d2330"
            x, yy = left + j * cell, top + i * cell
            out.append(f'<rect class="cell" x="{x}" y="{yy}" width="{cell}" height="{cell}" fill="{fill}" '
                       f'stroke="#dde1e7"><title>{e(f"gold {row}, predicted {col}: {n}")}</title></rect>'
                       f'<text x="{x + cell / 2}" y="{yy + cell / 2 + 4}" font-size="12" text-anchor="middle" '
                       f'fill="{ink}">{n}</text>')
    out.append("</svg>")
    return "".join(out)


def _short(label: str) -> str:
    return {"SUPPORTED": "S", "REFUTED": "R", "NEI": "NEI"}.get(label, label)
