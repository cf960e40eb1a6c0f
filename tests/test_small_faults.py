"""Issue 30's smaller faults, each pinned by a test that fails when it comes back: the validator's record
counts, the mirror error, a BOM in JSONL, rich markup/emoji in printed data, the Ctrl-C message; and two
behaviours that worked but were unpinned (the training reward's weights with distinct betas, the judge
cache keeping its first score)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from biocheck.cli import app
from biocheck.data.fetch import MIRROR_ENV, FetchConfig, FetchError, fetch
from biocheck.data.prepare import PrepareConfig, prepare
from biocheck.data.validate import ValidateConfig, validate
from biocheck.io import InputError, parse_jsonl, read_jsonl
from tests.helpers.builders import write_raw
from tests.helpers.paths import REPO

runner = CliRunner()
ALL = ["SUPPORTED", "REFUTED", "NEI"]
BOM = b"\xef\xbb\xbf"
MARKUP = ":thumbs_up: [bold]loud[/bold] :smile:"  # rich would print 👍 loud 😄


def _error_lines(r) -> list[str]:
    return [line for line in r.output.splitlines() if line.startswith("error:")]


# --- the validator compares every split's record count with the manifest -----------------------------

@pytest.fixture
def prepared(raw_dir, tmp_path) -> Path:
    out = tmp_path / "prepared"
    prepare(PrepareConfig(raw_dir=raw_dir, out_dir=out, metrics_path=None,
                          keep_labels={"train": ALL, "val": ALL, "test": ALL}))
    return out


def _validate(prepared: Path, tmp_path: Path):
    return validate(ValidateConfig(prepared_dir=prepared, report_path=tmp_path / "report.json",
                                   metrics_path=None, expected_rows={}))


def _keep_first_lines(path: Path, n: int) -> None:
    path.write_text("".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:n]), encoding="utf-8")


def _stats(prepared: Path) -> dict:
    return json.loads((prepared / "manifest.json").read_text(encoding="utf-8"))["stats"]


def _failed_rules(result) -> list[tuple[str, str]]:
    return [(c["table"], c["rule"]) for c in result.failures]


def test_clean_prepared_data_has_one_passing_count_check_per_file_and_split(prepared, tmp_path):
    result = _validate(prepared, tmp_path)
    assert result.success, result.summary()
    counts = {c["table"]: c for c in result.checks if c["rule"] == "expect_row_count_to_match_manifest"}
    assert sorted(counts) == sorted(["scifact/train.jsonl", "scifact/val.jsonl", "scifact/test.jsonl",
                                     "healthfc/test.jsonl", "full/scifact.jsonl [train]", "full/scifact.jsonl [val]",
                                     "full/scifact.jsonl [test]", "full/healthfc.jsonl [test]", "corpus.jsonl"])
    stats = _stats(prepared)
    assert counts["scifact/train.jsonl"]["observed"] == stats["working"]["scifact"]["train"]["total"] > 1


def test_a_working_split_with_deleted_records_fails_naming_file_expected_found_and_fix(prepared, tmp_path):
    expected = _stats(prepared)["working"]["scifact"]["train"]["total"]
    _keep_first_lines(prepared / "scifact" / "train.jsonl", 1)  # what is left is still a true copy of full/
    result = _validate(prepared, tmp_path)
    assert _failed_rules(result) == [("scifact/train.jsonl", "expect_row_count_to_match_manifest")]
    line, = [x for x in result.summary().splitlines() if x.startswith("  - scifact/train.jsonl")]
    assert "split 'train' holds 1 record" in line and f"manifest.json says {expected}" in line
    assert "biocheck data prepare" in line
    report = json.loads((tmp_path / "report.json").read_text())
    check, = [c for c in report["checks"] if not c["success"]]
    assert check["observed"] == 1 and check["expected"] == expected


def test_a_full_file_or_the_corpus_with_a_deleted_record_fails(prepared, tmp_path):
    stats = _stats(prepared)
    _keep_first_lines(prepared / "corpus.jsonl", stats["corpus"]["docs"] - 1)
    rows = (prepared / "full" / "scifact.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    val = [i for i, r in enumerate(rows) if json.loads(r)["split"] == "val"]
    # drop a val record from full/ and from val.jsonl: every remaining record is still a true copy
    gone = json.loads(rows.pop(val[0]))["id"]
    (prepared / "full" / "scifact.jsonl").write_text("".join(rows), encoding="utf-8")
    work = prepared / "scifact" / "val.jsonl"
    work.write_text("".join(x for x in work.read_text(encoding="utf-8").splitlines(keepends=True)
                            if json.loads(x)["id"] != gone), encoding="utf-8")
    result = _validate(prepared, tmp_path)
    counts = [t for t, rule in _failed_rules(result) if rule == "expect_row_count_to_match_manifest"]
    assert sorted(counts) == ["corpus.jsonl", "full/scifact.jsonl [val]", "scifact/val.jsonl"]
    summary = result.summary()
    n_val = stats["full"]["scifact"]["val"]["total"]
    assert f"split 'val' holds {n_val - 1} records, manifest.json says {n_val}" in summary


def test_added_records_fail_too(prepared, tmp_path):
    path = prepared / "healthfc" / "test.jsonl"
    path.write_text(path.read_text(encoding="utf-8") * 2, encoding="utf-8")  # duplicates: ids and count
    result = _validate(prepared, tmp_path)
    assert ("healthfc/test.jsonl", "expect_row_count_to_match_manifest") in _failed_rules(result)


@pytest.mark.parametrize("manifest", [None, "not json", '{"config": {}}', '{"stats": {"working": {}}}'])
def test_without_the_manifests_counts_the_data_fails_validation(prepared, tmp_path, manifest):
    path = prepared / "manifest.json"
    if manifest is None:
        path.unlink()
    else:
        path.write_text(manifest)
    result = _validate(prepared, tmp_path)
    assert not result.success
    assert {t for t, _ in _failed_rules(result)} <= {"manifest.json", "scifact/train.jsonl", "scifact/val.jsonl",
                                                     "scifact/test.jsonl", "healthfc/test.jsonl", "corpus.jsonl",
                                                     "full/scifact.jsonl [train]", "full/scifact.jsonl [val]",
                                                     "full/scifact.jsonl [test]", "full/healthfc.jsonl [test]"}
    assert "biocheck data prepare" in result.summary()


def test_the_cli_exits_1_on_a_split_with_deleted_records(prepared, tmp_path, monkeypatch):
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["out_dir"] = str(prepared)
    params["validate"]["expected_rows"] = {}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    _keep_first_lines(prepared / "scifact" / "train.jsonl", 1)
    r = runner.invoke(app, ["data", "validate", "--report", str(tmp_path / "v.json")])
    assert r.exit_code == 1, r.output
    assert "scifact/train.jsonl: expect_row_count_to_match_manifest" in r.output and "passed" not in r.output


# --- the mirror error names what the user set -------------------------------------------------------------

def _fetch_cfg(tmp_path: Path, **kw) -> FetchConfig:
    return FetchConfig(raw_dir=tmp_path / "raw", progress=False, max_attempts=1, backoff_s=0, **kw)


def test_a_bad_mirror_from_the_environment_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(MIRROR_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(FetchError) as e:
        fetch(_fetch_cfg(tmp_path))
    msg = str(e.value)
    assert f"{MIRROR_ENV}={tmp_path / 'nowhere'}" in msg and "--mirror" not in msg
    assert not (tmp_path / "raw" / "scifact").exists()


@pytest.mark.parametrize("env", [False, True])
def test_a_bad_mirror_option_names_the_option_not_the_variable(tmp_path, monkeypatch, env):
    if env:  # a good mirror in the environment: --mirror still wins, and is the one named
        monkeypatch.setenv(MIRROR_ENV, str(write_raw(tmp_path / "good")))
    bad = tmp_path / "bad"
    bad.mkdir()
    with pytest.raises(FetchError) as e:
        fetch(_fetch_cfg(tmp_path, mirror=bad))
    msg = str(e.value)
    assert f"--mirror {bad}" in msg and MIRROR_ENV not in msg and "scifact/data.tar.gz" in msg


def test_a_damaged_file_in_a_mirror_option_names_the_option(tmp_path):
    mirror = write_raw(tmp_path / "mirror")
    tar = mirror / "scifact" / "data.tar.gz"
    tar.write_bytes(tar.read_bytes()[:-40])
    with pytest.raises(FetchError) as e:
        fetch(_fetch_cfg(tmp_path, mirror=mirror))
    msg = str(e.value)
    assert str(tar) in msg and "--mirror" in msg and MIRROR_ENV not in msg


def test_the_cli_names_the_mirror_option(tmp_path, monkeypatch):
    monkeypatch.setenv(MIRROR_ENV, str(write_raw(tmp_path / "good")))
    r = runner.invoke(app, ["data", "fetch", "--params", str(REPO / "params.yaml"), "--raw-dir",
                            str(tmp_path / "raw"), "--mirror", str(tmp_path / "missing"), "--no-progress"])
    assert r.exit_code == 1, r.output
    line, = _error_lines(r)
    assert f"--mirror {tmp_path / 'missing'}" in line.replace("\n", "") and MIRROR_ENV not in line


# --- a UTF-8 byte-order mark is not a truncated file -------------------------------------------------------

def test_a_jsonl_file_starting_with_a_bom_is_read(tmp_path):
    path = tmp_path / "claims.jsonl"
    path.write_bytes(BOM + b'{"id": "a", "claim": "x"}\n{"id": "b", "claim": "y"}\n')
    assert read_jsonl(path) == [{"id": "a", "claim": "x"}, {"id": "b", "claim": "y"}]
    assert parse_jsonl(BOM + b'{"a": 1}', "one line, no newline") == [{"a": 1}]


def test_two_files_joined_keep_working_across_the_second_bom():
    assert parse_jsonl(b'{"a": 1}\n' + BOM + b'{"b": 2}\n', "joined") == [{"a": 1}, {"b": 2}]


def test_a_utf16_file_is_named_as_utf16_not_as_corrupt():
    with pytest.raises(InputError) as e:
        parse_jsonl(b"\xff\xfe" + '{"a": 1}\n'.encode("utf-16-le"), "f.jsonl")
    assert "UTF-16" in str(e.value) and "truncated" not in str(e.value)


def test_a_truncated_last_line_still_gets_the_hint():
    with pytest.raises(InputError, match="truncated"):
        parse_jsonl(BOM + b'{"a": 1}\n{"b": ', "cut.jsonl")


def test_a_complete_bad_line_is_not_called_truncated():
    with pytest.raises(InputError) as e:
        parse_jsonl(b'{"a": 1}\n{"b": oops}\n', "f.jsonl")
    assert "line 2: invalid JSON" in str(e.value) and "truncated" not in str(e.value)


def test_line_separators_inside_a_json_string_round_trip(tmp_path):
    from biocheck.io import dump_jsonl

    rows = [{"claim": "one\u2028two\u2029three\x85four\x1cfive\x0bsix\x0cseven"}, {"claim": "next"}]
    dump_jsonl(tmp_path / "f.jsonl", rows)  # ensure_ascii=False: the separators are written raw
    assert read_jsonl(tmp_path / "f.jsonl") == rows


def test_a_batch_of_claims_with_a_bom_runs_through_the_cli(evidence_workdir):
    (evidence_workdir / "script.json").write_text(json.dumps([{"content": "## Conclusion\nSUPPORTED\n"}]))
    (evidence_workdir / "claims.jsonl").write_bytes(BOM + b'{"id": "a", "claim": "Vitamin D prevents fractures."}\n')
    r = runner.invoke(app, ["check", "--claims", "claims.jsonl", "--out", "out", "--llm", "scripted:script.json"])
    assert r.exit_code == 0, r.output
    assert json.loads((evidence_workdir / "out" / "summary.json").read_text())["episodes"] == 1


# --- data text is printed verbatim: no rich markup, no emoji codes ------------------------------------------

def test_a_validation_summary_prints_data_verbatim(prepared, tmp_path, monkeypatch):
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["out_dir"] = str(prepared)
    params["validate"]["expected_rows"] = {}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    path = prepared / "full" / "healthfc.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    rows[0]["label"] = MARKUP
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = runner.invoke(app, ["data", "validate", "--report", str(tmp_path / "v.json")])
    assert r.exit_code == 1, r.output
    assert MARKUP in r.output and "👍" not in r.output and "😄" not in r.output


def test_a_failed_claims_id_is_printed_verbatim(evidence_workdir, monkeypatch):
    from biocheck.llm import LLMError
    from biocheck.llm.scripted import ScriptedChat

    def dead(self, messages, tools):
        raise LLMError("cannot reach the server :fire: [red]down[/red]")

    monkeypatch.setattr(ScriptedChat, "chat", dead)
    (evidence_workdir / "script.json").write_text("[]")
    (evidence_workdir / "claims.jsonl").write_text(json.dumps({"id": MARKUP, "claim": "Vitamin D works."}) + "\n")
    r = runner.invoke(app, ["check", "--claims", "claims.jsonl", "--out", "out", "--llm", "scripted:script.json"])
    assert r.exit_code == 1, r.output
    line, = _error_lines(r)
    assert f"{MARKUP}: cannot reach the server :fire: [red]down[/red]" in line


def test_search_results_are_printed_verbatim(evidence_workdir):
    r = runner.invoke(app, ["search", f"vitamin {MARKUP}"])
    assert MARKUP in r.output and "👍" not in r.output, r.output


def test_the_model_line_is_printed_verbatim(evidence_workdir):
    script = evidence_workdir / "my :thumbs_up: model.json"
    script.write_text(json.dumps([{"content": "## Conclusion\nSUPPORTED\n"}]))
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--llm", f"scripted:{script.name}"])
    assert r.exit_code == 0, r.output
    assert "scripted:my :thumbs_up: model.json" in r.output and "👍" not in r.output


# --- Ctrl-C says what was kept -----------------------------------------------------------------------------

def _interrupt_on(monkeypatch, word: str) -> list[bool]:
    """The scripted model 'receives' Ctrl-C on the claim that mentions `word`, while the switch is on."""
    from biocheck.llm.scripted import ScriptedChat

    real, armed = ScriptedChat.chat, [True]

    def chat(self, messages, tools):
        if armed[0] and word in messages[1]["content"]:
            raise KeyboardInterrupt
        return real(self, messages, tools)

    monkeypatch.setattr(ScriptedChat, "chat", chat)
    return armed


def test_ctrl_c_in_a_batch_says_the_finished_traces_are_kept_and_a_rerun_resumes(evidence_workdir, monkeypatch):
    from biocheck.agent.run import trace_path

    (evidence_workdir / "script.json").write_text(json.dumps([{"content": "## Conclusion\nSUPPORTED\n"}]))
    (evidence_workdir / "claims.jsonl").write_text(
        '{"id": "a", "claim": "Vitamin D prevents fractures."}\n{"id": "b", "claim": "Stop here."}\n')
    armed = _interrupt_on(monkeypatch, "Stop")
    args = ["check", "--claims", "claims.jsonl", "--out", "out", "--llm", "scripted:script.json", "--workers", "1"]
    r = runner.invoke(app, args)
    assert r.exit_code == 130, r.output
    line, = _error_lines(r)
    assert "no partial output was kept" not in line
    assert "interrupted" in line and "out" in line and "kept" in line and "resume" in line
    assert trace_path(evidence_workdir / "out", "a").is_file()  # what the message promises is there
    armed[0] = False
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert json.loads((evidence_workdir / "out" / "summary.json").read_text())["reused"] == 1


@pytest.mark.parametrize("command, stage, promise", [
    (["train"], "train_stage", "checkpoint"),
    (["evaluate"], "evaluate_stage", "reuse"),
    (["reward", "audit"], "audit_stage", "reuse"),
    (["data", "prepare"], "prepare_stage", "rerun"),
])
def test_ctrl_c_in_a_stage_says_what_is_true_for_it(tmp_path, monkeypatch, command, stage, promise):
    import biocheck.pipeline as pipeline

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, stage, interrupted)
    r = runner.invoke(app, [*command, "--params", str(REPO / "params.yaml")])
    assert r.exit_code == 130, r.output
    line, = _error_lines(r)
    assert "interrupted" in line and promise in line and "no partial output was kept" not in line
    assert "Traceback" not in r.output


# --- pinned: the training reward's weighted total is score()'s, with beta2 != beta3 ------------------------

class HalfJudge:
    spec, prompt_hash = "half", "h"

    def fingerprint(self):
        return "half"

    def score(self, pairs):
        return [{"SUPPORTED": 0.75, "REFUTED": 0.05, "NEI": 0.2} for _ in pairs]


def test_the_weighted_training_reward_equals_score_with_distinct_betas(evidence):
    from biocheck.labels import Label
    from biocheck.rewards.components import EpisodeView, RewardConfig, score
    from biocheck.train.reward_funcs import COMPONENTS, RewardBank
    from tests.helpers.checkpoints import rollouts

    cfg = RewardConfig(beta1=0.3, beta2=0.7, beta3=1.9)
    envs, completions = rollouts(evidence)
    claims, labels = ["Vitamin D prevents fractures."] * 3, ["SUPPORTED", "SUPPORTED", "REFUTED"]
    bank = RewardBank(cfg, judge=HalfJudge())
    assert bank.weights() == [1.0, 0.3, 0.7, -1.9, 0.0]
    values = {f.__name__: f(completions, environments=envs, label=labels, claim=claims) for f in bank.functions()}
    # TRL's total: sum of reward_weights[i] * reward_funcs[i] (grpo.make_trainer sets reward_weights = weights())
    trl_total = [sum(w * values[n][i] for w, n in zip(bank.weights(), COMPONENTS, strict=True)) for i in range(3)]
    library = [score(EpisodeView(claim=c, gold=Label(g), queries=e.budget.query_texts(), ledger=dict(e.budget.ledger),
                                 final_text=comp[-1]["content"]), cfg, HalfJudge())
               for c, g, e, comp in zip(claims, labels, envs, completions, strict=True)]
    assert trl_total == pytest.approx([b.total for b in library])
    # the test has teeth only if evidence and hallucination are non-zero somewhere and not equal
    assert any(b.evidence for b in library) and any(b.hallucination for b in library)
    swapped = [b.outcome + 0.3 * b.search + 1.9 * b.evidence - 0.7 * b.hallucination for b in library]
    assert swapped != pytest.approx(trl_total)


# --- pinned: the judge cache keeps the first score stored for a key -----------------------------------------

def test_the_judge_cache_keeps_the_first_score_for_a_key(tmp_path):
    from biocheck.evidence.types import Article
    from biocheck.rewards.judge.cache import CachedJudge, JudgeCache, pair_key

    article = Article(pmid="7", title="T", abstract="A.")
    key = pair_key("fp", "ph", "claim", article)
    first = {"SUPPORTED": 0.9, "REFUTED": 0.05, "NEI": 0.05}
    cache = JudgeCache(tmp_path)
    cache.put_many({key: first})
    cache.put_many({key: {"SUPPORTED": 0.1, "REFUTED": 0.8, "NEI": 0.1}})
    assert JudgeCache(tmp_path).get_many([key]) == {key: first} and len(cache) == 1

    class Flipped:  # same fingerprint and prompt, another answer: the stored one is what every run sees
        spec, prompt_hash = "x", "ph"

        def fingerprint(self):
            return "fp"

        def score(self, pairs):
            raise AssertionError("a cached pair must not be scored again")

    assert CachedJudge(Flipped(), JudgeCache(tmp_path)).score([("claim", article)]) == [first]
