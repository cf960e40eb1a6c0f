"""The evaluation baselines (evaluate/systems/no_retrieval.py, cer.py, fire.py) driven by fake models.

A fake chat model records every conversation it is sent, so each test checks what the model read (the
claim, CER's ranked sentences, FIRE's earlier evidence and its stop/retry instructions) as well as the
episode that comes back: label, stop reason, searches, ledger, fingerprints.
"""

from __future__ import annotations

import copy

import pytest

from biocheck.agent.episode import Episode
from biocheck.data.schema import ClaimRecord
from biocheck.evaluate.systems import prompts
from biocheck.evaluate.systems.base import System
from biocheck.evaluate.systems.cer import CER, NO_EVIDENCE, CERConfig, candidates, split_sentences
from biocheck.evaluate.systems.fire import FIRE, MALFORMED, FIREConfig, bag, cosine
from biocheck.evaluate.systems.no_retrieval import NoRetrieval
from biocheck.evaluate.systems.rankers import BM25Ranker, EncoderRanker, make_ranker
from biocheck.evaluate.systems.verdict import NO_LABEL, read_verdict
from biocheck.evidence.search import SearchConfig, ToolOutput, article_dict
from biocheck.evidence.types import Article
from biocheck.labels import DISPLAY, Label
from biocheck.llm.base import AssistantTurn, LLMError, ToolCall
from biocheck.params import check_nested
from biocheck.wiring import make_search_tool

CLAIM = ClaimRecord(id="7", dataset="scifact", split="test", claim="Vitamin D supplementation reduces hip fractures.",
                    label=Label.SUPPORTED)


class FakeChat:
    """Replies from a list (the last reply repeats) or a function of the messages; records what it saw."""

    def __init__(self, replies, fp: str = "model-a") -> None:
        self.replies, self.fp = replies, fp
        self.spec = f"fake:{fp}"
        self.seen: list[list[dict]] = []

    def chat(self, messages, tools):
        self.seen.append(copy.deepcopy(messages))
        if callable(self.replies):
            reply = self.replies(messages)
        else:
            reply = self.replies[min(len(self.seen), len(self.replies)) - 1]
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, AssistantTurn):
            return reply
        return AssistantTurn(content=reply, usage={"prompt_tokens": 10, "completion_tokens": 2})

    def fingerprint(self) -> str:
        return self.fp


class WordTool:
    """Each query finds one paper of its own, in words no other query's paper shares (distinct evidence)."""

    max_results = 3

    def __init__(self, same_paper: bool = False) -> None:
        self.ran: list[str] = []
        self.same_paper = same_paper

    def run(self, query: str, n: int | None = None) -> ToolOutput:
        self.ran.append(query)
        k = 0 if self.same_paper else len(self.ran)
        words = " ".join(f"term{k}x{i}" for i in range(30))
        a = Article(pmid=str(900 + k), title=f"Paper {k}", abstract=f"{words}.", source="test")
        return ToolOutput(query=query, results=[article_dict(a)], articles=[a], backend="words")


def user_texts(messages) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "user"]


@pytest.fixture
def bm25_tool(evidence):
    cfg, _ = evidence
    return make_search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store, mode="bm25", max_results=20))


@pytest.fixture
def boolean_tool(evidence):
    cfg, _ = evidence
    return make_search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store, max_results=3))


# -- label reading -----------------------------------------------------------------------------------

LABEL_FORMS = [
    ("Answer: SUPPORTED", Label.SUPPORTED), ("supported", Label.SUPPORTED), ("**Answer:** Supported.", Label.SUPPORTED),
    ("Answer: REFUTED", Label.REFUTED), ("refuted", Label.REFUTED), ("Verdict: **Refuted**", Label.REFUTED),
    ("Answer: NOT ENOUGH INFORMATION", Label.NEI), ("Not enough information", Label.NEI), ("NEI", Label.NEI),
    ("Answer: not enough info", Label.NEI), ("Conclusion: insufficient evidence", Label.NEI),
    ("## Conclusion\nREFUTED", Label.REFUTED),
    ("<think>Maybe it is refuted.</think>\nAnswer: SUPPORTED", Label.SUPPORTED),
    ("The trials clearly refute the claim.", Label.REFUTED),  # one label in a sentence: taken, with a note
]


