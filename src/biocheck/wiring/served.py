"""The BioCheck agent as an MLflow model: a claim in, the structured report out.

`biocheck select` logs each selected checkpoint with this model's pyfunc flavor (MLflow models-from-code: MLflow
runs `served_model.py`, which hands it an `AgentModel`), so `mlflow.pyfunc.load_model("models:/biocheck-agent@champion")`
and `mlflow models serve -m models:/biocheck-agent@champion` run the real agent: the same `make_agent` that
training, evaluation and `biocheck check` build, with the policy weights, the prompts of the installed package
and the evidence backend the version was logged with (its files travel as the model's artifacts, so another
machine needs only the package, not this project's data/ folder).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

POLICY = "policy"  # the model's artifact names: the weights and tokenizer ...
EVIDENCE = "evidence"  # ... and the evidence backend's files (the local index, or the evidence store)
CODE_FILE = Path(__file__).with_name("served_model.py")  # the models-from-code entry MLflow runs at load


@dataclass
class ServeConfig:
    """What a logged agent runs besides its weights: `agent:` and `search:` as the project had them (plain data,
    stored in the MLmodel file as the pyfunc model_config). The search paths are replaced at load by the
    model's own evidence artifact."""

    agent: dict[str, Any] = field(default_factory=dict)
    search: dict[str, Any] = field(default_factory=dict)

    def evidence_files(self) -> Path | None:
        """The files the backend reads: the local index folder, the evidence store (replay, entrez), or None."""
        backend = self.search.get("backend", "local")
        key = "index_dir" if backend == "local" else "store"
        value = self.search.get(key)
        return Path(value) if value else None


def build_agent(config: ServeConfig, policy: Path, evidence: Path | None):
    """The agent of a logged model: `agent:` with the policy as its model, `search:` reading `evidence`."""
    from biocheck.agent.episode import AgentConfig
    from biocheck.evidence.search import SearchConfig
    from biocheck.wiring.components import make_agent

    agent_values = {k: v for k, v in config.agent.items() if k != "llm"}
    search_values = dict(config.search)
    if evidence is not None:
        search_values["index_dir" if search_values.get("backend", "local") == "local" else "store"] = str(evidence)
    agent_cfg = AgentConfig(llm=f"transformers:{policy}", **{**agent_values, "workers": 1})
    return make_agent(agent_cfg, SearchConfig(**search_values))


def claims_of(model_input: Any) -> list[str]:
    """The claims of a pyfunc input: a DataFrame (or records) with a `claim` column, a dict, or plain strings."""
    if hasattr(model_input, "to_dict"):  # pandas DataFrame (what the scoring server hands over)
        model_input = model_input.to_dict(orient="records")
    if isinstance(model_input, dict):
        model_input = [model_input]
    if isinstance(model_input, str):
        model_input = [model_input]
    claims = []
    for item in model_input:
        claim = item.get("claim") if isinstance(item, dict) else item
        if not isinstance(claim, str) or not claim.strip():
            raise ValueError(f"each input needs a non-empty 'claim' (text), got {item!r}; e.g. "
                             '{"dataframe_records": [{"claim": "Vitamin D prevents fractures."}]}')
        claims.append(claim)
    return claims


def report_json(agent, claim: str) -> str:
    """One episode of `agent` on `claim`, as the JSON `biocheck check --format json` prints (plus the claim)."""
    from biocheck.agent.report.render import render_json
    from biocheck.agent.report.schema import ParsedReport
    from biocheck.agent.run import describe_model, episode_error

    episode = agent.run(claim)
    error = episode_error(episode)
    if error is not None:  # an empty report would read as "the model found nothing"
        raise RuntimeError(f"the model failed: {error}")
    meta = {"model": describe_model(agent.llm.spec, agent.llm_fingerprint), "llm_fingerprint": agent.llm_fingerprint,
            "prompt_hash": agent.prompts_hash, "searches": episode.searches}
    return render_json(ParsedReport(report=episode.report, problems=episode.parse_problems), claim=claim, meta=meta)


def _python_model_base() -> type:
    import mlflow.pyfunc

    return mlflow.pyfunc.PythonModel


class AgentModel(_python_model_base()):
    """The pyfunc model: `load_context` builds the agent once; `predict` runs one episode per claim and returns
    one row per claim, `report` the report as JSON text (evidence items, summary, conclusion)."""

    def load_context(self, context) -> None:
        config = ServeConfig(**(context.model_config or {}))
        evidence = context.artifacts.get(EVIDENCE)
        self.agent = build_agent(config, Path(context.artifacts[POLICY]), Path(evidence) if evidence else None)

    def predict(self, context, model_input, params=None):
        import pandas as pd

        return pd.DataFrame({"report": [report_json(self.agent, claim) for claim in claims_of(model_input)]})


def parse_report(text: str) -> dict[str, Any]:
    """A served report back to data (the test and a client's first step)."""
    return json.loads(text)
