"""An evaluation killed with SIGKILL mid-run: the rerun computes only what is missing, nothing is duplicated
or cut. A real process is killed (the harness tests simulate the leftovers; this one makes them)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from biocheck.data.schema import ClaimRecord

N = 6
# The child: `biocheck evaluate` in-process with a model that records every call and is slow enough to kill.
CHILD = """
import re, sys, time
import biocheck.llm as llm_mod
from biocheck.llm.scripted import ScriptedChat

class Slow(ScriptedChat):
    def chat(self, messages, tools):
        number = re.search(r"Claim number (\\d+)", messages[-1]["content"]).group(1)
        with open(sys.argv[2], "a") as f:
            f.write(number + "\\n")
        time.sleep(float(sys.argv[3]))
        return super().chat(messages, tools)

llm_mod.make_llm = lambda spec, gen=None: Slow([{"content": "## Conclusion\\nSUPPORTED"}], spec="scripted:slow")
from biocheck.pipeline import evaluate_stage
evaluate_stage(sys.argv[1], progress=False, systems=["no_retrieval"], datasets=["scifact"], workers=1)
print("DONE", flush=True)
"""


def _run(project: Path, calls: Path, delay: float) -> subprocess.Popen:
    env = {**os.environ, "BIOCHECK_TRACKING": "off"}
    return subprocess.Popen([sys.executable, "-c", CHILD, str(project / "params.yaml"), str(calls), str(delay)],
                            cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_killed_evaluation_resumes_without_duplicates(evidence_workdir):
    project = evidence_workdir
    folder = project / "data" / "prepared" / "scifact"
    folder.mkdir(parents=True)
    (folder / "test.jsonl").write_text("".join(
        ClaimRecord(id=str(i), dataset="scifact", split="test", claim=f"Claim number {i} is true.",
                    label="SUPPORTED").model_dump_json() + "\n" for i in range(N)))
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["agent"]["llm"] = "scripted:slow"
    params["reward"]["judge"] = None
    params["evaluate"]["eqs_judge"] = None  # EQS by the (absent) training judge
    params["evaluate"]["limit"] = None  # every claim
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    traces = project / "eval" / "traces" / "no_retrieval"

    first = project / "calls-1.txt"
    proc = _run(project, first, delay=2.0)
    deadline = time.time() + 600  # a safety net for a hung child, not a speed requirement
    while len(list(traces.rglob("*.json"))) < 2 and time.time() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(60)
    done = {p.stem for p in traces.rglob("*.json")}
    assert 2 <= len(done) < N
    assert not (project / "eval" / "predictions" / "no_retrieval" / "scifact.jsonl").exists()  # never half-written

    second = project / "calls-2.txt"
    proc = _run(project, second, delay=0.0)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0 and "DONE" in out, out
    assert sorted(second.read_text().split()) == sorted(str(i) for i in range(N) if str(i) not in done)  # only those
    assert len(first.read_text().split()) >= len(done)  # the killed run did make the calls its traces record
    lines = (project / "eval" / "predictions" / "no_retrieval" / "scifact.jsonl").read_text().splitlines()
    ids = [json.loads(line)["id"] for line in lines]
    assert ids == [str(i) for i in range(N)]  # every claim once, in order, no cut line
    assert not [p for p in (project / "eval").rglob("*") if p.name.startswith(".") or p.suffix == ".tmp"]
