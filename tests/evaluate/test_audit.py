"""The reward-signal audit: which reward terms vary inside a group (GRPO learns only from those), by label;
the judge's credit for right- and wrong-side filings; the warning; and `biocheck reward audit` end to end
on the tiny model."""

from __future__ import annotations

import json
import logging

import pytest
import yaml
from typer.testing import CliRunner

from biocheck.agent.episode import AgentConfig
from biocheck.agent.prompts import Prompts
from biocheck.cli import app
from biocheck.data.schema import ClaimRecord, GoldEvidence
from biocheck.evaluate.audit import AuditConfig, AuditSetup, audit, pick_claims, warnings
from biocheck.evaluate.systems.agent_systems import AgentSystem
from biocheck.evidence.search import SearchConfig, search_tool
from biocheck.evidence.types import Article
from biocheck.io import InputError
from biocheck.labels import Label
from biocheck.llm.scripted import ScriptedChat
from biocheck.rewards.components import RewardConfig
from tests.helpers.turns import search

S, R = Label.SUPPORTED, Label.REFUTED


def report(side: str, pmid: str, quote: str, conclusion: str) -> str:
    item = f'- PMID: {pmid}\n  Quote: "{quote}"\n  Context: c'
    sup, ref = (item, "None") if side == "supporting" else ("None", item)
    return (f"## Supporting evidence\n{sup}\n## Refuting evidence\n{ref}\n## Summary\nSupport reasons: x\n"
            f"Refutation reasons: y\nConsensus and context check: z\nJustification: w\n## Conclusion\n{conclusion}")


CITE_101 = report("supporting", "101", "Vitamin D supplementation reduced hip fractures in older adults.", "SUPPORTED")
CITE_103_AS_SUPPORT = report("supporting", "103", "Aspirin increased major bleeding.", "SUPPORTED")
SILENT = "## Supporting evidence\nNone\n## Refuting evidence\nNone\n## Summary\nJustification: w\n## Conclusion\nREFUTED"


class SideJudge:
    """s(SUPPORTED) 0.9 for paper 101, s(REFUTED) 0.2 for paper 103 (a judge that cannot credit refutation)."""

    spec, prompt_hash = "side", "s"

    def fingerprint(self):
        return "side"

    def score(self, pairs):
        return [{"SUPPORTED": 0.9, "REFUTED": 0.05, "NEI": 0.05} if a.pmid == "101" else
                {"SUPPORTED": 0.6, "REFUTED": 0.2, "NEI": 0.2} for _, a in pairs]


def sample(name, turns_for, search_cfg):
    """A scripted agent: claim text -> its turns (one system per episode of a group, as the seeds give)."""

    class ByClaim(ScriptedChat):
        def chat(self, messages, tools):
            claim = next(m["content"] for m in messages if m["role"] == "user")
            return ScriptedChat(turns_for(claim)).chat(messages, tools)  # its position: assistant turns so far

    tool = search_tool(search_cfg)
    s = AgentSystem("eg_grpo", ByClaim([{"content": ""}]), tool, AgentConfig(llm=f"scripted:{name}"), search_cfg,
                    Prompts.for_tool(5, tool))
    s.name = name
    s.close = lambda: None
    return s


@pytest.fixture
def search_cfg(evidence):
    cfg, _ = evidence
    return SearchConfig(index_dir=cfg.index_dir, store=cfg.store, max_results=5)


CLAIMS = [ClaimRecord(id="1", dataset="scifact", split="train", claim="Vitamin D prevents hip fractures.", label=S,
                      evidence=[GoldEvidence(doc_id="101", sentences=[0], label=S)]),
          ClaimRecord(id="2", dataset="scifact", split="train", claim="Aspirin is safe.", label=R,
                      evidence=[GoldEvidence(doc_id="103", sentences=[0], label=R)])]
