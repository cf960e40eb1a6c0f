"""Chat-model backends behind one interface, chosen by a spec string.

  transformers:<hf id or path>   in-process Hugging Face model (chat template with tool calling)
  openai:<model>                 any OpenAI-compatible server (OPENAI_BASE_URL, OPENAI_API_KEY)
  vllm:<model>                   in-process vLLM engine (GPU only, imported lazily)
  scripted:<file.json>           replays a JSON list of assistant turns (tests, demos)
"""

from __future__ import annotations

from biocheck.llm.base import AssistantTurn, ChatLLM, GenerationConfig, LLMError, ToolCall
from biocheck.llm.spec import split_spec

KINDS = ("transformers", "openai", "vllm", "scripted")


def make_llm(spec: str, gen: GenerationConfig | None = None) -> ChatLLM:
    kind, ref = split_spec(spec)
    if not ref or kind not in KINDS:
        raise LLMError(f"bad LLM spec {spec!r}: expected KIND:REF with KIND one of {', '.join(KINDS)} "
                       "(e.g. transformers:models/base, openai:gpt-4o-mini, scripted:episode.json)")
    if kind == "scripted":
        from biocheck.llm.scripted import ScriptedChat

        return ScriptedChat.from_file(ref)
    if kind == "openai":
        from biocheck.llm.openai_backend import OpenAIChat

        return OpenAIChat(ref, gen)
    if kind == "vllm":
        from biocheck.llm.vllm_backend import VLLMChat

        return VLLMChat(ref, gen)
    from biocheck.llm.transformers_backend import TransformersChat

    return TransformersChat(ref, gen)


__all__ = ["AssistantTurn", "ChatLLM", "GenerationConfig", "LLMError", "ToolCall", "make_llm", "KINDS"]
