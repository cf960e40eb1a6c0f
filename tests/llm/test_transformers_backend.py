"""`transformers:<path>`: the local-model ChatLLM, run on a tiny random model built by `biocheck model init` code."""

from __future__ import annotations

import copy
import json
import shutil
import threading
from pathlib import Path

import pytest

from biocheck.agent.prompts import prompt_texts
from biocheck.base_model.tiny import build_tiny_model
from biocheck.llm.base import AssistantTurn, ChatLLM, GenerationConfig, LLMError, ToolCall
from biocheck.llm.load import model_fingerprint
from biocheck.llm.transformers_backend import TransformersChat, parse_completion
from tests.helpers.tiny import small_config, write_corpus


def search_pubmed(query: str) -> str:
    """Search PubMed and return the top papers.

    Args:
        query: A PubMed Boolean query.
    """
    return ""


@pytest.fixture(scope="module")
def tools() -> list[dict]:
    from transformers.utils import get_json_schema

    return [get_json_schema(search_pubmed)]


MESSAGES = [
    {"role": "system", "content": "You are BioCheck, a biomedical fact-checker."},
    {"role": "user", "content": "Claim: Aspirin prevents stroke."},
]
QUERY = '(aspirin OR "acetylsalicylic acid") AND stroke[tiab] AND 2020'


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tiny")
    cfg = small_config(root, write_corpus(root / "corpus.jsonl"), max_position_embeddings=2048)
    build_tiny_model(cfg, prompt_texts())
    return cfg.out_dir


@pytest.fixture(scope="module")
def llm(model_dir) -> TransformersChat:
    return TransformersChat(f"transformers:{model_dir}", GenerationConfig(max_new_tokens=12))


