"""The evaluation harness and stage: cached episodes, resume after a kill, predictions, metrics, extras."""

from __future__ import annotations

import json
import logging
import re
import threading

import pytest

from biocheck.agent.episode import AgentConfig, Episode
from biocheck.agent.prompts import Prompts
from biocheck.evaluate import compare, evaluation
from biocheck.evaluate.config import EvaluateConfig
from biocheck.evaluate.harness import (
    episode_tokens,
    make_scorer,
    predictions_path,
    read_episode,
    run_system,
    times_path,
    trace_dir,
)
from biocheck.evaluate.systems.agent_systems import AgentSystem
from biocheck.evaluate.systems.base import Prediction
from biocheck.evidence.search import SearchConfig, search_tool
from biocheck.io import InputError
from biocheck.labels import Label
from biocheck.llm.base import LLMError
from biocheck.llm.scripted import ScriptedChat
from tests.helpers.eval_project import claims
from tests.helpers.judges import HalfJudge
from tests.helpers.turns import REPORT, search

TURNS = [search("vitamin D AND fracture*"), {"content": REPORT}]


class CountingChat(ScriptedChat):
    """A scripted model that counts its turns and fails on claims that contain FAIL."""

    def __init__(self, turns, spec="scripted:<inline>"):
        super().__init__(turns, spec)
        self.calls = 0
        self.claims: list[str] = []
        self._count = threading.Lock()

    def chat(self, messages, tools):
        user = next(m["content"] for m in messages if m["role"] == "user")
        with self._count:
            self.calls += 1
            if sum(m["role"] == "assistant" for m in messages) == 0:
                self.claims.append(user.removeprefix("Claim: "))
        if "FAIL" in user:
            raise LLMError("server down (sk-secret-value)")
        return super().chat(messages, tools)


@pytest.fixture
def search_cfg(evidence):
    cfg, _ = evidence
    return SearchConfig(index_dir=cfg.index_dir, store=cfg.store, max_results=3)


def agent_system(search_cfg, turns=TURNS, name="eg_grpo", label_only=False) -> tuple[AgentSystem, CountingChat]:
    llm = CountingChat(turns)
    tool = search_tool(search_cfg)
    cfg = AgentConfig(llm="scripted:<inline>")
    return AgentSystem(name, llm, tool, cfg, search_cfg, Prompts.for_tool(5, tool), label_only=label_only), llm


def lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_predictions_have_one_line_per_claim_with_its_trace_and_scores(search_cfg, tmp_path):
    sys_, llm = agent_system(search_cfg)
    cs = claims()
    preds = run_system(sys_, cs, "scifact", tmp_path, workers=2, progress=False, scorer=make_scorer(HalfJudge()))
    rows = lines(predictions_path(tmp_path, "eg_grpo", "scifact"))
    assert [r["id"] for r in rows] == [c.id for c in cs] == [p.id for p in preds]  # claim order, no duplicates
    # the file holds everything but the seconds (this machine's: in memory, MLflow, and the traces' times files)
    assert all("seconds" not in r for r in rows)
    assert [Prediction.model_validate(r).model_dump() for r in rows] == [p.model_dump() for p in preds]
    for c, p in zip(cs, preds, strict=True):
        ep = Episode.model_validate_json((tmp_path / p.trace).read_text())
        assert ep.claim == c.claim and ep.claim_id == c.id and p.gold == c.label
        assert p.pred is Label.SUPPORTED and p.searches == 1 and p.writes_report and p.parseable
        assert p.fingerprint == sys_.fingerprint() and p.system == "eg_grpo" and p.dataset == "scifact"
        assert (p.eqs, p.ehr) == (0.75, 0.0) and p.error is None and p.seconds > 0
    assert (tmp_path / preds[1].trace).parent == trace_dir(tmp_path, "eg_grpo", sys_.fingerprint(), "scifact")
    assert len({p.trace for p in preds}) == 4 and llm.calls == 8


