"""Pieces the report parser shares: quote marks, field labels, PMIDs, labels and section titles in free text.

Every regex here is anchored or bounded so that a huge or hostile text costs linear time.
"""

from __future__ import annotations

import re

from biocheck.labels import Label

# Opening quote mark -> the closing marks accepted for it (models mix straight and curly quotes).
QUOTE_PAIRS: dict[str, str] = {
    '"': '"”“',
    "“": '”“"',
    "”": '”"',
    "„": '“”"',
    "'": "'’",
    "‘": "’'",
    "’": "’'",
    "«": "»",
    "»": "«»",
    "‹": "›",
}
# An opening mark starts a token: not preceded by a letter or digit ("don't", "patients'" are not quotes).
_OPENER_RE = re.compile(r"(?<![^\W_])[\"“”„'‘’«»‹]")
# A closing mark ends a token: not followed by a letter or digit.
_CLOSER_RE = {o: re.compile("[" + re.escape(c) + r"](?![^\W_])") for o, c in QUOTE_PAIRS.items()}

# Characters that separate fields written on one line ("PMID 123: "quote" -- context").
SEPARATORS = " \t\n,;:|-–—.)]}*_>"

_ID = r"(?=[A-Za-z]*\d)[A-Za-z0-9]+"  # an id has a digit: "PMID: Quote: ..." has no PMID
_PMID_VALUE = re.compile(r"[\W_]{0,12}?(?:(?:PMID|PubMed\s*ID)s?\b[\W_]{0,6}?)?(" + _ID + ")", re.I)
_MORE_IDS = re.compile(r"\s*(?:,|;|/|&|\band\b)\s*(?:PMIDs?\s*[:#]?\s*)?(" + _ID + r")\b", re.I)
PMID_REF = re.compile(
    r"[\[(]?\s*\b(?:PMID|PubMed\s*ID)s?\b\s*[:#=]?\s*(?:\*\*|__)?\s*(" + _ID + r")(?:\*\*|__)?\s*[\])]?", re.I
)

# "Label: text", "**Label:** text", "**Label**: text", "[Label: text"; the label is looked up by the caller.
# "Label:** text" too: a bold label on one line ('"..." **Context:** c') loses its opening "**" to the
# separators stripped before it.
FIELD_LABEL = re.compile(
    r"[\[(]?\s*(?:(?P<b>\*\*|__|\*|_)\s*(?P<l1>[A-Za-z][A-Za-z &/()'-]{0,40}?)\s*(?:(?P=b)\s*[:=]|[:=]\s*(?P=b))"
    r"|(?P<l2>[A-Za-z][A-Za-z &/()'-]{0,40}?)\s*(?:(?:\*\*|__)\s*[:=]|[:=](?:\s*(?:\*\*|__))?))[ \t]*"
)

# A label word is negated by a cue right before it, or one filler word after the cue ("cannot be
# supported", "not fully supported", "no study refutes"), by "lacks"/"fails to", or by a prefix.
_NEG_CUE = r"\b(?:not|no|neither|nor|never|cannot|\w+n['’]t)[\s_-]+"
_NEG_FILLER = r"(?:(?:\w+ly|well|be|been|being|yet|any|evidence|data|study|studies|trials?)[\s_-]+)?"
_NEG_VERB = r"\b(?:lack(?:s|ed|ing)?|fail(?:s|ed)?[\s_-]+to)[\s_-]+"
_LABELS = re.compile(
    r"(?P<nei>\bnot[\s_-]+enough[\s_-]+(?:info(?:rmation)?|evidence|data)\b|\bNEI\b"
    r"|\binsufficient[\s_-]+(?:evidence|information|data)\b)"
    rf"|(?:(?P<neg>{_NEG_CUE}{_NEG_FILLER}|{_NEG_VERB}|\b(?:un|non)-?)|\b)"
    r"(?P<word>support(?:ed|s)?|refut(?:ed|es|e)?)\b",
    re.I,
)

_SECTION_PATTERNS: dict[str, re.Pattern[str]] = {
    "supporting": re.compile(
        r"(?:supporting|supportive)(?: evidence| studies| papers| literature)?|evidence (?:for|supporting)(?: the claim)?"
    ),
    "refuting": re.compile(
        r"(?:refuting|refutational|contradicting|contradictory|opposing|conflicting)"
        r"(?: evidence| studies| papers| literature)?|evidence (?:against|refuting|contradicting)(?: the claim)?"
    ),
    "summary": re.compile(r"summary"),
    "conclusion": re.compile(r"(?:final )?(?:conclusion|verdict|label|answer)"),
}
SECTION_NAMES = {
    "supporting": "Supporting evidence",
    "refuting": "Refuting evidence",
    "summary": "Summary",
    "conclusion": "Conclusion",
}


def snip(text: str, n: int = 60) -> str:
    """A short one-line excerpt for a problem message."""
    s = " ".join(text[: n * 4].split())
    return s if len(s) <= n else s[: n - 1] + "…"


