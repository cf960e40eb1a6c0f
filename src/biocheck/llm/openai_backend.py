"""`openai:<model>`: any OpenAI-compatible chat-completions server (`vllm serve`, hosted APIs).

Base URL from OPENAI_BASE_URL (default https://api.openai.com/v1), key from OPENAI_API_KEY
(optional for local servers). The key is only ever sent in the Authorization header: never logged,
traced or stored; a server that echoes it in an error body ("Incorrect API key provided: ...") has it
blanked from the error text (`biocheck.secrets.redact`).

The server is not trusted: every answer is checked against the chat-completions schema (`Completion`), and
one that does not fit (a message that is a string, tool calls that are not a list, content that is not text,
no choices, a body that is not JSON) is an LLMError naming the server and the fault, never a traceback; the
agent makes it one failed episode. A request gets `timeout` seconds (`agent.request_timeout_s` for the
agent) and is not retried after a timeout: a stalled server would only multiply the wait.

The key is bound to OPENAI_BASE_URL's address: a redirect is never followed (the request would go,
key and prompt included, wherever the server points); it is an LLMError naming both addresses.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
from collections.abc import Callable
from typing import Any

import httpx
import tenacity
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from biocheck.llm.base import AssistantTurn, GenerationConfig, LLMError, ToolCall
from biocheck.secrets import redact

log = logging.getLogger(__name__)

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class _Busy(Exception):
    """The server refused the connection or answered busy (RETRY_STATUS): worth another attempt."""


def _jittered(wait: tenacity.wait.wait_base) -> Callable[[tenacity.RetryCallState], float]:
    """`wait` times a random factor in [0.75, 1.25]: clients that failed together retry apart."""
    return lambda state: wait(state) * random.uniform(0.75, 1.25)


WIRE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
JSON = {"Content-Type": "application/json"}
TIMEOUT_SETTING = "agent.request_timeout_s"  # where the agent's request timeout is set (params.yaml)


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


# --- the answer's schema: what we read, strictly typed; anything else a server adds is ignored ----------------

class _Wire(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class _Function(_Wire):
    name: str
    arguments: str | dict[str, Any] | None = None  # the API sends a JSON string; a few servers an object


class _Call(_Wire):
    id: str | None = None
    type: str | None = None
    function: _Function


class _Message(_Wire):
    content: str | None = None
    tool_calls: list[_Call] | None = None


class _Choice(_Wire):
    message: _Message


class _Usage(_Wire):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class Completion(_Wire):
    """A chat-completions answer as far as BioCheck reads it."""

    choices: list[_Choice] = Field(min_length=1)
    usage: _Usage | None = None


MAX_FAULTS = 3  # schema errors quoted in a malformed-answer message


def parse_completion(raw: bytes) -> Completion:
    """The answer's body checked against `Completion`; ValueError with one line saying what is wrong."""
    try:
        return Completion.model_validate_json(raw)
    except ValidationError as e:
        faults = [f"{'.'.join(map(str, err['loc'])) or 'answer'}: {err['msg']}" for err in e.errors()[:MAX_FAULTS]]
        more = f" (+{e.error_count() - MAX_FAULTS} more)" if e.error_count() > MAX_FAULTS else ""
        raise ValueError("; ".join(" ".join(f.split()) for f in faults) + more) from None


