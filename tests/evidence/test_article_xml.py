"""PubMed/esearch XML -> records: inline markup and MathML as text, the fake's NCBI shapes, and every
genuine NCBI sample in ../shared/eutils-samples (or $BIOCHECK_EUTILS_SAMPLES) when it is there."""

from __future__ import annotations

import io
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from biocheck.evidence.article_xml import article_from_record, iter_pubmed_records, parse_efetch, parse_esearch
from biocheck.evidence.entrez import EntrezClient
from tests.helpers.fake_eutils import MATHML_VO2MAX, FakeArticle, FakeEutils, esearch_xml, pubmed_xml
from tests.helpers.paths import REPO

_SAMPLES = os.environ.get("BIOCHECK_EUTILS_SAMPLES", "").strip()
SAMPLES = Path(_SAMPLES) if _SAMPLES else REPO.parent / "shared" / "eutils-samples"
MML = 'xmlns:mml="http://www.w3.org/1998/Math/MathML"'
TAG_TEXT = re.compile(r"</?[A-Za-z][\w:.-]*(\s[^<>]*)?/?>")  # "<i>", "</mml:mi>", "<sub/>" left in text
SPELLED_OUT = re.compile(r"(?:\b\w ){3,}\w\b")  # "V . O 2 m a x": MathML flattened letter by letter
DOT = "\u0307"


def _one(title: str, abstract) -> tuple[str, str]:
    (article,) = parse_efetch(pubmed_xml([FakeArticle("40000001", title, abstract)]))
    return article.title, article.abstract


# ---------------------------------------------------------------------------- inline markup


@pytest.mark.parametrize("tag", ["i", "b", "u", "sup", "sub", "mml:mi"])
def test_inline_markup_keeps_its_text_in_place_and_loses_its_tags(tag):
    attrs = f" {MML}" if tag.startswith("mml:") else ""
    marked = f"<{tag}{attrs}>marked</{tag}>"
    title, abstract = _one(f"A {marked} title.", f"Before {marked} after; X{marked}Y.")
    assert title == "A marked title."
    assert abstract == "Before marked after; XmarkedY."  # nothing added around inline text


def test_sub_and_sup_stay_inline_without_spaces():
    _, abstract = _one("t", "CO<sub>2</sub> at 4 L·min<sup>-1</sup>; r<sup>2</sup>&lt;0.25; p<sub>trend</sub>=0.04")
    assert abstract == "CO2 at 4 L·min-1; r2<0.25; ptrend=0.04"


def test_nested_and_structured_markup():
    _, abstract = _one("t", [("RESULTS", "<b>All <i>CD4<sup>+</sup></i> cells</b> rose"), ("NOTE", "<u>&lt;</u>5")])
    assert abstract == "RESULTS: All CD4+ cells rose NOTE: <5"


def test_text_that_looks_like_a_tag_is_text():
    # an escaped "<b>" in the XML is a literal in the abstract, not markup: it must survive
    title, abstract = _one("The &lt;i&gt; element", "Scores a &lt;b&gt; c and x &lt; y &amp; z.")
    assert title == "The <i> element" and abstract == "Scores a <b> c and x < y & z."


# ---------------------------------------------------------------------------- MathML


def test_mathml_over_dot_becomes_a_combining_dot_as_pubmed_shows_it():
    _, abstract = _one("t", f"Maximal oxygen uptake ( {MATHML_VO2MAX} ) was high.")
    assert abstract == f"Maximal oxygen uptake ( V{DOT}O2max ) was high."
    assert not SPELLED_OUT.search(abstract)


@pytest.mark.parametrize(
    ("math", "text"),
    [
        ("<mml:mfrac><mml:mi>a</mml:mi><mml:mn>2</mml:mn></mml:mfrac>", "a/2"),
        ("<mml:msqrt><mml:mi>x</mml:mi></mml:msqrt>", "\u221ax"),
        ("<mml:msup><mml:mi>x</mml:mi><mml:mn>2</mml:mn></mml:msup><mml:mo>+</mml:mo><mml:mn>1</mml:mn>", "x2+1"),
        ("<mml:mover><mml:mi>Q</mml:mi><mml:mo>\u02d9</mml:mo></mml:mover>", f"Q{DOT}"),
        ("<mml:mover><mml:mi>x</mml:mi><mml:mo>\u00af</mml:mo></mml:mover>", "x\u0304"),
        ("<mml:mover><mml:mi>x</mml:mi><mml:mi>y</mml:mi></mml:mover>", "xy"),  # not an accent: inline
        ("<mml:semantics><mml:mi>k</mml:mi><mml:annotation encoding='TeX'>k</mml:annotation></mml:semantics>", "k"),
        ("<mml:mi> a </mml:mi>\n      <mml:mtext> </mml:mtext>", "a"),
    ],
)
def test_mathml_layouts(math, text):
    _, abstract = _one("t", f"L <mml:math {MML}>{math}</mml:math> R")
    assert abstract == f"L {text} R"


def test_mathml_with_a_default_namespace_is_text_too():
    _, abstract = _one("t", 'a <math xmlns="http://www.w3.org/1998/Math/MathML"><mi>x</mi><mn>1</mn></math> b')
    assert abstract == "a x1 b"


def test_streamed_baseline_records_get_the_same_text():
    articles = [FakeArticle("40000002", "T<sub>1</sub>", f"x {MATHML_VO2MAX} y")] * 3
    records = list(iter_pubmed_records(io.BytesIO(pubmed_xml(articles)), block_size=256))
    parsed = [article_from_record(r, "baseline:x") for r in records]
    assert [(a.title, a.abstract) for a in parsed] == [("T1", f"x V{DOT}O2max y")] * 3


