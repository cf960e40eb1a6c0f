"""What the model is shown of a long abstract (`excerpt`), and that demonstrations quote only that.

A model can copy only what it read: the first `abstract_chars` characters of an abstract rarely hold its
finding, so the tool shows the sentences that match the query, and an SFT demonstration never quotes a
sentence its episode's tool output did not show (it would teach quoting from memory).
"""

from __future__ import annotations

from biocheck.agent.prompts import Prompts
from biocheck.agent.report.parse import parse_report
from biocheck.agent.report.quotes import find_quote
from biocheck.agent.tools import cut_abstract, excerpt, format_results, query_words
from biocheck.data.schema import ClaimRecord, CorpusDoc, GoldEvidence
from biocheck.evidence.search import ToolOutput, article_dict
from biocheck.evidence.types import Article
from biocheck.labels import Label
from biocheck.text import split_sentences
from biocheck.train.demos import demonstration
from biocheck.train.env import make_env

SENTENCES = [
    "Older adults often fall.",
    "We enrolled 2,686 people aged 65 to 85 years living in the community.",
    "Participants took a capsule every four months for five years.",
    "Adherence was high in both groups and few participants withdrew.",
    "Falls were recorded by postcard every month.",
    "Vitamin D supplementation reduced hip fractures by 33 percent compared with placebo.",
    "No serious adverse events were seen.",
]
ABSTRACT = " ".join(SENTENCES)


def test_split_sentences_gives_verbatim_pieces():
    assert split_sentences(ABSTRACT) == SENTENCES
    assert split_sentences("BACKGROUND: A b. C d? (E) f! 5 g. e.g. h") == ["BACKGROUND: A b.", "C d?", "(E) f!",
                                                                          "5 g. e.g. h"]


def test_query_words_drop_operators_and_field_tags_and_keep_truncation():
    assert query_words('vitamin[tiab] AND (fractur* OR "hip") NOT rats[mh]') == {"vitamin", "fractur*", "hip", "rats"}
    assert query_words("D AND of[tiab]") == set()  # words under three letters carry no topic


def test_a_short_abstract_is_shown_whole():
    assert excerpt(ABSTRACT, len(ABSTRACT), "anything") == ABSTRACT


def test_the_matching_sentence_at_the_end_is_shown_where_the_first_characters_miss_it():
    finding = SENTENCES[5]
    assert not find_quote(finding, cut_abstract(ABSTRACT, 200))  # the old view: the finding is cut off
    shown = excerpt(ABSTRACT, 200, "vitamin[tiab] AND fractur*")
    assert find_quote(finding, shown)
    pieces = [p for p in shown.split(" ... ") if p not in ("...", "")]
    pieces = [p.removeprefix("... ").removesuffix(" ...") for p in pieces]
    assert pieces and all(find_quote(p, ABSTRACT) for p in pieces)  # every shown piece is verbatim
    assert len(shown) <= 200 + len(" ... ") * 3  # the budget, plus the gap marks


def test_kept_sentences_stay_in_the_abstracts_order_with_gap_marks():
    shown = excerpt(ABSTRACT, 170, "enrolled AND fractures")
    first, second = shown.find(SENTENCES[1]), shown.find(SENTENCES[5])
    assert 0 <= first < second  # abstract order, not score order
    assert shown.startswith("... ") and " ... " in shown and shown.endswith(" ...")


def test_no_query_word_in_the_abstract_falls_back_to_the_first_characters():
    assert excerpt(ABSTRACT, 120, "aspirin[tiab]") == cut_abstract(ABSTRACT, 120)
    assert excerpt(ABSTRACT, 120, "") == cut_abstract(ABSTRACT, 120)
    one_long = "Vitamin D " + "and more words " * 30 + "end. Short one."
    assert excerpt(one_long, 60, "vitamin") == cut_abstract(one_long, 60)  # the match alone exceeds the budget


