"""The evaluation gallery: static files (escaping, one page per claim, links that resolve) and, in a real
headless Chromium driven by Playwright, the page itself (no console errors, filters, claim pages, no XSS).

The browser tests skip, saying why, when Playwright or a Chromium executable is missing: install them with
`pip install playwright` and `apt-get install chromium` (or set BIOCHECK_CHROMIUM to a Chromium binary).
"""

from __future__ import annotations

import html
import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest

from biocheck.agent.budget import QueryRecord
from biocheck.agent.episode import Episode
from biocheck.agent.report.schema import EvidenceItem, Report, Summary
from biocheck.evaluate.gallery import Provenance, write_gallery
from biocheck.evaluate.systems.base import Prediction
from biocheck.evidence.types import Article
from biocheck.labels import Label
from tests.helpers.browser import chromium

XSS = "<script>alert(1)</script>"
S, R, N = Label.SUPPORTED, Label.REFUTED, Label.NEI
ABSTRACT = "Vitamin D lowered the rate of hip fractures in older adults."

# (dataset, claim id, gold, claim text); ids with odd characters need safe file names.
CLAIMS = [
    ("scifact", "12", S, "Vitamin D prevents hip fractures."),
    ("scifact", "a/b c?<x>", R, f"Claim with markup {XSS} in it."),
    ("scifact", "A", N, "Upper-case id."),
    ("scifact", "a", S, "Lower-case id (a case-folding file system would clash with 'A')."),
    ("healthfc", "hf-1", R, "Green tea cures colds."),
    ("healthfc", "hf-2", N, "Coffee extends life."),
]
# (system, dataset) -> predicted labels in CLAIMS order for that dataset (None: no label read).
PREDS = {
    ("eg_grpo", "scifact"): [S, R, S, None],
    ("eg_grpo", "healthfc"): [R, R],
    ("no_retrieval", "scifact"): [R, R, N, S],
    ("no_retrieval", "healthfc"): [N, N],
}
SYSTEMS = ["eg_grpo", "no_retrieval"]


def _predictions() -> dict[tuple[str, str], list[Prediction]]:
    out = {}
    for (system, dataset), labels in PREDS.items():
        claims = [c for c in CLAIMS if c[0] == dataset]
        out[(system, dataset)] = [
            Prediction(id=cid, dataset=dataset, system=system, fingerprint="f" * 16, gold=gold, pred=label,
                       trace=f"traces/{system}/{dataset}/{i}.json", writes_report=system == "eg_grpo",
                       eqs=0.5 if system == "eg_grpo" else None, searches=2 if system == "eg_grpo" else 0)
            for i, ((_d, cid, gold, _t), label) in enumerate(zip(claims, labels, strict=True))]
    return out


def _episode(p: Prediction) -> Episode | None:
    if p.id == "hf-2" and p.system == "no_retrieval":
        return None  # a prediction without a trace
    text = next(t for d, cid, _g, t in CLAIMS if d == p.dataset and cid == p.id)
    report = Report(
        supporting=[EvidenceItem(pmid="111", quote="lowered the rate of hip fractures", context=f"ctx {XSS}")],
        refuting=[EvidenceItem(pmid="999", quote=f"Invented {XSS}.", context="made up")],
        summary=Summary(justification=f"because {XSS}"), conclusion=p.pred)
    ledger = {"111": Article(pmid="111", title="Vitamin D trial", abstract=ABSTRACT, source="entrez")}
    queries = [QueryRecord(query=f"vitamin D AND fracture* {XSS}", pmids=["111"], n_results=1),
               QueryRecord(query="hip AND fracture", pmids=[], n_results=0)][: p.searches]
    return Episode(claim=text, claim_id=p.id, dataset=p.dataset, messages=[], ledger=ledger, report=report,
                   final_text=f"Final answer {XSS}", llm="scripted", searches=p.searches, queries=queries)


def _metrics() -> dict:
    """The shapes compare.py really writes (intervals as {"lo", "hi"})."""
    from biocheck.evaluate.compare import system_metrics

    out: dict = {}
    for (system, dataset), preds in _predictions().items():
        out.setdefault(system, {})[dataset] = system_metrics(preds, 50, 0)
    out["no_retrieval"]["healthfc"].pop("ci")  # a missing key is tolerated
    return out


