"""Compile a parsed query (``query.py`` AST) into tantivy query objects.

Queries are built from tantivy's programmatic constructors (term, phrase, boolean ...), never
from tantivy's own query-string syntax, so no character a user types (quotes, ``:``, ``^``,
``NEAR``, parentheses) can change the meaning of the search: query text is only ever
*analyzed* into tokens.

Semantics (documented in docs/search.md):

* a bare word is analyzed like the documents (stemmed); English stopwords and pure punctuation
  analyze to nothing and are ignored, as PubMed ignores stopwords; a hyphenated word
  (``IL-6``) becomes a phrase of its parts;
* a quoted phrase matches its words consecutively, stopwords included;
* a wildcard word expands to at most 600 unstemmed index words (PubMed's limit), most frequent
  first, which are OR-ed and matched as words, unstemmed (``methylat*`` finds *methylation*, not
  *Methyl-Red*, although both stem to ``methyl``); a phrase or hyphenated word holding a wildcard
  is matched on the unstemmed fields as a whole;
* ``[mh]`` searches MeSH headings when the index has any MeSH, otherwise title/abstract;
* the Boolean filter decides *which* documents match; ranking is BM25 of the query's positive
  words (not under a NOT) on the combined title+abstract field.
"""

from __future__ import annotations

import itertools
import logging
import re
from dataclasses import dataclass

import tantivy

from biocheck.evidence import local_schema as S
from biocheck.evidence.local_analysis import query_analyzer, raw_analyzer, stem_analyzer
from biocheck.evidence.query import And, Node, Not, Term, terms
from biocheck.evidence.types import SearchError

log = logging.getLogger(__name__)

MAX_EXPANSIONS = 600  # PubMed: "the first 600 variations of the truncated term"
_CHUNK = re.compile(r"(?:[^\W_]|\*)+")  # words as the simple tokenizer splits them, keeping '*'

_Must, _Should, _MustNot = tantivy.Occur.Must, tantivy.Occur.Should, tantivy.Occur.MustNot


@dataclass(frozen=True)
class Compiled:
    """A query ready to run: ``query`` selects and scores, ``rank_terms`` are the scored stems."""

    query: tantivy.Query
    rank_terms: tuple[str, ...]