@pytest.mark.parametrize("text,label", LABEL_FORMS)
def test_no_retrieval_reads_every_label_form(text, label):
    llm = FakeChat([text])
    ep = NoRetrieval(llm).run(CLAIM)
    assert isinstance(ep, Episode) and ep.report.conclusion == label
    assert ep.final_text == text and ep.stop_reason == "final_answer" and ep.llm_calls == 1
    assert ep.report.supporting == [] and ep.report.refuting == []  # label only


@pytest.mark.parametrize("text", ["I am not sure.", "It is supported in mice but refuted in humans.",
                                  "The claim is not supported.", ""])
def test_unreadable_or_ambiguous_answers_give_no_label(text):
    label, problems = read_verdict(text)
    assert label is None and problems and problems[0].startswith(NO_LABEL)
    ep = NoRetrieval(FakeChat([text])).run(CLAIM)
    assert ep.report.conclusion is None and ep.parse_problems


def test_strict_reading_ignores_a_label_word_inside_a_sentence():
    assert read_verdict("Vitamin D is supported by trials, I should check more.", strict=True)[0] is None
    assert read_verdict("Answer: REFUTED", strict=True) == (Label.REFUTED, [])


# -- no_retrieval ------------------------------------------------------------------------------------


def test_no_retrieval_prompt_holds_the_claim_and_every_label_and_no_evidence():
    llm = FakeChat(["Answer: REFUTED"])
    system = NoRetrieval(llm)
    assert isinstance(system, System) and system.name == "no_retrieval" and system.writes_report is False
    ep = system.run(CLAIM)
    (sent,) = llm.seen
    assert [m["role"] for m in sent] == ["system", "user"]
    assert CLAIM.claim in sent[1]["content"]
    for label in Label:
        assert DISPLAY[label] in sent[0]["content"]
    assert ep.searches == 0 and ep.queries == [] and ep.ledger == {}
    assert (ep.claim, ep.claim_id, ep.dataset, ep.gold_label) == (CLAIM.claim, "7", "scifact", Label.SUPPORTED)
    assert ep.prompt_hash == system.prompt_hash and ep.llm_fingerprint == "model-a" and ep.llm == "fake:model-a"
    assert ep.messages[-1]["role"] == "assistant" and ep.messages[-1]["usage"]["prompt_tokens"] == 10


def test_an_llm_error_ends_the_episode_and_never_leaks_a_secret(monkeypatch, bm25_tool):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-verysecretvalue123")

    def llm():
        return FakeChat([LLMError("server said: bad key sk-verysecretvalue123")])

    for system in (NoRetrieval(llm()), CER(llm(), bm25_tool), FIRE(llm(), WordTool())):
        ep = system.run(CLAIM)
        assert ep.stop_reason == "llm_error: server said: bad key ***", system.name
        assert "sk-verysecretvalue123" not in ep.model_dump_json()
        assert ep.report.conclusion is None and ep.llm_calls == 1


# -- cer ---------------------------------------------------------------------------------------------


def prompt_sentences(llm: FakeChat) -> list[str]:
    """The numbered evidence lines of CER's prompt, without their numbers and PMIDs."""
    text = llm.seen[0][1]["content"]
    lines = [line for line in text.splitlines() if line.startswith("[")]
    return [line.split(") ", 1)[1] for line in lines]


def test_cer_retrieves_by_bm25_and_puts_the_best_sentences_first(bm25_tool):
    llm = FakeChat(["Answer: SUPPORTED"])
    system = CER(llm, bm25_tool, CERConfig(retrieve=20, sentences=60), search_backend="local")
    ep = system.run(CLAIM)
    assert ep.report.conclusion == Label.SUPPORTED and ep.searches == 1 and ep.stop_reason == "final_answer"
    (q,) = ep.queries
    assert q.query == CLAIM.claim and q.pmids and set(q.pmids) == set(ep.ledger)
    user = llm.seen[0][1]["content"]
    assert CLAIM.claim in user
    got = prompt_sentences(llm)
    pool = [s for _, s in candidates([ep.ledger[p] for p in q.pmids])]
    assert sorted(got) == sorted(pool)  # fewer than 60: every title and sentence of the retrieved papers
    # The sentence sharing most words with the claim comes first; one sharing none is not before it.
    assert got[0] == "Vitamin D supplementation reduced hip fractures in older adults."
    shares_none = [x for x in got if not bag(x) & bag(CLAIM.claim)]
    assert shares_none and got.index(shares_none[0]) > got.index("Vitamin D and fracture risk")