def test_a_rerun_after_a_kill_runs_only_the_missing_claims(search_cfg, tmp_path):
    cs = claims(6)
    sys_, llm = agent_system(search_cfg)
    first = run_system(sys_, cs, "scifact", tmp_path, progress=False)
    # A kill -9 mid-run: predictions never written, two claims without a trace, a temporary left behind.
    predictions_path(tmp_path, "eg_grpo", "scifact").unlink()
    for p in (first[1], first[4]):
        (tmp_path / p.trace).unlink()
    folder = trace_dir(tmp_path, "eg_grpo", sys_.fingerprint(), "scifact")
    (folder / ".tmp-c_1-xyz.json.abc").write_text('{"claim": "half writ')
    sys2, llm2 = agent_system(search_cfg)
    again = run_system(sys2, cs, "scifact", tmp_path, progress=False)
    assert sorted(llm2.claims) == sorted([cs[1].claim, cs[4].claim]) and llm2.calls == 4
    assert [p.model_dump(exclude={"seconds"}) for p in again] == [p.model_dump(exclude={"seconds"}) for p in first]
    assert [r["id"] for r in lines(predictions_path(tmp_path, "eg_grpo", "scifact"))] == [c.id for c in cs]
    assert sorted(p.name for p in folder.iterdir()) == sorted(  # each trace and its times, no temporary
        name for p in first for name in ((tmp_path / p.trace).name, times_path(tmp_path / p.trace).name))
    sys3, llm3 = agent_system(search_cfg)
    run_system(sys3, cs, "scifact", tmp_path, progress=False)
    assert llm3.calls == 0  # everything cached
    assert [r["id"] for r in lines(predictions_path(tmp_path, "eg_grpo", "scifact"))] == [c.id for c in cs]


def test_an_episodes_times_lie_beside_its_trace_and_are_read_back_only_with_it(search_cfg, tmp_path):
    """The trace holds no time (the same inputs: the same bytes anywhere); `<claim>.times` beside it holds when
    the episode and each step ran, and an episode read back has them, unless they are another trace's."""
    sys_, _ = agent_system(search_cfg)
    (pred,) = run_system(sys_, claims(1), "scifact", tmp_path, progress=False)
    trace = tmp_path / pred.trace
    assert not {"started_at", "timing", "clock"} & set(json.loads(trace.read_text()))
    times = json.loads(times_path(trace).read_text())
    assert times_path(trace).name == f"{trace.stem}.times" and set(times) == {"trace_sha256", "started_at",
                                                                               "timing", "clock"}
    ep = read_episode(trace)
    (began, ended), = ep.clock["episode"]
    assert 0 < began <= ended and [len(ep.clock[k]) for k in ("llm", "search")] == [2, 1]
    assert ep.timing["total_s"] == pred.seconds > 0 and ep.started_at == times["started_at"] != ""
    # a trace replaced under its times (a `dvc checkout` leaves a file DVC ignores): they are not its times
    trace.write_text(trace.read_text().replace('"final_text": "', '"final_text": "x', 1))
    assert read_episode(trace).clock == {} and read_episode(trace).timing == {}


def test_a_trace_with_its_times_inside_is_reused_and_its_times_moved_beside_it(search_cfg, tmp_path):
    """A trace an older BioCheck wrote (times inside) is reused as it is, and rewritten without them."""
    sys_, _ = agent_system(search_cfg)
    cs = claims(1)
    (pred,) = run_system(sys_, cs, "scifact", tmp_path, progress=False)
    trace = tmp_path / pred.trace
    old = read_episode(trace)
    trace.write_text(old.model_dump_json(indent=2))  # as an older BioCheck wrote it: its times inside
    times_path(trace).unlink()
    sys2, llm2 = agent_system(search_cfg)
    (again,) = run_system(sys2, cs, "scifact", tmp_path, progress=False)
    assert llm2.calls == 0 and again.seconds == pred.seconds  # reused, with the time it took when it ran
    assert not {"started_at", "timing", "clock"} & set(json.loads(trace.read_text()))
    assert read_episode(trace) == old


