"""`transformers:<path or hf id>`: a local Hugging Face causal LM as a `ChatLLM`.

The prompt is rendered exactly as TRL's GRPOTrainer renders it (`apply_chat_template(..., tools=...,
add_generation_prompt=True, tokenize=True)`), and the generated ids are parsed with TRL's `parse_response`
(after `add_response_schema`), so an episode run here and a rollout during training see the same tokens and
the same tool calls. Templates TRL does not recognise still work, as plain text without tool calls.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biocheck.io import InputError
from biocheck.llm.base import AssistantTurn, GenerationConfig, LLMError, ToolCall
from biocheck.llm.load import load_model, model_fingerprint

log = logging.getLogger(__name__)

# The shortest prompt prefix worth caching (cache "prefix"): shorter shared starts (a chat template's header)
# save less than rebuilding the prefix costs.
MIN_PREFIX = 64
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def context_length(config: Any) -> int | None:
    """The most positions the model handles (prompt + generation), from the first key its config has; None if none.

    Architectures name it differently (Llama/Qwen: max_position_embeddings, GPT-2: n_positions); a prompt past it
    would crash the model or make it write garbage, so it is checked before generating."""
    for key in CONTEXT_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _normalise_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy the template can render: tool-call arguments as dicts (OpenAI sends JSON strings), content never None."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("content") is None:
            m["content"] = ""
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                c = dict(c)
                fn = dict(c.get("function") or {})
                if isinstance(fn.get("arguments"), str):
                    try:
                        fn["arguments"] = json.loads(fn["arguments"] or "{}")
                    except json.JSONDecodeError:
                        fn["arguments"] = {"arguments": fn["arguments"]}
                c["function"] = fn
                calls.append(c)
            m["tool_calls"] = calls
        out.append(m)
    return out


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _count_tool_calls(messages: list[dict[str, Any]]) -> int:
    return sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")


def parse_completion(tokenizer: Any, completion_ids: list[int], prompt_ids: list[int],
                     tools: list[dict[str, Any]] | None = None, *, structured: bool = True,
                     first_call_index: int = 0) -> AssistantTurn:
    """Turn generated ids into an AssistantTurn (content + tool calls), as TRL parses a rollout.

    `structured=False` (a template TRL does not know) gives the plain decoded text and no tool calls. Tool-call
    ids are `call_<n>`, numbered from `first_call_index` (the calls already in the conversation).
    """
    raw = tokenizer.decode(completion_ids, skip_special_tokens=False)
    usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(completion_ids)}
    ids = list(completion_ids)
    pad = tokenizer.pad_token_id
    while ids and pad is not None and pad != tokenizer.eos_token_id and ids[-1] == pad:
        ids.pop()  # stopped on <|endoftext|>: the parsers only know the end-of-turn token
    if not structured:
        text = tokenizer.decode(ids, skip_special_tokens=True)
        return AssistantTurn(content=text.strip(), raw=raw, usage=usage)

    from trl.chat_template_utils import parse_response

    try:
        parsed = parse_response(tokenizer, ids, prefix=list(prompt_ids), tools=tools or None)
    except Exception as e:  # a parser bug must not kill an episode: fall back to text
        log.debug("parse_response failed (%s); using plain text", e)
        parsed = {"content": tokenizer.decode(ids, skip_special_tokens=True)}
    calls = []
    for i, call in enumerate(parsed.get("tool_calls") or []):
        fn = call.get("function", call) if isinstance(call, dict) else {}
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                args = {"arguments": args}
        if not isinstance(args, dict):
            args = {} if args is None else {"arguments": args}
        calls.append(ToolCall(name=str(fn.get("name") or ""), arguments=args, id=f"call_{first_call_index + i}"))
    content = parsed.get("content") or ""
    if tokenizer.eos_token:
        content = content.replace(tokenizer.eos_token, "")
    return AssistantTurn(content=content.strip(), tool_calls=calls, raw=raw, usage=usage)


@dataclass
class _Turn:
    """One chat() call waiting for its tokens (`_Batcher`)."""

    prompt: list[int]
    max_new: int
    tokens: list[int] | None = None
    error: BaseException | None = None


class _Batcher:
    """Concurrent greedy turns generated as one left-padded batch.

    Threads running episodes (evaluation's `workers`) call `run`; the first to find the model idle collects
    what is waiting (up to `size`, after `gather_s` for turns just being rendered) and generates them
    together, the others wait for their tokens. It pays where decoding dominates; an agent turn's long prompt is
    prefill-bound (1.14x a smol episode, docs/benchmarks.md). Only greedy turns are batched: a sampled turn's seed must give its own
    tokens whatever else runs, so it is generated alone."""

    def __init__(self, generate_many, size: int, gather_s: float = 0.02) -> None:
        self._generate_many, self.size, self.gather_s = generate_many, size, gather_s
        self._waiting: list[_Turn] = []
        self._busy = False
        self._cv = threading.Condition()

    def run(self, prompt: list[int], max_new: int) -> list[int]:
        turn = _Turn(prompt, max_new)
        with self._cv:
            self._waiting.append(turn)
            self._cv.notify_all()
        while True:
            with self._cv:
                while self._busy and turn.tokens is None and turn.error is None:
                    self._cv.wait()
                if turn.error is not None:
                    raise turn.error
                if turn.tokens is not None:
                    return turn.tokens
                self._busy = True  # this thread generates the next batch
                deadline = time.monotonic() + self.gather_s
                while len(self._waiting) < self.size and (left := deadline - time.monotonic()) > 0:
                    self._cv.wait(left)
                batch, self._waiting = self._waiting[:self.size], self._waiting[self.size:]
            try:
                outs = self._generate_many([t.prompt for t in batch], [t.max_new for t in batch])
                for t, out in zip(batch, outs, strict=True):
                    t.tokens = out
            except BaseException as e:  # every turn of the batch gets the error, none waits forever
                for t in batch:
                    t.error = e
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()


class TransformersChat:
    """A local causal LM (path or hub id) behind the `ChatLLM` interface; thread-safe.

    `batch`: the most concurrent greedy turns generated together (`_Batcher`); 1: one generate at a time.
    `batch` and `dtype` default to the generation config's."""

    def __init__(self, model: str | Path, generation: GenerationConfig | None = None, *, device: str = "auto",
                 dtype: str | None = None, cache_dir: str | Path | None = None, batch: int | None = None) -> None:
        self.generation = generation or GenerationConfig()
        dtype = dtype or self.generation.dtype
        batch = batch or self.generation.batch
        try:
            loaded = load_model(model, device, dtype, cache_dir=cache_dir)
        except InputError as e:
            raise LLMError(str(e)) from None
        self.spec, self.path = loaded.spec, loaded.path
        self.model, self.tokenizer, self.device = loaded.model, loaded.tokenizer, loaded.device
        if not self.tokenizer.chat_template:
            raise LLMError(f"{self.spec}: the tokenizer has no chat template (an instruct/chat model is needed).")

        from trl.chat_template_utils import add_response_schema

        try:
            add_response_schema(self.tokenizer)
            self.structured = True
        except ValueError:
            log.warning("%s: TRL does not recognise this chat template; replies are plain text without tool calls.",
                        self.spec)
            self.structured = False

        eos = self.tokenizer.eos_token_id
        gen_eos = getattr(self.model.generation_config, "eos_token_id", None)
        gen_eos = gen_eos if isinstance(gen_eos, list) else [gen_eos]
        self.stop_ids = [i for i in dict.fromkeys([eos, *gen_eos]) if i is not None]
        if not self.stop_ids:
            raise LLMError(f"{self.spec}: the tokenizer has no eos token, so generation could never stop.")
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.stop_ids[0]
        self.max_positions = context_length(self.model.config)
        self._lock = threading.Lock()  # one generate at a time
        self._render_lock = threading.Lock()  # the fast tokenizer is not re-entrant
        self._batcher = _Batcher(self._generate_many, batch) if batch > 1 else None
        self._dtype = None if dtype in (None, "float32") or self.device.type == "cuda" else str(dtype)
        self._prefix: list[int] | None = None  # cache "prefix": the shared prompt prefix and its KV cache
        self._prefix_cache: Any = None
        self._seen: list[int] | None = None  # the last prompt, until a prefix is found
        self._fresh_prefix: Any = None  # a copy of the prefix's cache for the generate about to run
        self._fingerprint: str | None = None

    # ------------------------------------------------------------------------------------------ ChatLLM

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.path)
            if self._dtype is not None:  # the same weights in another precision answer differently: not the same model
                import hashlib

                self._fingerprint = hashlib.sha256(f"{self._fingerprint}\0{self._dtype}".encode()).hexdigest()[:12]
        return self._fingerprint

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """The prompt ids, exactly as TRL's GRPOTrainer renders a conversation with tools."""
        from jinja2 import TemplateError

        try:
            enc = self.tokenizer.apply_chat_template(
                _normalise_messages(messages), tools=tools or None, add_generation_prompt=True, tokenize=True,
                return_dict=True)
        except TemplateError as e:
            raise LLMError(f"{self.spec}: the chat template rejected the conversation: {e}") from None
        ids = enc["input_ids"]
        return list(ids[0] if ids and isinstance(ids[0], list) else ids)

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
             generation: GenerationConfig | None = None) -> AssistantTurn:
        g = generation or self.generation
        with self._render_lock:
            prompt_ids = self.render(messages, tools)
        n = len(prompt_ids)
        max_new = g.max_new_tokens
        if self.max_positions is not None:
            if n >= self.max_positions:
                raise LLMError(
                    f"{self.spec}: the prompt is {n} tokens but the model handles at most {self.max_positions} "
                    "positions (max_position_embeddings). Shorten the conversation (fewer searches or papers "
                    "per search, truncated abstracts) or use a model with a longer context.")
            max_new = min(max_new, self.max_positions - n)
        if self._batcher is not None and g.temperature <= 0:
            completion = self._batcher.run(prompt_ids, max(1, int(max_new)))
        else:
            with self._lock:
                completion = self._generate(prompt_ids, max_new, g)
        with self._render_lock:
            return parse_completion(self.tokenizer, completion, prompt_ids, tools, structured=self.structured,
                                    first_call_index=_count_tool_calls(messages))

    # -------------------------------------------------------------------------------------------- internals

    def _shared_prefix(self, prompts: list[list[int]]) -> int:
        """cache "prefix": how many leading tokens of `prompts` the cached prefix covers (0: none), building or
        shortening the prefix first. It is the longest prefix these prompts share with the cached one (or, before
        there is one, with the last prompt seen), at least MIN_PREFIX tokens and short of every prompt's last
        token; it only ever shortens, so an agent's turns settle on the system prompt and tool schema at once."""
        import copy

        if self.generation.cache != "prefix":
            return 0
        ref = self._prefix if self._prefix is not None else self._seen
        self._seen = prompts[0]
        if ref is None:
            return 0
        n = min([common_prefix(ref, q) for q in prompts] + [len(q) - 1 for q in prompts])
        if n < MIN_PREFIX:
            return 0
        if self._prefix is None or n != len(self._prefix):
            import torch
            from transformers import DynamicCache

            cache = DynamicCache(config=self.model.config)
            with torch.inference_mode():
                self.model(input_ids=torch.tensor([prompts[0][:n]], device=self.device), cache=cache,
                           use_cache=True, logits_to_keep=1)
            self._prefix, self._prefix_cache = prompts[0][:n], cache
        self._fresh_prefix = copy.deepcopy(self._prefix_cache)  # generate extends the cache it is given
        return n

    def _cache_kwargs(self) -> dict[str, Any]:
        # disable_compile: generate would compile a static cache's forward on CUDA, again for every new prompt length
        if self.generation.cache == "static":
            return {"cache_implementation": "static", "disable_compile": True}
        return {}

    def _generate(self, prompt_ids: list[int], max_new_tokens: int, g: GenerationConfig) -> list[int]:
        import torch
        from transformers import GenerationConfig as HFGenerationConfig

        sample = g.temperature > 0
        cfg = HFGenerationConfig(
            max_new_tokens=max(1, int(max_new_tokens)),
            do_sample=sample,
            eos_token_id=self.stop_ids,
            pad_token_id=self.pad_id,
            **({"temperature": g.temperature, "top_p": g.top_p, "top_k": 0} if sample else {}),
            **self._cache_kwargs(),
        )
        input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
        attention_mask = torch.ones_like(input_ids)
        prefix = {"cache": self._fresh_prefix} if self._shared_prefix([prompt_ids]) else {}
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, enabled=sample and g.seed is not None), torch.inference_mode():
            if sample and g.seed is not None:
                torch.manual_seed(g.seed)
            try:
                out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=cfg,
                                          **prefix)
            except RuntimeError as e:  # e.g. CUDA out of memory
                raise LLMError(f"{self.spec}: generation failed: {e}") from None
            finally:
                self._fresh_prefix = None  # the grown cache of this turn: not kept until the next one
        return out[0, len(prompt_ids):].tolist()

    def _generate_many(self, prompts: list[list[int]], max_new: list[int]) -> list[list[int]]:
        """Greedy turns for several prompts in one left-padded generate; each row's tokens as `_generate` gives
        them alone: up to and including its first stop token, at most its own `max_new`."""
        import torch
        from transformers import GenerationConfig as HFGenerationConfig

        if len(prompts) == 1:
            with self._lock:
                return [self._generate(prompts[0], max_new[0], GenerationConfig(temperature=0.0))]
        cfg = HFGenerationConfig(max_new_tokens=max(max_new), do_sample=False, eos_token_id=self.stop_ids,
                                 pad_token_id=self.pad_id, **self._cache_kwargs())
        with self._lock, torch.inference_mode():
            # Left padding, after the shared prefix when it is cached: [prefix][pads][rest]. Positions come from
            # the attention mask, so every row's tokens sit where they would alone.
            n = self._shared_prefix(prompts)
            width = n + max(len(p) - n for p in prompts)
            input_ids = torch.tensor([p[:n] + [self.pad_id] * (width - len(p)) + p[n:] for p in prompts],
                                     dtype=torch.long, device=self.device)
            attention_mask = torch.tensor([[1] * n + [0] * (width - len(p)) + [1] * (len(p) - n) for p in prompts],
                                          dtype=torch.long, device=self.device)
            prefix = {}
            if n:
                self._fresh_prefix.batch_repeat_interleave(len(prompts))
                prefix["cache"] = self._fresh_prefix
            try:
                out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=cfg,
                                          **prefix)
            except RuntimeError as e:
                raise LLMError(f"{self.spec}: generation failed: {e}") from None
            finally:
                self._fresh_prefix = None
        rows = []
        for row, limit in zip(out[:, width:].tolist(), max_new, strict=True):
            row = row[:limit]
            stop = next((i for i, t in enumerate(row) if t in self.stop_ids), None)
            rows.append(row if stop is None else row[:stop + 1])
        return rows
