"""Fuzzing a passage to check (issue 53): any text (any script, control characters, lone surrogates, NUL),
any bytes, and any answer a model may give. Either one InputError line, or an Extraction whose every span lies
inside the passage — the sentence rule's spans trimmed, in order and never overlapping — never a traceback."""

from __future__ import annotations

import json

from hypothesis import event, given
from hypothesis import strategies as st

from biocheck.io import InputError
from biocheck.llm.scripted import ScriptedChat
from biocheck.narrative.extract import extract, find_span

any_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=200)
prose = st.lists(st.sampled_from(["Statins cut LDL.", "Is it safe?", "I think so.", "e.g. Aspirin", "1.5 mg",
                                  "My friend tried it.", " ", "\n", "vs.", "Et al. Found", "?", "..."]),
                 max_size=12).map("".join)
passages = st.one_of(any_text, prose, st.binary(max_size=100))
quotes = st.one_of(any_text, prose, st.just("Statins cut LDL."))
answers = st.one_of(
    any_text,
    st.fixed_dictionaries({"claims": st.lists(st.fixed_dictionaries({"claim": any_text, "quote": quotes}),
                                              max_size=3)},
                          optional={"skipped": st.lists(st.fixed_dictionaries(
                              {"quote": quotes, "reason": st.sampled_from(["question", "opinion", "rude"])}),
                              max_size=2)}).map(json.dumps),
)


@given(passages, st.one_of(st.none(), answers))
def test_a_passage_is_refused_in_one_line_or_every_span_is_in_it(passage, answer):
    chat = None if answer is None else ScriptedChat([{"content": answer}])
    try:
        out = extract(passage, chat)
    except InputError as e:
        event("refused")
        assert str(e) and "\n" not in str(e)
        return
    event(out.method)
    text = out.passage
    for s in (*out.claims, *out.skipped):
        assert 0 <= s.start < s.end <= len(text)
    if out.method == "sentences":
        spans = sorted((*out.claims, *out.skipped), key=lambda s: s.start)
        assert all(a.end <= b.start for a, b in zip(spans, spans[1:], strict=False))
        assert all(text[s.start:s.end] == text[s.start:s.end].strip() for s in spans)
        assert all(c.text == text[c.start:c.end] for c in out.claims)


@given(prose, st.integers(0, 200), st.integers(0, 200))
def test_a_piece_of_the_passage_is_found_where_it_is(passage, i, j):
    i, j = sorted((min(i, len(passage)), min(j, len(passage))))
    quote = passage[i:j]
    span = find_span(passage, quote)
    if not quote.strip():
        assert span is None
    else:
        assert span is not None and passage[span.start:span.end] == quote.strip()