# ---------------------------------------------------------------------------- the fake speaks NCBI's shapes


def _raw_reply(server: FakeEutils, endpoint: str, params: dict[str, str]) -> bytes:
    import httpx

    return httpx.post(server.url + endpoint, data=params).content


def test_fake_esearch_has_translation_set_and_history_and_they_parse():
    with FakeEutils() as server:
        server.history = True
        ids, count, translation, _ = server.search("coffee mortality", 5)
        body = _raw_reply(server, "esearch.fcgi", {"db": "pubmed", "term": "coffee mortality"})
        with EntrezClient(base_url=server.url, api_key="k" * 36) as client:
            result = client.search("coffee mortality", n=5)
    assert b"<QueryKey>1</QueryKey><WebEnv>MCID_" in body and b"<From>coffee</From>" in body
    assert [a.pmid for a in result.articles] == ids and result.total == count
    assert result.translation == translation == (
        '("coffee"[MeSH Terms] OR "coffee"[All Fields]) AND ("mortality"[MeSH Terms] OR "mortality"[All Fields])'
    )


def test_esearch_with_everything_parses():
    xml = esearch_xml(["1", "2"], 40, '"x"[MeSH Terms]', 2, not_found=["qq"], warnings=["w1"],
                      translations=[("x", '"x"[MeSH Terms]')], history=("3", "MCID_1"))
    reply = parse_esearch(xml)
    assert (reply.ids, reply.count, reply.translation) == (["1", "2"], 40, '"x"[MeSH Terms]')
    assert reply.phrase_not_found == ["qq"] and reply.warnings == ["OutputMessage: w1"]


def test_fake_efetch_is_pretty_printed_with_authors_and_copyright():
    article = FakeArticle("40000003", "T.", [("AIM", "A.")], authors=[("Doe", "Jane")], copyright="© 2020 Test.")
    xml = pubmed_xml([article]).decode()
    assert "\n        <PMID" in xml and "<AuthorList" in xml and "<CopyrightInformation>" in xml
    (parsed,) = parse_efetch(xml.encode())
    assert parsed.abstract == "AIM: A." and parsed.title == "T."  # neither authors nor copyright leak in


# ---------------------------------------------------------------------------- genuine NCBI samples


def _samples(pattern: str) -> list[Path]:
    files = sorted(SAMPLES.glob(pattern)) if SAMPLES.is_dir() else []
    if not files:
        pytest.skip(f"needs NCBI sample replies ({pattern}): set BIOCHECK_EUTILS_SAMPLES or put them in {SAMPLES}")
    return files


def _flat(elem: ET.Element) -> str:
    return " ".join("".join(elem.itertext()).split())


def test_every_genuine_esearch_sample():
    for path in _samples("esearch*.xml"):
        root = ET.fromstring(path.read_bytes())  # the standard library's reading, as the oracle
        reply = parse_esearch(path.read_bytes())
        assert reply.ids == [e.text for e in root.iter("Id")], path.name
        assert reply.count == int(root.findtext("Count")), path.name
        assert reply.translation == root.findtext("QueryTranslation"), path.name
        assert reply.phrase_not_found == [e.text for e in root.iter("PhraseNotFound")], path.name
        assert reply.error is None and all(i.isdigit() for i in reply.ids), path.name


def test_every_genuine_pubmed_sample():
    for path in _samples("pubmed*.xml"):
        data = path.read_bytes()
        citations = ET.fromstring(data).findall("./PubmedArticle/MedlineCitation")
        articles = parse_efetch(data)
        assert [a.pmid for a in articles] == [c.findtext("PMID") for c in citations], path.name
        for article, citation in zip(articles, citations, strict=True):
            where = f"{path.name} PMID {article.pmid}"
            parts = citation.findall("./Article/Abstract/AbstractText")
            assert article.title and article.title == _flat(citation.find("./Article/ArticleTitle")), where
            assert bool(article.abstract) == any(_flat(p) for p in parts), where
            assert article.year is not None and article.journal, where
            assert article.mesh == [e.text for e in citation.iter("DescriptorName")], where
            for text in (article.title, article.abstract):
                assert not TAG_TEXT.search(text), (where, TAG_TEXT.search(text).group())
                assert not SPELLED_OUT.search(text), (where, SPELLED_OUT.search(text).group())
            expected = []  # the stdlib's text of each part, where no MathML needs rendering
            for part in parts:
                if part.find(".//{http://www.w3.org/1998/Math/MathML}math") is None and _flat(part):
                    label = part.get("Label")
                    expected.append(f"{label}: {_flat(part)}" if label else _flat(part))
            assert all(e in article.abstract for e in expected), where


def test_genuine_mathml_sample_reads_as_pubmed_shows_it():
    path = SAMPLES / "pubmed6.xml"
    if not path.is_file():
        pytest.skip(f"needs the NCBI sample pubmed6.xml: set BIOCHECK_EUTILS_SAMPLES or put it in {SAMPLES}")
    (article,) = parse_efetch(path.read_bytes())
    assert article.pmid == "30108519"
    assert f"maximal oxygen uptake ( V{DOT}O2max ) 67.6" in article.abstract
    assert article.abstract.count(f"V{DOT}O2max") == 3 and "V . O" not in article.abstract
    assert "velocity at MLSS (VMLSS)" in article.abstract and "LEmin+1.5mM" in article.abstract
    assert article.title.startswith('A "Blood Relationship" Between')
