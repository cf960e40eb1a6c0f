"""Local search backend: Boolean semantics query by query, ranking, persistence, robustness."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from biocheck.evidence import local_compile
from biocheck.evidence.local import LocalIndex, articles_from_corpus
from biocheck.evidence.query import parse
from biocheck.evidence.types import Article, SearchError, SearchResult


def art(pmid: str, title: str, abstract: str, mesh: list[str] | None = None) -> Article:
    return Article(pmid=pmid, title=title, abstract=abstract, mesh=mesh or [], source="test")


CORPUS = [
    art(
        "01",
        "Aspirin reduces heart attack risk",
        "Daily aspirin lowered the rate of myocardial infarction.",
        ["Aspirin", "Myocardial Infarction"],
    ),
    art(
        "02",
        "Ibuprofen and cardiac events",
        "Ibuprofen use was linked to heart failure in older patients.",
        ["Ibuprofen", "Heart Failure"],
    ),
    art(
        "03",
        "Vaccination schedules in children",
        "Uptake improved when schedules were simplified.",
        ["Vaccination", "Child"],
    ),
    art("04", "Vaccines and autism", "No association between vaccines and autism was found."),
    art(
        "05",
        "Breast cancer screening",
        "Mammography reduced breast cancer mortality.",
        ["Breast Neoplasms", "Mammography"],
    ),
    art("06", "Cancer of the breast in men", "Male breast tumours are rare."),
    art(
        "07",
        "Aspirin and colorectal cancer",
        "Aspirin prevented colorectal adenomas.",
        ["Colorectal Neoplasms", "Aspirin"],
    ),
    art("08", "Heart attack symptoms in women", "Women report atypical chest pain."),
    art("09", "Statins lower cholesterol", "Statin therapy lowers LDL and the risk of heart disease."),
    art("10", "Organization of diabetes care", "Care varies between regions."),
    art("11", "IL-6 signalling in inflammation", "Interleukin 6 drives acute inflammation."),
    art("12", "Aspirin dosing", "Aspirin dose, aspirin timing and aspirin adherence."),
    art("13", "Na\u00efve T cells", "Differentiation of na\u00efve T cells in the thymus."),
    art("14", "Ibuprofen for dental pain", "Ibuprofen relieved pain after tooth extraction."),
    art("15", "Zinc supplementation trial", "Zinc was given daily."),
    art("16", "Zinc supplementation trial", "Zinc was given daily."),  # exact twin of 15: a score tie
    art("17", "Hospital organisation", "The organisation of wards changed."),
    art("18", "Fish oil", "Omega omega omega trial."),
    art("19", "Fish oil", "Omega placebo blinded trial."),  # same length as 18, one "omega"
]


@pytest.fixture(scope="module")
def index() -> LocalIndex:
    return LocalIndex.build(CORPUS)


@pytest.fixture(scope="module")
def no_mesh() -> LocalIndex:
    return LocalIndex.build(a.model_copy(update={"mesh": []}) for a in CORPUS)


def hits(index: LocalIndex, query: str, mode: str = "boolean") -> set[str]:
    return {a.pmid for a in index.search(query, n=50, mode=mode).articles}  # type: ignore[arg-type]


def ranked(index: LocalIndex, query: str, mode: str = "boolean") -> list[str]:
    return [a.pmid for a in index.search(query, n=50, mode=mode).articles]  # type: ignore[arg-type]


# -- Boolean operators ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("aspirin", {"01", "07", "12"}),
        ("aspirin AND heart", {"01"}),
        ("aspirin OR ibuprofen", {"01", "02", "07", "12", "14"}),
        ("aspirin NOT heart", {"07", "12"}),
        ("aspirin heart", {"01"}),  # implicit AND
        ("nonexistentword", set()),
        ("aspirin AND nonexistentword", set()),
        ("aspirin OR nonexistentword", {"01", "07", "12"}),
    ],
)
def test_operators(index: LocalIndex, query: str, expected: set[str]) -> None:
    assert hits(index, query) == expected


def test_left_to_right_without_precedence(index: LocalIndex) -> None:
    # (ibuprofen OR aspirin) AND heart: the dental ibuprofen paper (14) has no "heart".
    assert hits(index, "ibuprofen OR aspirin AND heart") == {"01", "02"}
    assert hits(index, "ibuprofen OR (aspirin AND heart)") == {"01", "02", "14"}
    # (heart NOT aspirin) OR ibuprofen, not heart NOT (aspirin OR ibuprofen).
    assert hits(index, "heart NOT aspirin OR ibuprofen") == {"02", "08", "09", "14"}
    assert hits(index, "heart NOT (aspirin OR ibuprofen)") == {"08", "09"}


def test_nested_parentheses(index: LocalIndex) -> None:
    assert hits(index, "(aspirin OR (ibuprofen NOT pain)) AND (heart OR cardiac)") == {"01", "02"}


# -- phrases, fields, MeSH ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ('"breast cancer"', {"05"}),
        ("breast cancer", {"05", "06"}),
        ('"cancer of the breast"', {"06"}),  # stopwords inside a phrase count
        ('"heart attack"', {"01", "08"}),
        ('"attack heart"', set()),
        ("IL-6", {"11"}),  # hyphenated word = phrase of its parts
        ('"interleukin 6"', {"11"}),
    ],
)
def test_phrases(index: LocalIndex, query: str, expected: set[str]) -> None:
    assert hits(index, query) == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("mammography[ti]", set()),
        ("mammography[ab]", {"05"}),
        ("mammography[tiab]", {"05"}),
        ("mammography[all]", {"05"}),
        ("screening[ti]", {"05"}),
        ("screening[ab]", set()),
        ("heart[ti]", {"01", "08"}),
        ("heart[ab]", {"02", "09"}),
        ('"heart attack"[ab]', set()),
        ('"heart attack"[ti] NOT aspirin[ab]', {"08"}),
    ],
)
def test_field_tags(index: LocalIndex, query: str, expected: set[str]) -> None:
    assert hits(index, query) == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("aspirin[mh]", {"01", "07"}),  # 12 says aspirin in its text but has no MeSH
        ('"breast neoplasms"[mh]', {"05"}),
        ("neoplasms[mh]", {"05", "07"}),  # a word of a heading matches (approximates explosion)
        ('"myocardial infarction"[mesh]', {"01"}),
        ('"aspirin myocardial"[mh]', set()),  # phrases never run across two headings
        ("neoplasms", {"05", "07"}),  # untagged = [all], which includes MeSH
        ("neoplasms[tiab]", set()),
    ],
)
def test_mesh_when_the_index_has_mesh(index: LocalIndex, query: str, expected: set[str]) -> None:
    assert hits(index, query) == expected


def test_mesh_falls_back_to_title_abstract_without_mesh(no_mesh: LocalIndex) -> None:
    assert no_mesh.stats()["docs_with_mesh"] == 0
    assert hits(no_mesh, "aspirin[mh]") == hits(no_mesh, "aspirin[tiab]") == {"01", "07", "12"}
    assert hits(no_mesh, '"heart attack"[mh]') == {"01", "08"}
    assert hits(no_mesh, "neoplasms[mh]") == hits(no_mesh, "neoplasms") == set()


# -- truncation, case, stopwords, unicode ------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("cholest*", {"09"}),
        ("cholest", set()),  # without '*' a word prefix is not a word
        ("vaccin*", {"03", "04"}),
        ("organi*ation", {"10", "17"}),  # inner wildcard: organization and organisation
        ("organization", {"10"}),
        ('"breast canc*"', {"05"}),
        ('"heart attac*"[ti]', {"01", "08"}),
        ("breast-canc*", {"05"}),
        ("zzzzz*", set()),  # a wildcard matching no word matches nothing ...
        ("aspirin OR zzzzz*", {"01", "07", "12"}),  # ... and stays neutral inside an OR
    ],
)
def test_truncation(index: LocalIndex, query: str, expected: set[str]) -> None:
    assert hits(index, query) == expected


def test_truncation_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_compile, "MAX_EXPANSIONS", 1)
    capped = LocalIndex.build(CORPUS)  # fresh compiler: no cached expansions
    # organisation and organization are each in one paper; the tie goes alphabetically.
    assert hits(capped, "organi*ation") == {"17"}


METHYL = [  # the stem of "methylation"/"methylated" is "methyl": a stemmed prefix would match 41-43
    art("40", "DNA methylation in tumours", "Promoters were methylated in most samples.", ["DNA Methylation"]),
    art("41", "Methyl-Red staining", "Methyl red is a pH indicator."),
    art("42", "N-methyl-D-aspartate receptors", "NMDA receptor blockade in rats."),
    art("43", "Methyl donors", "Folate supplies methyl groups.", ["Methylation"]),  # only its MeSH says it
    art("44", "Methylated histones", "Histone marks."),
    art("45", "Hypermethylation of CpG islands", "Islands were hypermethylated."),  # no word starts with it
]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("methylat*", {"40", "43", "44"}),  # words that begin with "methylat", not the stem "methyl"
        ("methylat*[tiab]", {"40", "44"}),  # 43 says "methylation" only in its MeSH
        ("methylat*[ti]", {"40", "44"}),
        ("methylat*[ab]", {"40"}),
        ("methylat*[mh]", {"40", "43"}),
        ('"dna methylat*"', {"40"}),
        ('"methylat* histones"[ti]', {"44"}),
        ("methyl", {"40", "41", "42", "43", "44"}),  # a bare word is still stemmed
        ("methylat* NOT histones", {"40", "43"}),
    ],
)
def test_truncation_matches_words_not_stems(query: str, expected: set[str]) -> None:
    methyl = LocalIndex.build(METHYL)
    assert hits(methyl, query) == expected


@pytest.mark.parametrize(
    ("variant", "reference"),
    [
        ("ASPIRIN", "aspirin"),
        ("Aspirin", "aspirin"),
        ('"BREAST CANCER"', '"breast cancer"'),
        ("MAMMOGRAPHY[TIAB]", "mammography[tiab]"),
        ("CHOLEST*", "cholest*"),
        ("Neoplasms[MH]", "neoplasms[mh]"),
    ],
)
def test_case_insensitive(index: LocalIndex, variant: str, reference: str) -> None:
    assert hits(index, variant) == hits(index, reference) != set()


def test_stemming_matches_word_forms(index: LocalIndex) -> None:
    assert hits(index, "statin") == hits(index, "statins") == {"09"}
    assert hits(index, "lowering") == {"01", "09"}  # lowered, lower, lowers


def test_lowercase_operators_are_ignored_stopwords(index: LocalIndex) -> None:
    assert hits(index, "aspirin and heart") == {"01"}
    assert hits(index, "aspirin or ibuprofen") == set()  # = aspirin AND ibuprofen
    assert hits(index, "the aspirin") == hits(index, "aspirin")
    assert hits(index, "aspirin AND the") == hits(index, "aspirin")
    assert hits(index, "aspirin NOT the") == hits(index, "aspirin")


def test_only_stopwords_is_an_error(index: LocalIndex) -> None:
    for query in ("the", "the AND of", "-- ;"):
        with pytest.raises(SearchError, match="no searchable words"):
            index.search(query)
    with pytest.raises(SearchError, match="no searchable words"):
        index.search("the of and", mode="bm25")
    with pytest.raises(SearchError, match="too long"):
        index.search("aspirin " * 1000, mode="bm25")


def test_accents_fold(index: LocalIndex) -> None:
    assert hits(index, "naive") == hits(index, "na\u00efve") == hits(index, "NA\u00cfVE[ti]") == {"13"}


# -- ranking, determinism, result shape --------------------------------------------------------


def test_boolean_results_are_ranked_by_bm25(index: LocalIndex) -> None:
    assert ranked(index, "aspirin")[0] == "12"  # four mentions in a short abstract
    assert ranked(index, "omega AND trial") == ["18", "19"]


def test_bm25_length_normalisation_and_twins(index: LocalIndex) -> None:
    # One "trial" each: the shorter paper (18) first, then the identical twins in pmid order.
    assert ranked(index, "trial NOT placebo") == ["18", "15", "16"]


def test_boolean_order_is_bm25_on_title_abstract_only(index: LocalIndex) -> None:
    # The filter selects, it does not score: an OR ranks exactly like bm25 mode over the same
    # words, although the filter also matched per field (title, abstract, MeSH).
    for boolean, free_text in [
        ("aspirin OR heart", "aspirin heart"),
        ("cancer OR breast[ti]", "cancer breast"),
    ]:
        assert ranked(index, boolean) == ranked(index, free_text, mode="bm25")


def test_only_positive_words_rank(index: LocalIndex) -> None:
    compiler = index._view.compiler  # the ranking terms are what this test is about
    assert compiler.boolean(parse("aspirin NOT (heart OR cardiac)")).rank_terms == ("aspirin",)
    assert compiler.boolean(parse("(cholest* OR the) NOT statins")).rank_terms == ("cholesterol",)


def test_bm25_mode_ranks_repetition_higher(index: LocalIndex) -> None:
    assert ranked(index, "omega", mode="bm25") == ["18", "19"]
    result = index.search("omega", n=5, mode="bm25")
    assert result.articles[0].pmid == "18" and result.total is None


def test_bm25_mode_is_free_text_any_word(index: LocalIndex) -> None:
    # No Boolean filter: either word may match; operators and quotes are just text.
    assert hits(index, "aspirin ibuprofen", mode="bm25") == {"01", "02", "07", "12", "14"}
    assert hits(index, '"aspirin" AND (ibuprofen', mode="bm25") == {"01", "02", "07", "12", "14"}


def test_ties_are_broken_by_pmid_and_stable_across_builds(index: LocalIndex) -> None:
    assert ranked(index, "zinc") == ["15", "16"]
    shuffled = LocalIndex.build(list(reversed(CORPUS)))
    for query, mode in [("zinc", "boolean"), ("aspirin OR heart", "boolean"), ("heart attack", "bm25")]:
        assert ranked(shuffled, query, mode) == ranked(index, query, mode)
        assert ranked(index, query, mode) == ranked(index, query, mode)


def test_unscored_matches_come_in_pmid_order(index: LocalIndex) -> None:
    # A quoted stopword filters but gives BM25 nothing to score: the order is by pmid.
    result = index.search('"in"', n=4)
    assert [a.pmid for a in result.articles] == ["02", "03", "06", "08"] and result.total == 6


def test_result_shape(index: LocalIndex) -> None:
    result = index.search("aspirin OR ibuprofen AND heart", n=1)
    assert isinstance(result, SearchResult)
    assert result.backend == "local"
    assert result.query == "aspirin OR ibuprofen AND heart"
    assert result.translation == "(aspirin[all] OR ibuprofen[all]) AND heart[all]"
    assert result.total == 2 and len(result.articles) == 1
    assert result.searched_at and result.searched_at.endswith("+00:00")
    first = result.articles[0]
    assert first == next(a for a in CORPUS if a.pmid == first.pmid)  # the stored Article, intact


def test_n_is_validated(index: LocalIndex) -> None:
    assert len(index.search("aspirin", n=2).articles) == 2
    for bad in (0, -1, 10_001):
        with pytest.raises(SearchError, match="n must be"):
            index.search("aspirin", n=bad)


def test_get_and_len(index: LocalIndex) -> None:
    assert len(index) == len(CORPUS)
    assert index.get("05") == CORPUS[4]
    assert index.get("nope") is None


# -- add, persistence --------------------------------------------------------------------------


def test_add_inserts_and_replaces() -> None:
    index = LocalIndex.build(CORPUS[:3])
    assert index.add([art("99", "Melatonin and sleep", "Melatonin shortened sleep latency.")]) == 1
    assert hits(index, "melatonin") == {"99"} and len(index) == 4
    index.add([art("99", "Caffeine and sleep", "Caffeine lengthened sleep latency.")])
    assert len(index) == 4
    assert hits(index, "melatonin") == set() and hits(index, "caffeine") == {"99"}
    assert index.get("99").title == "Caffeine and sleep"  # type: ignore[union-attr]


def test_searches_stay_consistent_while_adding() -> None:
    index = LocalIndex.build(CORPUS)
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in range(30):
                assert [a.pmid for a in index.search("aspirin", n=3).articles] == ["12", "07", "01"]
        except BaseException as exc:  # noqa: BLE001  collected and re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    for i in range(10):
        index.add([art(f"x{i}", "Melatonin and sleep", "Melatonin shortened sleep latency.")])
    for thread in threads:
        thread.join()
    assert not errors and len(index) == len(CORPUS) + 10


def test_duplicate_pmid_in_build_keeps_last() -> None:
    index = LocalIndex.build([art("1", "old", "first version"), art("1", "new", "second version")])
    assert len(index) == 1 and index.get("1").title == "new"  # type: ignore[union-attr]


def test_adding_mesh_switches_mh_from_fallback_to_mesh() -> None:
    index = LocalIndex.build(CORPUS[11:12])  # "Aspirin dosing", no MeSH
    assert hits(index, "aspirin[mh]") == {"12"}
    index.add([CORPUS[0]])  # has MeSH "Aspirin"
    assert hits(index, "aspirin[mh]") == {"01"}


QUERIES = [
    ("aspirin OR heart", "boolean"),
    ('"breast cancer"[tiab]', "boolean"),
    ("vaccin*", "boolean"),
    ("neoplasms[mh]", "boolean"),
    ("heart attack risk", "bm25"),
]


def test_persistence_round_trip(tmp_path: Path, index: LocalIndex) -> None:
    path = tmp_path / "evidence" / "local_index"
    built = LocalIndex.build(CORPUS, path=path)
    opened = LocalIndex.open(path)
    assert len(opened) == len(CORPUS)
    for query, mode in QUERIES:
        expected = index.search(query, n=10, mode=mode).articles  # type: ignore[arg-type]
        assert built.search(query, n=10, mode=mode).articles == expected  # type: ignore[arg-type]
        assert opened.search(query, n=10, mode=mode).articles == expected  # type: ignore[arg-type]
    stats = opened.stats()
    assert stats["docs"] == len(CORPUS) and stats["docs_with_mesh"] == 5
    assert stats["size_bytes"] > 0 and "open_seconds" in stats
    # timings are this process's: the build's is in the built index's stats, never on disk (a DVC output)
    assert built.stats()["build_seconds"] >= 0 and "build_seconds" not in stats


def test_add_persists_and_rebuild_replaces(tmp_path: Path) -> None:
    path = tmp_path / "idx"
    LocalIndex.build(CORPUS[:2], path=path).add([CORPUS[2]])
    reopened = LocalIndex.open(path)
    assert hits(reopened, "vaccination") == {"03"} and reopened.stats()["added_docs"] == 1
    LocalIndex.build(CORPUS[3:5], path=path)  # an index directory is replaced, not appended to
    reopened = LocalIndex.open(path)
    assert len(reopened) == 2 and hits(reopened, "vaccination") == {"04"}


def test_the_same_articles_give_the_same_files(tmp_path: Path) -> None:
    # The index is a DVC output: tantivy's random segment names and no time in the metadata.
    def files(path: Path) -> dict[str, bytes]:
        return {f.name: f.read_bytes() for f in sorted(path.iterdir())}

    first, second = LocalIndex.build(CORPUS, path=tmp_path / "a"), LocalIndex.build(CORPUS, path=tmp_path / "b")
    assert files(tmp_path / "a") == files(tmp_path / "b")
    assert ranked(first, "aspirin") == ranked(second, "aspirin")
    assert "build_seconds" not in json.loads((tmp_path / "a" / "biocheck_index.json").read_text())


def test_several_writer_threads_index_the_same_articles_and_warn_of_other_bytes(tmp_path: Path, caplog) -> None:
    """One writer thread writes one segment: the same bytes every build. Several share the articles out as they come
    free (measured: 4 threads on 5,000 abstracts gave 4 segments of other sizes each build): the same documents and
    results, other bytes, which the build says (DVC would see a new index each time)."""
    import random

    rnd = random.Random(0)
    words = [f"w{i}" for i in range(500)]
    papers = [art(str(i), " ".join(rnd.choices(words, k=6)), " ".join(rnd.choices(words, k=60))) for i in range(3000)]

    def files(path: Path) -> dict[str, bytes]:
        return {f.name: f.read_bytes() for f in sorted(path.iterdir())}

    def segments(path: Path) -> int:
        return len(json.loads((path / "meta.json").read_text())["segments"])

    with caplog.at_level("WARNING", logger="biocheck.evidence.local"):
        one = LocalIndex.build(papers, path=tmp_path / "one", threads=1)
        LocalIndex.build(papers, path=tmp_path / "again", threads=1)
    assert segments(tmp_path / "one") == 1 and files(tmp_path / "one") == files(tmp_path / "again")
    assert "segments" not in caplog.text
    with caplog.at_level("WARNING", logger="biocheck.evidence.local"):
        four = LocalIndex.build(papers, path=tmp_path / "four", threads=4)
    n = segments(tmp_path / "four")
    assert (f"the index has {n} segments (4 writer threads)" in caplog.text) is (n > 1)
    assert len(four) == len(one) == 3000
    for query in ("w1 OR w2", "w3 AND w4", "w5 NOT w6"):
        assert ranked(four, query) == ranked(one, query)


def test_renamed_segments_with_deletions_still_open_and_search(tmp_path: Path) -> None:
    from biocheck.evidence.local_files import name_segments

    path = tmp_path / "idx"
    LocalIndex.build(CORPUS[:3], path=path).add([art("02", "Ibuprofen", "Naproxen replaced it.")])
    assert list(path.glob("*.del"))  # two segments, the first with the replaced article deleted
    before = {f.name[:32] for f in path.glob("*.idx")}
    name_segments(path, "digest")
    after = {f.name[:32] for f in path.glob("*.idx")}
    assert len(after) == 2 and not after & before and not [f for f in path.iterdir() if f.name[:32] in before]
    reopened = LocalIndex.open(path)  # every file meta.json names is there, checksums intact
    assert len(reopened) == 3 and hits(reopened, "naproxen") == {"02"} and hits(reopened, "infarction") == {"01"}
    reopened.add([CORPUS[3]])  # tantivy still manages the renamed files: it writes and merges on
    assert hits(LocalIndex.open(path), "autism") == {"04"}


def test_failed_build_keeps_the_previous_index(tmp_path: Path) -> None:
    path = tmp_path / "idx"
    LocalIndex.build(CORPUS[:2], path=path)

    def broken():
        yield CORPUS[2]
        raise RuntimeError("corpus read failed")

    with pytest.raises(RuntimeError, match="corpus read failed"):
        LocalIndex.build(broken(), path=path)
    assert len(LocalIndex.open(path)) == 2  # the old index is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # no staging directory left


def test_open_and_build_refuse_wrong_directories(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="No local search index"):
        LocalIndex.open(tmp_path / "missing")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("not an index")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "biocheck_index.json").write_text('{"format": 1}')  # meta without index files
    with pytest.raises(ValueError, match="rebuild it"):
        LocalIndex.open(broken)
    (broken / "biocheck_index.json").write_text('{"format": 0}')
    with pytest.raises(ValueError, match="has format 0"):
        LocalIndex.open(broken)
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        LocalIndex.build(CORPUS, path=foreign)
    assert (foreign / "keep.txt").read_text() == "not an index"


# -- malformed queries and escaping ------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("(aspirin OR heart", "Unbalanced parenthesis"),
        ('"heart attack', "Unbalanced quote"),
        ("aspirin AND", "has nothing after it"),
        ("aspirin[au]", "Unknown field tag"),
        ("", "Empty query"),
        ("asp*", "at least 4 characters"),
    ],
)
def test_malformed_queries_raise_search_error(index: LocalIndex, query: str, message: str) -> None:
    with pytest.raises(SearchError, match=message.replace("(", r"\(")):
        index.search(query)


NASTY = [
    '"',
    "'",
    "*",
    ":",
    "title:aspirin",
    "abstract:(heart)",
    "aspirin^10",
    "NEAR",
    "aspirin NEAR heart",
    "aspirin NEAR/3 heart",
    "(",
    ")",
    "()",
    "[",
    "]",
    "[]",
    "\\",
    "%",
    "_",
    "'; DROP TABLE x; --",
    '" OR 1=1 --',
    "\x00",
    "\u03b1-synuclein \u2603 \U0001d518\U0001d52b",
    "\u200b",
    "\U0001f642",
    "aspirin'",
    "\u4e2d\u6587 \u68c0\u7d22",
    "*aspirin",
    "aspirin**",
    "+aspirin -heart",
    "x" * 300,
    "AND",
    "OR",
    "NOT",
    "aspirin AND NOT heart",
    "{aspirin}",
    "aspirin~2",
    "$(rm -rf /)",
    "a:b:c",
    "regex:/.*/",
    "aspi.*",
    "heart\nattack",
    "aspirin\tOR\theart",
]


@pytest.mark.parametrize("mode", ["boolean", "bm25"])
@pytest.mark.parametrize("query", NASTY)
def test_special_characters_never_crash(index: LocalIndex, query: str, mode: str) -> None:
    try:
        result = index.search(query, n=5, mode=mode)  # type: ignore[arg-type]
    except SearchError as exc:
        assert str(exc)  # a message the model can read
    else:
        assert isinstance(result, SearchResult)
    assert len(index) == len(CORPUS)  # nothing was dropped or altered


def test_special_characters_are_text_not_syntax(index: LocalIndex) -> None:
    # tantivy's query language would read these as field/boost/proximity: here they are words.
    assert hits(index, "title:aspirin") == set()  # the phrase "title aspirin" is nowhere
    assert hits(index, "aspirin^10") == set()
    assert hits(index, "aspirin NEAR heart") == set()  # "near" is just a word no paper has
    assert hits(index, "heart\nattack") == hits(index, "heart attack") == {"01", "08"}
    assert hits(index, "'; DROP TABLE x; --", mode="bm25") == set()


# -- corpus reader -----------------------------------------------------------------------------


def test_articles_from_corpus_reads_prepared_and_raw_formats(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    records = [
        {"id": "4983", "title": "T1", "abstract": ["Sentence one.", "Sentence two."], "structured": False},
        {"doc_id": 7, "title": "T2", "abstract": ["Only."], "structured": True},
        {"id": "8", "title": "T3", "abstract": [], "mesh": ["Aspirin"], "year": 2001},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    articles = list(articles_from_corpus(path, source="corpus:test"))
    assert [a.pmid for a in articles] == ["4983", "7", "8"]
    assert articles[0].abstract == "Sentence one. Sentence two."
    assert articles[2].mesh == ["Aspirin"] and articles[2].year == 2001 and articles[2].abstract == ""
    assert {a.source for a in articles} == {"corpus:test"}
    assert next(articles_from_corpus(path)).source == "corpus:scifact"


def test_articles_from_corpus_names_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"id": "1", "title": "ok", "abstract": []}\n{"title": "no id"}\n')
    with pytest.raises(ValueError, match=r"corpus.jsonl:2"):
        list(articles_from_corpus(path))
