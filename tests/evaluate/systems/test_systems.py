"""The evaluated agent systems (base / eg_grpo / outcome_only, and the label-only pmsearch) and the registry."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from biocheck.agent.episode import AgentConfig
from biocheck.agent.prompts import Prompts
from biocheck.agent.report.schema import Report
from biocheck.data.schema import ClaimRecord
from biocheck.evaluate.config import SYSTEMS, EvaluateConfig
from biocheck.evaluate.systems import AGENTS, WRITES_REPORT, Lazy, make_system
from biocheck.evaluate.systems.agent_systems import NO_LABEL, AgentSystem
from biocheck.evidence.search import SearchConfig, search_tool
from biocheck.labels import Label
from biocheck.llm.scripted import ScriptedChat
from tests.helpers.turns import REPORT, search

CLAIM = ClaimRecord(id="c1", dataset="scifact", split="test", claim="Vitamin D prevents fractures.",
                    label=Label.SUPPORTED)


@pytest.fixture
def search_cfg(evidence):
    cfg, _ = evidence
    return SearchConfig(index_dir=cfg.index_dir, store=cfg.store, max_results=3)


def system(name, turns, search_cfg, label_only=False, **agent) -> AgentSystem:
    tool = search_tool(search_cfg)
    cfg = AgentConfig(llm="scripted:<inline>", **agent)
    return AgentSystem(name, ScriptedChat(turns), tool, cfg, search_cfg, Prompts.for_tool(cfg.max_searches, tool),
                       label_only=label_only)


def sections(text: str) -> dict[str, str]:
    """'## Title' -> body; the text before the first heading under ''."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {"": parts[0], **{parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}}


def test_an_agent_system_runs_the_biocheck_agent_and_keeps_its_report(search_cfg):
    sys_ = system("eg_grpo", [search("vitamin D AND fracture*"), {"content": REPORT}], search_cfg)
    ep = sys_.run(CLAIM)
    assert sys_.writes_report and sys_.name == "eg_grpo"
    assert ep.claim == CLAIM.claim and ep.claim_id == "c1" and ep.dataset == "scifact" and ep.gold_label is Label.SUPPORTED
    assert ep.searches == 1 and set(ep.ledger) == {"101"}
    assert ep.report.conclusion is Label.SUPPORTED and ep.report.supporting[0].pmid == "101" and not ep.parse_problems
    assert ep.prompt_hash == Prompts(5, 3).hash() and re.fullmatch(r"[0-9a-f]{16}", sys_.fingerprint())


@pytest.mark.parametrize("answer", ["REFUTED", "**Refuted.**", "<think>the trial found no effect</think>\nREFUTED",
                                    REPORT.replace("SUPPORTED\n", "REFUTED\n")])
def test_pmsearch_keeps_the_search_but_its_episode_has_only_a_label(search_cfg, answer):
    sys_ = system("pmsearch", [search("vitamin D AND fracture*"), {"content": answer}], search_cfg, label_only=True)
    ep = sys_.run(CLAIM)
    assert not sys_.writes_report
    assert ep.report == Report(conclusion=Label.REFUTED)  # a full report from the model is cut to its label
    assert ep.parse_problems == [] and ep.final_text == answer
    assert ep.searches == 1 and set(ep.ledger) == {"101"}  # same graph and tool as the agent


def test_pmsearch_without_a_readable_label_has_no_conclusion_and_one_problem(search_cfg):
    ep = system("pmsearch", [{"content": "The evidence is mixed."}], search_cfg, label_only=True).run(CLAIM)
    assert ep.report == Report() and ep.parse_problems == [NO_LABEL]


def test_pmsearch_prompt_differs_from_the_agents_only_in_the_report_instructions(search_cfg):
    agent = system("eg_grpo", [], search_cfg).agent.prompts
    label = system("pmsearch", [], search_cfg, label_only=True).agent.prompts
    assert label.report is False and agent.report is True
    a_head, _, a_report = agent.system().partition("## The report")
    b_head, _, b_answer = label.system().partition("## The answer")
    assert a_report and b_answer and "## The report" not in label.system()
    a, b = sections(a_head), sections(b_head)
    assert a["How to search"] == b["How to search"] and "search_pubmed(query)" in b[""]
    assert a[""].splitlines()[2:] == b[""].splitlines()[2:]  # the tool and budget paragraph
    assert all(lab in b_answer for lab in ("SUPPORTED", "REFUTED", "NOT ENOUGH INFORMATION"))
    assert "PMID" not in b_answer and "Quote" not in b_answer and "PMID" in a_report
    assert label.user("x") == agent.user("x") and label.refusal() == agent.refusal()
    assert label.tool_schema() == agent.tool_schema()
    assert label.intervention() != agent.intervention() and "label only" in label.intervention()
    assert "report" in agent.intervention() and "report" not in label.intervention()
    assert label.hash() != agent.hash()


def test_the_report_prompts_are_the_default_and_keep_their_hash():
    assert Prompts() == Prompts(report=True) and Prompts().hash() == Prompts(report=True).hash()
    assert Prompts(3, 2).hash() == dataclasses.replace(Prompts(3, 2, report=False), report=True).hash()
    assert Prompts(report=False).hash() != Prompts().hash()
    assert "{" not in Prompts(report=False).system() + Prompts(report=False).intervention()  # every field filled


