"""The evaluation gallery: a static, self-contained HTML folder people can browse (reports/eval/).

index.html holds the metric table with 95% intervals, the paired tests against the reference system, the
plots (inline SVG) and one row per claim with every system's verdict, filterable by dataset, system, gold
label and right/wrong. claims/<dataset>/<safe id>.html shows one claim: each system's verdict beside the
gold label and each report exactly as `biocheck check --format html` renders it (report/render.py), inside
a sandboxed frame that runs no scripts. No network, no CDN: CSS, JavaScript and plots are inline.

Everything that came from a model, a paper or a data file is untrusted: it goes through html.escape, and
the script only shows and hides elements by their data-* attributes.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote as url_quote

from biocheck.agent.episode import Episode
from biocheck.evaluate.config import DATASETS, REFERENCE, SYSTEMS
from biocheck.evaluate.gallery_static import CSS, FILTER_JS, RESIZE_JS
from biocheck.evaluate.gallery_svg import bar_chart, confusion_svg, interval, number
from biocheck.evaluate.headline import COLUMNS, PAIRED_NAMES, dataset_notes, p_text
from biocheck.evaluate.rationale import sentence_f1
from biocheck.evaluate.systems.base import Prediction
from biocheck.io import write_text_atomic
from biocheck.labels import LABELS
from biocheck.metrics import OTHER
from biocheck.outputs import output_dir
from biocheck.report.render import render_html

e = html.escape
# How the paired differences read (the paired-test helper computes them; this is only their caption).
PAIRED_CAPTION = (f"Each system against {REFERENCE} on the claims both answered, paired by claim id: Δ = "
                  "{REFERENCE} minus the system (for EHR a negative Δ is better for {REFERENCE}), with the 95% "
                  "interval and p of a paired bootstrap over claims, and the minimum detectable difference (MDD: "
                  "the true Δ this n would find with 80% power); McNemar's exact test for accuracy (b: claims "
                  "only {REFERENCE} got right, c: only the system). Bold: p < 0.05.").replace("{REFERENCE}", REFERENCE)
METRIC_CAPTION = ("Each number with its 95% interval and the n it counts: claims (accuracy, rates, rationale F1; "
                  "exact binomial intervals for the rates), citing reports (EHR), cited items (micro-EHR), judged "
                  "reports (EQS); bootstrap over claims elsewhere. Macro-F1 is over the label set shown (2-way on a "
                  "set without NEI gold). EHR counts only reports that cite: read it beside the citing rate. "
                  "Grounded rate: claims whose report parses, cites, and invents nothing. Rationale F1: SciFact's "
                  "sentence-level selection + label F1 against the gold rationales (no judge).")
CLAIM_TEXT_CHARS = 160  # the index shows the start of each claim; its page shows all of it


@dataclass
class _Claim:
    """One claim of one dataset, with every system's prediction and the claim text from the first trace."""

    dataset: str
    id: str
    gold: str
    page: str  # path relative to the gallery root
    text: str = ""
    preds: dict[str, Prediction] = field(default_factory=dict)


# Who may replace the gallery folder (biocheck.outputs), how the user names it, an unmarked older gallery.
OUTPUT = ("biocheck evaluate", "evaluate.report_dir", ("index.html",))


def write_gallery(report_dir: Path, predictions: dict[tuple[str, str], list[Prediction]],
                  load_episode: Callable[[Prediction], Episode | None], metrics: dict, paired: dict) -> Path:
    """Write the gallery folder atomically (it replaces `report_dir` as a whole); return its index.html.

    `predictions`: (system, dataset) -> that system's predictions; `load_episode`: a prediction's trace, or
    None when it has none; `metrics` = {system: {dataset: {...}}}; `paired` = {dataset: {system: {...}}}.
    """
    report_dir = Path(report_dir)
    systems = _ordered({s for s, _ in predictions} | set(metrics), SYSTEMS)
    datasets = _ordered({d for _, d in predictions} | {d for m in metrics.values() if isinstance(m, Mapping)
                                                       for d in m}, tuple(DATASETS))
    claims = _claims(predictions, datasets)
    with output_dir(report_dir, *OUTPUT) as tmp:
        for claim in claims:
            episodes = {s: load_episode(p) for s, p in claim.preds.items()}
            claim.text = next((ep.claim for ep in episodes.values() if ep is not None and ep.claim), "")
            page = tmp / claim.page
            page.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(page, _claim_page(claim, systems, episodes))  # secrets blanked
        write_text_atomic(tmp / "index.html", _index(systems, datasets, claims, predictions, metrics, paired))
    return report_dir / "index.html"