def _stat(diff: float, lo: float, hi: float, p: float) -> dict:
    return {"reference": 0.5, "other": 0.5 - diff, "diff": diff, "mean": diff, "lo": lo, "hi": hi, "p": p}


# compare.paired_tests' shape, per dataset; a small p must show in bold
PAIRED = {d: {"no_retrieval": {"reference": "eg_grpo", "n": 4, "only_reference": 0, "only_other": 0,
                                "accuracy": _stat(0.25, -0.5, 0.75, 0.0004), "macro_f1": _stat(0.1, -0.2, 0.4, 0.6),
                                "mcnemar": {"b": 3, "c": 1, "p": 0.625}}} for d in ("scifact", "healthfc")}


@pytest.fixture()
def gallery(tmp_path) -> Path:
    return write_gallery(tmp_path / "reports" / "eval", _predictions(), _episode, _metrics(), PAIRED)


def _claim_pages(index: Path) -> list[Path]:
    return sorted((index.parent / "claims").rglob("*.html"))


def _hrefs(page: Path) -> list[str]:
    return [html.unescape(h) for h in re.findall(r'href="([^"]*)"', page.read_text())]


# -- static checks -----------------------------------------------------------------------------------


def test_every_claim_has_a_page_and_every_link_resolves(gallery):
    assert gallery.name == "index.html" and gallery.is_file()
    pages = _claim_pages(gallery)
    assert len(pages) == len(CLAIMS)
    assert len({p.name.lower() for p in pages if p.parent.name == "scifact"}) == 4  # "A" and "a" do not clash
    linked = set()
    for page in [gallery, *pages]:
        for href in _hrefs(page):
            if href.startswith(("#", "https://")):
                continue
            target = (page.parent / unquote(href)).resolve()
            assert target.is_file(), f"{page.name}: broken link {href}"
            linked.add(target)
    assert {p.resolve() for p in pages} <= linked  # the index reaches every claim page
    assert not [p for p in gallery.parent.parent.iterdir() if p.name.startswith(".tmp-")]  # atomic: no leftovers


def test_model_and_claim_text_is_escaped(gallery):
    for page in [gallery, *_claim_pages(gallery)]:
        text = page.read_text()
        # the only script element is the gallery's own (one, at the end)
        assert text.count("<script") == 1 and "alert(1)</script>" not in text, page
        assert "<x>" not in text
    index = gallery.read_text()
    assert html.escape(f"Claim with markup {XSS} in it.") in index
    assert 'srcdoc="' not in index and "http" not in index.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_claim_page_shows_each_verdict_and_the_rendered_report(gallery):
    page = next(p for p in _claim_pages(gallery) if p.name == "12.html").read_text()
    rows = dict(re.findall(r'<tr data-system="([^"]+)">.*?<td>(right|wrong)</td>', page))
    assert rows == {"eg_grpo": "right", "no_retrieval": "wrong"}  # gold S; eg_grpo said S, no_retrieval R
    frame = html.unescape(re.search(r'srcdoc="([^"]*)"', page).group(1))  # eg_grpo writes a report
    assert "<mark>lowered the rate of hip fractures</mark>" in frame
    assert "not in the retrieved papers" in frame and html.escape(XSS) in frame
    assert page.count("<iframe") == 1  # the label-only system has no report frame, only its text
    missing = next(p for p in _claim_pages(gallery) if p.name == "hf-2.html").read_text()
    assert "No trace for this prediction." in missing and "Green tea" not in missing


