"""Text analysis shared by indexing and querying, so both sides always tokenize the same way.

The analyzers are tantivy objects: the index applies them to documents and the query compiler
calls ``.analyze``/``.pre_tokenize`` on the very same objects, so no Python re-implementation can
drift from what was indexed.
"""

from __future__ import annotations

from functools import cache

import tantivy

STEM = "biocheck_stem"  # title, abstract, MeSH and the ranking field
RAW = "biocheck_raw"  # unstemmed words, only to expand wildcards the way PubMed does
MAX_TOKEN_CHARS = 40  # longer "words" are sequences, hashes, URLs: dropped, as Lucene/tantivy do


def _base() -> tantivy.TextAnalyzerBuilder:
    # Split on every non-alphanumeric character, lower-case, fold accents (naïve -> naive).
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(MAX_TOKEN_CHARS))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
    )


@cache
def stem_analyzer() -> tantivy.TextAnalyzer:
    """Index analyzer: keeps stopwords so quoted phrases like "effect of aspirin" stay exact."""
    return _base().filter(tantivy.Filter.stemmer("english")).build()


@cache
def query_analyzer() -> tantivy.TextAnalyzer:
    """Bare query words and ranking terms: the stem analyzer minus English stopwords.

    The stopword filter keeps token positions, so a hyphenated word still becomes a correct phrase.
    """
    return (
        _base().filter(tantivy.Filter.stopword("english")).filter(tantivy.Filter.stemmer("english")).build()
    )


@cache
def raw_analyzer() -> tantivy.TextAnalyzer:
    """Unstemmed words: wildcard patterns are matched against these, as PubMed matches words."""
    return _base().build()


def register(index: tantivy.Index) -> None:
    """Tokenizers are not stored in the index files, so every opened index needs them again."""
    index.register_tokenizer(STEM, stem_analyzer())
    index.register_tokenizer(RAW, raw_analyzer())
