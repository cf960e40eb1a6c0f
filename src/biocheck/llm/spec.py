"""Model specs, "KIND:REF": transformers:models/base, openai:gpt-4o-mini, vllm:Qwen/Qwen3-4B, scripted:turns.json,
and the same shape for rankers (encoder:<model>). The one parser: the chat backends, the judges, the
evaluation's model policy and the reports all read a spec here. A registered model, `models:/NAME@ALIAS` or
`models:/NAME/VERSION` (MLflow's own URI), is a transformers model: its REF is the whole URI
(llm/resolve.py downloads it)."""

from __future__ import annotations

REGISTRY_PREFIX = "models:/"


def split_spec(spec: object) -> tuple[str, str]:
    """(KIND, REF) of "KIND:REF"; ("", spec) when there is no colon (a bare path, id or word)."""
    text = str(spec if spec is not None else "")
    if text.startswith(REGISTRY_PREFIX):
        return "transformers", text
    kind, sep, ref = text.partition(":")
    return (kind, ref) if sep else ("", kind)


def spec_ref(spec: object, kind: str) -> str:
    """REF when `spec` is "`kind`:REF", else `spec` itself (a backend takes its spec with or without its kind)."""
    k, ref = split_spec(spec)
    return ref if k == kind else str(spec)