def test_cer_keeps_at_most_n_sentences_in_the_rankers_order(bm25_tool):
    class Reverse:
        spec = "reverse"

        def rank(self, claim, sentences, k):
            return list(range(len(sentences)))[::-1][:k]

    llm = FakeChat(["Answer: NEI"])
    system = CER(llm, bm25_tool, CERConfig(sentences=3))
    system.ranker = Reverse()
    ep = system.run(CLAIM)
    pool = [s for _, s in candidates([ep.ledger[p] for p in ep.queries[0].pmids])]
    assert len(pool) > 3 and prompt_sentences(llm) == pool[::-1][:3]
    assert ep.report.conclusion == Label.NEI


def test_cer_without_evidence_still_asks_and_records_the_search_error():
    class Broken:
        max_results = 20

        def run(self, query, n=None):
            return ToolOutput(query=query, results=[], error="backend down")

    llm = FakeChat(["Answer: NOT ENOUGH INFORMATION"])
    ep = CER(llm, Broken()).run(CLAIM)
    assert NO_EVIDENCE in llm.seen[0][1]["content"] and ep.tool_errors == ["backend down"]
    assert ep.report.conclusion == Label.NEI and ep.queries[0].error == "backend down"


def test_cer_refuses_settings_that_cannot_hold(evidence, boolean_tool, bm25_tool):
    with pytest.raises(ValueError, match="max_results=20"):
        CER(FakeChat(["x"]), boolean_tool)  # 3 papers per search cannot give 20 abstracts
    narrow = make_search_tool(SearchConfig(index_dir=evidence[0].index_dir, max_results=20))
    with pytest.raises(ValueError, match="bm25 mode"):
        CER(FakeChat(["x"]), narrow)
    with pytest.raises(ValueError, match="cer.ranker"):
        CERConfig(ranker="tfidf")
    with pytest.raises(ValueError, match=r"^evaluate\.cer\.sentences must be >= 1, not 0$"):  # bounds.py
        check_nested(CERConfig, {"sentences": 0}, "evaluate.cer")
    with pytest.raises(ValueError, match="cannot load encoder"):
        CER(FakeChat(["x"]), bm25_tool, CERConfig(ranker="encoder:/no/such/model"))


def test_bm25_ranker_orders_by_match_then_keeps_the_rest_in_order():
    sents = ["Coffee and sleep.", "Aspirin raised bleeding risk.", "Bleeding with aspirin was rare.", "Nothing here."]
    order = BM25Ranker().rank("aspirin bleeding", sents, 10)
    assert sorted(order) == [0, 1, 2, 3] and set(order[:2]) == {1, 2} and order[2:] == [0, 3]
    assert BM25Ranker().rank("aspirin bleeding", sents, 1)[0] in (1, 2) and len(BM25Ranker().rank("x", sents, 2)) == 2
    assert isinstance(make_ranker("encoder:some/model"), EncoderRanker)


def test_split_sentences():
    assert split_sentences("BACKGROUND: A b. C d? (E) f! 5 g. e.g. h") == ["BACKGROUND: A b.", "C d?", "(E) f!",
                                                                           "5 g. e.g. h"]


def test_encoder_ranker_puts_the_claim_itself_first(tiny_model):
    sents = ["Coffee intake was not linked to atrial fibrillation.", CLAIM.claim, "Memory scores were unchanged."]
    ranker = make_ranker(f"encoder:{tiny_model}")
    order = ranker.rank(CLAIM.claim, sents, 2)
    assert order[0] == 1 and len(order) == 2


# -- fire --------------------------------------------------------------------------------------------