def test_a_corrupt_or_foreign_trace_is_rerun_with_a_warning(search_cfg, tmp_path, caplog):
    cs = claims(3)
    sys_, _ = agent_system(search_cfg)
    first = run_system(sys_, cs, "scifact", tmp_path, progress=False)
    cut = tmp_path / first[0].trace
    cut.write_text(cut.read_text()[:100])  # truncated
    other = tmp_path / first[2].trace  # a trace of another claim under this claim's name
    other.write_text((tmp_path / first[1].trace).read_text())
    sys2, llm2 = agent_system(search_cfg)
    with caplog.at_level(logging.WARNING, logger="biocheck.evaluate.harness"):
        run_system(sys2, cs, "scifact", tmp_path, progress=False)
    assert sorted(llm2.claims) == sorted([cs[0].claim, cs[2].claim])
    assert "unreadable trace" in caplog.text and "another claim" in caplog.text
    assert Episode.model_validate_json(cut.read_text()).claim == cs[0].claim
    assert Episode.model_validate_json(other.read_text()).claim == cs[2].claim


def test_a_new_model_reruns_only_that_system(search_cfg, tmp_path):
    cs = claims(3)
    a, _ = agent_system(search_cfg, name="eg_grpo")
    b, _ = agent_system(search_cfg, name="pmsearch", label_only=True)
    run_system(a, cs, "scifact", tmp_path, progress=False)
    run_system(b, cs, "scifact", tmp_path, progress=False)
    changed = [search("aspirin[ti]"), {"content": REPORT.replace("SUPPORTED\n", "REFUTED\n")}]
    a2, llm_a = agent_system(search_cfg, turns=changed, name="eg_grpo")
    b2, llm_b = agent_system(search_cfg, name="pmsearch", label_only=True)
    preds = run_system(a2, cs, "scifact", tmp_path, progress=False)
    run_system(b2, cs, "scifact", tmp_path, progress=False)
    assert len(llm_a.claims) == 3 and llm_b.calls == 0
    assert a2.fingerprint() != a.fingerprint() and b2.fingerprint() == b.fingerprint()
    assert {p.pred for p in preds} == {Label.REFUTED} and all(p.fingerprint == a2.fingerprint() for p in preds)
    assert [r["pred"] for r in lines(predictions_path(tmp_path, "eg_grpo", "scifact"))] == ["REFUTED"] * 3
    back, llm_back = agent_system(search_cfg, name="eg_grpo")  # the first model again: its traces are kept
    assert {p.pred for p in run_system(back, cs, "scifact", tmp_path, progress=False)} == {Label.SUPPORTED}
    assert llm_back.calls == 0


def test_a_failed_claim_gets_an_error_and_no_trace_and_is_retried(search_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    cs = claims(3)
    cs[1] = cs[1].model_copy(update={"claim": "FAIL this one."})
    sys_, _ = agent_system(search_cfg)
    preds = run_system(sys_, cs, "scifact", tmp_path, progress=False, scorer=make_scorer(HalfJudge()))
    bad = preds[1]
    assert bad.pred is None and bad.trace is None and "server down" in bad.error
    assert "sk-secret" not in predictions_path(tmp_path, "eg_grpo", "scifact").read_text()
    assert bad.eqs is None and bad.ehr is None and bad.parseable is None
    assert preds[0].trace and preds[2].trace and preds[0].error is None
    assert len(list(trace_dir(tmp_path, "eg_grpo", sys_.fingerprint(), "scifact").glob("*.json"))) == 2
    sys2, llm2 = agent_system(search_cfg)
    run_system(sys2, cs, "scifact", tmp_path, progress=False)
    assert llm2.claims == ["FAIL this one."]


def test_without_a_judge_ehr_is_scored_and_eqs_left_out(search_cfg, tmp_path):
    invented = REPORT.replace("PMID: 101", "PMID: 999")  # a paper the search never returned
    sys_, _ = agent_system(search_cfg, turns=[search("vitamin D AND fracture*"), {"content": invented}])
    preds = run_system(sys_, claims(2), "scifact", tmp_path, progress=False, scorer=make_scorer(None))
    assert [(p.eqs, p.ehr, p.parseable) for p in preds] == [(None, 1.0, True)] * 2
    label, _ = agent_system(search_cfg, name="pmsearch", label_only=True)
    preds = run_system(label, claims(2), "scifact", tmp_path, progress=False, scorer=make_scorer(HalfJudge()))
    assert [(p.eqs, p.ehr, p.parseable, p.writes_report) for p in preds] == [(None, None, None, False)] * 2


def test_progress_shows_claims_done_and_running_accuracy(search_cfg, tmp_path, capsys):
    sys_, _ = agent_system(search_cfg)
    run_system(sys_, claims(4), "scifact", tmp_path, progress=True)
    err = capsys.readouterr().err
    assert "eg_grpo/scifact" in err and "4/4" in err and "acc=0.500" in err
    sys2, _ = agent_system(search_cfg)
    run_system(sys2, claims(3), "scifact", tmp_path, progress=True)  # all cached: 2 of 3 right
    assert "acc=0.667" in capsys.readouterr().err


def test_without_bars_a_progress_line_is_logged_every_n_claims_and_at_the_end(search_cfg, tmp_path, caplog):
    cs = claims(5)
    cs[2] = cs[2].model_copy(update={"claim": "FAIL this one."})
    sys_, _ = agent_system(search_cfg)
    with caplog.at_level(logging.INFO, logger="biocheck.evaluate.harness"):
        run_system(sys_, cs, "scifact", tmp_path, progress=False, progress_every=2)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("evaluate: ")]
    time = r", (\d+s|\d+m\d\ds|\d+h\d\dm)"
    assert len(said) == 3
    assert re.fullmatch(r"evaluate: eg_grpo scifact 2/5 claims \(40%\), 0 failed" + time, said[0])
    assert re.fullmatch(r"evaluate: eg_grpo scifact 4/5 claims \(80%\), 1 failed" + time, said[1])
    assert re.fullmatch(r"evaluate: eg_grpo scifact 5/5 claims \(100%\), 1 failed" + time, said[2])
    caplog.clear()
    sys2, _ = agent_system(search_cfg)
    with caplog.at_level(logging.INFO, logger="biocheck.evaluate.harness"):
        run_system(sys2, claims(5), "scifact", tmp_path / "bars", progress=True, progress_every=2)
    assert not [r for r in caplog.records if r.getMessage().startswith("evaluate: ")]  # the bar says it