def test_tables_and_plots_cover_every_system_and_dataset(gallery):
    index = gallery.read_text()
    metric_rows = re.findall(r'<tr data-filter="" data-system="([^"]+)" data-dataset="([^"]+)"><td>', index)
    assert set(metric_rows) >= set(PREDS)
    acc = _metrics()["eg_grpo"]["scifact"]["accuracy"]
    assert f"{acc:.3f}" in index
    assert index.count('<figure class="plot"') == len({d for _, d in PREDS}) + len(PREDS)
    # confusion matrix counts, read back from the SVG, equal the predictions' (gold, pred) counts
    for (system, dataset), preds in _predictions().items():
        fig = re.search(rf'<figure class="plot" data-filter="" data-system="{system}" data-dataset="{dataset}">'
                        r"(.*?)</figure>", index, flags=re.S).group(1)
        cells = Counter({(g, p): int(n) for g, p, n in
                         re.findall(r"<title>gold (\w+), predicted (\w+): (\d+)</title>", fig)})
        expected = Counter((p.gold.value, p.pred.value if p.pred else "OTHER") for p in preds)
        assert +cells == expected
    assert '<span class="sig">&lt;0.001</span>' in index  # the paired test's small p, bold
    assert '0.250 <span class="ci">[-0.500, 0.750]</span>' in index  # Δ accuracy with its paired interval
    m = _metrics()["eg_grpo"]["scifact"]
    assert f'{m["accuracy"]:.3f} <span class="ci">[{m["ci"]["accuracy"]["lo"]:.3f}, ' \
           f'{m["ci"]["accuracy"]["hi"]:.3f}]</span>' in index  # compare.py's {"lo", "hi"} intervals


def test_every_interval_has_its_n_and_every_dataset_says_what_it_can_mean(tmp_path):
    metrics = _metrics()
    about = {"scifact": {"role": "selection claims", "evidence_corpus": "local index of the SciFact corpus",
                         "caveat": "selection claims: these claims chose the checkpoint", "eqs_judge": "j1",
                         "reward_judge": "j1", "eqs_by_training_judge": True},
             "healthfc": {"role": "held-out test", "evidence_corpus": "local index of the SciFact corpus",
                          "caveat": "evidence corpus does not contain this dataset's sources", "eqs_judge": "j2",
                          "reward_judge": "j1", "eqs_by_training_judge": False}}
    for by_dataset in metrics.values():
        for d, m in by_dataset.items():
            m["about"] = about[d]
    index = write_gallery(tmp_path / "g", _predictions(), _episode, metrics, PAIRED).read_text()
    m = metrics["eg_grpo"]["scifact"]
    assert f'{m["accuracy"]:.3f} <span class="ci">[{m["ci"]["accuracy"]["lo"]:.3f}, ' \
           f'{m["ci"]["accuracy"]["hi"]:.3f}]</span> <span class="ci">n=4</span>' in index
    notes = re.search(r'<ul id="notes">(.*?)</ul>', index).group(1)
    assert "evidence corpus does not contain this dataset's sources" in html.unescape(notes)
    assert "dataset's" not in notes  # escaped
    assert "selection claims" in notes and "EQS scored by the training judge (j1)" in notes
    assert "EQS scored by j2, not the training judge j1" in notes


def test_a_failing_writer_leaves_the_old_gallery(tmp_path, gallery):
    before = {p: p.read_text() for p in [gallery, *_claim_pages(gallery)]}
    calls = []

    def breaks_late(p):  # new text for the first claims, then a trace that cannot be read
        calls.append(p)
        if len(calls) > 4:
            raise RuntimeError("trace unreadable")
        ep = _episode(p)
        return ep.model_copy(update={"claim": "a new claim text"}) if ep else None

    with pytest.raises(RuntimeError):
        write_gallery(gallery.parent, _predictions(), breaks_late, _metrics(), PAIRED)
    assert {p: p.read_text() for p in [gallery, *_claim_pages(gallery)]} == before
    assert not [p for p in gallery.parent.parent.iterdir() if p.name.startswith(".tmp-")]


# -- the header and the searches ---------------------------------------------------------------------

ABOUT = Provenance(profile="smol", commit="0123456789abcdef0123", dirty=True)


def test_the_header_states_profile_and_commit_and_no_date(tmp_path):
    index = write_gallery(tmp_path / "g", _predictions(), _episode, _metrics(), PAIRED, provenance=ABOUT)
    header = re.search(r'<p id="provenance"[^>]*>(.*?)</p>', index.read_text(), flags=re.S).group(1)
    assert "Profile smol" in header and "commit 0123456 + uncommitted changes" in header
    # no date: the gallery is a DVC output, the same bytes whenever the same inputs made it
    assert "0123456789" not in header and "made" not in header and not re.search(r"\d{4}-\d\d-\d\d", header)
    assert "not meaningful" not in index.read_text()
    clean = Provenance(profile="smol", commit="0123456789abcdef0123", dirty=False)
    again = write_gallery(tmp_path / "g", _predictions(), _episode, _metrics(), PAIRED, provenance=clean)
    assert "commit 0123456" in again.read_text() and "uncommitted" not in again.read_text()


