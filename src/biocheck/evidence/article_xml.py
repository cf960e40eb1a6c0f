"""E-utilities XML -> Python: esearch replies and PubMed article records, via Biopython's parser.

Biopython's `DataHandler` (what `Bio.Entrez.read` uses) does the XML work with its bundled DTDs.
Our `_OfflineHandler` changes three things. It never downloads a DTD (an unknown DTD would make
Biopython fetch it from NCBI behind our rate limiter's back, or hang offline), and it maps a
newer PubMed DTD (`pubmed_YYMMDD.dtd` not bundled yet) to the newest bundled one. And it turns
the markup inside text fields into plain text while parsing:

- Biopython (escape=False) hands a text field's child elements back as re-serialised tag text
  ("CO<sub>2</sub>", MathML as `<math><msub><mi>V</mi>...`) mixed with the decoded character
  data, so a literal "<" of the text ("r2 &lt;0.25") and a tag can no longer be told apart. The
  handler therefore works on the parser's element events instead of the string afterwards.
- Any element inside a text field (`<i>`, `<b>`, `<u>`, `<sup>`, `<sub>`, ...) is inline markup:
  its tags are dropped and its text stays in place with nothing added ("CO<sub>2</sub>" -> "CO2").
- MathML (`<mml:math>`) becomes the text PubMed shows: the text of its token elements (mi, mn,
  mo, mtext) in reading order with the layout whitespace between elements ignored; an accent
  over or under a base (`<mover>`: "." or "˙" over V) becomes the Unicode combining mark after
  the base ("V̇O2max" = V + U+0307 + "O2max"); a fraction is "num/den"; annotations (TeX
  copies of the formula) are skipped. The grounding rule ignores the combining dot, so a model
  that quotes "VO2max" still matches (rewards/grounding.py).

`article_from_record` is the one place a PubMed record becomes an `Article`; the efetch parser
and the baseline file reader (`baseline.py`) both use it.

A baseline file is the user's file, not NCBI's reply, so `iter_pubmed_records` asks more of it and
less: its root must be a PubmedArticleSet (a DOCTYPE or first element naming anything else is
`NotPubMedXMLError` at once), and a DTD that is local, unknown or missing altogether is replaced by
the newest bundled PubMed DTD. No file or URL a document names is ever opened: a DTD is looked up by
its file name among Biopython's bundled DTDs only, and an external general entity (`<!ENTITY x
SYSTEM "file:///...">`, the XXE attack) is refused (`UnsafeXMLError`). Entity expansion bombs are
stopped by expat itself (its amplification limit, expat >= 2.4).
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path, PurePosixPath
from typing import IO, Any
from urllib.parse import urlparse
from xml.parsers import expat

from Bio.Entrez.Parser import CorruptedXMLError, DataHandler, NotXMLError, ValidationError

from biocheck.evidence.types import Article

logger = logging.getLogger(__name__)

_PUBMED_DTD = re.compile(r"pubmed_(\d{6})\.dtd")
_MATH_TOKENS = frozenset({"mi", "mn", "mo", "mtext", "ms"})  # the only MathML elements holding text
_MATH_SKIP = frozenset({"annotation", "annotation-xml"})  # other encodings of the same formula
# An accent over/under a base -> the combining mark written after it ("V" + "." -> "V̇").
_ACCENTS = {
    ".": "\u0307", "\u02d9": "\u0307", "\u00b7": "\u0307", "\u0307": "\u0307",  # dot: a rate (V̇O2)
    "..": "\u0308", "\u00a8": "\u0308", "^": "\u0302", "\u02c6": "\u0302", "~": "\u0303", "\u02dc": "\u0303",
    "\u00af": "\u0304", "\u203e": "\u0305", "\u2192": "\u20d7",
}
_YEAR = re.compile(r"\b(1[5-9]\d\d|2\d\d\d)\b")


class XMLParseError(Exception):
    """The response is not the complete XML document expected (truncated, HTML, JSON ...).

    Retryable: NCBI sometimes cuts responses short under load.
    """


class MissingDTDError(Exception):
    """The XML names a DTD that Biopython does not bundle (and we refuse to download)."""


class NotPubMedXMLError(XMLParseError):
    """Well-formed XML that is not a PubmedArticleSet, or one without any record."""


class UnsafeXMLError(XMLParseError):
    """The XML asks for an external entity (a file or URL to be read into the text): refused."""


PUBMED_ROOT = "PubmedArticleSet"


@cache
def _newest_bundled_pubmed_dtd() -> str | None:
    names = sorted(p.name for p in Path(DataHandler.global_dtd_dir).glob("pubmed_*.dtd"))
    return names[-1] if names else None


@dataclass
class _MathNode:
    name: str
    children: list[_MathNode | str] = field(default_factory=list)


def _local_name(name: str) -> str:
    # expat reports a namespaced name as "uri local"; Biopython keeps the prefix in some paths
    return name.rsplit(" ", 1)[-1].rsplit(":", 1)[-1]


def _math_text(node: _MathNode) -> str:
    """A MathML element as inline text (rule in the module docstring)."""
    if node.name in _MATH_TOKENS:
        return " ".join("".join(c for c in node.children if isinstance(c, str)).split())
    # character data between MathML elements is layout whitespace, not text
    parts = [_math_text(c) for c in node.children if isinstance(c, _MathNode) and c.name not in _MATH_SKIP]
    if node.name in ("mover", "munder") and len(parts) == 2 and parts[1] in _ACCENTS:
        return parts[0] + _ACCENTS[parts[1]]
    if node.name == "mfrac" and len(parts) == 2:
        return f"{parts[0]}/{parts[1]}"
    if node.name == "msqrt":
        return "\u221a" + "".join(parts)
    return "".join(parts)


class _OfflineHandler(DataHandler):
    """Biopython's handler, minus network access for DTDs, with markup in text turned into text."""

    def __init__(self, validate: bool, escape: bool, ignore_errors: bool, root: str | None = None) -> None:
        super().__init__(validate, escape, ignore_errors)
        self.characterDataHandler = self._text  # read by Biopython when a text field starts
        self._math: list[_MathNode] = []  # open MathML elements, outermost first
        self.root = root  # a file (not a reply): the root element it must have; any DTD is then replaced
        self.doctype: str | None = None
        self.parser.StartDoctypeDeclHandler = self._doctype
        if root is not None:
            self.xmlDeclHandler(None, None, None)  # a file may lack the XML declaration Biopython waits for

    def _doctype(self, name: str, system_id: str | None, public_id: str | None, internal: int) -> None:
        self.doctype = _local_name(name)
        if self.root is not None and self.doctype != self.root:
            raise NotPubMedXMLError(f"the document is a <{self.doctype}>, not a <{self.root}>")

    def externalEntityRefHandler(self, context: str | None, base: str | None, systemId: str,
                                 publicId: str | None) -> int:
        """Biopython's, minus every file and URL: a DTD is found by its name among the bundled ones."""
        if context is not None:  # a general entity in the text, not a DTD (parameter entity): XXE
            raise UnsafeXMLError(f"the XML refers to an external entity ({systemId!r}); refusing to read it")
        name = PurePosixPath(urlparse(systemId).path or systemId).name
        handle = self.open_dtd_file(name)
        try:
            parser = self.parser.ExternalEntityParserCreate(context)
            parser.ElementDeclHandler = self.elementDecl
            parser.ParseFile(handle)
        finally:
            handle.close()
        self.parser.StartElementHandler = self.startElementHandler
        return 1

    def handleMissingDocumentDefinition(self, tag: str, attrs: dict) -> None:
        """No DTD: a PubmedArticleSet is read with the newest bundled PubMed DTD; anything else is refused."""
        name = _local_name(tag)
        fallback = _newest_bundled_pubmed_dtd()
        if name != PUBMED_ROOT or fallback is None or (self.root is not None and name != self.root):
            raise NotPubMedXMLError(f"the document is a <{name}> without a DTD, not a <{self.root or PUBMED_ROOT}>")
        self.externalEntityRefHandler(None, None, fallback, None)
        self.startElementHandler(tag, attrs)

    def startNamespaceDeclHandler(self, prefix: str | None, uri: str) -> None:
        # Biopython raises on a namespace it does not know (e.g. MathML as a default xmlns, not
        # NCBI's mml: prefix); such elements are only ever inline markup here, so record and go on.
        if prefix in ("xsi", "mml", "xlink", "ali"):
            super().startNamespaceDeclHandler(prefix, uri)
        else:
            self.namespace_level[prefix] += 1
            self.namespace_prefix[uri] = prefix

    # Inside a text field Biopython calls these for every child element (it would re-serialise them).
    def startRawElementHandler(self, name: str, attrs: dict) -> None:
        tag = _local_name(name)
        if self._math or tag == "math":
            node = _MathNode(tag)
            if self._math:
                self._math[-1].children.append(node)
            self._math.append(node)
        # anything else (<i>, <b>, <u>, <sup>, <sub>, ...) is inline markup: the tag goes, its text stays
        self.parser.EndElementHandler = self.endRawElementHandler
        self.level += 1

    def endRawElementHandler(self, name: str) -> None:
        self.level -= 1
        if self.level == 0:
            self.parser.EndElementHandler = self.endStringElementHandler
        if self._math:
            node = self._math.pop()
            if not self._math:
                self.data.append(_math_text(node))

    def _text(self, content: str) -> None:
        if self._math:
            self._math[-1].children.append(content)
        else:
            self.data.append(content)

    def open_dtd_file(self, filename: str):
        handle = super().open_dtd_file(filename)
        replace = _PUBMED_DTD.fullmatch(filename) or (self.root == PUBMED_ROOT and self.doctype == PUBMED_ROOT)
        if handle is None and replace:
            fallback = _newest_bundled_pubmed_dtd()
            if fallback is not None:
                logger.debug("DTD %s is not bundled with Biopython; using %s", filename, fallback)
                handle = super().open_dtd_file(fallback)
        if handle is None:
            raise MissingDTDError(
                f"DTD {filename!r} is not bundled with Biopython and downloads are disabled; "
                f"copy it into {DataHandler.local_dtd_dir} or upgrade biopython"
            )
        return handle