def test_progress_lines_count_reused_claims_and_the_default_is_every_ten(search_cfg, tmp_path, caplog):
    from biocheck.evaluate.harness import PROGRESS_EVERY, progress_line

    assert PROGRESS_EVERY == 10
    assert progress_line("cer", "healthfc", 20, 50, 3, 72.4) == "evaluate: cer healthfc 20/50 claims (40%), 3 failed, 1m12s"
    assert progress_line("cer", "healthfc", 1, 3, 0, 3725) == "evaluate: cer healthfc 1/3 claims (33%), 0 failed, 1h02m"
    sys_, _ = agent_system(search_cfg)
    run_system(sys_, claims(2), "scifact", tmp_path, progress=False)
    sys2, _ = agent_system(search_cfg)
    with caplog.at_level(logging.INFO, logger="biocheck.evaluate.harness"):
        run_system(sys2, claims(3), "scifact", tmp_path, progress=False, progress_every=2)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("evaluate: ")]
    assert [x.split(", ")[0] for x in said] == ["evaluate: eg_grpo scifact 3/3 claims (100%)"]  # 2 reused


def test_no_claims_or_duplicate_ids_are_input_errors(search_cfg, tmp_path):
    sys_, llm = agent_system(search_cfg)
    with pytest.raises(InputError, match="scifact: no claims"):
        run_system(sys_, [], "scifact", tmp_path, progress=False)
    with pytest.raises(InputError, match=r"duplicate claim ids \['0'\]"):
        run_system(sys_, claims(1) * 2, "scifact", tmp_path, progress=False)
    assert llm.calls == 0


def test_tokens_are_what_the_backend_reported_on_assistant_messages():
    ep = Episode(claim="x", report={}, messages=[
        {"role": "user", "content": "x", "usage": {"prompt_tokens": 99}},
        {"role": "assistant", "content": "", "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total": 15}},
        {"role": "assistant", "content": "SUPPORTED", "usage": {"prompt_tokens": 20, "completion_tokens": True}},
        {"role": "assistant", "content": "SUPPORTED"}])
    assert episode_tokens(ep) == 35