def _ordered(names: set[str], known: tuple[str, ...]) -> list[str]:
    """The project's own order for known names (the reference system first), then the rest by name."""
    return sorted(names, key=lambda n: (n not in known, known.index(n) if n in known else 0, n))


def safe_name(text: str, taken: set[str]) -> str:
    """A file name for `text` that is valid everywhere and unique in `taken` (compared case-insensitively,
    for file systems that fold case); ids that are already plain stay as they are."""
    name = text if re.fullmatch(r"[A-Za-z0-9_-]{1,80}", text) else ""
    if not name or name.lower() in taken:
        slug = re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_")[:60] or "claim"
        name = f"{slug}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"
    taken.add(name.lower())
    return name


def _claims(predictions: Mapping[tuple[str, str], list[Prediction]], datasets: list[str]) -> list[_Claim]:
    """Claims per dataset in the order the predictions list them; the first gold label seen counts."""
    by_key: dict[tuple[str, str], _Claim] = {}
    dirs: set[str] = set()
    dataset_dir = {d: safe_name(d, dirs) for d in datasets}
    taken: dict[str, set[str]] = {d: set() for d in datasets}
    for (system, dataset), preds in sorted(predictions.items(), key=lambda kv: _system_rank(kv[0][0])):
        for p in preds:
            claim = by_key.get((dataset, p.id))
            if claim is None:
                name = safe_name(p.id, taken[dataset])
                claim = by_key[(dataset, p.id)] = _Claim(dataset, p.id, p.gold.value,
                                                        f"claims/{dataset_dir[dataset]}/{name}.html")
            claim.preds[system] = p
    return sorted(by_key.values(), key=lambda c: datasets.index(c.dataset))  # stable: keeps claim order


def _system_rank(system: str) -> tuple[bool, int, str]:
    return (system not in SYSTEMS, SYSTEMS.index(system) if system in SYSTEMS else 0, system)


def _pred_label(p: Prediction | None) -> str | None:
    return None if p is None or p.pred is None else p.pred.value


def _badge(label: str | None) -> str:
    return f'<span class="badge {e(label)}">{e(label)}</span>' if label else '<span class="badge none">none</span>'


def _fmt(x: object, digits: int = 3) -> str:
    v = number(x)
    return "—" if v is None else f"{v:.{digits}f}"


def _fmt_p(x: object) -> str:
    p = p_text(x)
    if p is None:
        return "—"
    text = p[0].replace("<", "&lt;")
    return f'<span class="sig">{text}</span>' if p[1] else text


def _with_ci(value: object, ci: object, n: object = None) -> str:
    lo_hi = interval(ci)
    tail = f' <span class="ci">[{lo_hi[0]:.3f}, {lo_hi[1]:.3f}]</span>' if lo_hi else ""
    count = number(n)
    size = f' <span class="ci">n={int(count)}</span>' if count is not None and number(value) is not None else ""
    return _fmt(value) + tail + size


def _page(title: str, body: list[str], script: str) -> str:
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{e(title)}</title><style>{CSS}</style></head>\n<body><main>\n"
            + "\n".join(body) + f"\n</main><script>{script}</script></body></html>\n")


# -- index.html -------------------------------------------------------------------------------------


