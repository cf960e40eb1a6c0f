"""The tool's text (agent/tools.py `format_results`) and schema written out by hand, and the training env's wiring.

Other tests compare the env's and the graph's outputs with `format_results` itself; here the text the
model reads is pinned independently, character for character, so a change to it cannot go unnoticed.
"""

from __future__ import annotations

import pytest

from biocheck.agent.prompts import Prompts
from biocheck.agent.tools import MISSING_QUERY, TOOL_NAME, cut_abstract, format_results, tool_function, tool_schema
from biocheck.evidence.search import ToolOutput
from biocheck.train.env import SearchEnv, env_factory
from tests.helpers.turns import A1, A2, TABLE, TableTool

NO_PAPERS = "No papers found for this query. Try fewer concepts, broader terms, synonyms, or remove field tags."


def out(*results: dict, error: str | None = None) -> ToolOutput:
    return ToolOutput(query="q", results=list(results), error=error)


def test_papers_are_blocks_in_order():
    text = format_results(out({"pmid": "1", "title": "T one", "abstract": "A one."},
                              {"pmid": "2", "title": "T two", "abstract": "A two."}))
    assert text == "PMID: 1\nTitle: T one\nAbstract: A one.\n\nPMID: 2\nTitle: T two\nAbstract: A two."


def test_missing_title_and_abstract_have_placeholders():
    assert format_results(out({"pmid": "5"}, {"pmid": "6", "title": "T", "abstract": ""})) == (
        "PMID: 5\nTitle: \nAbstract: (no abstract)\n\nPMID: 6\nTitle: T\nAbstract: (no abstract)")


def test_an_error_wins_over_results_and_no_results_say_how_to_broaden():
    assert format_results(out({"pmid": "1"}, error="Unbalanced parentheses.")) == "Search error: Unbalanced parentheses."
    assert format_results(out()) == NO_PAPERS


@pytest.mark.parametrize("chars, expected", [
    (None, "alpha beta gamma delta"),
    (0, "alpha beta gamma delta"),  # 0 means no cut, like None
    (22, "alpha beta gamma delta"),  # exactly the limit: not cut
    (21, "alpha beta gamma ..."),  # cut inside a word: back to the last whole word
    (16, "alpha beta gamma ..."),  # a word ending exactly at the limit is whole: kept (it used to be dropped)
    (17, "alpha beta gamma ..."),  # cut right after a space
    (12, "alpha beta ..."),  # one letter into a word: that word goes
    (3, "alp ..."),  # no space before the limit: the only cut there is
])
def test_abstract_chars_cut_at_a_word_boundary(chars, expected):
    text = format_results(out({"pmid": "1", "title": "T", "abstract": "alpha beta gamma delta"}), chars)
    assert text == "PMID: 1\nTitle: T\nAbstract: " + expected


def test_the_cut_breaks_at_a_space_not_at_a_line_break():
    text = format_results(out({"pmid": "1", "title": "T", "abstract": "BACKGROUND: one\nMETHODS: two"}), 20)
    # "BACKGROUND: one\nMETH" is cut back to its last space: the line break is not a word boundary
    assert text == "PMID: 1\nTitle: T\nAbstract: BACKGROUND: ..."
    # but a word that ends exactly at the limit, before a line break, is whole and kept
    assert cut_abstract("BACKGROUND: one\nMETHODS: two", 15) == "BACKGROUND: one ..."


def test_the_tool_is_schema_only_and_names_where_searches_run():
    schema = tool_schema(5)
    assert schema["function"]["name"] == TOOL_NAME == "search_pubmed"
    assert schema["function"]["parameters"]["required"] == ["query"]
    assert schema["function"]["parameters"]["properties"]["query"]["type"] == "string"
    with pytest.raises(NotImplementedError,
                       match=r"^schema only: the agent runs searches through agent\.budget\.SearchBudget$"):
        tool_function(5)("x")
    assert MISSING_QUERY == "Search error: search_pubmed needs a 'query' string argument."


@pytest.mark.parametrize("papers, words", [(1, "one"), (3, "three"), (5, "five"), (10, "ten"), (12, "12")])
def test_the_tool_description_states_the_papers_per_search(papers, words):
    assert tool_schema(papers)["function"]["description"] == (
        f"Search PubMed and return up to {words} papers (PMID, title, abstract) in relevance order.")


def test_the_schema_is_a_fresh_copy_each_time():
    schema = tool_schema(3)
    schema["function"]["name"] = "changed"
    assert tool_schema(3)["function"]["name"] == TOOL_NAME


# -- the training environment --------------------------------------------------------------------------


def test_env_text_is_the_tool_text_with_the_budget_note():
    tool = TableTool(TABLE)
    env = SearchEnv(tool, Prompts(max_searches=2), 2, abstract_chars=12)
    assert env.search_pubmed("vit") == ("PMID: 1\nTitle: Vitamin D and fractures\nAbstract: Vitamin D ...\n\n"
                                        "PMID: 2\nTitle: Aspirin and bleeding\nAbstract: Aspirin ...")
    assert env.search_pubmed("none") == NO_PAPERS + "\n\n" + Prompts(max_searches=2).intervention()
    assert env.budget.ledger == {"1": A1, "2": A2} and env.budget.errors == []


def state(env: SearchEnv) -> tuple:
    b = env.budget
    return env.row, b.searches, b.refused, b.queries, b.ledger, b.errors


def test_env_starts_empty_and_reset_without_a_row_clears_it():
    env = SearchEnv(TableTool(TABLE), Prompts(max_searches=1), 1)
    assert state(env) == ({}, 0, 0, [], {}, [])
    old = env.budget
    env.search_pubmed(q="x")
    env.search_pubmed("vit")
    env.reset()
    assert state(env) == ({}, 0, 0, [], {}, []) and env.budget is not old
    assert (old.searches, old.refused) == (1, 1)  # the last episode's budget is left as it was


def test_factory_passes_budget_prompts_and_abstract_cut():
    tool, prompts = TableTool(TABLE), Prompts(max_searches=1, papers_per_search=3)
    env = env_factory(tool, prompts, 1, abstract_chars=12)()
    assert env.search_pubmed("vit").startswith("PMID: 1\nTitle: Vitamin D and fractures\nAbstract: Vitamin D ...")
    assert env.search_pubmed("vit") == prompts.refusal() + " " + prompts.intervention()
    whole = env_factory(tool, prompts, 1)()
    assert "Vitamin D reduced fractures." in whole.search_pubmed("vit")


def test_env_each_call_without_a_query_spends_one_search():
    env = SearchEnv(TableTool(TABLE), Prompts(max_searches=3), 3)
    assert env.search_pubmed() == MISSING_QUERY and env.search_pubmed(query=7) == MISSING_QUERY
    assert env.budget.searches == 2 and env.budget.errors == [MISSING_QUERY, MISSING_QUERY]