def test_a_prediction_counts_the_tokens_the_model_reported(search_cfg, tmp_path):
    class Metered(CountingChat):
        def chat(self, messages, tools):
            turn = super().chat(messages, tools)
            turn.usage = {"prompt_tokens": 100, "completion_tokens": 7}
            return turn

    tool = search_tool(search_cfg)
    sys_ = AgentSystem("base", Metered(TURNS), tool, AgentConfig(), search_cfg, Prompts.for_tool(5, tool))
    assert [p.tokens for p in run_system(sys_, claims(2), "scifact", tmp_path, progress=False)] == [214, 214]


# --- the stage ---------------------------------------------------------------------------------------


@pytest.fixture
def recorded(monkeypatch):
    """Tracking off, and what the stage hands MLflow at the end recorded (the runs are compare's to test)."""
    monkeypatch.setenv("BIOCHECK_TRACKING", "off")
    calls = []
    monkeypatch.setattr(compare.EvalRuns, "finish",
                        lambda self, *a, **k: calls.append(((self.config, self.base, *a), k)) or [])
    return calls


def eval_cfg(tmp_path, **kw) -> EvaluateConfig:
    kw = {"systems": ["eg_grpo", "pmsearch"], "datasets": ["scifact", "healthfc"], **kw}
    return EvaluateConfig(bootstrap=50, out_dir=tmp_path / "eval", report_dir=tmp_path / "reports",
                          metrics_path=tmp_path / "m.json", paired_path=tmp_path / "p.json",
                          headline_dir=tmp_path / "headline", plots_dir=tmp_path / "plots", **kw)


def test_evaluate_runs_every_system_on_every_dataset_and_writes_every_output(search_cfg, tmp_path, recorded):
    cfg = eval_cfg(tmp_path, limit=3)
    a, _ = agent_system(search_cfg, name="eg_grpo")
    b, _ = agent_system(search_cfg, turns=[search("aspirin[ti]"), {"content": "REFUTED"}], name="pmsearch",
                        label_only=True)
    data = {"scifact": claims(4), "healthfc": claims(5, "healthfc", "Coffee prevents dementia, claim")}
    about = {"scifact": {"role": "held-out test"}, "healthfc": {"caveat": "no sources"}}
    out = evaluation.evaluate(cfg, {"eg_grpo": a, "pmsearch": b}, data, make_scorer(HalfJudge()), progress=False,
                         profile="quickstart", about=about)
    metrics = json.loads(cfg.metrics_path.read_text())
    assert metrics == out["metrics"] and set(metrics) == {"eg_grpo", "pmsearch"}
    for s in metrics:
        for d in ("scifact", "healthfc"):
            preds = [Prediction.model_validate(r) for r in lines(predictions_path(cfg.out_dir, s, d))]
            assert [p.id for p in preds] == [c.id for c in data[d][:3]]  # the limit: the first 3
            assert metrics[s][d]["accuracy"] == sum(p.pred == p.gold for p in preds) / 3
            ran = {"model_fingerprint": {"eg_grpo": a, "pmsearch": b}[s].agent.llm_fingerprint}  # which weights
            assert metrics[s][d] == json.loads(json.dumps({**compare.system_metrics(preds, 50, 0),
                                                           "about": {**about[d], **ran}}))
    assert metrics["eg_grpo"]["scifact"]["eqs"] == 0.75 and metrics["pmsearch"]["scifact"]["eqs"] is None
    paired = json.loads(cfg.paired_path.read_text())
    assert set(paired) == {"scifact", "healthfc"} and set(paired["scifact"]) == {"pmsearch"}
    assert (tmp_path / "plots" / "scores.csv").exists() and out["skipped"] == {}
    table = cfg.table_path.read_text().splitlines()  # the headline numbers as a terminal shows them
    assert max(map(len, table)) <= 100 and len(table) == 2 + 2 * 2
    cells = {tuple(c.strip() for c in line.strip("|").split("|"))[:2]: [c.strip() for c in line.strip("|").split("|")]
             for line in table[2:]}
    eg = cells[("eg_grpo", "scifact")]
    assert eg[2] == "3" and eg[-1] == "0.750" and eg[3] == f"{metrics['eg_grpo']['scifact']['accuracy']:.3f}"
    assert cells[("pmsearch", "healthfc")][-1] == "-"  # a label-only system has no EQS
    headline = json.loads((tmp_path / "headline" / "scifact" / "eg_grpo.json").read_text())  # DVC's metrics
    assert headline["eqs"] == 0.75 and headline["n"] == 3 and "ci" not in headline and "confusion" not in headline
    assert sorted(p.relative_to(tmp_path / "headline").as_posix() for p in (tmp_path / "headline").rglob("*.json")) \
        == [f"{d}/{s}.json" for d in ("healthfc", "scifact") for s in ("eg_grpo", "pmsearch")]
    index = (tmp_path / "reports" / "index.html").read_text()
    assert out["gallery"] == (tmp_path / "reports" / "index.html").as_posix() and "pmsearch" in index
    (args, kw), = recorded  # EvalRuns(cfg, profile).finish(metrics, paired, predictions, system_tags, gallery=)
    assert args[0] is cfg and args[1]["profile"] == "quickstart" and kw["gallery"] == cfg.report_dir
    assert args[2] == metrics and args[3] == paired
    assert set(args[4]["eg_grpo"]) == {"scifact", "healthfc"} and len(args[4]["eg_grpo"]["healthfc"]) == 3
    assert args[5]["pmsearch"]["prompt_hash"] == b.agent.prompts_hash != a.agent.prompts_hash