def rendered_turn(llm: TransformersChat, history: list[dict], assistant: dict, tools) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids) of `assistant` as the template renders it after `history`."""
    prompt = llm.render(history, tools)
    full = llm.tokenizer.apply_chat_template(history + [assistant], tools=tools, tokenize=True,
                                             return_dict=True)["input_ids"]
    assert full[:len(prompt)] == prompt
    return prompt, full[len(prompt):]


def call_msg(name: str, args: dict, content: str = "") -> dict:
    return {"role": "assistant", "content": content,
            "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": name, "arguments": args}}]}


# ------------------------------------------------------------------------------------- the random model


def test_is_a_chat_llm(llm, model_dir):
    assert isinstance(llm, ChatLLM)
    assert llm.spec == f"transformers:{model_dir}" and llm.path == model_dir
    assert llm.device.type in ("cpu", "cuda") and llm.structured
    assert TransformersChat(str(model_dir)).spec == llm.spec  # the prefix is optional


def test_turn_with_tools_from_a_random_model(llm, tools):
    msgs = copy.deepcopy(MESSAGES)
    turn = llm.chat(msgs, tools)
    assert msgs == MESSAGES  # never mutated
    assert isinstance(turn, AssistantTurn) and isinstance(turn.content, str) and isinstance(turn.raw, str)
    assert all(isinstance(c, ToolCall) for c in turn.tool_calls)
    assert turn.usage["prompt_tokens"] == len(llm.render(MESSAGES, tools))
    assert 1 <= turn.usage["completion_tokens"] <= 12
    assert turn.to_message()["role"] == "assistant"


def test_respects_max_new_tokens(llm, tools):
    for n in (1, 5):
        turn = llm.chat(MESSAGES, tools, GenerationConfig(max_new_tokens=n))
        assert 1 <= turn.usage["completion_tokens"] <= n


def test_greedy_is_deterministic(llm, tools):
    a, b = llm.chat(MESSAGES, tools), llm.chat(MESSAGES, tools)
    assert a.raw == b.raw and a.usage == b.usage


def test_seeded_sampling_is_reproducible_and_keeps_the_global_rng(llm, tools):
    import torch

    gen = GenerationConfig(max_new_tokens=12, temperature=1.0, seed=7)
    state = torch.get_rng_state()
    a, b = llm.chat(MESSAGES, tools, gen), llm.chat(MESSAGES, tools, gen)
    assert a.raw == b.raw
    assert torch.equal(torch.get_rng_state(), state)
    others = {llm.chat(MESSAGES, tools, GenerationConfig(max_new_tokens=12, temperature=1.0, seed=s)).raw
              for s in range(4)}
    assert len(others) > 1  # the seed matters (a random model samples near-uniformly over 1k tokens)


def test_full_conversation_with_json_string_arguments(llm, tools):
    """History as an OpenAI-compatible client sends it: arguments as a JSON string, content None."""
    history = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_0", "type": "function",
             "function": {"name": "search_pubmed", "arguments": json.dumps({"query": QUERY})}}]},
        {"role": "tool", "tool_call_id": "call_0", "name": "search_pubmed", "content": "PMID: 1\nTitle: Aspirin."},
    ]
    prompt = llm.tokenizer.decode(llm.render(history, tools))
    assert f"<parameter=query>\n{QUERY}\n</parameter>" in prompt and "<tool_response>\nPMID: 1" in prompt
    assert isinstance(llm.chat(history, tools), AssistantTurn)


def test_no_tools_renders_without_the_tool_block(llm):
    assert "# Tools" not in llm.tokenizer.decode(llm.render(MESSAGES, []))
    assert isinstance(llm.chat(MESSAGES, []), AssistantTurn)


def test_prompt_longer_than_the_context_is_an_llm_error(llm, tools, monkeypatch):
    n = len(llm.render(MESSAGES, tools))
    monkeypatch.setattr(llm, "max_positions", n)
    with pytest.raises(LLMError, match=rf"prompt is {n} tokens.*at most {n} positions"):
        llm.chat(MESSAGES, tools)
    monkeypatch.setattr(llm, "max_positions", n + 3)  # room for 3 new tokens: the budget is clamped
    assert llm.chat(MESSAGES, tools, GenerationConfig(max_new_tokens=50)).usage["completion_tokens"] <= 3


def test_template_errors_are_llm_errors(llm, tools):
    with pytest.raises(LLMError, match="chat template rejected"):
        llm.chat([{"role": "system", "content": "only a system message"}], tools)


def test_concurrent_calls_are_serialised(llm, tools):
    expected = llm.chat(MESSAGES, tools).raw
    results: list[str | None] = [None] * 4

    def work(i: int) -> None:
        results[i] = llm.chat(MESSAGES, tools).raw

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == [expected] * 4


# ------------------------------------------------------------------------- parsing (teacher-forced ids)


def test_parse_a_rendered_tool_call(llm, tools):
    prompt, completion = rendered_turn(llm, MESSAGES, call_msg("search_pubmed", {"query": QUERY}), tools)
    turn = parse_completion(llm.tokenizer, completion, prompt, tools)
    assert turn.tool_calls == [ToolCall(name="search_pubmed", arguments={"query": QUERY}, id="call_0")]
    assert turn.content == "" and turn.raw.startswith("<tool_call>\n<function=search_pubmed>")
    assert turn.usage == {"prompt_tokens": len(prompt), "completion_tokens": len(completion)}


def test_chat_returns_the_tool_call_the_model_generates(llm, tools, monkeypatch):
    """Drive `generate` so the model "outputs" a known call: the whole chat() path parses it."""
    import torch

    history = MESSAGES + [call_msg("search_pubmed", {"query": "aspirin"}),
                          {"role": "tool", "tool_call_id": "call_0", "name": "search_pubmed", "content": "none"}]
    prompt, completion = rendered_turn(llm, history, call_msg("search_pubmed", {"query": QUERY}, "Broaden it."),
                                       tools)
    seen = {}

    def fake_generate(input_ids, attention_mask, generation_config):
        seen["prompt"], seen["cfg"] = input_ids[0].tolist(), generation_config
        return torch.tensor([seen["prompt"] + completion])

    monkeypatch.setattr(llm.model, "generate", fake_generate)
    turn = llm.chat(history, tools)
    assert seen["prompt"] == prompt and not seen["cfg"].do_sample
    assert llm.tokenizer.convert_tokens_to_ids("<|im_end|>") in seen["cfg"].eos_token_id
    assert turn.content == "Broaden it."
    assert turn.tool_calls == [ToolCall(name="search_pubmed", arguments={"query": QUERY}, id="call_1")]
    assert turn.to_message()["tool_calls"][0]["function"] == {"name": "search_pubmed", "arguments": {"query": QUERY}}


def test_calls_to_unoffered_tools_are_still_returned(llm, tools):
    prompt, completion = rendered_turn(llm, MESSAGES, call_msg("delete_everything", {"table": "all"}), tools)
    turn = parse_completion(llm.tokenizer, completion, prompt, tools)
    assert turn.tool_calls == [ToolCall(name="delete_everything", arguments={"table": "all"}, id="call_0")]


def test_numeric_looking_query_stays_a_string(llm, tools):
    prompt, completion = rendered_turn(llm, MESSAGES, call_msg("search_pubmed", {"query": "12345"}), tools)
    assert parse_completion(llm.tokenizer, completion, prompt, tools).tool_calls[0].arguments == {"query": "12345"}


def test_two_calls_in_one_turn(llm, tools):
    msg = call_msg("search_pubmed", {"query": "a"})
    msg["tool_calls"].append({"id": "x", "type": "function", "function": {"name": "search_pubmed",
                                                                          "arguments": {"query": "b"}}})
    prompt, completion = rendered_turn(llm, MESSAGES, msg, tools)
    turn = parse_completion(llm.tokenizer, completion, prompt, tools, first_call_index=4)
    assert [(c.id, c.arguments["query"]) for c in turn.tool_calls] == [("call_4", "a"), ("call_5", "b")]


@pytest.mark.parametrize("text, content, n_calls", [
    ("## Conclusion\nSUPPORTED<|im_end|>", "## Conclusion\nSUPPORTED", 0),
    ("## Conclusion\nREFUTED<|endoftext|>", "## Conclusion\nREFUTED", 0),  # the pad/eot stop id
    ("no end token, cut at max_new_tokens", "no end token, cut at max_new_tokens", 0),
    ("hi <tool_call> not xml </tool_call><|im_end|>", "hi <tool_call> not xml </tool_call>", 0),
    ("<tool_call>\n<function=search_pubmed>\n<parameter=query>\nasp", "", 1),  # truncated: the agent refuses it
    ("", "", 0),
])
def test_parse_final_answers_and_garbage(llm, tools, text, content, n_calls):
    prompt = llm.render(MESSAGES, tools)
    ids = llm.tokenizer.encode(text, add_special_tokens=False)
    turn = parse_completion(llm.tokenizer, ids, prompt, tools)
    assert turn.content == content and len(turn.tool_calls) == n_calls and turn.raw == text


def test_unknown_template_falls_back_to_plain_text(model_dir, tools, tmp_path):
    copy_dir = tmp_path / "m"
    shutil.copytree(model_dir, copy_dir)
    template = (copy_dir / "chat_template.jinja").read_text()
    (copy_dir / "chat_template.jinja").write_text("{#- a local edit -#}\n" + template)  # TRL no longer knows it
    other = TransformersChat(str(copy_dir), GenerationConfig(max_new_tokens=4))
    assert not other.structured
    prompt, completion = rendered_turn(other, MESSAGES, call_msg("search_pubmed", {"query": QUERY}), tools)
    turn = parse_completion(other.tokenizer, completion, prompt, tools, structured=False)
    assert turn.tool_calls == [] and "<function=search_pubmed>" in turn.content
    assert isinstance(other.chat(MESSAGES, tools), AssistantTurn)


# ------------------------------------------------------------------------------- fingerprint and errors


def test_fingerprint(llm, model_dir, tmp_path):
    fp = llm.fingerprint()
    assert len(fp) == 12 and int(fp, 16) >= 0 and fp == model_fingerprint(model_dir)
    copy_dir = tmp_path / "m"
    shutil.copytree(model_dir, copy_dir)
    assert model_fingerprint(copy_dir) == fp  # content, not location
    (copy_dir / "tokenizer.json").write_text("{}")
    assert model_fingerprint(copy_dir) == fp  # only config + weights count
    weights = bytearray((copy_dir / "model.safetensors").read_bytes())
    weights[-1] ^= 1
    (copy_dir / "model.safetensors").write_bytes(bytes(weights))
    assert model_fingerprint(copy_dir) != fp


def test_missing_model_is_a_clear_llm_error(tmp_path):
    with pytest.raises(LLMError, match="no such model directory.*biocheck model init"):
        TransformersChat(f"transformers:{tmp_path / 'nope'}/")


def test_dir_without_a_model_is_an_llm_error(tmp_path):
    with pytest.raises(LLMError, match=rf"^transformers:{tmp_path}: {tmp_path}: not a model folder \(no config"):
        TransformersChat(str(tmp_path))


@pytest.mark.parametrize("config, expected", [
    ({"max_position_embeddings": 2048, "n_positions": 1024}, 2048),
    ({"n_positions": 1024}, 1024),  # GPT-2 style
    ({"max_sequence_length": 512}, 512),
    ({"seq_length": 8192}, 8192),
    ({"max_position_embeddings": None, "n_positions": 64}, 64),
    ({}, None),
    ({"max_position_embeddings": 0}, None),
])
def test_the_context_length_is_read_whatever_the_config_calls_it(config, expected):
    from types import SimpleNamespace

    from biocheck.llm.transformers_backend import context_length

    assert context_length(SimpleNamespace(**config)) == expected
