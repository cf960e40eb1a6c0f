"""PubMed query syntax: tokenizer and recursive-descent parser producing a small AST.

The grammar follows PubMed's rules where they are documented:

* ``AND``, ``OR``, ``NOT`` are operators only in upper case; lower-case ``and`` is an ordinary
  word (a stopword, so the backend ignores it). ``NOT`` is binary (``a NOT b``).
* No precedence: operators are applied left to right, so ``a OR b AND c`` is ``(a OR b) AND c``.
  Parentheses group.
* Adjacent terms without an operator are joined by ``AND``.
* ``"quoted phrases"``; a field tag (``[tiab]``, ``[ti]``, ``[ab]``, ``[mh]``, ``[all]`` and
  PubMed's long forms) applies to the single word or phrase right before it.
* ``*`` is a wildcard for zero or more characters and needs at least 4 characters before the
  first ``*`` of a word (PubMed's rule since 2024).

Anything malformed raises :class:`SearchError` with a short message a small LLM can act on.
The parser never evaluates anything: backends compile the AST (see ``local_compile.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from biocheck.evidence.types import SearchError

Field = Literal["all", "tiab", "ti", "ab", "mh"]

MAX_QUERY_CHARS = 4000
MAX_TERMS = 256  # bounds the AST depth too, so compiling it never hits the recursion limit
MAX_DEPTH = 32  # nested parentheses
MIN_WILDCARD_PREFIX = 4  # PubMed: "at least 4 characters before the first wildcard"

# PubMed accepts the short tags and the long names shown on its Advanced page.
FIELD_TAGS: dict[str, Field] = {
    "tiab": "tiab",
    "title/abstract": "tiab",
    "ti": "ti",
    "title": "ti",
    "ab": "ab",
    "abstract": "ab",
    "mh": "mh",
    "mesh": "mh",
    "mesh terms": "mh",
    "mh:noexp": "mh",  # no MeSH tree here, so "no explosion" changes nothing
    "majr": "mh",  # no major/minor distinction in a corpus: approximated by any MeSH heading
    "mesh major topic": "mh",
    "all": "all",
    "all fields": "all",
    "tw": "all",  # text words: title, abstract and MeSH here
}
_SUPPORTED_TAGS = "[tiab], [ti], [ab], [mh], [all]"

OPERATORS = ("AND", "OR", "NOT")
_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u00ab": '"', "\u00bb": '"'})
_WORD_CHUNK = re.compile(r"(?:[^\W_]|\*)+")  # a word as the index tokenizer sees it, keeping '*'


@dataclass(frozen=True)
class Term:
    """One searchable unit: a bare word or a quoted phrase, with its field."""

    text: str
    field: Field = "all"
    phrase: bool = False

    @property
    def wildcard(self) -> bool:
        return "*" in self.text


@dataclass(frozen=True)
class And:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    left: Node
    right: Node


Node = Term | And | Or | Not


@dataclass(frozen=True)
class _Token:
    kind: Literal["word", "phrase", "op", "tag", "lparen", "rparen"]
    value: str
    pos: int  # character offset in the query, for error messages


def _excerpt(query: str, limit: int = 120) -> str:
    return query if len(query) <= limit else query[: limit - 3] + "..."


def _error(message: str, query: str) -> SearchError:
    return SearchError(f"{message} (query: {_excerpt(query)})")


def tokenize(query: str) -> list[_Token]:
    """Split a query into words, phrases, operators, field tags and parentheses."""
    tokens: list[_Token] = []
    i, n = 0, len(query)
    while i < n:
        c = query[i]
        if c.isspace():
            i += 1
        elif c == "(":
            tokens.append(_Token("lparen", c, i))
            i += 1
        elif c == ")":
            tokens.append(_Token("rparen", c, i))
            i += 1
        elif c == '"':
            end = query.find('"', i + 1)
            if end < 0:
                raise _error(f"Unbalanced quote (opened at position {i}, never closed)", query)
            text = query[i + 1 : end]
            if not text.strip():
                raise _error(f'Empty quoted phrase "" at position {i}', query)
            tokens.append(_Token("phrase", text, i))
            i = end + 1
        elif c == "[":
            end = query.find("]", i + 1)
            if end < 0:
                raise _error(f"Unclosed field tag '[' at position {i}; write e.g. aspirin[tiab]", query)
            tokens.append(_Token("tag", query[i + 1 : end], i))
            i = end + 1
        elif c == "]":
            raise _error(f"Unexpected ']' at position {i}", query)
        else:
            start = i
            while i < n and not query[i].isspace() and query[i] not in '()"[]':
                i += 1
            word = query[start:i]
            kind = "op" if word in OPERATORS else "word"
            tokens.append(_Token(kind, word, start))
    return tokens


def _check_wildcards(text: str, query: str) -> None:
    for chunk in _WORD_CHUNK.findall(text):
        star = chunk.find("*")
        if star >= 0 and star < MIN_WILDCARD_PREFIX:
            raise _error(
                f"Wildcard '*' needs at least {MIN_WILDCARD_PREFIX} characters before it "
                f"(got '{chunk}'; e.g. vaccin*)",
                query,
            )


class _Parser:
    def __init__(self, tokens: list[_Token], query: str) -> None:
        self.tokens = tokens
        self.query = query
        self.i = 0
        self.terms = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def next(self) -> _Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def expr(self, depth: int) -> Node:
        node = self.unit(depth)
        while (tok := self.peek()) is not None and tok.kind != "rparen":
            if tok.kind == "op":
                self.next()
                following = self.peek()
                if following is None or following.kind == "rparen":
                    raise _error(
                        f"Operator {tok.value} at position {tok.pos} has nothing after it", self.query
                    )
                if following.kind == "op":
                    message = (
                        f"Operator {following.value} at position {following.pos} directly follows {tok.value}"
                    )
                    raise _error(message, self.query)
                op = tok.value
            else:
                op = "AND"  # PubMed joins adjacent terms with AND
            node = _combine(op, node, self.unit(depth))
        return node

    def unit(self, depth: int) -> Node:
        tok = self.next()
        if tok.kind == "lparen":
            if depth >= MAX_DEPTH:
                raise _error(f"Parentheses nested deeper than {MAX_DEPTH}", self.query)
            inner = self.peek()
            if inner is None:
                raise _error("Unbalanced parenthesis: '(' is never closed", self.query)
            if inner.kind == "rparen":
                raise _error(f"Empty parentheses at position {tok.pos}", self.query)
            node = self.expr(depth + 1)
            close = self.peek()
            if close is None:
                raise _error(f"Unbalanced parenthesis: '(' at position {tok.pos} is never closed", self.query)
            self.next()
            after = self.peek()
            if after is not None and after.kind == "tag":
                raise _error(
                    f"Field tag [{after.value}] after ')' is not supported; tag each term, "
                    "e.g. (aspirin[tiab] OR ibuprofen[tiab])",
                    self.query,
                )
            return node
        if tok.kind == "rparen":
            raise _error(f"Unbalanced parenthesis: unexpected ')' at position {tok.pos}", self.query)
        if tok.kind == "op":
            where = "start the query" if tok.pos == self.tokens[0].pos else "follow '('"
            hint = " (NOT is binary: write 'a NOT b')" if tok.value == "NOT" else ""
            raise _error(f"Operator {tok.value} at position {tok.pos} cannot {where}{hint}", self.query)
        if tok.kind == "tag":
            raise _error(
                f"Field tag [{tok.value}] at position {tok.pos} must follow a word or phrase", self.query
            )
        self.terms += 1
        if self.terms > MAX_TERMS:
            raise _error(f"Too many terms (more than {MAX_TERMS})", self.query)
        field: Field = "all"
        tag = self.peek()
        if tag is not None and tag.kind == "tag":
            self.next()
            field = _field(tag, self.query)
        _check_wildcards(tok.value, self.query)
        return Term(text=tok.value.strip(), field=field, phrase=tok.kind == "phrase")


def _field(tag: _Token, query: str) -> Field:
    name = " ".join(tag.value.lower().split())
    if name not in FIELD_TAGS:
        raise _error(f"Unknown field tag [{tag.value}]; supported: {_SUPPORTED_TAGS}", query)
    return FIELD_TAGS[name]


def _combine(op: str, left: Node, right: Node) -> Node:
    # AND and OR are associative, so left-to-right chains flatten without changing meaning.
    if op == "AND":
        return And((*left.items, right) if isinstance(left, And) else (left, right))
    if op == "OR":
        return Or((*left.items, right) if isinstance(left, Or) else (left, right))
    return Not(left, right)


def parse(query: str) -> Node:
    """Parse a PubMed-style query into an AST; raise SearchError if it is malformed."""
    if len(query) > MAX_QUERY_CHARS:
        raise SearchError(f"Query too long ({len(query)} characters; the limit is {MAX_QUERY_CHARS})")
    query = query.translate(_QUOTES)
    tokens = tokenize(query)
    if not tokens:
        raise SearchError("Empty query: give at least one search term")
    parser = _Parser(tokens, query)
    node = parser.expr(depth=0)
    leftover = parser.peek()
    if leftover is not None:  # only a ')' can stop the top-level expression early
        raise _error(f"Unbalanced parenthesis: unexpected ')' at position {leftover.pos}", query)
    return node


def to_string(node: Node, top: bool = True) -> str:
    """Render an AST back to PubMed syntax with explicit grouping (used as the translation)."""
    if isinstance(node, Term):
        text = f'"{node.text}"' if node.phrase else node.text
        return f"{text}[{node.field}]"
    if isinstance(node, Not):
        inner = f"{to_string(node.left, False)} NOT {to_string(node.right, False)}"
    else:
        op = " AND " if isinstance(node, And) else " OR "
        inner = op.join(to_string(item, False) for item in node.items)
    return inner if top else f"({inner})"


def terms(node: Node, positive_only: bool = False) -> list[Term]:
    """The leaves in query order; with positive_only, skip everything on the right of a NOT."""
    if isinstance(node, Term):
        return [node]
    if isinstance(node, Not):
        left = terms(node.left, positive_only)
        return left if positive_only else left + terms(node.right, positive_only)
    return [leaf for item in node.items for leaf in terms(item, positive_only)]
