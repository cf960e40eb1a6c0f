"""LLM backends other than transformers: OpenAI-compatible server (faked locally), vLLM laziness, specs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from biocheck.agent.episode import Agent, AgentConfig
from biocheck.agent.tools import tool_schema
from biocheck.evidence.search import SearchConfig, search_tool
from biocheck.labels import Label
from biocheck.llm import LLMError, make_llm
from biocheck.llm.base import GenerationConfig
from biocheck.llm.openai_backend import OpenAIChat
from tests.helpers.fake_openai import FakeOpenAI as SharedFakeOpenAI
from tests.helpers.fake_openai import assistant
from tests.helpers.turns import REPORT

KEY = "sk-test-0123456789"


class FakeOpenAI(SharedFakeOpenAI):
    """Answers turn k of a conversation with answers[k] (the last one after that); the first `fail_first`
    requests get 503."""

    def __init__(self, answers: list[dict], fail_first: int = 0):
        def reply(body, _headers):
            if len(self.requests) <= fail_first:
                return 503, None
            k = sum(1 for m in body["messages"] if m["role"] == "assistant")
            return 200, assistant(answers[min(k, len(answers) - 1)])

        super().__init__(reply)


def call(q: str, i: int = 0) -> dict:
    return {"content": None, "tool_calls": [{"id": f"c{i}", "type": "function",
                                             "function": {"name": "search_pubmed", "arguments": json.dumps({"query": q})}}]}


def test_openai_episode_through_the_graph(evidence, monkeypatch):
    cfg, _ = evidence
    fake = FakeOpenAI([call("vitamin D AND fracture*"), {"content": REPORT}], fail_first=1)
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    try:
        llm = make_llm("openai:some-model", GenerationConfig(max_new_tokens=64))
        tool = search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store))
        ep = Agent(llm, tool, AgentConfig(llm=llm.spec)).run("Vitamin D prevents fractures.")
    finally:
        fake.close()
    assert ep.report.conclusion is Label.SUPPORTED and ep.searches == 1 and set(ep.ledger) == {"101"}
    first, *_, last = [r for r in fake.requests if r["body"]]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == f"Bearer {KEY}"
    assert first["body"]["tools"] == [tool_schema(tool.max_results)] and first["body"]["model"] == "some-model"
    # our dict arguments travel as JSON strings, as the API expects
    sent_call = last["body"]["messages"][2]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(sent_call) == {"query": "vitamin D AND fracture*"}
    assert KEY not in ep.model_dump_json()  # the key never reaches a trace


def test_openai_gives_up_with_a_clear_error(monkeypatch):
    fake = FakeOpenAI([{"content": "x"}], fail_first=100)
    try:
        llm = OpenAIChat("m", base_url=fake.url, api_key="", max_attempts=2)
        monkeypatch.setattr("time.sleep", lambda s: None)
        with pytest.raises(LLMError, match="no answer after 2 attempts"):
            llm.chat([{"role": "user", "content": "hi"}], [])
    finally:
        fake.close()


def test_non_json_arguments_are_kept_readable():
    from biocheck.llm.openai_backend import _arguments

    assert _arguments('{"query": "a AND b"}') == {"query": "a AND b"}
    assert _arguments("aspirin bleeding") == {"query": "aspirin bleeding"}
    assert _arguments({"query": "x"}) == {"query": "x"}


# Modules on CPU code paths: the CLI, the agent, rewards and judges, and the training wiring.
CPU_MODULES = [
    "biocheck.cli", "biocheck.llm", "biocheck.agent.episode", "biocheck.agent.graph", "biocheck.agent.run",
    "biocheck.llm.transformers_backend", "biocheck.llm.openai_backend", "biocheck.rewards.components",
    "biocheck.evaluate.score", "biocheck.rewards.judge", "biocheck.rewards.judge.transformers_judge",
    "biocheck.train.env", "biocheck.train.reward_funcs", "biocheck.train.dataset", "biocheck.train.demos",
    "biocheck.train.grpo", "biocheck.train.sft", "biocheck.train.select", "biocheck.train.training",
]

# In a child process, with a fake `vllm` first on sys.path: import every CPU module, then build a
# vllm backend. The fake records each import in a marker file, so the test can fail both ways,
# whether or not the real vLLM is installed.
_IMPORT_CHECK = """
import importlib, pathlib, sys
marker = pathlib.Path(sys.argv[1])
for name in sys.argv[2:]:
    importlib.import_module(name)
print("after cpu imports:", marker.exists())
from biocheck.llm import make_llm
try:
    make_llm("vllm:some-model")
except Exception as e:
    print("make_llm:", type(e).__name__)
print("after make_llm:", marker.exists())
"""


def test_vllm_is_never_imported_on_cpu_paths_but_is_by_the_vllm_backend(tmp_path):
    fake, marker = tmp_path / "fake" / "vllm", tmp_path / "vllm-imported"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('imported')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), *sys.path])}
    out = subprocess.run([sys.executable, "-c", _IMPORT_CHECK, str(marker), *CPU_MODULES], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert "after cpu imports: False" in out, out
    assert "after make_llm: True" in out, out


def test_vllm_backend_without_vllm_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError, installed or not
    with pytest.raises(LLMError, match=r"pip install -e '\.\[gpu\]'"):
        make_llm("vllm:models/base")


@pytest.mark.parametrize("spec", ["", "gpt-4", "bard:x", "openai:", "scripted"])
def test_bad_specs(spec):
    with pytest.raises(LLMError, match="bad LLM spec"):
        make_llm(spec)
