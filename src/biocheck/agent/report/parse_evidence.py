"""Evidence sections of a report: the lines under 'Supporting evidence' / 'Refuting evidence' -> items.

Two passes. First the lines are cut into items and each item into fields ("PMID", "Quote", "Context",
or unlabelled text); a multi-line quote stays in one field. Then each item's fields are read: labelled
fields first, unlabelled text last, so a stray line cannot take the place of a labelled quote.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from biocheck.agent.report.parse_common import (
    PMID_REF,
    QUOTE_PAIRS,
    SEPARATORS,
    closer_positions,
    closers,
    ends_with_closer,
    field_label_at_start,
    find_opener,
    has_closer,
    has_words,
    snip,
    split_pmid,
)
from biocheck.agent.report.schema import EvidenceItem

FIELD_LABELS: dict[str, str] = {
    "pmid": "pmid",
    "pmids": "pmid",
    "pubmed id": "pmid",
    "quote": "quote",
    "quotation": "quote",
    "excerpt": "quote",
    "passage": "quote",
    "exact quote": "quote",
    "verbatim quote": "quote",
    "context": "context",
    "reason": "context",
    "rationale": "context",
    "explanation": "context",
    "relevance": "context",
    "why": "context",
    "comment": "context",
}

_BULLET = re.compile(r"\s*(?:[-*•+·▪‣◦]|\d{1,3}[.)])\s+")  # "**PMID**" is bold, not a bullet: needs a space
_SUBHEAD = re.compile(r"\s*#{1,6}\s")
_PMID_START = re.compile(r"[\[(]?\s*(?:\*\*|__)?\s*(?:PMIDs?|PubMed\s*ID)\b\s*(?:\*\*|__)?\s*", re.I)
# A field label right after a closing quote mark ends the quote there: `Quote: "..." Context: ...`.
_LABEL_AFTER_CLOSE = re.compile(
    r"\s*[,;|.\-–—]*\s*(?:\*\*|__)?(?:context|reason|rationale|explanation|relevance|pmid)\b\s*(?:\*\*|__)?\s*[:=]",
    re.I,
)
_LABEL_IN_UNQUOTED = re.compile(r"\s(?=(?:\*\*|__)?(?:Context|Reason|Rationale|Explanation|PMID)\s*(?:\*\*|__)?\s*:)")
_BARE_ID = re.compile(r"\[?(\d{4,10})\]?\s*[:\-–—]")  # "- 31234567: "quote""
_EMPTY = re.compile(r"(?:none|n a|na|nil|nothing|null|empty|not applicable)(?: found| identified| retrieved)?|no\b.*")


@dataclass
class _Field:
    label: str | None  # "pmid" | "quote" | "context" | "heading" | None (unlabelled)
    lines: list[str] = field(default_factory=list)
    opener: str | None = None  # the mark of a quote still open at the last line

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def add(self, line: str) -> None:
        """Append a line and track whether a quote is left open (kept incremental: linear time)."""
        blank_before = not any(x.strip() for x in self.lines)
        self.lines.append(line)
        if self.label == "quote":
            t = line.strip()
            if blank_before and t and t[0] in QUOTE_PAIRS:
                self.opener, t = t[0], t[1:]
            if self.opener is not None and (ends_with_closer(t, self.opener) or _closed_before_label(t, self.opener)):
                self.opener = None
        elif self.label in (None, "pmid"):
            if self.opener is not None:
                if has_closer(line, self.opener):
                    self.opener = None
            elif (i := find_opener(line)) >= 0 and not closers(line, i):
                self.opener = line[i]


@dataclass
class _Chunk:
    fields: list[_Field] = field(default_factory=list)

    def has(self, label: str) -> bool:
        return any(f.label == label for f in self.fields)

    @property
    def substantive(self) -> bool:
        return any(f.label != "heading" for f in self.fields)


@dataclass
class _Item:
    pmid: str | None = None
    more_pmids: list[str] = field(default_factory=list)
    quote: str | None = None
    context: str | None = None
    labelled: bool = False  # a PMID/Quote/Context label was seen
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def is_empty_marker(text: str) -> bool:
    """'None', 'N/A', '-', 'No refuting evidence was found.': an evidence section with no items."""
    words = " ".join(re.sub(r"[^a-z0-9]+", " ", text[:2000].lower()).split())
    return _EMPTY.fullmatch(words) is not None or not has_words(text)


def _tidy(text: str) -> str:
    """Free text between fields without its separators: ' — (RCT)' -> 'RCT'; a final '.' stays."""
    t = text.lstrip(SEPARATORS + "([").rstrip().rstrip(",;:|-–—*_").rstrip()
    for _ in range(3):  # bounded: each check counts the whole text
        if not t or t[-1] not in ")]" or t.count("(" if t[-1] == ")" else "[") >= t.count(t[-1]):
            break
        t = t[:-1].rstrip()
    return t


def parse_evidence(lines: list[str], section: str, first: int = 1) -> tuple[list[EvidenceItem], list[str]]:
    """Items under one evidence heading (numbered from `first` in problems), and the problems met."""
    problems: list[str] = []
    items: list[EvidenceItem] = []
    body = "\n".join(lines)
    if not body.strip() or (is_empty_marker(body) and not PMID_REF.search(body) and find_opener(body) < 0):
        return items, problems
    for chunk in _chunks(lines):
        st = _read_chunk(chunk)
        if st.pmid is None and st.quote is None and not st.labelled:
            text = "\n".join(f.text for f in chunk.fields)
            if not is_empty_marker(text):
                problems.append(f"text under {section} ignored: {snip(text)!r}")
            continue
        n = first + len(items)
        item, item_problems = finish_item(st.pmid, st.quote, st.context, n, section)
        items.append(item)
        problems += item_problems
        where = f"evidence item {n} under {section}"
        if st.more_pmids:
            problems.append(f"{where} lists several PMIDs; kept {item.pmid}")
        problems += [f"{where} {note}" for note in st.notes]
        problems += [f"{where}: ignored {snip(t)!r}" for t in st.ignored]
    return items, problems


def finish_item(
    pmid: str | None, quote: str | None, context: str | None, n: int, section: str
) -> tuple[EvidenceItem, list[str]]:
    """The item, and a problem for each missing field (shared with the JSON reader)."""
    where = f"evidence item {n} under {section}"
    problems = [
        f"{where} has no {name}"
        for name, value in (("PMID", pmid), ("quote", quote), ("context", context))
        if not value
    ]
    return EvidenceItem(pmid=pmid or "", quote=quote or "", context=context or ""), problems


# -- pass 1: lines -> items -> fields ---------------------------------------------------------------


@dataclass
class _Line:
    bullet: bool
    subheading: bool
    content: str  # without bullet and outer whitespace
    label: str | None
    rest: str  # the content after the label


def _line(raw: str) -> _Line:
    subheading = _SUBHEAD.match(raw) is not None
    bullet_m = _BULLET.match(raw)
    content = (raw[bullet_m.end() :] if bullet_m else raw).strip()
    if subheading:
        return _Line(False, True, content.lstrip("#").strip(), None, "")
    label, rest = field_label(content)
    return _Line(bullet_m is not None, False, content, label, rest)


def field_label(content: str) -> tuple[str | None, str]:
    """('pmid' | 'quote' | 'context', the text after the label), or (None, content)."""
    label, rest = field_label_at_start(content, FIELD_LABELS)
    if label is not None:
        return label, rest
    m = _PMID_START.match(content)  # "PMID 123" without a colon
    if m:
        return "pmid", content[m.end() :]
    return None, content


def _closed_before_label(text: str, opener: str) -> bool:
    """`"quote" Context: ...` on one line: a closing mark followed by a field label."""
    return any(_LABEL_AFTER_CLOSE.match(text, j + 1) for j in closer_positions(text, opener))


_RANK = {"pmid": 0, "quote": 1, "context": 2}


def _goes_back(chunk: _Chunk, label: str) -> bool:
    """A bulleted 'PMID', or a bulleted field that comes before one already seen ('- Quote' after 'Context'),
    starts a new item; '- PMID / - Quote / - Context' in order is one item written as a list."""
    return label == "pmid" or any(_RANK.get(f.label or "", -1) > _RANK[label] for f in chunk.fields)


def _chunks(lines: list[str]) -> list[_Chunk]:
    chunks = [_Chunk()]
    for raw in lines:
        chunk = chunks[-1]
        cur = chunk.fields[-1] if chunk.fields else None
        if not raw.strip():
            if cur is not None:
                cur.add("")
            continue
        ln = _line(raw)
        if cur is not None and cur.opener is not None and ln.label is None and not ln.subheading:
            cur.add(raw)  # inside a multi-line quote: keep the line exactly
            continue
        new_item = chunk.substantive and (
            (ln.label is not None and (chunk.has(ln.label) or (ln.bullet and _goes_back(chunk, ln.label))))
            or (ln.label is None and ln.bullet)
        )
        if new_item or (ln.subheading and chunk.fields):
            chunk = _Chunk()
            chunks.append(chunk)
            cur = None
        if ln.subheading:
            chunk.fields.append(_Field("heading", [ln.content]))
        elif ln.label is not None or cur is None or ln.bullet or cur.label == "heading":
            f = _Field(ln.label)
            f.add(ln.rest if ln.label is not None else ln.content)
            chunk.fields.append(f)
        else:
            cur.add(raw if cur.label == "quote" else ln.content)
    return [c for c in chunks if c.fields]


# -- pass 2: one item's fields -> pmid, quote, context ----------------------------------------------


def _read_chunk(chunk: _Chunk) -> _Item:
    st = _Item()
    deferred: list[str] = []  # unlabelled text, read once the labelled fields are in
    for f in chunk.fields:
        if f.label is None:
            deferred.append(f.text)
        elif f.label == "heading":
            m = PMID_REF.search(f.text)
            if m and st.pmid is None:
                st.pmid = m.group(1)
                f_rest = _tidy(f.text[: m.start()] + " " + f.text[m.end() :])
            else:
                f_rest = f.text
            if has_words(f_rest):
                st.ignored.append(f_rest)
        else:
            st.labelled = True
            _labelled(st, f.label, f.text, deferred)
    i = 0
    while i < len(deferred):  # the list grows while it is read: text after a quote is read next
        _unlabelled(st, deferred[i], deferred)
        i += 1
    return st


def _labelled(st: _Item, label: str, text: str, deferred: list[str]) -> None:
    if label == "pmid":
        pmid, more, rest = split_pmid(text)
        if pmid is not None and st.pmid is None:
            st.pmid, st.more_pmids = pmid, more
        elif pmid is not None:
            st.ignored.append(text)
            return
        if pmid is None and find_opener(rest) < 0:  # "PMID: not available": no id, and no quote either
            if has_words(rest):
                st.ignored.append(rest.strip())
        elif rest.strip(SEPARATORS):
            deferred.append(rest)
    elif label == "quote":
        if st.quote:
            st.ignored.append(text)
            return
        _quote(st, text, deferred)
    elif st.context is None:
        st.context = "\n".join(line.strip() for line in text.split("\n")).strip()
    else:
        st.ignored.append(text)


def _quote(st: _Item, text: str, deferred: list[str]) -> None:
    """A Quote field: the text inside the marks, exactly; what follows the closing mark is read later."""
    t = text.strip()
    if not t or t[0] not in QUOTE_PAIRS:
        parts = _LABEL_IN_UNQUOTED.split(t, maxsplit=1)  # "Quote: no marks here Context: ..."
        st.quote = parts[0].strip()
        if len(parts) > 1:
            deferred.append(parts[1])
        return
    ends = closers(t, 0)
    if not ends:
        st.quote = t[1:].strip()
        st.notes.append("has no closing quote mark")
        return
    end = next((j for j in ends if _LABEL_AFTER_CLOSE.match(t, j + 1)), ends[-1])  # else the last mark
    st.quote = t[1:end].strip()
    if t[end + 1 :].strip(SEPARATORS):
        deferred.append(t[end + 1 :])


def _unlabelled(st: _Item, text: str, deferred: list[str]) -> None:
    t = _tidy(text)
    if not t:
        return
    label, rest = field_label(t)
    if label is not None:
        st.labelled = True
        _labelled(st, label, rest, deferred)
        return
    if st.pmid is None:
        m = PMID_REF.search(t) or _BARE_ID.match(t)
        if m:
            st.pmid = m.group(1)
            t = _tidy(t[: m.start()] + " " + t[m.end() :])
    i = find_opener(t)
    ends = closers(t, i) if i >= 0 else []
    if i >= 0 and ends and st.quote is None:
        # unlabelled text: the first closing mark ends the quote ("quote" -- "scare quotes" in context)
        before, st.quote, after = t[:i], t[i + 1 : ends[0]].strip(), t[ends[0] + 1 :]
        if has_words(before):
            st.ignored.append(_tidy(before))
        if _tidy(after):
            deferred.append(after)
    elif st.pmid is None and not st.labelled:
        st.ignored.append(t)
    elif st.quote is None:
        st.quote = t.strip()
    elif st.context is None:
        st.context = "\n".join(line.strip() for line in t.split("\n")).strip()
    else:
        st.ignored.append(t)
