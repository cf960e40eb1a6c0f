"""`vllm:<model>`: an in-process vLLM engine (GPU only; `pip install -e '.[gpu]'`).

vLLM is imported only when this backend is built, never on CPU code paths. The prompt is rendered
and the output parsed with the model's own tokenizer and chat template, exactly as the
transformers backend does, so both backends see the same text.
"""

from __future__ import annotations

import threading
from typing import Any

from biocheck.llm.base import AssistantTurn, GenerationConfig, LLMError


class VLLMChat:
    def __init__(self, model: str, gen: GenerationConfig | None = None, **engine_kwargs: Any) -> None:
        try:
            import vllm  # noqa: F401  (lazy: GPU-only dependency)
        except ImportError:
            raise LLMError("the vllm backend needs vLLM and a GPU: pip install -e '.[gpu]'") from None
        from vllm import LLM

        from biocheck.llm.load import model_fingerprint
        from biocheck.llm.resolve import resolve_model
        from biocheck.llm.transformers_backend import parse_completion

        self.spec = f"vllm:{model}"
        self.gen = gen or GenerationConfig()
        path = resolve_model(model)
        self.engine = LLM(model=str(path), **engine_kwargs)
        self.tokenizer = self.engine.get_tokenizer()
        self._parse = parse_completion
        self._fingerprint = model_fingerprint(path)
        self._lock = threading.Lock()
        self._path = path

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        from vllm import SamplingParams

        prompt_ids = self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                                        tokenize=True)
        params = SamplingParams(max_tokens=self.gen.max_new_tokens, temperature=self.gen.temperature,
                                top_p=self.gen.top_p, seed=self.gen.seed)
        with self._lock:
            out = self.engine.generate([{"prompt_token_ids": prompt_ids}], params, use_tqdm=False)[0].outputs[0]
        return self._parse(self.tokenizer, list(out.token_ids), list(prompt_ids), tools=tools,
                           first_call_index=sum(len(m.get("tool_calls") or []) for m in messages))

    def fingerprint(self) -> str:
        return self._fingerprint
