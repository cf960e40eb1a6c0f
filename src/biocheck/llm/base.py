"""The one interface every chat-model backend implements.

Messages are plain OpenAI-style dicts (what chat templates and OpenAI-compatible servers take):
  {"role": "system" | "user", "content": str}
  {"role": "assistant", "content": str, "tool_calls": [{"id", "type": "function",
                                                        "function": {"name": str, "arguments": dict}}]}
  {"role": "tool", "tool_call_id": str, "name": str, "content": str}
Tool-call arguments are dicts inside BioCheck (chat templates iterate them); the OpenAI backend
serialises them to JSON strings on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from biocheck.bounds import Count
from biocheck.errors import BioCheckError


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = ""

    def to_message(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class AssistantTurn:
    """What a model said: free text and/or tool calls, plus the raw generated text for traces."""

    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    raw: str | None = None  # the decoded generation before parsing (None for API backends)
    usage: dict[str, int] = field(default_factory=dict)  # prompt_tokens / completion_tokens when known

    def to_message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [c.to_message() for c in self.tool_calls]
        return msg


# A long report from a busy server takes a minute or two; a stalled one should not hold an episode much longer.
REQUEST_TIMEOUT_S = 120.0


@dataclass
class GenerationConfig:
    max_new_tokens: Count = 1024
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int | None = None
    request_timeout_s: float = REQUEST_TIMEOUT_S  # server backends (openai): seconds to wait for one answer
    batch: Count = 1  # transformers: the most concurrent greedy turns generated together (1: one at a time)
    dtype: str | None = None  # transformers: the weights' dtype (None: float32 on a CPU, bfloat16 on CUDA)
    # transformers: the KV cache. "static" preallocates it for the turn and writes in place; "dynamic" (transformers'
    # default) concatenates a copy at every token, which on a CPU made a decode step 1.5-2.5x slower at 1500 tokens;
    # "prefix": dynamic, and the prompt prefix every turn shares (system prompt, tool schema) is computed once
    cache: Literal["dynamic", "static", "prefix"] = "dynamic"


@runtime_checkable
class ChatLLM(Protocol):
    spec: str  # the spec string it was made from, e.g. "transformers:models/base"

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        """One assistant turn for the conversation so far; never mutates `messages`."""
        ...

    def fingerprint(self) -> str:
        """A short hash identifying the model weights/script (logged with every episode)."""
        ...


class LLMError(BioCheckError):
    """A backend could not produce a turn (server down, bad spec, model missing)."""
