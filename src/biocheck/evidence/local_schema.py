"""Tantivy schema of the local index: one document per article.

Fields and why each exists:

* ``pmid``: exact id (raw token) for upserts and ``get``; fast and stored, to order ties by pmid.
* ``title``, ``abstract``, ``mesh``: stemmed with positions, for field tags and phrases. ``mesh``
  holds one value per heading, so a phrase cannot run from one heading into the next.
* ``text``: title + abstract again, frequencies only: the single field BM25 ranks on (one
  combined field ranks better on SciFact than summing per-field BM25, see docs/search.md).
* ``raw``: unstemmed words of all fields, doc ids only: the term dictionary wildcards expand on.
* ``raw_title``, ``raw_abstract``, ``raw_mesh``: the same fields unstemmed, with positions: where
  a wildcard's expansions are matched, so ``methylat*`` finds *methylation* but not *Methyl-Red*
  (both stem to ``methyl``).
* ``flags``: ``mesh`` when the article has MeSH, so the index knows whether MeSH exists at all.
* ``article``: the Article as JSON, stored (compressed) and returned as is.
"""

from __future__ import annotations

import tantivy

from biocheck.evidence.local_analysis import RAW, STEM
from biocheck.evidence.types import Article

PMID = "pmid"
TITLE = "title"
ABSTRACT = "abstract"
MESH = "mesh"
TEXT = "text"
RAW_WORDS = "raw"
RAW_TITLE = "raw_title"
RAW_ABSTRACT = "raw_abstract"
RAW_MESH = "raw_mesh"
UNSTEMMED = {TITLE: RAW_TITLE, ABSTRACT: RAW_ABSTRACT, MESH: RAW_MESH}  # field -> its unstemmed twin
FLAGS = "flags"
ARTICLE = "article"
HAS_MESH_FLAG = "mesh"


def build_schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field(PMID, stored=True, fast=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field(TITLE, tokenizer_name=STEM, index_option="position")
    builder.add_text_field(ABSTRACT, tokenizer_name=STEM, index_option="position")
    builder.add_text_field(MESH, tokenizer_name=STEM, index_option="position")
    builder.add_text_field(TEXT, tokenizer_name=STEM, index_option="freq")
    builder.add_text_field(RAW_WORDS, tokenizer_name=RAW, index_option="basic")
    for raw in UNSTEMMED.values():
        builder.add_text_field(raw, tokenizer_name=RAW, index_option="position")
    builder.add_text_field(FLAGS, tokenizer_name="raw", index_option="basic")
    builder.add_bytes_field(ARTICLE, stored=True)
    return builder.build()


def to_document(article: Article) -> tantivy.Document:
    doc = tantivy.Document()
    doc.add_text(PMID, article.pmid)
    doc.add_text(TITLE, article.title)
    doc.add_text(ABSTRACT, article.abstract)
    # Two values of one field: BM25 sees one document length, title and abstract together.
    doc.add_text(TEXT, article.title)
    doc.add_text(TEXT, article.abstract)
    doc.add_text(RAW_WORDS, article.title)
    doc.add_text(RAW_WORDS, article.abstract)
    doc.add_text(RAW_TITLE, article.title)
    doc.add_text(RAW_ABSTRACT, article.abstract)
    for heading in article.mesh:
        doc.add_text(MESH, heading)
        doc.add_text(RAW_MESH, heading)
        doc.add_text(RAW_WORDS, heading)
    if article.mesh:
        doc.add_text(FLAGS, HAS_MESH_FLAG)
    doc.add_bytes(ARTICLE, article.model_dump_json().encode())
    return doc


def from_document(doc: tantivy.Document) -> Article:
    return Article.model_validate_json(doc.get_first(ARTICLE))