def test_fire_searches_then_answers_with_the_earlier_evidence_in_view(boolean_tool):
    llm = FakeChat(["I need trials.\nSearch: vitamin D AND fracture*", "Answer: SUPPORTED"])
    system = FIRE(llm, boolean_tool, FIREConfig(), search_backend="local")
    ep = system.run(CLAIM)
    assert ep.report.conclusion == Label.SUPPORTED and ep.stop_reason == "final_answer"
    assert ep.searches == 1 and [q.query for q in ep.queries] == ["vitamin D AND fracture*"] and ep.ledger
    first, second = llm.seen
    assert CLAIM.claim in user_texts(first)[0]
    evidence = user_texts(second)[-1]
    assert "vitamin D AND fracture*" in evidence
    for pmid, article in ep.ledger.items():
        assert f"PMID: {pmid}" in evidence and article.title in evidence
    assert system.tool_prompts.intervention() not in evidence  # the agent's report notice is not FIRE's


def test_fire_stops_on_a_similar_query_without_running_it(boolean_tool):
    llm = FakeChat(["Search: vitamin D fracture", "Search: Fracture, vitamin D!", "Answer: REFUTED"])
    ep = FIRE(llm, boolean_tool).run(CLAIM)
    assert ep.stop_reason == "similar_query" and ep.searches == 1 and len(ep.queries) == 1
    assert ep.report.conclusion == Label.REFUTED and ep.llm_calls == 3
    assert user_texts(llm.seen[2])[-1] == prompts.fill("fire_final")


def test_fire_runs_a_dissimilar_query_and_stops_on_similar_evidence():
    tool = WordTool(same_paper=True)  # two different queries, the same paper
    llm = FakeChat(["Search: aspirin bleeding", "Search: coffee sleep", "Answer: NEI"])
    ep = FIRE(llm, tool).run(CLAIM)
    assert tool.ran == ["aspirin bleeding", "coffee sleep"] and ep.stop_reason == "similar_evidence"
    assert ep.report.conclusion == Label.NEI and ep.llm_calls == 3
    assert user_texts(llm.seen[2])[-1].endswith(prompts.fill("fire_final"))
    # Papers of their own: the same two searches go on, and the model answers when it chooses.
    llm = FakeChat(["Search: aspirin bleeding", "Search: coffee sleep", "Answer: NEI"])
    ep = FIRE(llm, WordTool()).run(CLAIM)
    assert ep.stop_reason == "final_answer" and ep.searches == 2
    assert cosine(bag("a b c"), bag("a b d")) < 0.9 <= cosine(bag("a b c"), bag("C, b; a"))


def test_fire_step_bound_then_a_forced_answer():
    tool = WordTool()

    def reply(messages):
        if messages[-1]["content"].endswith(prompts.fill("fire_final")):
            return "Answer: SUPPORTED"
        n = sum(m["role"] == "assistant" for m in messages)
        return f"Search: topic{n} word{n}"

    llm = FakeChat(reply)
    ep = FIRE(llm, tool, FIREConfig(max_steps=3)).run(CLAIM)
    assert ep.searches == 3 and len(tool.ran) == 3 and ep.stop_reason == "max_steps"
    assert ep.report.conclusion == Label.SUPPORTED and ep.llm_calls == 4
    assert len(ep.ledger) == 3
    for earlier in ("term1x0", "term2x0", "term3x0"):  # every search's evidence is in the last prompt
        assert any(earlier in t for t in user_texts(llm.seen[-1]))
    # The search that spent the budget reads FIRE's answer-now prompt, not the agent's report notice.
    last = user_texts(llm.seen[-1])[-1]
    assert "term3x0" in last and last.endswith(prompts.fill("fire_final"))
    assert not any(FIRE(llm, tool, FIREConfig(max_steps=3)).tool_prompts.intervention() in t
                   for t in user_texts(llm.seen[-1]))


def test_fire_retry_bound_on_malformed_output():
    llm = FakeChat(["I am thinking about it."])
    ep = FIRE(llm, WordTool(), FIREConfig(max_retries=3)).run(CLAIM)
    # A step and the forced answer each get 1 + max_retries tries; then no label.
    assert ep.llm_calls == 2 * (1 + 3) and ep.stop_reason == MALFORMED and ep.report.conclusion is None
    assert ep.searches == 0 and ep.parse_problems
    assert user_texts(llm.seen[1])[-1] == prompts.fill("fire_retry")


