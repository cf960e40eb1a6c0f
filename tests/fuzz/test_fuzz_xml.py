"""Fuzzing PubMed XML (efetch replies and baseline files): a genuine-shaped document cut short, with bytes
flipped, a record's text replaced by any text, or its DOCTYPE changed, is read as articles whose fields have
the right types, or refused with the parser's own error naming the file — never another exception, never a
file or URL it names opened."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from biocheck.evidence.article_xml import MissingDTDError, XMLParseError, parse_efetch
from biocheck.evidence.baseline import iter_baseline
from tests.helpers.fake_eutils import CORPUS, FakeArticle, pubmed_xml

DOC = pubmed_xml(CORPUS[:3])
DOCTYPES = [b"", b'<!DOCTYPE PubmedArticleSet SYSTEM "local.dtd">', b'<!DOCTYPE PubmedArticleSet SYSTEM "/etc/passwd">',
            b'<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/hostname">]>', b"<!DOCTYPE PubmedArticleSet>"]
xml_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)


def _doctype_swapped(doc: bytes, doctype: bytes) -> bytes:
    start = doc.index(b"<!DOCTYPE")
    end = doc.index(b">", start) + 1
    return doc[:start] + doctype + doc[end:]


documents = st.one_of(
    st.integers(0, len(DOC)).map(lambda n: DOC[:n]),  # cut short anywhere
    st.tuples(st.integers(0, len(DOC) - 1), st.integers(0, 255)).map(
        lambda t: DOC[:t[0]] + bytes([t[1]]) + DOC[t[0] + 1:]),  # one byte flipped
    st.sampled_from(DOCTYPES).map(lambda d: _doctype_swapped(DOC, d)),
    st.tuples(xml_text, xml_text).map(lambda t: pubmed_xml([FakeArticle(pmid="123", title=t[0], abstract=t[1])])),
    st.binary(max_size=80),
)


def _well_typed(articles) -> None:
    for a in articles:
        assert isinstance(a.pmid, str) and a.pmid and isinstance(a.title, str) and isinstance(a.abstract, str)


@given(documents)
def test_an_efetch_reply_is_articles_or_a_parse_error(doc):
    try:
        _well_typed(parse_efetch(doc))
    except (XMLParseError, MissingDTDError) as e:
        assert str(e).strip() and "\n" not in str(e).strip(), str(e)


@given(documents)
def test_a_baseline_file_is_articles_or_one_error_naming_it(doc):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pubmed26n0001.xml"
        path.write_bytes(doc)
        try:
            _well_typed(list(iter_baseline(path)))
        except XMLParseError as e:
            assert str(e).startswith(str(path)) and "\n" not in str(e), str(e)
        assert sorted(p.name for p in Path(tmp).iterdir()) == ["pubmed26n0001.xml"]