def test_fingerprint_covers_model_prompts_and_settings_but_not_workers(search_cfg):
    turns = [{"content": "SUPPORTED"}]
    fp = system("base", turns, search_cfg).fingerprint()
    assert system("other_name", turns, search_cfg).fingerprint() == fp  # what runs, not what it is called
    assert system("base", turns, search_cfg, workers=8).fingerprint() == fp
    assert system("base", turns, dataclasses.replace(search_cfg, timeout_s=99.0)).fingerprint() == fp
    changed = [
        system("base", [{"content": "REFUTED"}], search_cfg),  # another model
        system("base", turns, search_cfg, label_only=True),  # other prompts
        system("base", turns, search_cfg, max_searches=2),
        system("base", turns, search_cfg, temperature=0.7),
        system("base", turns, dataclasses.replace(search_cfg, mode="bm25")),
    ]
    fps = [s.fingerprint() for s in changed]
    assert fp not in fps and len(set(fps)) == len(fps)


# --- registry ---------------------------------------------------------------------------------------


def scripted(tmp_path, turns, name="model.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(turns))
    return f"scripted:{path}"


def test_make_system_builds_each_agent_lazily_with_its_own_model(search_cfg, tmp_path):
    spec = scripted(tmp_path, [search("aspirin[ti]"), {"content": REPORT}])
    for name in (*AGENTS, "pmsearch"):
        s = make_system(name, llm=spec, agent_cfg=AgentConfig(), search_cfg=search_cfg)
        assert isinstance(s, Lazy) and s.name == name and s.writes_report is (name != "pmsearch")
        ep = s.run(CLAIM)
        assert ep.llm == spec and ep.config["llm"] == spec and ep.search_backend == "local"
        assert ep.searches == 1 and ep.report.conclusion is Label.SUPPORTED
        assert bool(ep.report.supporting) is (name != "pmsearch")


def test_a_lazy_system_loads_its_model_on_first_use_and_drops_it_on_close(search_cfg, tmp_path):
    missing = make_system("eg_grpo", llm=f"scripted:{tmp_path / 'absent.json'}", agent_cfg=AgentConfig(),
                          search_cfg=search_cfg)
    assert missing.name == "eg_grpo"  # nothing loaded yet
    with pytest.raises(Exception, match="absent.json"):
        missing.fingerprint()
    s = make_system("base", llm=scripted(tmp_path, [{"content": "SUPPORTED"}]), agent_cfg=AgentConfig(),
                    search_cfg=search_cfg)
    fp = s.fingerprint()
    first = s.system
    s.close()
    assert s._system is None and s.fingerprint() == fp  # the fingerprint is kept without reloading
    assert s.describe()["prompt_hash"] == first.agent.prompts_hash
    assert s.run(CLAIM).report.conclusion is Label.SUPPORTED and s.system is not first


def test_make_system_rejects_an_unknown_name(search_cfg):
    with pytest.raises(ValueError, match="unknown system 'gpt'.*eg_grpo"):
        make_system("gpt", llm="scripted:x.json", agent_cfg=AgentConfig(), search_cfg=search_cfg)


def test_every_known_system_has_a_report_flag():
    assert set(WRITES_REPORT) == set(SYSTEMS)
    assert [s for s in SYSTEMS if WRITES_REPORT[s]] == list(AGENTS)


@pytest.mark.parametrize("name", ["no_retrieval", "cer", "fire"])
def test_make_system_builds_the_baselines_with_the_same_model_and_search(search_cfg, tmp_path, name):
    spec = scripted(tmp_path, [{"content": "SUPPORTED"}] * 3)
    s = make_system(name, llm=spec, agent_cfg=AgentConfig(), search_cfg=search_cfg, eval_cfg=EvaluateConfig())
    ep = s.run(CLAIM)
    assert s.name == name and not s.writes_report and not s.system.writes_report
    assert ep.llm == spec and ep.claim_id == "c1" and ep.report.conclusion is Label.SUPPORTED
    assert re.fullmatch(r"[0-9a-f]{16}", s.fingerprint()) and s.describe()["prompt_hash"] == ep.prompt_hash
    if name == "cer":  # CER's retriever: the same backend, 20 abstracts, BM25
        assert s.system.tool.max_results == 20 and search_cfg.max_results == 3


def test_baseline_settings_are_checked_when_the_system_is_made(search_cfg):
    with pytest.raises(ValueError, match=r"unknown key\(s\) evaluate\.cer\.retrive; 'evaluate\.cer' accepts \["):
        make_system("cer", llm="scripted:x.json", agent_cfg=AgentConfig(), search_cfg=search_cfg,
                    eval_cfg=EvaluateConfig(cer={"retrive": 5}))
    # the bounds its fields' types declare (bounds.py), checked as a section's
    for baseline, values, message in [("fire", {"similarity": 2}, "evaluate.fire.similarity must be <= 1, not 2"),
                                       ("fire", {"max_retries": -1}, "evaluate.fire.max_retries must be >= 0, not -1"),
                                       ("cer", {"retrieve": 0}, "evaluate.cer.retrieve must be >= 1, not 0"),
                                       ("cer", {"sentences": True}, "evaluate.cer.sentences must be an int, not True")]:
        with pytest.raises(ValueError) as e:
            make_system(baseline, llm="scripted:x.json", agent_cfg=AgentConfig(), search_cfg=search_cfg,
                        eval_cfg=EvaluateConfig(**{baseline: values}))
        assert str(e.value) == message


def test_fire_searches_under_the_agents_budget_unless_told_otherwise(search_cfg, tmp_path):
    spec = scripted(tmp_path, [{"content": "SUPPORTED"}])
    agent = AgentConfig(max_searches=3, abstract_chars=50)
    fire = make_system("fire", llm=spec, agent_cfg=agent, search_cfg=search_cfg, eval_cfg=EvaluateConfig()).system
    assert (fire.cfg.max_steps, fire.cfg.abstract_chars) == (3, 50)
    own = make_system("fire", llm=spec, agent_cfg=agent, search_cfg=search_cfg,
                      eval_cfg=EvaluateConfig(fire={"max_steps": 5})).system
    assert own.cfg.max_steps == 5