PAPERS = {"101": Article(pmid="101", title="Vitamin D and fracture risk",
                         abstract="Vitamin D supplementation reduced hip fractures in older adults."),
          "103": Article(pmid="103", title="Aspirin in primary prevention", abstract="Aspirin increased major bleeding.")}


def test_audit_counts_varying_terms_credit_by_side_and_warns(search_cfg, tmp_path, caplog):
    def first(claim):  # cites the gold paper (aspirin: filed on the wrong side), right verdict for vitamin D
        if "Vitamin" in claim:
            return [search("vitamin D AND fracture*"), {"content": CITE_101}]
        return [search("aspirin"), {"content": CITE_103_AS_SUPPORT}]

    def second(claim):  # searches the same, cites nothing
        return [search("vitamin D AND fracture*" if "Vitamin" in claim else "aspirin"), {"content": SILENT}]

    cfg = AuditConfig(out_dir=tmp_path / "audit", metrics_path=tmp_path / "audit.json",
                      report_path=tmp_path / "audit_report.json", progress=False)
    setup = AuditSetup(cfg=cfg, samples=[sample("sample0", first, search_cfg), sample("sample1", second, search_cfg)],
                       claims=CLAIMS, reward=RewardConfig(), judge=SideJudge(), papers=PAPERS,
                       sentences={d: [a.abstract] for d, a in PAPERS.items()})
    with caplog.at_level(logging.WARNING):
        out = audit(setup)
    assert json.loads(cfg.report_path.read_text()) == json.loads(json.dumps(out))
    head = json.loads(cfg.metrics_path.read_text())  # the headline DVC shows: a few numbers of the summary
    assert head["groups_varying"] == json.loads(json.dumps(out["groups_varying"])) and head["episodes"] == out["episodes"]
    assert head["gold_paper_credit"]["SUPPORTED"]["correct_side"] == out["judge_credit"]["gold_papers"]["SUPPORTED"][
        "correct_side"] and head["warnings"] == len(out["warnings"]) and "about" not in head
    sup, ref = out["groups_varying"]["SUPPORTED"], out["groups_varying"]["REFUTED"]
    # Vitamin D: episode 1 is right and cites 101 (s 0.9 > 0.5: R_evidence > 0), episode 2 silent and wrong.
    assert sup == {"groups": 1, "outcome": 1.0, "search": 0.0, "evidence": 1.0, "hallucination": 0.0,
                   "total_eg_grpo": 1.0, "total_outcome_only": 1.0}
    # Aspirin: 103 filed as supporting gets s(SUPPORTED) 0.6 > 0.5: evidence varies; verdicts SUPPORTED vs REFUTED.
    assert ref["evidence"] == 1.0 and ref["outcome"] == 1.0
    assert out["groups_varying"]["all"]["groups"] == 2 and out["groups_varying"]["all"]["evidence"] == 1.0
    gold = out["judge_credit"]["gold_papers"]
    assert gold["SUPPORTED"] == {"pairs": 1, "correct_side": 1.0, "wrong_side": 0.0, "s_correct_mean": 0.9,
                                 "s_wrong_mean": 0.05}
    assert gold["REFUTED"]["correct_side"] == 0.0 and gold["REFUTED"]["wrong_side"] == 1.0  # the smol judge's bias
    cites = out["judge_credit"]["citations"]
    assert cites["SUPPORTED"]["gold_correct_side"] == {"n": 1, "credited": 1.0, "s_mean": 0.9}
    assert cites["REFUTED"]["gold_wrong_side"]["n"] == 1 and cites["REFUTED"]["gold_correct_side"]["n"] == 0
    assert out["evidence"]["SUPPORTED"]["nonzero"] == 0.5 and out["episodes"] == 4
    # the funnel, one row per episode: vitamin D's citing episode passes every step, its silent one stops after
    # retrieval; aspirin's citing episode quotes the rationale but files it on the wrong side
    fs, fr = out["funnel"]["SUPPORTED"], out["funnel"]["REFUTED"]
    assert fs["n"] == 2 and [fs["steps"][k]["count"] for k in ("retrieved", "cited", "credited", "right_label")] == [2, 1, 1, 1]
    assert fr["n"] == 2 and [fr["steps"][k]["count"] for k in ("retrieved", "cited", "rationale", "credited")] == [2, 1, 1, 0]
    assert out["warnings"] == []
    # The warning fires for a label whose groups never vary in R_evidence.
    result = {"groups_varying": {"SUPPORTED": {"groups": 4, "evidence": 0.5}, "REFUTED": {"groups": 4, "evidence": 0.0}}}
    (line,) = warnings(result, 0.2)
    assert "0% of REFUTED groups" in line and "SUPPORTED" not in line