def norm_words(text: str) -> str:
    """Lower-case letters only, single spaces: how titles and field labels are compared."""
    t = text.lower().replace("&", " and ").replace("/", " and ")
    return " ".join(re.sub(r"[^a-z]+", " ", t).split())


def section_kind(title: str) -> str | None:
    """'supporting' | 'refuting' | 'summary' | 'conclusion' for a section title, else None."""
    t = re.sub(r"\([^)]{0,80}\)", " ", title[:200])  # "Supporting evidence (3 papers)"
    t = re.sub(r"^\W*(?:\d{1,2}|[ivx]{1,4}|[a-h])[.)]\s+", "", t.strip(), flags=re.I)  # "1. Summary"
    t = t.strip(" *_#:")
    if not re.fullmatch(r"[A-Za-z][A-Za-z &/'’-]*", t):  # "- Supporting 1" is a list line, not a title
        return None
    t = norm_words(t)
    for kind, pattern in _SECTION_PATTERNS.items():
        if pattern.fullmatch(t):
            return kind
    return None


def find_opener(text: str, start: int = 0) -> int:
    """Index of the first opening quote mark at or after `start`, or -1."""
    m = _OPENER_RE.search(text, start)
    return m.start() if m else -1


def closers(text: str, opener_at: int) -> list[int]:
    """Indices of the marks that can close the quote opened at `opener_at`."""
    return closer_positions(text, text[opener_at], opener_at + 1)


def closer_positions(text: str, opener: str, start: int = 0) -> list[int]:
    """Indices (from `start`) of the marks that can close a quote opened with `opener`."""
    return [m.start() for m in _CLOSER_RE[opener].finditer(text, start)]


def has_closer(text: str, opener: str) -> bool:
    """Whether `text` holds a mark that closes a quote opened with `opener`."""
    return _CLOSER_RE[opener].search(text) is not None


def ends_with_closer(text: str, opener: str) -> bool:
    """Whether `text` ends with a mark closing `opener` (trailing punctuation allowed: `"...".`)."""
    return re.search("[" + re.escape(QUOTE_PAIRS[opener]) + r"][\s.,;:!?)\]]*$", text[-200:]) is not None


def unquote(text: str) -> str:
    """Strip one pair of surrounding quote marks and the outer whitespace."""
    s = text.strip()
    if len(s) > 1 and s[0] in QUOTE_PAIRS and s[-1] in QUOTE_PAIRS[s[0]]:
        return s[1:-1].strip()
    return s


def field_label_at_start(text: str, known: dict[str, str]) -> tuple[str | None, str]:
    """(known[label], the text after it) when `text` starts with a known field label, else (None, text)."""
    m = FIELD_LABEL.match(text)
    if m:
        words = norm_words(m.group("l1") or m.group("l2"))
        # "Context (why it supports the claim):", "Quote from the abstract:": the first word decides
        key = known.get(words) or known.get(words.split(" ")[0])
        if key:
            return key, text[m.end() :]
    return None, text


def split_pmid(text: str) -> tuple[str | None, list[str], str]:
    """Read the id at the start of a PMID field: (pmid, further ids listed, the rest of the text)."""
    m = _PMID_VALUE.match(text)
    if not m:
        return None, [], text
    more: list[str] = []
    end = m.end()
    while (extra := _MORE_IDS.match(text, end)) is not None:
        more.append(extra.group(1))
        end = extra.end()
    return m.group(1), more, text[end:]


def canon_pmid(value: str) -> str:
    """'PMID: 123', '[PMID 123]', ' 123 ' -> '123'; '' when there is no id."""
    pmid, _more, _rest = split_pmid(value.strip())
    return pmid or ""


def read_labels(text: str) -> tuple[list[Label], str]:
    """The labels stated in `text`, in order, and the text left when they are removed.

    A negated word ("NOT SUPPORTED", "unsupported", "does not support") is not a label and stays
    in the leftover; "supporting" and "refuting" are not labels either (they are section words).
    """
    labels: list[Label] = []
    leftover: list[str] = []
    pos = 0
    for m in _LABELS.finditer(text):
        if m.group("neg"):
            continue
        leftover.append(text[pos : m.start()])
        pos = m.end()
        if m.group("nei"):
            labels.append(Label.NEI)
        elif m.group("word").lower().startswith("support"):
            labels.append(Label.SUPPORTED)
        else:
            labels.append(Label.REFUTED)
    leftover.append(text[pos:])
    return labels, "".join(leftover)


def has_words(text: str) -> bool:
    return re.search(r"[^\W_]", text) is not None


def pure_label(text: str) -> Label | None:
    """The label when `text` is one label and nothing else ("**Supported.**"), else None."""
    if len(text) > 200:
        return None
    labels, leftover = read_labels(text)
    if labels and len(set(labels)) == 1 and not has_words(leftover):
        return labels[0]
    return None
