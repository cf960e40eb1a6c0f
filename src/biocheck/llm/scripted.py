"""`scripted:<file>`: replays a JSON list of assistant turns (tests, debugging, demos).

Each turn is {"tool_calls": [{"name": "search_pubmed", "arguments": {"query": "..."}}]} or
{"content": "<final text>"} (both keys may appear). When the list runs out it answers with empty
content. It goes through the same graph as every other backend.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

from biocheck.llm.base import AssistantTurn, LLMError, ToolCall


def _turn(raw: Any, i: int, where: str) -> AssistantTurn:
    if not isinstance(raw, dict) or not ({"content", "tool_calls"} & raw.keys()):
        raise LLMError(f"{where}: turn {i} must be an object with 'content' and/or 'tool_calls', got {raw!r:.80}")
    calls = []
    for j, c in enumerate(raw.get("tool_calls") or []):
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            raise LLMError(f"{where}: turn {i}, tool call {j} needs a 'name' (and 'arguments').")
        args = _arguments(c.get("arguments"), f"{where}: turn {i}, tool call {j}")
        calls.append(ToolCall(name=c["name"], arguments=args, id=c.get("id") or f"call_{i}_{j}"))
    return AssistantTurn(content=str(raw.get("content") or ""), tool_calls=calls)


def _arguments(raw: Any, where: str) -> dict[str, Any]:
    """A call's arguments as a dict: an object, a JSON string of one (OpenAI style), or plain text as the query."""
    args = raw
    if isinstance(raw, str):
        try:
            args = json.loads(raw)
        except ValueError:
            return {"query": raw}  # not JSON: the text is the query
    if args is None:
        return {}
    if not isinstance(args, dict):
        raise LLMError(f"{where}: 'arguments' must be an object such as {{\"query\": \"...\"}} (or a JSON string "
                       f"of one), not {raw!r:.60}.")
    return args


class ScriptedChat:
    """Answers turn k of every conversation with script[k] (k = assistant turns already in it)."""

    def __init__(self, turns: list[dict], spec: str = "scripted:<inline>") -> None:
        self.spec = spec
        self.turns = [_turn(t, i, spec) for i, t in enumerate(turns)]
        self._digest = hashlib.sha256(json.dumps(turns, sort_keys=True).encode()).hexdigest()[:16]
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedChat:
        path = Path(path)
        try:
            turns = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise LLMError(f"scripted: no script file {path}") from None
        except IsADirectoryError:
            raise LLMError(f"scripted: {path} is a folder; give a JSON file of assistant turns "
                           "(scripted:episode.json).") from None
        except OSError as e:
            raise LLMError(f"scripted: cannot read {path} ({e.strerror or e})") from None
        except ValueError as e:
            raise LLMError(f"scripted: {path} is not valid JSON ({e})") from None
        if not isinstance(turns, list):
            raise LLMError(f"scripted: {path} must hold a JSON list of turns")
        return cls(turns, spec=f"scripted:{path}")

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        # Position in the script = assistant turns so far, so one script serves many episodes.
        k = sum(1 for m in messages if m.get("role") == "assistant")
        if k >= len(self.turns):
            return AssistantTurn(content="")
        t = self.turns[k]
        return AssistantTurn(content=t.content, tool_calls=[ToolCall(c.name, dict(c.arguments), c.id)
                                                            for c in t.tool_calls])

    def fingerprint(self) -> str:
        return self._digest
