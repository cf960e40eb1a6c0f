"""The extractor: a model's JSON answer mapped to spans, the sentence rule when the answer cannot be trusted,
and bad input as one line."""

from __future__ import annotations

import dataclasses
import json

import pytest

from biocheck.io import InputError
from biocheck.llm import GenerationConfig, make_llm
from biocheck.llm.openai_backend import OpenAIChat
from biocheck.llm.scripted import ScriptedChat
from biocheck.narrative.extract import MAX_PASSAGE_CHARS, extract, find_span
from biocheck.narrative.prompts import extraction_prompt
from biocheck.narrative.schema import Extraction
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.fake_openai import assistant as fake_answer

PASSAGE = "Metformin lowers blood glucose and reduces weight. Is that true for everyone? Statins cut LDL."


def scripted(answer: object) -> ScriptedChat:
    return ScriptedChat([{"content": answer if isinstance(answer, str) else json.dumps(answer)}])


def test_a_model_answer_becomes_claims_with_their_spans():
    chat = scripted({
        "claims": [{"claim": "Metformin lowers blood glucose.", "quote": "Metformin lowers blood glucose"},
                   {"claim": "Metformin reduces weight.", "quote": "Metformin lowers blood glucose and reduces weight."},
                   {"claim": "Statins cut LDL.", "quote": "Statins cut LDL."}],
        "skipped": [{"quote": "Is that true for everyone?", "reason": "question"}],
    })
    out = extract(PASSAGE, chat)
    assert out.method == "model" and out.note == ""
    assert out.texts() == ["Metformin lowers blood glucose.", "Metformin reduces weight.", "Statins cut LDL."]
    # spans counted by hand: the first sentence is 50 characters, the question 26 from 51, the last 16 from 78
    assert [(c.start, c.end) for c in out.claims] == [(0, 30), (0, 50), (78, 94)]
    assert all(c.method == "model" for c in out.claims)
    assert [(s.start, s.end, s.reason) for s in out.skipped] == [(51, 77, "question")]


def test_the_model_reads_the_extraction_prompt_and_the_passage():
    seen = []

    class Recording(ScriptedChat):
        def chat(self, messages, tools):
            seen.append(messages)
            return super().chat(messages, tools)

    extract(PASSAGE, Recording([{"content": '{"claims": []}'}]))
    assert seen == [[{"role": "system", "content": extraction_prompt()}, {"role": "user", "content": PASSAGE}]]


def test_a_fenced_answer_and_a_quote_differing_in_case_and_spaces_are_accepted():
    answer = '```json\n{"claims": [{"claim": "Statins cut LDL.", "quote": "statins   CUT ldl"}]}\n```'
    out = extract(PASSAGE, scripted(answer))
    assert out.method == "model"
    assert [(c.start, c.end) for c in out.claims] == [(78, 93)]  # "Statins cut LDL" without its full stop


@pytest.mark.parametrize("answer, why", [
    ("Sure! The claims are: metformin lowers glucose.", "not JSON"),
    ('["Statins cut LDL."]', "not an object"),
    ('{"claims": "Statins cut LDL."}', "'claims' must be a list"),
    ('{"skipped": []}', "'claims' must be a list"),
    ('{"claims": [{"claim": "Statins cut LDL."}]}', "claim 1 has no text at 'quote'"),
    ('{"claims": [], "skipped": [{"quote": "Is that true for everyone?", "reason": "rude"}]}', "reason 'rude'"),
])
def test_a_malformed_answer_falls_back_to_the_sentence_rule(answer, why):
    out = extract(PASSAGE, scripted(answer))
    assert out.method == "sentences" and why in out.note and "sentence rule" in out.note
    # the sentence rule: two claims (the sentences), the question skipped
    assert out.texts() == ["Metformin lowers blood glucose and reduces weight.", "Statins cut LDL."]
    assert all(c.method == "sentences" for c in out.claims)
    assert [(s.start, s.end, s.reason) for s in out.skipped] == [(51, 77, "question")]


def test_a_quote_the_passage_lacks_falls_back_and_says_which():
    chat = scripted({"claims": [{"claim": "Statins cut LDL.", "quote": "Statins cut LDL."},
                                {"claim": "Aspirin thins blood.", "quote": "Aspirin thins blood."}]})
    out = extract(PASSAGE, chat)
    assert out.method == "sentences"
    assert "claim 2's quote is not in the passage" in out.note and "Aspirin thins blood." in out.note
    assert out.texts() == ["Metformin lowers blood glucose and reduces weight.", "Statins cut LDL."]