def test_a_failing_extra_never_loses_predictions_or_metrics(search_cfg, tmp_path, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("no browser here")

    import biocheck.evaluate.gallery as gallery

    monkeypatch.setattr(gallery, "write_gallery", broken)
    monkeypatch.setattr(compare, "plot_data", broken)
    monkeypatch.setattr(compare.EvalRuns, "_log_pair", broken)  # MLflow logging, while the runs are open
    cfg = eval_cfg(tmp_path, datasets=["scifact"])
    a, _ = agent_system(search_cfg)
    out = evaluation.evaluate(cfg, {"eg_grpo": a}, {"scifact": claims(2)}, None, progress=False)
    assert out["skipped"] == {k: "RuntimeError: no browser here" for k in ("plots", "gallery", "mlflow")}
    assert out["gallery"] is None and json.loads(cfg.paired_path.read_text()) == {}
    assert json.loads(cfg.metrics_path.read_text())["eg_grpo"]["scifact"]["n"] == 2
    assert len(lines(predictions_path(cfg.out_dir, "eg_grpo", "scifact"))) == 2


def test_a_failing_extra_leaves_no_output_of_the_previous_run_beside_new_metrics(search_cfg, tmp_path, monkeypatch,
                                                                                recorded):
    """DVC keeps the plain outputs while the stage runs (`persist`): plots or a gallery that fail to render
    after new metrics were written must not stay behind from the previous run, read as current."""
    cfg = eval_cfg(tmp_path, datasets=["scifact"])
    a, _ = agent_system(search_cfg)
    first = evaluation.evaluate(cfg, {"eg_grpo": a}, {"scifact": claims(2)}, None, progress=False)
    assert first["skipped"] == {} and (cfg.report_dir / "index.html").is_file()
    assert all((cfg.plots_dir / name).is_file() for name in compare.PLOT_FILES)
    (cfg.plots_dir / "mine.txt").write_text("not the stage's")

    def broken(*a, **k):
        raise RuntimeError("no browser here")

    import biocheck.evaluate.gallery as gallery

    monkeypatch.setattr(gallery, "write_gallery", broken)
    monkeypatch.setattr(compare, "plot_data", broken)
    a, _ = agent_system(search_cfg)
    out = evaluation.evaluate(cfg, {"eg_grpo": a}, {"scifact": claims(3)}, None, progress=False)
    assert set(out["skipped"]) == {"plots", "gallery"}
    assert json.loads(cfg.metrics_path.read_text())["eg_grpo"]["scifact"]["n"] == 3  # the new numbers
    assert not cfg.report_dir.exists()
    assert not any((cfg.plots_dir / name).exists() for name in compare.PLOT_FILES)
    assert (cfg.plots_dir / "mine.txt").read_text() == "not the stage's"  # only the step's own files go


def test_evaluate_closes_each_system_after_its_datasets(search_cfg, tmp_path, recorded):
    order = []

    class Tracked:
        def __init__(self, inner, name):
            self.inner, self.name, self.writes_report = inner, name, inner.writes_report

        def fingerprint(self):
            return self.inner.fingerprint()

        def run(self, claim):
            order.append(("run", self.name))
            return self.inner.run(claim)

        def close(self):
            order.append(("close", self.name))

    a, _ = agent_system(search_cfg, name="eg_grpo")
    b, _ = agent_system(search_cfg, name="pmsearch", label_only=True)
    cfg = eval_cfg(tmp_path)
    evaluation.evaluate(cfg, {"eg_grpo": Tracked(a, "eg_grpo"), "pmsearch": Tracked(b, "pmsearch")},
                   {"scifact": claims(1), "healthfc": claims(1, "healthfc")}, None, progress=False)
    assert order == [("run", "eg_grpo")] * 2 + [("close", "eg_grpo")] + [("run", "pmsearch")] * 2 + [
        ("close", "pmsearch")]


def test_evaluate_needs_claims_for_every_configured_dataset(search_cfg, tmp_path):
    a, llm = agent_system(search_cfg)
    with pytest.raises(InputError, match="no claims given for dataset\\(s\\) healthfc"):
        evaluation.evaluate(eval_cfg(tmp_path), {"eg_grpo": a}, {"scifact": claims(1)}, None, progress=False)
    assert llm.calls == 0


def test_an_unexpected_error_stops_the_run_and_keeps_the_finished_traces(search_cfg, tmp_path):
    class Buggy:
        name, writes_report = "eg_grpo", True

        def __init__(self, inner):
            self.inner, self.runs = inner, 0

        def fingerprint(self):
            return self.inner.fingerprint()

        def run(self, claim):
            self.runs += 1
            if claim.id == "2":
                raise KeyError("a bug")
            return self.inner.run(claim)

    inner, _ = agent_system(search_cfg)
    buggy = Buggy(inner)
    with pytest.raises(KeyError, match="a bug"):
        run_system(buggy, claims(8), "scifact", tmp_path, workers=1, progress=False)
    assert buggy.runs == 3  # claims 0, 1 and 2: one claim in flight (workers=1), so none started after the bug
    assert not predictions_path(tmp_path, "eg_grpo", "scifact").exists()
    assert len(list(trace_dir(tmp_path, "eg_grpo", inner.fingerprint(), "scifact").glob("*.json"))) == buggy.runs - 1


class OtherJudge(HalfJudge):
    """A second judge that grades the same pairs lower (the EQS judge that did not train the policy)."""

    spec, prompt_hash = "other", "o"

    def fingerprint(self):
        return "other"

    def score(self, pairs):
        return [{"SUPPORTED": 0.25, "REFUTED": 0.5, "NEI": 0.25} for _ in pairs]


def test_scorer_reports_citations_both_judges_and_gold_rationales(search_cfg, evidence, tmp_path):
    from biocheck.data.schema import GoldEvidence
    from biocheck.evaluate.rationale import CorpusSentences

    cfg, _ = evidence
    corpus = CorpusSentences.from_jsonl(cfg.corpus)
    cs = claims(2)
    cs[0] = cs[0].model_copy(update={"evidence": [GoldEvidence(doc_id="101", sentences=[0], label=Label.SUPPORTED)]})
    cs[1] = cs[1].model_copy(update={"label": Label.NEI})  # SciFact's NEI claims are the ones without rationales
    silent = [search("vitamin D AND fracture*"), {"content": REPORT.split("## Supporting")[0] + "## Conclusion\nREFUTED"}]
    scorer = make_scorer(OtherJudge(), reward_judge=HalfJudge(), corpus=corpus)
    citing, _ = agent_system(search_cfg)
    p = run_system(citing, cs, "scifact", tmp_path / "a", progress=False, scorer=scorer)
    # REPORT cites paper 101 with its sentence 0, filed as supporting: the gold rationale of claim 0 exactly.
    assert (p[0].cited, p[0].hallucinated, p[0].ehr) == (1, 0, 0.0)
    assert (p[0].eqs, p[0].eqs_supporting, p[0].eqs_refuting, p[0].eqs_reward_judge) == (0.25, 0.25, None, 0.75)
    assert p[0].rationale.sentence_label == 1 and p[0].rationale.abstract_rationalized == 1
    assert p[1].rationale.sentence_relevant == 0 and p[1].rationale.sentence_retrieved == 1  # cited, no gold
    # the funnel's credit is the training judge's (0.75 > 0.5), not the EQS judge's (0.25)
    f = p[0].funnel
    assert (f.retrieved, f.cited, f.verbatim, f.rationale, f.credited) == (True, True, True, True, True)
    assert f.right_label == (p[0].pred == p[0].gold) and p[1].funnel is None  # no gold paper: nothing to funnel
    no_credit = run_system(citing, cs, "scifact", tmp_path / "a2", progress=False,
                           scorer=make_scorer(OtherJudge(), reward_judge=None, corpus=corpus))
    assert no_credit[0].funnel.rationale and not no_credit[0].funnel.credited  # no training judge: nothing credited
    quiet, _ = agent_system(search_cfg, turns=silent)
    q = run_system(quiet, cs, "scifact", tmp_path / "b", progress=False, scorer=scorer)
    assert q[0].funnel.retrieved and not q[0].funnel.cited
    assert (q[0].cited, q[0].ehr, q[0].eqs) == (0, None, None)  # silence: no EHR of 0, nothing to grade
    assert q[0].rationale.sentence_retrieved == 0 and q[0].rationale.sentence_relevant == 1
    same = make_scorer(HalfJudge(), reward_judge=None)
    assert run_system(citing, cs, "scifact", tmp_path / "c", progress=False, scorer=same)[0].eqs_reward_judge is None
    healthfc = run_system(citing, claims(1, "healthfc"), "healthfc", tmp_path / "d", progress=False, scorer=scorer)
    assert healthfc[0].rationale is None  # no gold rationales there
    # A report that cites a grounded quote but has no conclusion: unparseable, so a failure, not EHR 0.
    broken, _ = agent_system(search_cfg, turns=[search("vitamin D AND fracture*"),
                                                {"content": REPORT.split("## Conclusion")[0]}])
    b = run_system(broken, cs, "scifact", tmp_path / "e", progress=False, scorer=scorer)
    assert (b[0].parseable, b[0].cited, b[0].hallucinated, b[0].ehr) == (False, 1, 0, None)


@pytest.mark.parametrize("label, gold, named", [
    (Label.SUPPORTED, [("999", [0], Label.SUPPORTED)], "gold paper 999 is not in the corpus"),
    (Label.SUPPORTED, [("101", [999], Label.SUPPORTED)], "gold sentence 999 of doc 101"),
    (Label.SUPPORTED, [("101", [-1], Label.SUPPORTED)], "gold sentence -1 of doc 101"),
    (Label.REFUTED, [], "REFUTED with no gold rationale"),
    (Label.NEI, [("101", [0], Label.SUPPORTED)], "NEI with 1 gold rationale(s)"),
])
def test_gold_the_scorer_cannot_use_is_refused_before_any_claim_runs(search_cfg, evidence, tmp_path, label, gold,
                                                                      named):
    from biocheck.data.schema import GoldEvidence
    from biocheck.evaluate.rationale import CorpusSentences

    cfg, _ = evidence
    cs = claims(2)
    cs[0] = cs[0].model_copy(update={"evidence": [GoldEvidence(doc_id="101", sentences=[0], label=Label.SUPPORTED)]})
    cs[1] = cs[1].model_copy(update={"label": label, "evidence": [
        GoldEvidence(doc_id=d, sentences=s, label=lab) for d, s, lab in gold]})
    sys_, llm = agent_system(search_cfg)
    scorer = make_scorer(HalfJudge(), corpus=CorpusSentences.from_jsonl(cfg.corpus))
    with pytest.raises(InputError) as e:
        run_system(sys_, cs, "scifact", tmp_path, progress=False, scorer=scorer)
    assert str(e.value).startswith(f"claim scifact:c/1 (test): {named}") and "biocheck data validate" in str(e.value)
    assert llm.calls == 0 and not predictions_path(tmp_path, "eg_grpo", "scifact").exists()
    with pytest.raises(InputError, match=named.replace("(", r"\(").replace(")", r"\)")):
        scorer([None, None], cs)  # scoring on its own refuses it too