def test_the_tool_text_shows_the_excerpt_for_its_own_query():
    art = Article(pmid="7", title="Vitamin D trial", abstract=ABSTRACT, source="corpus:test")
    out = ToolOutput(query="vitamin[tiab] AND fractur*", results=[article_dict(art)], articles=[art])
    assert excerpt(ABSTRACT, 200, out.query) in format_results(out, 200)
    assert ABSTRACT in format_results(out, None)


class Tool:
    def __init__(self, *articles: Article):
        self.articles = list(articles)

    def run(self, query: str) -> ToolOutput:
        return ToolOutput(query=query, results=[article_dict(a) for a in self.articles], articles=self.articles)


def _demo(chars: int | None, rationale: int) -> tuple[list[dict], str]:
    doc = CorpusDoc(id="7", title="Vitamin D trial", abstract=SENTENCES)
    art = Article(pmid="7", title=doc.title, abstract=ABSTRACT, source="corpus:test")
    record = ClaimRecord(id="1", dataset="scifact", split="train", label=Label.SUPPORTED,
                         claim="Vitamin D supplementation prevents hip fractures.",
                         evidence=[GoldEvidence(doc_id="7", sentences=[rationale], label=Label.SUPPORTED)])
    env = make_env(Tool(art), Prompts(max_searches=2), 2, abstract_chars=chars)
    msgs = demonstration(record, env, {"7": doc}, 2)
    return msgs, "\n\n".join(m["content"] for m in msgs if m["role"] == "tool")


def test_a_demonstration_quotes_the_finding_its_tool_output_showed():
    msgs, shown = _demo(chars=200, rationale=5)
    report = parse_report(msgs[-1]["content"]).report
    assert report.conclusion is Label.SUPPORTED
    assert [e.quote for e in report.supporting] == [SENTENCES[5]]
    assert find_quote(SENTENCES[5], shown)


def test_a_demonstration_never_quotes_a_retrieved_sentence_that_was_not_shown():
    # rationale 2 ("capsule every four months") matches no query word and lies past the budget: not shown
    msgs, shown = _demo(chars=120, rationale=2)
    assert not find_quote(SENTENCES[2], shown)
    report = parse_report(msgs[-1]["content"]).report
    assert report.supporting == [] and report.refuting == [] and report.conclusion is Label.NEI
    # the whole abstract shown (abstract_chars null): the same sentence is quoted
    msgs, _ = _demo(chars=None, rationale=2)
    assert [e.quote for e in parse_report(msgs[-1]["content"]).report.supporting] == [SENTENCES[2]]


def test_a_demonstration_cites_each_paper_once_with_its_own_context_line():
    # Two quotes of one paper under one shared context line taught the smol SFT model to repeat its
    # evidence list until the token limit: one item per paper, and the paper's title in its context line.
    other = ["Hip fractures were as frequent with vitamin D as with placebo.", "Nothing else differed."]
    docs = {"7": CorpusDoc(id="7", title="Vitamin D trial", abstract=SENTENCES),
            "8": CorpusDoc(id="8", title="A second trial", abstract=other)}
    arts = [Article(pmid=k, title=d.title, abstract=" ".join(d.abstract), source="corpus:test") for k, d in docs.items()]
    record = ClaimRecord(id="1", dataset="scifact", split="train", label=Label.SUPPORTED,
                         claim="Vitamin D supplementation prevents hip fractures.",
                         evidence=[GoldEvidence(doc_id="7", sentences=[5, 6], label=Label.SUPPORTED),
                                   GoldEvidence(doc_id="7", sentences=[1], label=Label.SUPPORTED),
                                   GoldEvidence(doc_id="8", sentences=[0, 1], label=Label.SUPPORTED)])
    env = make_env(Tool(*arts), Prompts(max_searches=2), 2, abstract_chars=None)
    report = parse_report(demonstration(record, env, docs, 2)[-1]["content"]).report
    assert [(e.pmid, e.quote) for e in report.supporting] == [("7", SENTENCES[5]), ("8", other[0])]
    contexts = [e.context for e in report.supporting]
    assert len(set(contexts)) == 2 and "Vitamin D trial" in contexts[0] and "A second trial" in contexts[1]