def _index(systems: list[str], datasets: list[str], claims: list[_Claim],
           predictions: Mapping[tuple[str, str], list[Prediction]], metrics: Mapping, paired: Mapping) -> str:
    body = ["<header><h1>BioCheck evaluation</h1>",
            f'<p class="muted">{len(systems)} systems · {len(datasets)} datasets · {len(claims)} claims. '
            f"Reference system for the paired tests: {e(REFERENCE)}.</p></header>",
            _filters(systems, datasets),
            "<h2>What the numbers can mean</h2>", _notes(datasets, metrics),
            "<h2>Metrics</h2>", _metric_table(systems, datasets, metrics),
            f'<p class="note">{e(METRIC_CAPTION)}</p>',
            "<h2>Paired tests</h2>", _paired_table(datasets, paired), f'<p class="note">{e(PAIRED_CAPTION)}</p>',
            "<h2>Accuracy and macro-F1</h2>", _bars(systems, datasets, metrics),
            "<h2>Confusion matrices</h2>", _confusions(systems, datasets, predictions),
            "<h2>Claims</h2>", '<p id="claim-count" class="muted"></p>', _claim_table(systems, claims)]
    return _page("BioCheck evaluation", body, FILTER_JS)


def _filters(systems: list[str], datasets: list[str]) -> str:
    def select(ident: str, label: str, options: list[tuple[str, str]]) -> str:
        opts = "".join(f'<option value="{e(v)}">{e(t)}</option>' for v, t in options)
        return f'<label>{e(label)} <select id="{ident}">{opts}</select></label>'

    return ('<nav class="filters">'
            + select("f-dataset", "Dataset", [("", "all"), *((d, d) for d in datasets)])
            + select("f-system", "System", [("", "all"), *((s, s) for s in systems)])
            + select("f-gold", "Gold label", [("", "all"), *((lab, lab) for lab in LABELS)])
            + select("f-outcome", "Verdict", [("", "right or wrong"), ("right", "right (every shown system)"),
                                              ("wrong", "wrong (any shown system)")])
            + "</nav>")


def _notes(datasets: list[str], metrics: Mapping) -> str:
    notes = dataset_notes(metrics)
    items = [f"<li><b>{e(d)}</b>: {e('; '.join(notes[d]))}</li>" for d in datasets if notes.get(d)]
    return f'<ul id="notes">{"".join(items)}</ul>' if items else '<p class="muted">No notes.</p>'


def _metric_table(systems: list[str], datasets: list[str], metrics: Mapping) -> str:
    head = "".join(f"<th>{e(label)}</th>" for _, label, _ in COLUMNS)
    rows = [f'<table id="metrics"><thead><tr><th>system</th><th>dataset</th><th>labels</th>{head}</tr></thead><tbody>']
    for s in systems:
        by_dataset = metrics.get(s) if isinstance(metrics.get(s), Mapping) else {}
        for d in datasets:
            m = by_dataset.get(d)
            if not isinstance(m, Mapping):
                continue
            ci = m.get("ci") if isinstance(m.get("ci"), Mapping) else {}
            cells = "".join(f'<td class="num">{_with_ci(m.get(k), ci.get(k), m.get(n))}</td>' for k, _, n in COLUMNS)
            rows.append(f'<tr data-filter="" data-system="{e(s)}" data-dataset="{e(d)}"><td>{e(s)}</td>'
                        f'<td>{e(d)}</td><td>{e(str(m.get("label_set") or "—"))}</td>{cells}</tr>')
    rows.append("</tbody></table>")
    return "".join(rows)