def test_fire_reads_an_answer_after_retries_and_never_an_answer_from_a_search_line():
    llm = FakeChat(["hmm, supported?", "still thinking", "Answer: not enough information"])
    ep = FIRE(llm, WordTool(), FIREConfig(max_retries=2)).run(CLAIM)
    assert ep.report.conclusion == Label.NEI and ep.llm_calls == 3 and ep.stop_reason == "final_answer"
    # In the forced answer a search line is malformed even though its words name a label.
    llm = FakeChat(["Search: vitamin D supported"])
    ep = FIRE(llm, WordTool(), FIREConfig(max_steps=1, max_retries=1)).run(CLAIM)
    assert ep.searches == 1 and ep.report.conclusion is None and ep.stop_reason == MALFORMED
    assert ep.llm_calls == 1 + 2


def test_fire_accepts_a_tool_call_as_a_search():
    turn = AssistantTurn(tool_calls=[ToolCall("search_pubmed", {"query": "aspirin"}, "c1")])
    llm = FakeChat([turn, "Answer: REFUTED"])
    ep = FIRE(llm, WordTool()).run(CLAIM)
    assert [q.query for q in ep.queries] == ["aspirin"] and ep.report.conclusion == Label.REFUTED


def test_fire_llm_error_mid_episode_ends_it():
    tool = WordTool()
    ep = FIRE(FakeChat(["Search: aspirin", LLMError("connection refused")]), tool).run(CLAIM)
    assert ep.stop_reason == "llm_error: connection refused" and ep.searches == 1 and ep.report.conclusion is None
    assert ep.llm_calls == 2 and tool.ran == ["aspirin"]


def test_fire_config_errors():  # the bounds are the fields' types (bounds.py), checked as evaluate.fire is read
    for bad in ({"max_steps": 0}, {"similarity": 0}, {"similarity": 1.5}, {"max_retries": -1}, {"abstract_chars": 0}):
        key = next(iter(bad))
        with pytest.raises(ValueError, match=rf"^evaluate\.fire\.{key} must be "):
            check_nested(FIREConfig, bad, "evaluate.fire")


# -- fingerprints ------------------------------------------------------------------------------------


def test_fingerprints_follow_model_prompt_and_settings(monkeypatch, bm25_tool):
    tool = WordTool()

    def fps(llm_fp: str = "model-a", cer_cfg=None, fire_cfg=None) -> dict[str, str]:
        llm = FakeChat(["x"], fp=llm_fp)
        return {"no_retrieval": NoRetrieval(llm).fingerprint(), "cer": CER(llm, bm25_tool, cer_cfg).fingerprint(),
                "fire": FIRE(llm, tool, fire_cfg).fingerprint()}

    base = fps()
    assert base == fps() and all(len(v) == 16 for v in base.values()) and len(set(base.values())) == 3
    other_model = fps("model-b")
    assert all(other_model[k] != base[k] for k in base)
    assert fps(cer_cfg=CERConfig(sentences=10))["cer"] != base["cer"]
    assert fps(fire_cfg=FIREConfig(max_steps=4))["fire"] != base["fire"]
    assert fps(fire_cfg=FIREConfig(similarity=0.8))["fire"] != base["fire"]
    assert fps(cer_cfg=CERConfig(sentences=10))["fire"] == base["fire"]  # one system's settings only move its own
    llm = FakeChat(["x"])
    assert CER(llm, bm25_tool, search_backend="replay").fingerprint() != base["cer"]
    assert FIRE(llm, tool, search_backend="replay").fingerprint() != base["fire"]

    # One word changed in one system's prompt moves that system's fingerprint and episode prompt hash only.
    original = prompts.template

    def edited(name: str) -> str:
        return original(name) + (" Be brief." if name == "cer_system" else "")

    monkeypatch.setattr(prompts, "template", edited)
    changed = fps()
    assert changed["cer"] != base["cer"] and changed["no_retrieval"] == base["no_retrieval"]
    assert changed["fire"] == base["fire"]
    ep = CER(FakeChat(["Answer: REFUTED"]), bm25_tool).run(CLAIM)
    assert ep.prompt_hash == prompts.prompt_hash("cer") and "Be brief." in ep.messages[0]["content"]
