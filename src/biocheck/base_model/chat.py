"""Chat templates with tool calling: read verbatim from TRL, and checked to round-trip a `search_pubmed` call.

TRL recognises a chat template by its exact text (`add_response_schema`), and only then can `parse_response`
read tool calls out of generated ids, in GRPO rollouts and in the agent's transformers backend alike. So a model
whose own template has no tools (SmolLM2) or that has no template at all (the tiny model) is given one of the
templates TRL ships, unchanged.
"""

from __future__ import annotations

import importlib.resources
from typing import Any

from biocheck.io import InputError


def trl_chat_template(name: str) -> str:
    """The text of a chat template shipped with TRL, read verbatim from the installed package."""
    path = importlib.resources.files("trl") / "chat_templates" / f"{name}.jinja"
    if not path.is_file():
        raise InputError(f"chat template {name!r}: no trl/chat_templates/{name}.jinja in the installed TRL "
                         "(name one shipped there, e.g. 'qwen3_5_nothink' or 'qwen2_5').")
    return path.read_text(encoding="utf-8")


def example_search_tool() -> dict[str, Any]:
    """A `search_pubmed` tool schema, for checking and for tokenizer training (the agent's own lives in agent/)."""
    return {
        "type": "function",
        "function": {
            "name": "search_pubmed",
            "description": "Search PubMed and return the top papers (PMID, title, abstract) for a Boolean query.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "A PubMed query."}},
                "required": ["query"],
            },
        },
    }


def check_tool_round_trip(tokenizer) -> None:
    """Fail loudly unless TRL recognises the tokenizer's template and reads back a tool call it rendered.

    Leaves the tokenizer as it found it (`add_response_schema` sets an attribute that would be saved with it)."""
    from trl.chat_template_utils import add_response_schema, parse_response

    saved = {a: getattr(tokenizer, a, None) for a in ("response_template", "response_schema")}
    try:
        try:
            add_response_schema(tokenizer)
        except ValueError as e:
            raise InputError(f"chat template: TRL does not recognise it, so tool calls cannot be parsed ({e}).") \
                from None
        tools = [example_search_tool()]
        call = {"name": "search_pubmed", "arguments": {"query": "aspirin AND stroke[tiab]"}}
        messages = [{"role": "system", "content": "You are BioCheck."},
                    {"role": "user", "content": "Claim: aspirin prevents stroke."}]
        prompt = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                               return_dict=True)["input_ids"]
        full = tokenizer.apply_chat_template(
            messages + [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]}],
            tools=tools, tokenize=True, return_dict=True)["input_ids"]
        parsed = parse_response(tokenizer, full[len(prompt):], prefix=prompt, tools=tools)
        calls = [c.get("function") for c in parsed.get("tool_calls") or []]
        if full[:len(prompt)] != prompt or calls != [call]:
            raise RuntimeError(f"chat template round trip failed: rendered {call}, parsed {parsed}")
    finally:
        for attr, value in saved.items():
            if hasattr(tokenizer, attr) or value is not None:
                setattr(tokenizer, attr, value)