def _paired_table(datasets: list[str], paired: Mapping) -> str:
    if not any(isinstance(paired.get(d), Mapping) and paired[d] for d in paired):
        return '<p class="muted">No paired comparisons.</p>'
    rows = ['<table id="paired"><thead><tr><th>dataset</th><th>system</th><th>n</th><th>metric</th>'
            "<th>Δ [95% CI]</th><th>p</th><th>MDD</th></tr></thead><tbody>"]
    for d in _ordered(set(paired), tuple(datasets)):
        by_system = paired.get(d) if isinstance(paired.get(d), Mapping) else {}
        for s in _ordered(set(by_system), SYSTEMS):
            t = by_system[s] if isinstance(by_system[s], Mapping) else {}
            attrs = f'data-filter="" data-system="{e(s)}" data-dataset="{e(d)}"'
            lead = f"<td>{e(d)}</td><td>{e(s)}</td><td class=\"num\">{_fmt(t.get('n'), 0)}</td>"
            for key, name in PAIRED_NAMES.items():  # compare.paired_tests: {diff, mean, lo, hi, p, mdd}
                diff = t.get(key) if isinstance(t.get(key), Mapping) else {}
                if number(diff.get("diff")) is None:
                    continue
                rows.append(f"<tr {attrs}>{lead}<td>{e(name)}</td><td class=\"num\">{_with_ci(diff.get('diff'), diff)}"
                            f"</td><td class=\"num\">{_fmt_p(diff.get('p'))}</td>"
                            f"<td class=\"num\">{_fmt(diff.get('mdd'))}</td></tr>")
            mc = t.get("mcnemar") if isinstance(t.get("mcnemar"), Mapping) else {}
            rows.append(f"<tr {attrs}>{lead}<td>McNemar (accuracy) b / c</td><td class=\"num\">"
                        f"{_fmt(mc.get('b'), 0)} / {_fmt(mc.get('c'), 0)}</td><td class=\"num\">{_fmt_p(mc.get('p'))}"
                        "</td><td></td></tr>")
    rows.append("</tbody></table>")
    return "".join(rows)


def _bars(systems: list[str], datasets: list[str], metrics: Mapping) -> str:
    out = ['<div class="plots">']
    for d in datasets:
        rows = [(s, metrics[s][d]) for s in systems
                if isinstance(metrics.get(s), Mapping) and isinstance(metrics[s].get(d), Mapping)]
        if rows:
            out.append(f'<figure class="plot" data-filter="" data-dataset="{e(d)}">{bar_chart(d, rows)}</figure>')
    out.append("</div>")
    return "".join(out) if len(out) > 2 else '<p class="muted">No metrics.</p>'


def _confusions(systems: list[str], datasets: list[str],
                predictions: Mapping[tuple[str, str], list[Prediction]]) -> str:
    """From the predictions themselves (the same counts as metrics' 3-way matrix; OTHER = no label read)."""
    out = ['<div class="plots">']
    for d in datasets:
        for s in systems:
            preds = predictions.get((s, d))
            if not preds:
                continue
            counts: dict[tuple[str, str], int] = {}
            for p in preds:
                key = (p.gold.value, _pred_label(p) or OTHER)
                counts[key] = counts.get(key, 0) + 1
            svg = confusion_svg(f"{s} · {d} (n={len(preds)})", LABELS, [*LABELS, OTHER], counts)
            out.append(f'<figure class="plot" data-filter="" data-system="{e(s)}" data-dataset="{e(d)}">'
                       f"{svg}</figure>")
    out.append("</div>")
    return "".join(out)


def _claim_table(systems: list[str], claims: list[_Claim]) -> str:
    head = "".join(f'<th data-filter="" data-system="{e(s)}">{e(s)}</th>' for s in systems)
    rows = [f'<table id="claims"><thead><tr><th>claim</th><th>dataset</th><th>gold</th>{head}</tr></thead><tbody>']
    for c in claims:
        text = c.text or c.id
        short = text if len(text) <= CLAIM_TEXT_CHARS else text[: CLAIM_TEXT_CHARS - 1] + "…"
        cells = [f'<td><a href="{e(url_quote(c.page))}">{e(short)}</a> <span class="muted">{e(c.id)}</span></td>',
                 f"<td>{e(c.dataset)}</td><td>{_badge(c.gold)}</td>"]
        cells += [_verdict_cell(s, c.preds.get(s), c.gold) for s in systems]
        rows.append(f'<tr class="claim-row" data-dataset="{e(c.dataset)}" data-gold="{e(c.gold)}">'
                    + "".join(cells) + "</tr>")
    rows.append("</tbody></table>")
    return "".join(rows)