class QueryCompiler:
    """Compiles for one searcher: wildcard expansions depend on that searcher's term dictionary."""

    def __init__(self, schema: tantivy.Schema, searcher: tantivy.Searcher, has_mesh: bool) -> None:
        self.schema = schema
        self.searcher = searcher
        self.has_mesh = has_mesh
        self._expansions: dict[str, list[str]] = {}

    # -- entry points -------------------------------------------------------------------------

    def boolean(self, node: Node) -> Compiled:
        selector = self._node(node)
        if selector is None:
            raise SearchError(
                "Query has no searchable words (only stopwords or punctuation); use content words"
            )
        rank = self._rank_terms(terms(node, positive_only=True))
        if not rank:
            return Compiled(selector, ())
        # The filter only selects (score 0); optional ranking clauses add BM25 on title+abstract.
        clauses = [(_Must, tantivy.Query.const_score_query(selector, 0.0))]
        clauses += [(_Should, self._term(S.TEXT, t)) for t in rank]
        return Compiled(tantivy.Query.boolean_query(clauses), rank)

    def free_text(self, text: str) -> Compiled:
        rank = tuple(dict.fromkeys(query_analyzer().analyze(text)))
        if not rank:
            raise SearchError("Query has no searchable words (only stopwords or punctuation)")
        return Compiled(tantivy.Query.boolean_query([(_Should, self._term(S.TEXT, t)) for t in rank]), rank)

    # -- Boolean structure --------------------------------------------------------------------

    def _node(self, node: Node) -> tantivy.Query | None:
        """None means "ignored" (stopwords only): it drops out of its parent, as in PubMed."""
        if isinstance(node, Term):
            return self._leaf(node)
        if isinstance(node, Not):
            left = self._node(node.left)
            right = self._node(node.right)
            if left is None or right is None:
                return left
            return tantivy.Query.boolean_query([(_Must, left), (_MustNot, right)])
        parts = [q for q in (self._node(item) for item in node.items) if q is not None]
        if len(parts) <= 1:
            return parts[0] if parts else None
        occur = _Must if isinstance(node, And) else _Should
        return tantivy.Query.boolean_query([(occur, q) for q in parts])

    # -- leaves -------------------------------------------------------------------------------

    def _fields(self, term: Term) -> list[str]:
        tiab = [S.TITLE, S.ABSTRACT]
        if term.field == "ti":
            return [S.TITLE]
        if term.field == "ab":
            return [S.ABSTRACT]
        if term.field == "tiab":
            return tiab
        if term.field == "mh":
            return [S.MESH] if self.has_mesh else tiab  # no MeSH anywhere: fall back to words
        return tiab + [S.MESH] if self.has_mesh else tiab

    def _leaf(self, term: Term) -> tantivy.Query | None:
        positions = self._wildcard_positions(term) if term.wildcard else self._positions(term)
        if not positions:
            return None
        if any(not alternatives for _, alternatives in positions):
            return tantivy.Query.empty_query()  # a wildcard that matches no word matches nothing
        fields = self._fields(term)
        if term.wildcard:  # expansions are words, not stems: match them where words are kept
            fields = [S.UNSTEMMED[field] for field in fields]
        per_field = [self._match(field, positions) for field in fields]
        return per_field[0] if len(per_field) == 1 else self._any(per_field)

    def _positions(self, term: Term) -> list[tuple[int, list[str]]]:
        # Phrases keep stopwords (exact match); bare words drop them but keep their positions.
        analyzer = stem_analyzer() if term.phrase else query_analyzer()
        tokens = analyzer.pre_tokenize(term.text).tokens
        return [(tok.position - tokens[0].position, [tok.text]) for tok in tokens]

    def _wildcard_positions(self, term: Term) -> list[tuple[int, list[str]]]:
        """Unstemmed words per position: the expansions of a wildcard chunk, the word itself otherwise."""
        positions: list[tuple[int, list[str]]] = []
        for offset, chunk in enumerate(_CHUNK.findall(term.text)):
            if "*" in chunk:
                positions.append((offset, self._expand(chunk)))
            elif term.phrase or query_analyzer().analyze(chunk):  # a bare stopword leaves a gap
                positions += [(offset, [tok]) for tok in raw_analyzer().analyze(chunk)]
        first = positions[0][0] if positions else 0
        return [(offset - first, words) for offset, words in positions]

    def _match(self, field: str, positions: list[tuple[int, list[str]]]) -> tantivy.Query:
        if len(positions) == 1:
            words = positions[0][1]
            if len(words) == 1:
                return self._term(field, words[0])
            return tantivy.Query.term_set_query(self.schema, field, words)
        offsets = [offset for offset, _ in positions]
        combos = itertools.islice(itertools.product(*(words for _, words in positions)), MAX_EXPANSIONS)
        phrases = [
            tantivy.Query.phrase_query(self.schema, field, list(zip(offsets, combo, strict=True)))
            for combo in combos
        ]
        return phrases[0] if len(phrases) == 1 else self._any(phrases)

    def _term(self, field: str, token: str) -> tantivy.Query:
        return tantivy.Query.term_query(self.schema, field, token)

    @staticmethod
    def _any(queries: list[tantivy.Query]) -> tantivy.Query:
        return tantivy.Query.boolean_query([(_Should, q) for q in queries])

    # -- wildcards ----------------------------------------------------------------------------

    def _expand(self, chunk: str) -> list[str]:
        """Unstemmed index words matching a wildcard word, most frequent first, at most 600."""
        if chunk in self._expansions:
            return self._expansions[chunk]
        pieces = ["".join(raw_analyzer().analyze(piece)) for piece in chunk.split("*")]
        prefix = pieces[0]
        if not prefix:  # the parser guarantees 4 characters; analysis can still drop them
            words: list[str] = []
        elif len(pieces) == 2 and not pieces[1]:  # plain truncation "word*"
            found = self.searcher.terms_with_prefix(S.RAW_WORDS, prefix, limit=MAX_EXPANSIONS + 1)
            words = [w for w, _ in found]
        else:  # inner wildcards: walk the prefix, keep the words the whole pattern matches
            pattern = re.compile(".*".join(re.escape(p) for p in pieces))
            found = self.searcher.terms_with_prefix(S.RAW_WORDS, prefix)
            words = [w for w, _ in found if pattern.fullmatch(w)]
        if len(words) > MAX_EXPANSIONS:
            log.info("Wildcard %r matches more than %d words; using the most frequent", chunk, MAX_EXPANSIONS)
            words = words[:MAX_EXPANSIONS]
        self._expansions[chunk] = words
        return words

    # -- ranking ------------------------------------------------------------------------------

    def _rank_terms(self, leaves: list[Term]) -> tuple[str, ...]:
        ranked: dict[str, None] = {}
        for leaf in leaves:
            for chunk in _CHUNK.findall(leaf.text) if leaf.wildcard else [leaf.text]:
                words = self._expand(chunk) if "*" in chunk else [chunk]
                for word in words:
                    ranked.update(dict.fromkeys(query_analyzer().analyze(word)))
        return tuple(ranked)