def _handler(root: str | None = None) -> _OfflineHandler:
    # validate=False: skip elements newer than the DTD instead of failing on them.
    # ignore_errors=True: keep <ERROR> as data so the caller decides whether to retry.
    return _OfflineHandler(validate=False, escape=False, ignore_errors=True, root=root)


def _read(data: bytes, what: str) -> Any:
    try:
        return _handler().read(io.BytesIO(data))
    except (CorruptedXMLError, NotXMLError, ValidationError) as exc:
        raise XMLParseError(f"{what} response is not valid XML ({len(data)} bytes): {exc}") from None


# ---------------------------------------------------------------------------- esearch


@dataclass
class EsearchReply:
    ids: list[str]
    count: int
    translation: str | None = None
    phrase_not_found: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None  # an <ERROR> element: the search was not run


def parse_esearch(data: bytes) -> EsearchReply:
    record = _read(data, "esearch")
    if not isinstance(record, dict) or not ("IdList" in record or "ERROR" in record):
        raise XMLParseError("esearch response is XML but not an eSearchResult")
    if "ERROR" in record:
        return EsearchReply(ids=[], count=0, error=str(record["ERROR"]))
    errors = record.get("ErrorList") or {}
    warnings = record.get("WarningList") or {}
    warning_texts = [f"{key}: {value}" for key, values in warnings.items() for value in values]
    field_errors = [f"FieldNotFound: {value}" for value in errors.get("FieldNotFound", [])]
    translation = record.get("QueryTranslation")
    return EsearchReply(
        ids=[str(i) for i in record["IdList"]],
        count=int(record.get("Count", 0)),
        translation=str(translation) if translation is not None else None,
        phrase_not_found=[str(p) for p in errors.get("PhraseNotFound", [])],
        warnings=field_errors + warning_texts,
    )