class OpenAIChat:
    def __init__(self, model: str, gen: GenerationConfig | None = None, base_url: str | None = None,
                 api_key: str | None = None, timeout: float | None = None, max_attempts: int = 4) -> None:
        """`timeout`: seconds per request; None takes `gen.request_timeout_s` (the agent's setting, named in
        the error when a request runs out of time)."""
        self.model = model
        self.spec = f"openai:{model}"
        self.gen = gen or GenerationConfig()
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1").rstrip("/")
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self._key = key  # to blank from error texts even when passed in code rather than set in the env
        headers = {"Authorization": f"Bearer {key}", **JSON} if key else dict(JSON)
        self.timeout = self.gen.request_timeout_s if timeout is None else timeout
        self._timeout_setting = TIMEOUT_SETTING if timeout is None else "its client's timeout"
        self._client = httpx.Client(timeout=self.timeout, headers=headers, follow_redirects=False)
        self.max_attempts = max_attempts

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        body: dict[str, Any] = {"model": self.model, "messages": _wire(messages), "max_tokens": self.gen.max_new_tokens,
                                "temperature": self.gen.temperature, "top_p": self.gen.top_p}
        if tools:
            body["tools"] = tools
        if self.gen.seed is not None:
            body["seed"] = self.gen.seed
        url = self.base_url + "/chat/completions"
        raw = self._send(url, body)
        try:
            answer = parse_completion(raw)
        except ValueError as e:
            raise self._malformed(url, str(e), raw) from None
        msg = answer.choices[0].message
        calls = [ToolCall(name=c.function.name, arguments=_arguments(c.function.arguments), id=c.id or f"call_{i}")
                 for i, c in enumerate(msg.tool_calls or [])]
        usage = answer.usage.model_dump(exclude_none=True) if answer.usage else {}
        return AssistantTurn(content=msg.content or "", tool_calls=calls, usage=usage)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """The JSON object the server answers at `path` (for callers that read more than a turn: the judge)."""
        url = self.base_url + path
        raw = self._send(url, body)
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise self._malformed(url, f"not JSON: {e}", raw) from None
        if not isinstance(data, dict):
            raise self._malformed(url, f"a JSON {type(data).__name__}, not an object", raw)
        return data

    def _send(self, url: str, body: dict[str, Any]) -> bytes:
        """The body of the server's answer to `body`, retried on refused connections and busy answers."""
        # Encoded here, ASCII-escaped: httpx's own encoder fails on text that is not valid Unicode (a lone
        # surrogate from a claim) with a UnicodeEncodeError instead of sending it escaped.
        content = json.dumps(body).encode("ascii")
        try:
            if self.max_attempts < 1:  # tenacity always makes a first attempt
                raise _Busy("")
            return self._retrying()(self._post_once, url, content)
        except _Busy as busy:
            raise LLMError(f"{url}: no answer after {self.max_attempts} attempts ({busy}). Is the server up? "
                           "Set OPENAI_BASE_URL (e.g. http://localhost:8000/v1 for `vllm serve`).") from None

    def _retrying(self) -> tenacity.Retrying:
        """Busy answers and refused connections retried, waiting ~0.5 s, 1 s, 2 s ... (at most ~30 s) with jitter;
        the last `_Busy` is re-raised. Shown with --verbose only: the default output stays one line per failure."""
        return tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_attempts),
            wait=_jittered(tenacity.wait_exponential(multiplier=0.5, max=30.0)),
            retry=tenacity.retry_if_exception_type(_Busy),
            before_sleep=tenacity.before_sleep_log(log, logging.DEBUG),
            reraise=True,
        )

    def _post_once(self, url: str, content: bytes) -> bytes:
        """One request: the answer's body, `_Busy` (worth a retry) or LLMError."""
        try:
            r = self._client.post(url, content=content)
        except httpx.TimeoutException as e:
            raise self._error(f"{url}: no answer within {self.timeout:g} s ({type(e).__name__}); the server "
                              f"is stalled or slower than {self._timeout_setting} allows (raise it for slow "
                              "models).", "", 0) from None
        except httpx.TransportError as e:
            raise _Busy(type(e).__name__) from None
        if r.status_code in RETRY_STATUS:
            raise _Busy(f"HTTP {r.status_code}")
        if r.is_redirect:
            raise self._error(f"{url} redirects (HTTP {r.status_code}) to {r.headers.get('Location', '')[:200]}; not "
                              "followed, so the API key stays with the address it is for: set OPENAI_BASE_URL to "
                              "the final address if the move is genuine", "", 0)
        if r.status_code >= 400:
            raise self._error(f"{url} answered HTTP {r.status_code}: ", r.text, 300)
        return r.content

    def _malformed(self, url: str, fault: str, raw: bytes) -> LLMError:
        return self._error(f"{url}: malformed chat-completions answer ({fault}); is this an OpenAI-compatible "
                           "server? The answer began: ", raw.decode("utf-8", "replace"), 120)

    def _error(self, what: str, body: Any, limit: int) -> LLMError:
        """An LLMError quoting `limit` chars of the server's answer, secrets blanked before the cut (a key
        cut in half would no longer match)."""
        quoted = " ".join(redact(body, extra=[self._key]).split())  # one line, whatever the server sent
        return LLMError(redact(what, extra=[self._key]) + quoted[:limit])

    def fingerprint(self) -> str:
        return hashlib.sha256(f"{self.base_url}|{self.model}".encode()).hexdigest()[:16]
