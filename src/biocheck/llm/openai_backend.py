"""`openai:<model>`: any OpenAI-compatible chat-completions server (`vllm serve`, hosted APIs).

Base URL from OPENAI_BASE_URL (default https://api.openai.com/v1), key from OPENAI_API_KEY
(optional for local servers). The key is only ever sent in the Authorization header: never logged,
traced or stored; a server that echoes it in an error body ("Incorrect API key provided: ...") has it
blanked from the error text (`biocheck.secrets.redact`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import time
from typing import Any

import httpx

from biocheck.llm.base import AssistantTurn, GenerationConfig, LLMError, ToolCall
from biocheck.secrets import redact

log = logging.getLogger(__name__)

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


WIRE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def _wire(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our messages -> the API's: tool-call arguments travel as JSON strings."""
    out = []
    for m in messages:
        m = {k: v for k, v in m.items() if k in WIRE_KEYS}  # our trace keys (raw, usage) stay here
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"])}}
                               for c in m["tool_calls"]]
        out.append(m)
    return out


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
        return value if isinstance(value, dict) else {"query": str(value)}
    except ValueError:
        return {"query": str(raw)}  # a model that wrote plain text as arguments: keep it readable


class OpenAIChat:
    def __init__(self, model: str, gen: GenerationConfig | None = None, base_url: str | None = None,
                 api_key: str | None = None, timeout: float = 120.0, max_attempts: int = 4) -> None:
        self.model = model
        self.spec = f"openai:{model}"
        self.gen = gen or GenerationConfig()
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1").rstrip("/")
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self._key = key  # to blank from error texts even when passed in code rather than set in the env
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(timeout=timeout, headers=headers)
        self.max_attempts = max_attempts

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        body: dict[str, Any] = {"model": self.model, "messages": _wire(messages), "max_tokens": self.gen.max_new_tokens,
                                "temperature": self.gen.temperature, "top_p": self.gen.top_p}
        if tools:
            body["tools"] = tools
        if self.gen.seed is not None:
            body["seed"] = self.gen.seed
        data = self._post("/chat/completions", body)
        try:
            msg = data["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise self._error(f"{self.base_url}: unexpected chat-completions answer ", data, 200) from None
        calls = [ToolCall(name=(c.get("function") or {}).get("name", ""),
                          arguments=_arguments((c.get("function") or {}).get("arguments")),
                          id=c.get("id") or f"call_{i}") for i, c in enumerate(msg.get("tool_calls") or [])]
        usage = {k: v for k, v in (data.get("usage") or {}).items() if k in ("prompt_tokens", "completion_tokens")}
        return AssistantTurn(content=msg.get("content") or "", tool_calls=calls, usage=usage)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = self.base_url + path
        last = ""
        for attempt in range(1, self.max_attempts + 1):
            try:
                r = self._client.post(url, json=body)
                if r.status_code not in RETRY_STATUS:
                    if r.status_code >= 400:
                        raise self._error(f"{url} answered HTTP {r.status_code}: ", r.text, 300)
                    return r.json()
                last = f"HTTP {r.status_code}"
            except (httpx.TransportError, ValueError) as e:
                last = type(e).__name__
            if attempt < self.max_attempts:
                time.sleep(min(30.0, 0.5 * 2 ** (attempt - 1)) * random.uniform(0.75, 1.25))
        raise LLMError(f"{url}: no answer after {self.max_attempts} attempts ({last}). Is the server up? "
                       "Set OPENAI_BASE_URL (e.g. http://localhost:8000/v1 for `vllm serve`).")

    def _error(self, what: str, body: Any, limit: int) -> LLMError:
        """An LLMError quoting `limit` chars of the server's answer, secrets blanked before the cut (a key
        cut in half would no longer match)."""
        return LLMError(redact(what, extra=[self._key]) + redact(body, extra=[self._key])[:limit])

    def fingerprint(self) -> str:
        return hashlib.sha256(f"{self.base_url}|{self.model}".encode()).hexdigest()[:16]