# ---------------------------------------------------------------------------- articles


def clean_text(text: str) -> str:
    """Collapse whitespace (the handler has already turned inline markup into text)."""
    return " ".join(text.split())


def _year(date: Any) -> int | None:
    if not date:
        return None
    text = str(date.get("Year") or date.get("MedlineDate") or "")
    match = _YEAR.search(text)
    return int(match.group(1)) if match else None


def _abstract(abstract: Any) -> str:
    """Join AbstractText parts; structured abstracts keep their labels ("METHODS: ...")."""
    if not abstract:
        return ""
    parts = []
    for part in abstract.get("AbstractText", []):
        text = clean_text(str(part))
        label = getattr(part, "attributes", {}).get("Label")
        if label and text:
            parts.append(f"{label}: {text}")
        elif text:
            parts.append(text)
    return " ".join(parts)


def _from_citation(citation: Any, source: str) -> Article:
    art = citation.get("Article", {})
    journal = art.get("Journal", {})
    title = clean_text(str(art.get("ArticleTitle", "") or art.get("VernacularTitle", "")))
    year = _year(journal.get("JournalIssue", {}).get("PubDate"))
    if year is None:  # electronic-only articles may carry ArticleDate alone
        dates = art.get("ArticleDate") or []
        year = _year(dates[0]) if dates else None
    journal_name = journal.get("Title") or journal.get("ISOAbbreviation")
    if not journal_name:
        journal_name = citation.get("MedlineJournalInfo", {}).get("MedlineTA")
    mesh = [str(h["DescriptorName"]) for h in citation.get("MeshHeadingList", []) if "DescriptorName" in h]
    return Article(
        pmid=str(citation["PMID"]),
        title=title,
        abstract=_abstract(art.get("Abstract")),
        year=year,
        journal=str(journal_name) if journal_name else None,
        mesh=mesh,
        source=source,
    )