def _outcome(p: Prediction | None, gold: str) -> str:
    return "missing" if p is None else ("right" if _pred_label(p) == gold else "wrong")


def _verdict_cell(system: str, p: Prediction | None, gold: str) -> str:
    outcome = _outcome(p, gold)
    attrs = f'data-filter="" data-system="{e(system)}" data-outcome="{outcome}"'
    if p is None:
        return f'<td class="verdict missing" {attrs}>—</td>'
    mark = "✓" if outcome == "right" else "✗"
    return f'<td class="verdict {outcome}" {attrs}>{_badge(_pred_label(p))}<span class="mark">{mark}</span></td>'


# -- claims/<dataset>/<id>.html ---------------------------------------------------------------------


def _claim_page(claim: _Claim, systems: list[str], episodes: Mapping[str, Episode | None]) -> str:
    shown = [s for s in systems if s in claim.preds]
    up = "../" * claim.page.count("/")
    body = [f'<p><a href="{up}index.html">← all claims</a></p>',
            f"<header><h1>{e(claim.dataset)} · claim {e(claim.id)}</h1>",
            f'<p class="claim">{e(claim.text) if claim.text else "<span class=muted>(no trace has the claim text)</span>"}</p>',
            f"<p>Gold label: {_badge(claim.gold)}</p></header>",
            '<h2>Verdicts</h2><table id="verdicts"><thead><tr><th>system</th><th>verdict</th><th>outcome</th><th>EQS</th>'
            "<th>EHR</th><th>cited</th><th>rationale F1</th><th>searches</th><th>tokens</th><th>error</th></tr>"
            "</thead><tbody>"]
    for s in shown:
        p = claim.preds[s]
        body.append(f'<tr data-system="{e(s)}"><td><a href="#sys-{e(s)}">{e(s)}</a></td>'
                    f'{_verdict_cell(s, p, claim.gold)}<td>{_outcome(p, claim.gold)}</td>'
                    f'<td class="num">{_fmt(p.eqs)}</td><td class="num">{_fmt(p.ehr)}</td>'
                    f'<td class="num">{_fmt(p.cited, 0)}</td><td class="num">{_fmt(sentence_f1(p.rationale))}</td>'
                    f'<td class="num">{p.searches}</td><td class="num">{p.tokens}</td>'
                    f"<td>{e(p.error or '')}</td></tr>")
    body.append("</tbody></table>")
    for s in shown:
        body.append(_system_section(s, claim.preds[s], episodes.get(s)))
    return _page(f"{claim.dataset} {claim.id}: {claim.text[:80]}", body, RESIZE_JS)



def _system_section(system: str, p: Prediction, ep: Episode | None) -> str:
    head = f'<section id="sys-{e(system)}"><h2>{e(system)}</h2>'
    if ep is None:
        return head + '<p class="muted">No trace for this prediction.</p></section>'
    if not p.writes_report:  # a label-only system: its answer is the verdict; show what the model wrote
        text = e(ep.final_text) if ep.final_text else '<span class="muted">(empty)</span>'
        return head + f'<details><summary>Model output</summary><pre class="final">{text}</pre></details></section>'
    meta = {k: v for k, v in (("system", system), ("model", ep.llm), ("prompt hash", ep.prompt_hash),
                              ("searches", ep.searches), ("stop", ep.stop_reason)) if v not in ("", None)}
    page = render_html(ep.report, ep.ledger, ep.claim, problems=ep.parse_problems, meta=meta)
    # srcdoc keeps the report page exactly as `biocheck check --format html` writes it (its own styles);
    # the sandbox forbids scripts, allow-same-origin only lets this page read the frame's height.
    return head + (f'<iframe class="report" title="{e(system)} report" sandbox="allow-same-origin" '
                   f'srcdoc="{e(page, quote=True)}"></iframe></section>')