def test_without_a_model_the_sentence_rule_runs_without_a_note():
    out = extract(PASSAGE)
    assert out.method == "sentences" and out.note == ""
    assert len(out.claims) == 2


def test_a_passage_of_only_questions_gives_no_claim_and_every_sentence_skipped():
    passage = "Does coffee cause cancer? Is red wine good for the heart? Should I worry?"
    out = extract(passage)
    assert out.claims == ()
    # by hand: 25 characters, a space, 31, a space, 15
    assert [(s.start, s.end, s.reason) for s in out.skipped] == [(0, 25, "question"), (26, 57, "question"),
                                                                 (58, 73, "question")]


@pytest.mark.parametrize("passage, words", [
    ("", "no text to check"),
    ("  \n\t ", "no text to check"),
    ("x" * (MAX_PASSAGE_CHARS + 1), f"{MAX_PASSAGE_CHARS + 1:,} characters, over the limit of {MAX_PASSAGE_CHARS:,}"),
    ("Statins cut LDL.\0\0\x01", "NUL byte (character 16)"),
    (b"\x89PNG\r\n\x1a\n\xff\xfe", "not UTF-8"),
    ("Statins \ud800 cut LDL.", "lone surrogate at character 8"),
])
def test_bad_input_is_one_line(passage, words):
    with pytest.raises(InputError) as e:
        extract(passage, scripted({"claims": []}))
    message = str(e.value)
    assert words in message and "\n" not in message


def test_a_passage_at_the_limit_is_checked():
    passage = ("Statins cut LDL. " * MAX_PASSAGE_CHARS)[:MAX_PASSAGE_CHARS]
    assert len(extract(passage).claims) > 0


def test_utf8_bytes_are_read_as_text():
    text = "Statins cut LDL in adults aged ≥ 65."
    assert extract(text.encode("utf-8")).texts() == [text]


def test_find_span_verbatim_first_then_normalised_else_none():
    passage = "A\u0130 B  Statins cut LDL.\nStatins cut LDL."
    assert find_span(passage, "Statins cut LDL.") == find_span(passage, "  Statins cut LDL.  ")
    at = passage.index("Statins")
    assert find_span(passage, "Statins cut LDL.").start == at
    # lower-casing "\u0130" gives two characters: the span maps back to the passage's own indices
    assert find_span(passage, "b statins cut ldl") == find_span(passage, "B  Statins cut LDL")
    span = find_span(passage, "\u0130 b statins")
    assert passage[span.start:span.end] == "\u0130 B  Statins"
    assert find_span(passage, "Statins cut HDL") is None
    assert find_span(passage, "   ") is None


def test_an_openai_compatible_server_answers_the_extraction():
    answer = {"claims": [{"claim": "Statins cut LDL.", "quote": "Statins cut LDL."}],
              "skipped": [{"quote": "Is that true for everyone?", "reason": "question"}]}
    fake = FakeOpenAI(lambda body, headers: (200, fake_answer({"content": "```json\n" + json.dumps(answer) + "\n```"})))
    try:
        out = extract(PASSAGE, OpenAIChat("m", base_url=fake.url, api_key=""))
    finally:
        fake.close()
    assert out.method == "model" and out.texts() == ["Statins cut LDL."]
    (request,) = fake.requests
    assert "tools" not in request["body"]  # no tool is offered: the answer is JSON text
    assert request["body"]["messages"][1] == {"role": "user", "content": PASSAGE}


def test_a_local_transformers_model_that_cannot_follow_the_format_gets_the_fallback(tiny_model):
    # the tiny model's weights are random: what it writes is no JSON object with claims
    chat = make_llm(f"transformers:{tiny_model}", GenerationConfig(max_new_tokens=8))
    out = extract(PASSAGE, chat)
    assert out.method == "sentences" and "sentence rule" in out.note
    assert out.texts() == ["Metformin lowers blood glucose and reduces weight.", "Statins cut LDL."]


def test_an_extraction_read_back_from_json_is_the_same_extraction():
    chat = scripted({"claims": [{"claim": "Statins cut LDL.", "quote": "Statins cut LDL."}],
                     "skipped": [{"quote": "Is that true for everyone?", "reason": "question"}]})
    found = extract(PASSAGE, chat)
    assert found.method == "model" and found.skipped  # the question is skipped: both tuples are exercised
    row = json.loads(json.dumps(dataclasses.asdict(found)))
    assert Extraction.from_dict(row) == found
    fallback = extract(PASSAGE, scripted("no JSON here"))
    assert fallback.note and Extraction.from_dict(json.loads(json.dumps(dataclasses.asdict(fallback)))) == fallback
