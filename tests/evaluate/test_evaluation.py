"""`biocheck evaluate` through the CLI: the wiring (pipeline.evaluate_stage), its outputs, its one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from biocheck import pipeline, wiring
from biocheck.cli import app
from biocheck.io import InputError
from tests.helpers.builders import model_files
from tests.helpers.eval_project import CLAIMS, REPORT, held
from tests.helpers.paths import REPO

runner = CliRunner()


def test_an_ad_hoc_run_writes_every_output_under_out_and_a_rerun_reuses_every_episode(project):
    args = ["evaluate", "--systems", "base,pmsearch,no_retrieval", "--out", "adhoc", "--no-progress"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    out = project / "adhoc"
    metrics = json.loads((out / "eval.json").read_text())
    assert sorted(metrics) == ["base", "no_retrieval", "pmsearch"]
    for system, by_dataset in metrics.items():
        assert sorted(by_dataset) == ["healthfc", "scifact"]
        for dataset, m in by_dataset.items():
            assert m["n"] == len(CLAIMS[dataset])
            golds = [g for _, _, g in CLAIMS[dataset]]
            assert m["accuracy"] == pytest.approx(golds.count("SUPPORTED") / len(golds))  # the script says SUPPORTED
            preds = [json.loads(line) for line in
                     (out / "predictions" / system / f"{dataset}.jsonl").read_text().splitlines()]
            assert [p["id"] for p in preds] == [i for i, _, _ in CLAIMS[dataset]]
            assert {p["pred"] for p in preds} == {"SUPPORTED"} and all(p["trace"] for p in preds)
    paired = json.loads((out / "eval_paired.json").read_text())
    assert paired == {}  # eg_grpo, the reference, was not among the systems
    assert (out / "gallery" / "index.html").is_file()
    headline = {p.relative_to(out / "headline").as_posix(): json.loads(p.read_text())
                for p in (out / "headline").rglob("*") if p.is_file()}
    assert sorted(headline) == [f"{d}/{s}.json" for d in ("healthfc", "scifact") for s in sorted(metrics)]
    assert headline["scifact/base.json"]["n"] == 3 and "ci" not in headline["scifact/base.json"]
    assert headline["scifact/base.json"]["accuracy"] == metrics["base"]["scifact"]["accuracy"]
    for dvc_output in ("metrics/eval", "reports/eval_metrics.json", "reports/eval_paired.json"):
        assert not (project / dvc_output).exists(), dvc_output  # --out keeps the DVC outputs untouched
    traces = sorted((out / "traces").rglob("*.json"))
    assert len(traces) == 3 * 5
    stamps = {p: p.stat().st_mtime_ns for p in traces}
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert {p: p.stat().st_mtime_ns for p in traces} == stamps  # every episode came from the cache


@pytest.mark.parametrize("args, message", [
    (["--systems", "base,gpt5"], "--systems base,gpt5: systems: unknown 'gpt5'; choose from base, eg_grpo"),
    (["--datasets", "pubmed"], "--datasets pubmed: datasets: unknown 'pubmed'; choose from scifact, healthfc"),
    (["--limit", "0"], "--limit 0: evaluate.limit must be >= 1, not 0"),
    (["--workers", "0"], "--workers 0: evaluate.workers must be >= 1, not 0"),
])
def test_bad_options_are_one_line(project, args, message):
    r = runner.invoke(app, ["evaluate", *args, "--no-progress"])
    assert r.exit_code == 1 and message in r.output and "Traceback" not in r.output
    assert not (project / "eval").exists()


def test_a_missing_checkpoint_names_the_command_that_makes_it(project):
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["agent"]["llm"] = "transformers:models/base"
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    for system, command in (("outcome_only", "dvc repro train@outcome_only select@outcome_only"),
                            ("eg_grpo", "dvc repro select@eg_grpo"), ("base", "dvc repro model")):
        r = runner.invoke(app, ["evaluate", "--systems", system, "--no-progress"])
        assert r.exit_code == 1 and f"run `{command}` first" in r.output, r.output


def test_an_empty_test_split_is_one_line(project):
    (project / "data" / "prepared" / "healthfc" / "test.jsonl").write_text("")
    r = runner.invoke(app, ["evaluate", "--systems", "no_retrieval", "--no-progress"])
    assert r.exit_code == 1 and "healthfc/test.jsonl" in r.output and "Traceback" not in r.output


def test_each_system_runs_its_own_model_from_the_params():
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    models = pipeline.eval_models(params)
    assert models["base"] == "transformers:models/base" and models["eg_grpo"] == "transformers:models/selected"
    assert models["outcome_only"] == "transformers:models/selected_outcome_only"
    assert {models[s] for s in ("no_retrieval", "pmsearch", "cer", "fire")} == {"transformers:models/base"}
    params["agent"]["llm"] = "openai:gpt-x"  # a hosted model has no checkpoints: every system runs it
    assert set(pipeline.eval_models(params).values()) == {"openai:gpt-x"}
    params["agent"]["llm"] = "openai:models/base"  # a server that loads by path: each agent its checkpoint
    served = pipeline.eval_models(params)
    assert (served["base"], served["eg_grpo"], served["outcome_only"], served["cer"]) == (
        "openai:models/base", "openai:models/selected", "openai:models/selected_outcome_only", "openai:models/base")


def test_model_chooses_what_eg_grpo_runs_and_a_bad_alias_is_one_line(project):
    (project / "refute.json").write_text(json.dumps([{"content": REPORT.replace("\nSUPPORTED", "\nREFUTED")}]))
    args = ["evaluate", "--systems", "eg_grpo", "--datasets", "scifact", "--out", "adhoc", "--no-progress"]
    r = runner.invoke(app, [*args, "--model", "scripted:refute.json"])
    assert r.exit_code == 0, r.output
    preds = [json.loads(line) for line in (project / "adhoc" / "predictions" / "eg_grpo" / "scifact.jsonl")
             .read_text().splitlines()]
    assert {p["pred"] for p in preds} == {"REFUTED"}  # the given model, not agent.llm's script (SUPPORTED)
    r = runner.invoke(app, [*args, "--model", "championn"])
    assert r.exit_code == 1 and "championn" in r.output and "selected, outcome_only, base, champion" in r.output
    assert "Traceback" not in r.output


def test_baselines_can_run_the_sft_start_and_a_missing_one_names_its_stage(project):
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["agent"]["llm"] = "transformers:models/base"
    params["evaluate"]["baseline_model"] = "sft"
    models = pipeline.eval_models(params)
    assert {models[s] for s in ("no_retrieval", "pmsearch", "cer", "fire")} == {"transformers:models/sft"}
    assert models["base"] == "transformers:models/base"  # the untrained agent stays the base model
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    r = runner.invoke(app, ["evaluate", "--systems", "cer", "--no-progress"])
    assert r.exit_code == 1 and "no model in models/sft" in r.output and "dvc repro sft" in r.output
    params["evaluate"]["baseline_model"] = {"no_retrieval": "sft"}  # per baseline; the others: the base model
    models = pipeline.eval_models(params)
    assert models["no_retrieval"] == "transformers:models/sft" and models["cer"] == "transformers:models/base"
    for bad in ({"no_retrieval": "large"}, {"eg_grpo": "sft"}, "tiny"):
        params["evaluate"]["baseline_model"] = bad
        with pytest.raises(InputError, match="baseline_model"):
            pipeline.evaluate_config(params)


def test_every_metrics_row_says_what_its_numbers_can_mean(project):
    r = runner.invoke(app, ["evaluate", "--systems", "eg_grpo,no_retrieval", "--out", "adhoc", "--no-progress"])
    assert r.exit_code == 0, r.output
    metrics = json.loads((project / "adhoc" / "eval.json").read_text())
    sci, hfc = metrics["eg_grpo"]["scifact"]["about"], metrics["no_retrieval"]["healthfc"]["about"]
    assert sci["role"] == "held-out test" and sci["held_out"] is True
    assert sci["eqs_by_training_judge"] is False and sci["eqs_judge"] is None  # no judge at all here
    assert hfc["corpus_has_sources"] is False and "SciFact corpus" in hfc["evidence_corpus"]
    assert "healthfc: searched in: local index of the SciFact corpus" in r.output  # the printout says it too
    assert "evidence corpus does not contain this dataset's sources" in r.output


def test_dataset_about_marks_a_corpus_without_the_sources_and_the_selection_claims():
    from biocheck.evaluate.config import dataset_about

    hfc = dataset_about("healthfc", "local index of the SciFact corpus", "scifact")
    assert hfc["corpus_has_sources"] is False
    assert hfc["caveat"] == "evidence corpus does not contain this dataset's sources"
    val = dataset_about("scifact_val", "local index of the SciFact corpus", "scifact")
    assert val["role"] == "selection claims" and val["held_out"] is False and "chose the checkpoint" in val["caveat"]
    assert dataset_about("scifact", "x", "scifact")["corpus_has_sources"] is True
    assert dataset_about("healthfc", "live PubMed", "pubmed")["corpus_has_sources"] is None


def test_eqs_by_the_training_judge_is_said_and_a_missing_judge_names_its_stage(project, monkeypatch):
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["reward"]["judge"] = "transformers:models/judge"
    params["evaluate"]["eqs_judge"] = "transformers:models/judge_eqs"
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    r = runner.invoke(app, ["evaluate", "--systems", "eg_grpo", "--no-progress"])
    assert r.exit_code == 1 and "reward.judge: no judge in models/judge; run `dvc repro judge` first" in r.output
    model_files(project / "models" / "judge")
    r = runner.invoke(app, ["evaluate", "--systems", "eg_grpo", "--no-progress"])
    assert r.exit_code == 1 and "evaluate.eqs_judge: no judge in models/judge_eqs" in r.output
    assert "dvc repro judge_eqs" in r.output and "Traceback" not in r.output
    built = []
    monkeypatch.setattr(pipeline.evaluation, "make_judge", lambda cfg: built.append(cfg.spec) or object())
    p = wiring.params_of(project / "params.yaml")
    model_files(project / "models" / "judge_eqs")
    _, about = pipeline.eval_scorer(p, pipeline.evaluate_config(p, datasets=["scifact"]))
    assert built == ["transformers:models/judge", "transformers:models/judge_eqs"]
    assert about["scifact"]["eqs_judge"] == "transformers:models/judge_eqs"
    assert about["scifact"]["eqs_by_training_judge"] is False
    params["evaluate"]["eqs_judge"] = None  # EQS by the training judge: built once, and said
    built.clear()
    p = wiring.params_of(params)
    _, about = pipeline.eval_scorer(p, pipeline.evaluate_config(p, datasets=["scifact"]))
    assert built == ["transformers:models/judge"] and about["scifact"]["eqs_by_training_judge"] is True


# --- one writer per output; eval.json names what it describes (issue 50, item 6) ---------------------------


def test_a_second_evaluation_into_an_out_being_written_is_one_line_and_writes_nothing(project):
    """Two `evaluate --out X` at once both exited 0, and only the last finisher's files remained."""
    from tests.helpers.cli import one_error_line

    args = ["evaluate", "--systems", "base,no_retrieval", "--out", "adhoc", "--no-progress"]
    assert runner.invoke(app, args).exit_code == 0
    before = {p: p.read_bytes() for p in (project / "adhoc").rglob("*") if p.is_file()}
    (project / "script.json").write_text(json.dumps([{"content": REPORT.replace("SUPPORTED", "REFUTED")}]))
    with held(project / "adhoc"):
        one_error_line(runner.invoke(app, [*args, "--limit", "1"]), "--out adhoc",
                       "another evaluation is writing into this folder now", "give another --out")
    assert {p: p.read_bytes() for p in (project / "adhoc").rglob("*") if p.is_file()} == before  # intact
    with held(project / "eval"):  # the pipeline's own folder (evaluate.out_dir) too, named as such
        one_error_line(runner.invoke(app, ["evaluate", "--systems", "base", "--no-progress"]),
                       "evaluate.out_dir eval", "another evaluation")
    assert not (project / "reports").exists()
    r = runner.invoke(app, [*args, "--limit", "1"])  # released: it runs
    assert r.exit_code == 0, r.output