def _from_book(doc: Any, source: str) -> Article:
    book = doc.get("Book", {})
    title = doc.get("ArticleTitle") or book.get("BookTitle") or ""
    return Article(
        pmid=str(doc["PMID"]),
        title=clean_text(str(title)),
        abstract=_abstract(doc.get("Abstract")),
        year=_year(book.get("PubDate")),
        journal=None,
        mesh=[],
        source=source,
    )


def article_from_record(record: Any, source: str) -> Article | None:
    """One PubmedArticle / PubmedBookArticle record (Biopython structure) -> Article."""
    try:
        if "MedlineCitation" in record:
            return _from_citation(record["MedlineCitation"], source)
        if "BookDocument" in record:
            return _from_book(record["BookDocument"], source)
    except (KeyError, TypeError, ValueError) as exc:  # a malformed record must not sink the batch
        logger.warning("skipping a PubMed record without the expected fields (%s)", exc)
    return None


def parse_efetch(data: bytes, source: str = "entrez") -> list[Article]:
    """A PubmedArticleSet (efetch db=pubmed retmode=xml) -> Articles in document order."""
    record = _read(data, "efetch")
    if not isinstance(record, dict) or not ("PubmedArticle" in record or "PubmedBookArticle" in record):
        raise XMLParseError("efetch response is XML but not a PubmedArticleSet")
    records = list(record.get("PubmedArticle", [])) + list(record.get("PubmedBookArticle", []))
    return [a for a in (article_from_record(r, source) for r in records) if a is not None]


def iter_pubmed_records(stream: IO[bytes], block_size: int = 1 << 16) -> Iterator[Any]:
    """Stream a PubmedArticleSet, yielding each article record as soon as it is complete.

    `Bio.Entrez.parse` refuses a PubmedArticleSet (its root is a dict, not a list), so this
    feeds Biopython's handler block by block and takes finished records out of the root as it
    goes: memory stays at one block plus one record. Containers are attached to their parent
    when they start, so the last record of a list may still be in progress until the end.
    """
    handler = _handler(root=PUBMED_ROOT)
    keys = ("PubmedArticle", "PubmedBookArticle")
    records = 0
    while True:
        block = stream.read(block_size)
        final = not block
        try:
            handler.parser.Parse(block, final)
        except expat.ExpatError as exc:
            raise XMLParseError(f"PubMed XML is not well formed: {exc}") from None
        root = getattr(handler, "record", None)
        if isinstance(root, dict):
            for key in keys:
                items = root.get(key) or []
                done = len(items) if final else max(len(items) - 1, 0)
                if done > 0:
                    records += done
                    yield from items[:done]
                    del items[:done]
        if final:
            break
    root = getattr(handler, "record", None)
    if root is None:
        raise XMLParseError("no PubmedArticleSet found (empty input?)")
    if handler.element is not None:
        raise XMLParseError("PubMed XML ends before its last element is closed (truncated file?)")
    if not records and not (isinstance(root, dict) and root.get("DeleteCitation")):  # deletions alone: an update
        raise NotPubMedXMLError(f"the {PUBMED_ROOT} holds no PubmedArticle records")