def test_cached_episodes_are_rescored_not_regenerated(search_cfg, tmp_path):
    calls = []

    def counted(claim):
        calls.append(claim)
        return [search("aspirin"), {"content": SILENT}]

    cfg = AuditConfig(out_dir=tmp_path / "a", metrics_path=None, report_path=tmp_path / "a.json", progress=False)
    setup = AuditSetup(cfg=cfg, samples=[sample("sample0", counted, search_cfg)], claims=CLAIMS,
                       reward=RewardConfig(), judge=None, papers=PAPERS,
                       sentences={d: [a.abstract] for d, a in PAPERS.items()})  # the funnel places gold in them
    audit(setup)
    n = len(calls)
    audit(setup)
    assert n > 0 and len(calls) == n  # the second pass (another judge, say) read the traces


def test_pick_claims_splits_between_labels_and_is_seeded():
    claims = [ClaimRecord(id=str(i), dataset="scifact", split="train", claim=f"c{i}", label=S if i < 10 else R)
              for i in range(14)]
    a = pick_claims(claims, 6, seed=0)
    assert [c.label for c in a].count(S) == 3 and [c.label for c in a].count(R) == 3
    assert a == pick_claims(claims, 6, seed=0) and a != pick_claims(claims, 6, seed=5)
    b = pick_claims(claims, 12, seed=0)  # only 4 REFUTED: SUPPORTED fills the rest
    assert [c.label for c in b].count(R) == 4 and len(b) == 12
    assert pick_claims(claims, None, 0) == claims


def test_reward_audit_command_on_the_tiny_model(evidence_workdir, evidence, tiny_model):
    root = evidence_workdir
    folder = root / "data" / "prepared" / "scifact"
    folder.mkdir(parents=True)
    (folder.parent / "corpus.jsonl").write_bytes(evidence[0].corpus.read_bytes())  # the gold papers' sentences
    (folder / "train.jsonl").write_text("".join(c.model_dump_json() + "\n" for c in CLAIMS))
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["train"]["sft"]["out_dir"] = str(tiny_model)  # the start policy
    params["train"]["num_generations"] = 2
    params["reward"]["judge"] = None
    params["agent"]["max_new_tokens"] = 16
    params["agent"]["max_searches"] = 1
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    r = CliRunner().invoke(app, ["reward", "audit", "--claims", "2", "--no-progress"])
    assert r.exit_code == 0, r.output
    out = json.loads((root / "reports" / "reward_audit.json").read_text())
    assert out["episodes"] == 4 and out["group_size"] == 2 and out["claims"] == {"SUPPORTED": 1, "REFUTED": 1}
    assert out["about"]["start"] == f"transformers:{tiny_model}" and out["about"]["temperature"] == 0.8
    head = json.loads((root / "metrics" / "reward_audit.json").read_text())  # DVC's metrics: the headline only
    assert head["episodes"] == 4 and head["groups_varying"] == out["groups_varying"] and "about" not in head
    assert "groups where a term varies" in r.output
    params["train"]["sft"]["out_dir"] = "models/none"
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    r = CliRunner().invoke(app, ["reward", "audit"])
    assert r.exit_code == 1 and "no start model in models/none" in r.output and "dvc repro sft" in r.output