def test_eval_json_names_the_model_of_each_row_and_the_params_it_ran_with(project):
    args = ["evaluate", "--systems", "eg_grpo,no_retrieval", "--no-progress"]
    assert runner.invoke(app, [*args, "--out", "a"]).exit_code == 0
    assert runner.invoke(app, [*args, "--out", "elsewhere/b"]).exit_code == 0
    a, b = (json.loads((project / out / "eval.json").read_text()) for out in ("a", "elsewhere/b"))
    assert a["eg_grpo"]["scifact"]["about"]["model"] == "scripted:script.json"  # the spec the system ran
    assert a["no_retrieval"]["healthfc"]["about"]["model"] == "scripted:script.json"
    digests = {row["about"]["params_digest"] for by_dataset in a.values() for row in by_dataset.values()}
    assert len(digests) == 1 and re.fullmatch(r"[0-9a-f]{16}", digests.pop())
    # where the outputs go is no part of what they describe
    assert {s: {d: m["about"] for d, m in by.items()} for s, by in a.items()} == \
        {s: {d: m["about"] for d, m in by.items()} for s, by in b.items()}
    r = runner.invoke(app, [*args, "--out", "c", "--limit", "1"])  # another choice: another digest
    assert r.exit_code == 0, r.output
    c = json.loads((project / "c" / "eval.json").read_text())
    assert c["eg_grpo"]["scifact"]["about"]["params_digest"] != a["eg_grpo"]["scifact"]["about"]["params_digest"]


