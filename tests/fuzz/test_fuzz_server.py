"""Fuzzing an OpenAI-compatible server's answers: any JSON (or bytes) in a 200 answer, or a valid answer with
any part replaced by any JSON, is either a turn of the right types or one LLMError line — never a traceback
(which would end a batch) — and the API key the server echoes is never in the error text."""

from __future__ import annotations

import json
import os

import httpx
from hypothesis import given
from hypothesis import strategies as st

from biocheck.llm.base import AssistantTurn, LLMError
from biocheck.llm.openai_backend import OpenAIChat

KEY = "sk-fuzz-0123456789abcdef"
VALID = {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
    "role": "assistant", "content": "Looking.", "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "search_pubmed", "arguments": "{\"query\": \"vitamin D AND fractures\"}"}}]}}],
         "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20) | st.just(KEY),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


PATHS = list(_paths(VALID))[1:]


def _replaced(path, value):
    body = json.loads(json.dumps(VALID))
    target = body
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    return body


def _chat(answer: bytes) -> AssistantTurn:
    os.environ["OPENAI_API_KEY"] = KEY
    try:
        chat = OpenAIChat("m", base_url="http://fake.invalid/v1", max_attempts=1)
        chat._client = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200, content=answer)))
        return chat.chat([{"role": "system", "content": "s"}, {"role": "user", "content": "c"}], tools=[])
    finally:
        os.environ.pop("OPENAI_API_KEY", None)


def _check(answer: bytes) -> None:
    try:
        turn = _chat(answer)
    except LLMError as e:
        text = str(e)
        assert "\n" not in text and KEY not in text and "fake.invalid" in text, text
        return
    assert isinstance(turn.content, str)
    for call in turn.tool_calls:
        assert isinstance(call.name, str) and isinstance(call.arguments, dict) and isinstance(call.id, str)
    assert all(isinstance(k, str) and isinstance(v, int) for k, v in turn.usage.items())


@given(st.sampled_from(PATHS), json_values)
def test_a_valid_answer_with_any_part_replaced_is_a_turn_or_one_error_line(path, value):
    _check(json.dumps(_replaced(path, value)).encode())


@given(st.one_of(json_values.map(lambda v: json.dumps(v).encode()), st.binary(max_size=64)))
def test_any_json_or_bytes_as_the_answer_is_a_turn_or_one_error_line(answer):
    _check(answer)