def test_a_judge_of_quotes_is_asked_about_each_gold_rationale_not_the_whole_paper():
    from biocheck.evaluate.audit import _gold_credit

    class Seen(SideJudge):
        def __init__(self):
            self.pairs = []

        def score(self, pairs):
            self.pairs += [(c, a.pmid, a.title, a.abstract) for c, a in pairs]
            return super().score(pairs)

    two = "Aspirin increased major bleeding. It did not reduce mortality."
    papers = {**PAPERS, "103": Article(pmid="103", title="Aspirin in primary prevention", abstract=two)}
    sentences = {"101": [PAPERS["101"].abstract], "103": ["Aspirin increased major bleeding.", "It did not reduce mortality."]}
    claims = [CLAIMS[0], ClaimRecord(id="2", dataset="scifact", split="train", claim="Aspirin is safe.", label=R,
                                     evidence=[GoldEvidence(doc_id="103", sentences=[1], label=R),
                                               GoldEvidence(doc_id="103", sentences=[0, 1], label=R),
                                               GoldEvidence(doc_id="103", sentences=[5], label=R),  # 5: not in it
                                               GoldEvidence(doc_id="103", sentences=[-1], label=R)])]
    cfg = AuditConfig(progress=False)
    for reads, want in (("paper", [("Vitamin D prevents hip fractures.", "101", PAPERS["101"].title, PAPERS["101"].abstract),
                                   ("Aspirin is safe.", "103", "Aspirin in primary prevention", two)]),
                        ("quote", [("Vitamin D prevents hip fractures.", "101", PAPERS["101"].title, PAPERS["101"].abstract),
                                   ("Aspirin is safe.", "103", "Aspirin in primary prevention", "It did not reduce mortality."),
                                   ("Aspirin is safe.", "103", "Aspirin in primary prevention", two)])):
        judge = Seen()
        setup = AuditSetup(cfg=cfg, samples=[], claims=claims, reward=RewardConfig(judge_reads=reads), judge=judge,
                           papers=papers, sentences=sentences)
        out = _gold_credit(setup)
        assert judge.pairs == want
        assert out["REFUTED"]["pairs"] == len(want) - 1 and out["SUPPORTED"]["pairs"] == 1


def test_gold_the_funnel_cannot_place_is_refused_before_any_episode_runs(search_cfg, tmp_path):
    calls = []
    cfg = AuditConfig(out_dir=tmp_path / "a", metrics_path=None, report_path=tmp_path / "a.json", progress=False)
    setup = AuditSetup(cfg=cfg, samples=[sample("sample0", lambda claim: calls.append(claim) or [], search_cfg)],
                       claims=CLAIMS, reward=RewardConfig(), judge=None, papers=PAPERS,
                       sentences={"101": [PAPERS["101"].abstract]})  # 103, claim 2's gold paper, is missing
    with pytest.raises(InputError, match=r"^claim scifact:2: gold paper 103 is not in the corpus"):
        audit(setup)
    assert calls == [] and not (tmp_path / "a").exists() and not (tmp_path / "a.json").exists()


@pytest.mark.parametrize("where", ["report_path", "metrics_path"])
def test_an_output_that_is_a_folder_is_refused_before_any_episode_runs(search_cfg, tmp_path, where):
    calls = []
    (tmp_path / "taken").mkdir()
    paths = {"report_path": tmp_path / "a.json", "metrics_path": tmp_path / "m.json", where: tmp_path / "taken"}
    cfg = AuditConfig(out_dir=tmp_path / "a", progress=False, **paths)
    setup = AuditSetup(cfg=cfg, samples=[sample("sample0", lambda claim: calls.append(claim) or [], search_cfg)],
                       claims=CLAIMS, reward=RewardConfig(), judge=None, papers=PAPERS,
                       sentences={d: [a.abstract] for d, a in PAPERS.items()})
    with pytest.raises(InputError, match=rf"^audit.{where} {tmp_path / 'taken'}: is a folder"):
        audit(setup)
    assert calls == [] and not (tmp_path / "a").exists()