def test_the_params_digest_depends_on_the_params_only_not_the_folder_or_the_time(tmp_path, monkeypatch):
    """reports/eval_metrics.json is a DVC output, byte-identical across folders: no clock, no resolved path."""
    from biocheck.params import load_params
    from tests.helpers.paths import REPO

    params = load_params(REPO / "params.yaml")

    def digest(out: str | None = None) -> str:
        cfg = pipeline.evaluate_config(params)
        if out:
            cfg.out_dir = Path(out)
        setup = pipeline.EvalSetup(cfg, {}, {}, {s: pipeline.eval_models(params)[s] for s in cfg.systems})
        return pipeline.evaluation.eval_params_digest(params, setup)

    found = set()
    for where in ("a", "b"):
        (tmp_path / where).mkdir()
        monkeypatch.chdir(tmp_path / where)
        found |= {digest(), digest(str(tmp_path / where / "out"))}
    assert len(found) == 1
    params["evaluate"] = {**params["evaluate"], "bootstrap": 7}
    assert digest() not in found


def test_bootstrap_0_is_accepted_and_gives_no_bootstrap_interval(project):
    """evaluate.bootstrap: 0 means no resampling (EvaluateConfig): the params check takes it, the run gives no
    bootstrap interval and no paired p or MDD; proportions keep their exact binomial interval, which resamples
    nothing. A negative count is still refused, naming the key."""
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["evaluate"]["bootstrap"] = -1
    with pytest.raises(InputError, match=r"evaluate\.bootstrap must be >= 0"):
        pipeline.evaluate_config(params)
    params["evaluate"]["bootstrap"] = 0
    assert pipeline.evaluate_config(params).bootstrap == 0
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    r = runner.invoke(app, ["evaluate", "--systems", "eg_grpo,base", "--model", "scripted:script.json",
                            "--datasets", "scifact", "--out", "adhoc", "--no-progress"])
    assert r.exit_code == 0, r.output
    for system in ("eg_grpo", "base"):
        ci = json.loads((project / "adhoc" / "eval.json").read_text())[system]["scifact"]["ci"]
        assert {k for k, v in ci.items() if v["lo"] is not None} == {"accuracy", "parse_rate", "citing_rate",
                                                                   "grounded_rate"}  # exact binomial only
        assert ci["macro_f1"] == {"lo": None, "hi": None}
    paired = json.loads((project / "adhoc" / "eval_paired.json").read_text())["scifact"]["base"]
    assert paired["accuracy"]["diff"] == 0.0 and paired["macro_f1"]["p"] is None and paired["macro_f1"]["mdd"] is None


def test_the_evaluation_looks_for_the_training_judge_in_the_judge_stages_default_folder(project, monkeypatch):
    from biocheck.rewards.judge_train.train import JudgeTrainConfig

    monkeypatch.setattr(JudgeTrainConfig, "out_dir", Path("models/judge_elsewhere"))
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["judge"].pop("out_dir")  # the default: JudgeTrainConfig's
    params["reward"]["judge"] = "transformers:models/judge_elsewhere"
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    r = runner.invoke(app, ["evaluate", "--systems", "base", "--no-progress"])
    assert r.exit_code == 1 and "reward.judge: no judge in models/judge_elsewhere; run `dvc repro judge`" in r.output
