"""The evaluation gallery: a static, self-contained HTML folder people can browse (reports/eval/).

index.html holds the metric table with 95% intervals, the paired tests against the reference system, the
plots (inline SVG) and one row per claim with every system's verdict, filterable by dataset, system, gold
label and right/wrong. claims/<dataset>/<safe id>.html shows one claim: each system's verdict beside the
gold label and each report exactly as `biocheck check --format html` renders it (agent/report/render.py), inside
a sandboxed frame that runs no scripts. No network, no CDN: CSS, JavaScript and plots are inline.

The index and every claim page start with where the numbers come from: the profile, the commit (with
"+ uncommitted changes" when the checkout was dirty) and the date; the quickstart's say that its scores are
not meaningful. A claim page lists each system's searches (query and hits), in its report or beside it.

The pages are Jinja2 templates (templates/gallery/, autoescape on): everything that came from a model, a
paper or a data file is untrusted and escaped where a template prints it, and the script only shows and
hides elements by their data-* attributes.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote as url_quote

from biocheck.agent.episode import Episode
from biocheck.agent.report.render import render_html, searches_html
from biocheck.evaluate.config import DATASETS, REFERENCE, SYSTEMS
from biocheck.evaluate.gallery_static import env
from biocheck.evaluate.gallery_svg import bar_chart, confusion_svg, interval, number
from biocheck.evaluate.headline import COLUMNS, PAIRED_NAMES, dataset_notes, p_text
from biocheck.evaluate.rationale import sentence_f1
from biocheck.evaluate.systems.base import Prediction
from biocheck.io import write_text_atomic
from biocheck.labels import LABELS
from biocheck.measures import OTHER
from biocheck.outputs import output_dir
from biocheck.tracking import git_state

# How the paired differences read (the paired-test helper computes them; this is only their caption).
PAIRED_CAPTION = (f"Each system against {REFERENCE} on the claims both answered, paired by claim id: Δ = "
                  "{REFERENCE} minus the system (for EHR a negative Δ is better for {REFERENCE}), with the 95% "
                  "interval (BCa) and p of a paired bootstrap over claims, and the minimum detectable difference (MDD: "
                  "the true Δ this n would find with 80% power); McNemar's exact test for accuracy (b: claims "
                  "only {REFERENCE} got right, c: only the system). Bold: p < 0.05.").replace("{REFERENCE}", REFERENCE)
METRIC_CAPTION = ("Each number with its 95% interval and the n it counts: claims (accuracy, rates, rationale F1; "
                  "exact binomial intervals for the rates), citing reports (EHR), cited items (micro-EHR), judged "
                  "reports (EQS); BCa bootstrap over claims elsewhere. Macro-F1 is over the label set shown (2-way on a "
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


@dataclass(frozen=True)
class Provenance:
    """Where a gallery's numbers come from, stated in every page's header."""

    profile: str  # params.yaml's `profile` ("" when unknown)
    commit: str  # the full SHA, or "unknown" outside a git checkout
    dirty: bool | None  # uncommitted changes to tracked files (None: unknown)
    # No date: the gallery is an output DVC hashes, which the same inputs make the same bytes at any time, in any
    # folder. When it was made: the MLflow `evaluate` run that holds it as an artifact (its start time).

    @classmethod
    def now(cls, profile: str | None) -> Provenance:
        git = git_state()
        dirty = {"true": True, "false": False}.get(git["git_dirty"])
        return cls(profile or "", git["git_commit"], dirty)

    @property
    def short_commit(self) -> str:
        return self.commit[:7] if re.fullmatch(r"[0-9a-f]{7,}", self.commit) else self.commit


README_SECTION = "README.md#quick-start-two-commands"  # where the quickstart's "not meaningful" is explained


def write_gallery(report_dir: Path, predictions: dict[tuple[str, str], list[Prediction]],
                  load_episode: Callable[[Prediction], Episode | None], metrics: dict, paired: dict,
                  profile: str | None = None, provenance: Provenance | None = None) -> Path:
    """Write the gallery folder atomically (it replaces `report_dir` as a whole); return its index.html.

    `predictions`: (system, dataset) -> that system's predictions; `load_episode`: a prediction's trace, or
    None when it has none; `metrics` = {system: {dataset: {...}}}; `paired` = {dataset: {system: {...}}};
    `provenance`: what the header states (default: `profile`, this checkout's commit, now).
    """
    report_dir = Path(report_dir)
    about = provenance or Provenance.now(profile)
    readme = _readme_link(report_dir)
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
            up = "../" * claim.page.count("/")
            write_text_atomic(page, _claim_page(claim, systems, episodes, about,  # secrets blanked
                                                up + readme if readme else None))
        write_text_atomic(tmp / "index.html",
                          _index(systems, datasets, claims, predictions, metrics, paired, about, readme))
    return report_dir / "index.html"


def _readme_link(report_dir: Path) -> str | None:
    """The README's Quick start section relative to the gallery's root, when this folder has a README."""
    readme = Path.cwd() / "README.md"
    if not readme.is_file():
        return None
    rel = os.path.relpath(Path.cwd(), report_dir.resolve())
    return Path(rel, README_SECTION).as_posix()


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


def _fmt(x: object, digits: int = 3) -> str:
    v = number(x)
    return "—" if v is None else f"{v:.{digits}f}"


def _render(template: str, **context: Any) -> str:
    # The helpers the macros call (numbers formatted here, never taken as text from the input).
    return env().get_template(template).render(fmt=_fmt, interval=interval, number=number, p_text=p_text,
                                               **context)


# -- index.html -------------------------------------------------------------------------------------


def _index(systems: list[str], datasets: list[str], claims: list[_Claim],
           predictions: Mapping[tuple[str, str], list[Prediction]], metrics: Mapping, paired: Mapping,
           about: Provenance, readme: str | None) -> str:
    notes = dataset_notes(metrics)
    return _render(
        "index.html.jinja", title="BioCheck evaluation", about=about, readme=readme, systems=systems,
        datasets=datasets, claims=claims, reference=REFERENCE, filters=_filters(systems, datasets),
        notes=[(d, "; ".join(notes[d])) for d in datasets if notes.get(d)], columns=COLUMNS,
        metric_rows=_metric_rows(systems, datasets, metrics), metric_caption=METRIC_CAPTION,
        funnel_rows=funnel_rows(systems, datasets, metrics),
        paired_rows=_paired_rows(datasets, paired), paired_caption=PAIRED_CAPTION,
        bars=_bars(systems, datasets, metrics), confusions=_confusions(systems, datasets, predictions),
        claim_rows=[_claim_row(systems, c) for c in claims])


def _filters(systems: list[str], datasets: list[str]) -> list[tuple[str, str, list[tuple[str, str]]]]:
    return [("f-dataset", "Dataset", [("", "all"), *((d, d) for d in datasets)]),
            ("f-system", "System", [("", "all"), *((s, s) for s in systems)]),
            ("f-gold", "Gold label", [("", "all"), *((lab, lab) for lab in LABELS)]),
            ("f-outcome", "Verdict", [("", "right or wrong"), ("right", "right (every shown system)"),
                                      ("wrong", "wrong (any shown system)")])]


def _mapping(x: object) -> Mapping:
    return x if isinstance(x, Mapping) else {}


def _metric_rows(systems: list[str], datasets: list[str], metrics: Mapping) -> list[dict[str, Any]]:
    rows = []
    for s in systems:
        for d in datasets:
            m = _mapping(metrics.get(s)).get(d)
            if isinstance(m, Mapping):
                rows.append({"system": s, "dataset": d, "m": m, "ci": _mapping(m.get("ci")),
                             "label_set": str(m.get("label_set") or "—")})
    return rows


def funnel_rows(systems: list[str], datasets: list[str], metrics: Mapping) -> list[dict[str, Any]]:
    """One row per (system, dataset) with a funnel over at least one claim (the funnel table's rows)."""
    rows = []
    for s in systems:
        for d in datasets:
            f = _mapping(_mapping(_mapping(metrics.get(s)).get(d)).get("funnel"))
            if f.get("n"):
                rows.append({"name": s, "dataset": d, "f": f})
    return rows


def _paired_rows(datasets: list[str], paired: Mapping) -> list[dict[str, Any]]:
    """One row per paired difference (compare.paired_tests: {diff, mean, lo, hi, p, mdd}), then McNemar's."""
    rows: list[dict[str, Any]] = []
    for d in _ordered(set(paired), tuple(datasets)):
        by_system = _mapping(paired.get(d))
        for s in _ordered(set(by_system), SYSTEMS):
            t = _mapping(by_system[s])
            lead = {"dataset": d, "system": s, "n": t.get("n")}
            for key, name in PAIRED_NAMES.items():
                diff = _mapping(t.get(key))
                if number(diff.get("diff")) is not None:
                    rows.append({**lead, "metric": name, "diff": diff, "mcnemar": None})
            rows.append({**lead, "metric": "", "diff": {}, "mcnemar": _mapping(t.get("mcnemar"))})
    return rows


def _bars(systems: list[str], datasets: list[str], metrics: Mapping) -> list[tuple[str, Any]]:
    out = []
    for d in datasets:
        rows = [(s, metrics[s][d]) for s in systems if isinstance(_mapping(metrics.get(s)).get(d), Mapping)]
        if rows:
            out.append((d, bar_chart(d, rows)))
    return out


def _confusions(systems: list[str], datasets: list[str],
                predictions: Mapping[tuple[str, str], list[Prediction]]) -> list[tuple[str, str, Any]]:
    """From the predictions themselves (the same counts as metrics' 3-way matrix; OTHER = no label read)."""
    out = []
    for d in datasets:
        for s in systems:
            preds = predictions.get((s, d))
            if not preds:
                continue
            counts: dict[tuple[str, str], int] = {}
            for p in preds:
                key = (p.gold.value, _pred_label(p) or OTHER)
                counts[key] = counts.get(key, 0) + 1
            out.append((s, d, confusion_svg(f"{s} · {d} (n={len(preds)})", LABELS, [*LABELS, OTHER], counts)))
    return out


def _claim_row(systems: list[str], c: _Claim) -> dict[str, Any]:
    text = c.text or c.id
    short = text if len(text) <= CLAIM_TEXT_CHARS else text[: CLAIM_TEXT_CHARS - 1] + "…"
    return {"dataset": c.dataset, "gold": c.gold, "id": c.id, "href": url_quote(c.page), "short": short,
            "verdicts": [_verdict(s, c.preds.get(s), c.gold) for s in systems]}


def _outcome(p: Prediction | None, gold: str) -> str:
    return "missing" if p is None else ("right" if _pred_label(p) == gold else "wrong")


def _verdict(system: str, p: Prediction | None, gold: str) -> dict[str, Any]:
    return {"system": system, "outcome": _outcome(p, gold), "label": _pred_label(p)}


# -- claims/<dataset>/<id>.html ---------------------------------------------------------------------


def _claim_page(claim: _Claim, systems: list[str], episodes: Mapping[str, Episode | None], about: Provenance,
                readme: str | None) -> str:
    shown = [s for s in systems if s in claim.preds]
    rows = [{"system": s, "pred": claim.preds[s], "verdict": _verdict(s, claim.preds[s], claim.gold),
             "rationale_f1": sentence_f1(claim.preds[s].rationale)} for s in shown]
    return _render("claim.html.jinja", title=f"{claim.dataset} {claim.id}: {claim.text[:80]}", claim=claim,
                   up="../" * claim.page.count("/"), about=about, readme=readme, rows=rows,
                   sections=[_section(s, claim.preds[s], episodes.get(s)) for s in shown])


def _section(system: str, p: Prediction, ep: Episode | None) -> dict[str, Any]:
    """A system's part of a claim page: its report page (which lists its searches), or, for a label-only
    system, its model output and searches."""
    out: dict[str, Any] = {"system": system, "traced": ep is not None, "report": None, "final_text": "",
                           "searches": ""}
    if ep is None:
        return out
    if not p.writes_report:  # a label-only system: its answer is the verdict; show what the model wrote
        return {**out, "final_text": ep.final_text, "searches": searches_html(ep.queries, ep.ledger)}
    meta = {k: v for k, v in (("system", system), ("model", ep.llm), ("prompt hash", ep.prompt_hash),
                              ("searches", ep.searches), ("stop", ep.stop_reason)) if v not in ("", None)}
    return {**out, "report": render_html(ep.report, ep.ledger, ep.claim, problems=ep.parse_problems, meta=meta,
                                         queries=ep.queries)}