def test_the_quickstart_header_says_its_scores_are_not_meaningful_and_links_the_readme(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("# x\n")
    about = Provenance(profile="quickstart", commit="unknown", dirty=None)
    index = write_gallery(tmp_path / "reports" / "eval", _predictions(), _episode, _metrics(), PAIRED,
                          provenance=about).read_text()
    warning = re.search(r'<p id="not-meaningful"[^>]*>(.*?)</p>', index, flags=re.S).group(1)
    assert "quickstart" in warning and "scores are not meaningful" in warning
    assert 'href="../../README.md#quick-start-two-commands"' in warning
    assert "commit unknown" in index


def test_now_reads_the_commit_of_this_checkout():
    about = Provenance.now("paper")
    assert about.profile == "paper"
    assert about.commit == "unknown" or re.fullmatch(r"[0-9a-f]{40}", about.commit)


def test_each_claim_page_lists_the_searches_of_every_system(tmp_path):
    def with_searches(p: Prediction) -> Episode | None:
        ep = _episode(p)
        if ep is None:
            return None
        queries = [QueryRecord(query=f"q1 {p.system} {XSS}", pmids=["111"], n_results=1),
                   QueryRecord(query=f"q2 {p.system}", pmids=[], n_results=0)]
        return ep.model_copy(update={"queries": queries})

    index = write_gallery(tmp_path / "g", _predictions(), with_searches, _metrics(), PAIRED)
    page = next(p for p in _claim_pages(index) if p.name == "12.html").read_text()
    frame = html.unescape(re.search(r'srcdoc="([^"]*)"', page).group(1))  # eg_grpo: in its report
    searches = frame[frame.index('<section id="searches"'):]
    assert searches.index("q1 eg_grpo") < searches.index("q2 eg_grpo") and "0 hits" in searches
    assert "111</a>: Vitamin D trial" in searches and XSS not in frame and html.escape(XSS) in frame
    label_only = page[page.index('<section id="sys-no_retrieval"'):]  # a label-only system: on the page
    assert label_only.index("q1 no_retrieval") < label_only.index("q2 no_retrieval")
    assert "1 hit</span>" in label_only and "0 hits" in label_only and XSS not in page


def test_hostile_text_in_claim_quote_query_and_title_is_escaped_in_the_gallery(tmp_path):
    hostile = "<script>alert(1)</script> \"q\" 'a' & b"

    def hostile_episode(p: Prediction) -> Episode | None:
        ep = _episode(p)
        if ep is None:
            return None
        ledger = {"111": Article(pmid="111", title=f"T {hostile}", abstract=ABSTRACT, source="entrez")}
        report = ep.report.model_copy(update={"supporting": [EvidenceItem(pmid="111", quote=f"Q {hostile}")]})
        return ep.model_copy(update={"claim": f"C {hostile}", "ledger": ledger, "report": report,
                                     "queries": [QueryRecord(query=f"S {hostile}", pmids=["111"], n_results=1)]})

    index = write_gallery(tmp_path / "g", _predictions(), hostile_episode, _metrics(), PAIRED)
    for page in [index, *_claim_pages(index)]:
        text = page.read_text()
        assert text.count("<script") == 1 and "alert(1)</" not in text and " & b" not in text, page
    page = next(p for p in _claim_pages(index) if p.name == "12.html").read_text()
    assert "C &lt;script&gt;alert(1)&lt;/script&gt; &#34;q&#34; &#39;a&#39; &amp; b" in page
    frame = re.search(r'srcdoc="([^"]*)"', page).group(1)
    assert "<" not in frame and '"' not in frame  # the whole report page is one escaped attribute
    report = html.unescape(frame)
    assert "<script" not in report and "alert(1)</" not in report
    for text in ("C", "Q", "S", "T"):
        assert f"{text} &lt;script&gt;alert(1)&lt;/script&gt; &#34;q&#34; &#39;a&#39; &amp; b" in report, text


# -- in a real browser -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    with chromium("the gallery's browser tests") as b:
        yield b


@pytest.fixture()
def page(browser):
    ctx = browser.new_context()
    pg = ctx.new_page()
    pg.errors, pg.dialogs = [], []
    pg.on("console", lambda m: m.type == "error" and pg.errors.append(m.text))
    pg.on("pageerror", lambda exc: pg.errors.append(str(exc)))
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
    yield pg
    ctx.close()


def _visible_rows(pg) -> list[tuple[str, str]]:
    return [(r.get_attribute("data-dataset"), r.get_attribute("data-gold"))
            for r in pg.locator("tr.claim-row").all() if r.is_visible()]


def test_browser_index_loads_and_the_table_shows_every_system(page, gallery):
    page.goto(gallery.as_uri())
    assert page.title() == "BioCheck evaluation"
    assert re.fullmatch(r"Profile \S+ · commit \S+( \+ uncommitted changes)?",
                        page.locator("#provenance").inner_text())
    shown = {page.locator("#metrics tbody tr").nth(i).locator("td").first.inner_text()
             for i in range(page.locator("#metrics tbody tr").count())}
    assert shown == set(SYSTEMS)
    assert len(_visible_rows(page)) == len(CLAIMS)
    assert page.locator("#claim-count").inner_text() == f"{len(CLAIMS)} of {len(CLAIMS)} claims shown"
    assert page.errors == [] and page.dialogs == []


def test_browser_filters_hide_rows(page, gallery):
    page.goto(gallery.as_uri())
    page.select_option("#f-dataset", "healthfc")
    assert _visible_rows(page) == [("healthfc", c[2].value) for c in CLAIMS if c[0] == "healthfc"]
    assert all(r.get_attribute("data-dataset") == "healthfc"
               for r in page.locator("#metrics tbody tr").all() if r.is_visible())
    page.select_option("#f-dataset", "")
    page.select_option("#f-system", "no_retrieval")
    page.select_option("#f-outcome", "wrong")
    wrong = [(d, g.value) for (d, _cid, g, _t), p in
             zip(CLAIMS, [p for ds in ("scifact", "healthfc") for p in _predictions()[("no_retrieval", ds)]],
                 strict=True) if p.pred != g]
    assert _visible_rows(page) == wrong
    assert not page.locator('#claims th[data-system="eg_grpo"]').is_visible()
    assert page.locator('#claims th[data-system="no_retrieval"]').is_visible()
    page.select_option("#f-gold", "NEI")
    assert _visible_rows(page) == [x for x in wrong if x[1] == "NEI"]
    assert page.errors == []


def test_browser_claim_page_shows_verdicts_and_escapes_model_text(page, gallery):
    page.goto(gallery.as_uri())
    page.get_by_role("link", name=re.compile("Claim with markup")).click()
    page.wait_for_load_state("load")
    assert page.dialogs == []  # the claim's <script> did not run
    assert "a_b_c_x" in page.url  # the safe file name of id "a/b c?<x>"
    verdicts = {r.get_attribute("data-system"): r.locator("td").nth(2).inner_text()
                for r in page.locator("#verdicts tbody tr").all()}
    assert verdicts == {"eg_grpo": "right", "no_retrieval": "right"}  # gold R, both said R
    assert XSS in page.locator("p.claim").inner_text()  # shown as text
    frame = page.frame_locator("iframe.report")
    assert frame.locator("mark").first.inner_text() == "lowered the rate of hip fractures"
    assert XSS in frame.locator("body").inner_text() and frame.locator("script").count() == 0
    searches = frame.locator("#searches li.search")  # eg_grpo's two searches, in order, with their hits
    assert searches.count() == 2 and searches.nth(0).locator("code").inner_text() == f"vitamin D AND fracture* {XSS}"
    assert "1 hit" in searches.nth(0).inner_text() and "111: Vitamin D trial" in searches.nth(0).inner_text()
    assert searches.nth(1).inner_text() == "hip AND fracture 0 hits"
    page.locator("details summary").first.click()  # the label-only system's own text
    assert XSS in page.locator("pre.final").inner_text()
    assert page.dialogs == [] and page.errors == []
    page.get_by_role("link", name="← all claims").click()
    assert page.title() == "BioCheck evaluation"
