"""Artifacts checked before use (issue 30): a model folder, a checkpoint, a search index, a baseline XML file or
an evidence store that cannot be used is one error line naming the file and how to fix it, before anything is
copied, selected or answered; never a traceback, never a result built on it."""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from biocheck.cli import app
from biocheck.io import InputError
from tests.helpers.turns import REPORT, search

runner = CliRunner()
REBUILD = "biocheck evidence build"


def one_error_line(r) -> str:
    """The CLI failed with exit 1 and one `error:` line, no traceback; returns that line."""
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), (r.exit_code, r.output, repr(r.exception))
    assert "Traceback" not in r.output, r.output
    lines = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, r.output
    return lines[0]


def cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.fixture
def model_copy(tiny_model, tmp_path) -> Path:
    """A private copy of the tiny model, free to damage."""
    return Path(shutil.copytree(tiny_model, tmp_path / "model"))


# --- model folders: one check before every load ----------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "deleted", "extended", "empty"])
def test_load_model_refuses_damaged_weights_naming_the_file(model_copy, damage):
    from biocheck.llm.load import ModelFilesError, load_model

    weights = model_copy / "model.safetensors"
    if damage == "truncated":
        cut_in_half(weights)
    elif damage == "deleted":
        weights.unlink()
    elif damage == "extended":  # bytes after the last tensor: not what save_pretrained wrote
        weights.write_bytes(weights.read_bytes() + b"\0" * 16)
    else:
        weights.write_bytes(b"")
    with pytest.raises(ModelFilesError) as err:
        load_model(model_copy)
    text = str(err.value)
    assert "\n" not in text
    if damage == "deleted":
        assert str(model_copy) in text and "no weights" in text and "model.safetensors" in text
    else:
        assert str(weights) in text and "damaged or incomplete" in text
    assert isinstance(err.value, InputError)


def test_a_sharded_model_needs_every_shard_its_index_lists(model_copy):
    from biocheck.llm.load import ModelFilesError, check_model_dir

    weights = model_copy / "model.safetensors"
    weights.rename(model_copy / "model-00001-of-00002.safetensors")
    index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                            "b": "model-00002-of-00002.safetensors"}}
    (model_copy / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelFilesError, match=r"model-00002-of-00002\.safetensors: missing \(listed in "
                                              r"model\.safetensors\.index\.json\)"):
        check_model_dir(model_copy)
    (model_copy / "model.safetensors.index.json").write_text('{"weight_map": ')  # cut short
    with pytest.raises(ModelFilesError, match=r"model\.safetensors\.index\.json: not valid JSON"):
        check_model_dir(model_copy)


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "tokenizer_config.json"])
def test_a_cut_json_file_of_the_model_is_named(model_copy, name):
    from biocheck.llm.load import ModelFilesError, check_model_dir

    cut_in_half(model_copy / name)
    with pytest.raises(ModelFilesError) as err:
        check_model_dir(model_copy)
    assert str(model_copy / name) in str(err.value) and "not valid JSON" in str(err.value)


def test_a_pytorch_bin_cut_short_is_found_by_its_zip_directory(model_copy):
    import torch

    from biocheck.llm.load import ModelFilesError, check_model_dir

    (model_copy / "model.safetensors").unlink()
    torch.save({"w": torch.zeros(64)}, model_copy / "pytorch_model.bin")
    check_model_dir(model_copy)  # intact: passes
    cut_in_half(model_copy / "pytorch_model.bin")
    with pytest.raises(ModelFilesError, match="pytorch_model.bin: the weights file is damaged or incomplete"):
        check_model_dir(model_copy)


def test_the_fix_names_the_command_that_wrote_the_folder(model_copy):
    from biocheck.llm.load import ModelFilesError, check_model_dir
    from biocheck.outputs import MARK_FILE

    cut_in_half(model_copy / "model.safetensors")
    (model_copy / MARK_FILE).write_text("biocheck select\n")
    with pytest.raises(ModelFilesError, match=r"re-run `biocheck select`, which wrote it"):
        check_model_dir(model_copy)
    (model_copy / MARK_FILE).unlink()
    (model_copy / "trainer_state.json").write_text("{}")  # a training checkpoint
    with pytest.raises(ModelFilesError, match=r"delete .* to (resume from|select among) "):
        check_model_dir(model_copy)


def test_check_with_a_truncated_model_is_one_error_line(evidence_workdir, model_copy):
    cut_in_half(model_copy / "model.safetensors")
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--llm", f"transformers:{model_copy}"])
    line = one_error_line(r)
    assert str(model_copy / "model.safetensors") in line and "damaged or incomplete" in line
    assert "SafetensorError" not in r.output


def test_check_with_a_models_hidden_size_edited_is_one_error_line(evidence_workdir, model_copy):
    """An edit to config.json's hidden_size gave transformers' RuntimeError traceback at load."""
    config = json.loads((model_copy / "config.json").read_text())
    config["hidden_size"] *= 2
    (model_copy / "config.json").write_text(json.dumps(config))
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--llm", f"transformers:{model_copy}"])
    line = one_error_line(r)
    assert f"the weights in {model_copy} do not fit its config.json" in line and "hidden_size" in line
    assert "RuntimeError" not in r.output and "ignore_mismatched_sizes" not in r.output


@pytest.fixture
def eval_project(evidence_workdir: Path) -> Path:
    """A project folder with test splits; every system but the one under test runs a script."""
    from tests.helpers.builders import write_test_splits

    write_test_splits(evidence_workdir, {"scifact": [("1", "Vitamin D prevents fractures.", "SUPPORTED")]})
    (evidence_workdir / "script.json").write_text(json.dumps([{"content": REPORT}]))
    params = yaml.safe_load((evidence_workdir / "params.yaml").read_text())
    params["agent"]["llm"] = "scripted:script.json"
    params["reward"]["judge"] = None
    params["evaluate"]["eqs_judge"] = None
    (evidence_workdir / "params.yaml").write_text(yaml.safe_dump(params))
    return evidence_workdir


def test_evaluate_with_a_truncated_model_is_one_error_line(eval_project, model_copy):
    cut_in_half(model_copy / "model.safetensors")
    r = runner.invoke(app, ["evaluate", "--systems", "eg_grpo", "--datasets", "scifact", "--model", str(model_copy),
                            "--out", "adhoc", "--no-progress"])
    line = one_error_line(r)
    assert str(model_copy / "model.safetensors") in line and "damaged or incomplete" in line
    assert not (eval_project / "adhoc" / "eval.json").exists()


# --- `biocheck select`: every candidate checked before anything is copied ---------------------------------


def _state(history: list[dict]) -> str:
    return json.dumps({"global_step": history[-1]["step"] if history else 0, "log_history": history})


@pytest.fixture
def real_checkpoints(tiny_model, tmp_path) -> Path:
    """checkpoint-10 and -20 holding the tiny model's real files (the best: step 20), as TRL saves them."""
    root = tmp_path / "ckpt"
    history = [{"step": 0, "eval_reward": 0.1}]
    for step, reward in ((10, 0.2), (20, 0.5)):
        history += [{"step": step, "reward": reward}, {"step": step, "eval_reward": reward}]
        d = Path(shutil.copytree(tiny_model, root / f"checkpoint-{step}"))
        (d / "trainer_state.json").write_text(_state(history))
    return root


def _select_cfg(tmp_path: Path, ckpts: Path):
    from biocheck.train.select import SelectConfig

    return SelectConfig(checkpoints=ckpts, out_dir=tmp_path / "selected", metrics_path=tmp_path / "sel.json",
                        curve_path=tmp_path / "curve.csv", register=False)


def test_select_copies_the_chat_template_and_the_selection_loads_as_a_chat_model(real_checkpoints, tmp_path):
    from biocheck.llm.transformers_backend import TransformersChat
    from biocheck.train.select import select

    assert select(_select_cfg(tmp_path, real_checkpoints))["selected_step"] == 20
    selected = tmp_path / "selected"
    template = real_checkpoints / "checkpoint-20" / "chat_template.jinja"
    assert (selected / "chat_template.jinja").read_bytes() == template.read_bytes()
    chat = TransformersChat(selected)  # refused ("no chat template") if the template were left behind
    assert chat.tokenizer.chat_template == template.read_text()
    assert chat.render([{"role": "user", "content": "hi"}], None)


@pytest.mark.parametrize("step", [20, 10])  # the best checkpoint, or another one
@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_select_refuses_a_damaged_checkpoint_and_copies_nothing(real_checkpoints, tmp_path, step, damage):
    from biocheck.train.select import select

    weights = real_checkpoints / f"checkpoint-{step}" / "model.safetensors"
    cut_in_half(weights) if damage == "truncated" else weights.unlink()
    cfg = _select_cfg(tmp_path, real_checkpoints)
    with pytest.raises(InputError) as err:
        select(cfg)
    text = str(err.value)
    assert "\n" not in text and str(real_checkpoints / f"checkpoint-{step}") in text
    assert f"delete {real_checkpoints / f'checkpoint-{step}'}" in text  # how to go on without it
    assert not cfg.out_dir.exists() and not cfg.metrics_path.exists() and not cfg.curve_path.exists()


def test_a_kept_selection_is_not_replaced_by_a_damaged_checkpoint(real_checkpoints, tmp_path):
    from biocheck.train.select import select

    cfg = _select_cfg(tmp_path, real_checkpoints)
    select(cfg)
    before = {p.name: p.read_bytes() for p in cfg.out_dir.iterdir()}
    cut_in_half(real_checkpoints / "checkpoint-20" / "model.safetensors")
    with pytest.raises(InputError):
        select(cfg)
    assert {p.name: p.read_bytes() for p in cfg.out_dir.iterdir()} == before


@pytest.mark.parametrize("content", ["{\"log_history\": [", "not json at all", "[]", "{\"log_history\": 3}",
                                     "{\"log_history\": [{\"eval_reward\": 0.5}]}",
                                     "{\"log_history\": [{\"step\": \"ten\", \"eval_reward\": 0.5}]}",
                                     "{\"log_history\": [{\"step\": 20, \"eval_reward\": \"high\"}]}",
                                     "\xff\xfe"])
def test_select_with_a_garbage_trainer_state_names_the_file(real_checkpoints, tmp_path, content):
    from biocheck.train.select import select

    state = real_checkpoints / "checkpoint-20" / "trainer_state.json"
    state.write_bytes(content.encode("latin-1"))
    cfg = _select_cfg(tmp_path, real_checkpoints)
    with pytest.raises(InputError) as err:
        select(cfg)
    assert str(state) in str(err.value) and "\n" not in str(err.value)
    assert not cfg.out_dir.exists()


def test_cli_select_with_a_damaged_checkpoint_is_one_error_line(real_checkpoints, tmp_path, monkeypatch):
    from tests.helpers.paths import REPO

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["train"]["out_dir"] = str(real_checkpoints)
    params["select"] = {**(params.get("select") or {}), "out_dir": str(tmp_path / "selected"),
                        "metrics_path": str(tmp_path / "sel.json"), "curve_path": str(tmp_path / "curve.csv")}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    cut_in_half(real_checkpoints / "checkpoint-20" / "model.safetensors")
    line = one_error_line(runner.invoke(app, ["select", "--no-register"]))
    assert str(real_checkpoints / "checkpoint-20" / "model.safetensors") in line
    (real_checkpoints / "checkpoint-20" / "trainer_state.json").write_text("{")
    line = one_error_line(runner.invoke(app, ["select", "--no-register"]))
    assert "trainer_state.json" in line
    assert not (tmp_path / "selected").exists()


# --- `model init --base`: only a model folder is copied as the model -------------------------------------


@pytest.mark.parametrize("content", ["system", "config-only"])
def test_model_init_refuses_a_base_folder_that_is_not_a_model(tmp_path, monkeypatch, content):
    system = tmp_path / "etc"
    system.mkdir()
    (system / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (system / "hosts").write_text("127.0.0.1 localhost\n")
    if content == "config-only":
        (system / "config.json").write_text('{"model_type": "qwen3"}')
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    from tests.helpers.paths import REPO

    shutil.copy(REPO / "params.yaml", work / "params.yaml")
    monkeypatch.chdir(work)
    r = runner.invoke(app, ["model", "init", "--base", "../../../etc", "--out-dir", "models/base"])
    line = one_error_line(r)
    assert "../../../etc" in line and ("no config.json" in line or "no weights" in line)
    assert "--base" in line
    assert not (work / "models").exists()


def test_model_init_copies_a_real_model_folder(tiny_model, tmp_path, monkeypatch):
    from biocheck.base_model.build import ModelConfig, init_model

    stats = init_model(ModelConfig(base=str(tiny_model), out_dir=tmp_path / "base", metrics_path=None))
    assert (tmp_path / "base" / "model.safetensors").read_bytes() == (tiny_model / "model.safetensors").read_bytes()
    assert stats["source"] == str(tiny_model)


# --- the search index: checked when opened -------------------------------------------------------------


def _index_with_deletes(path: Path):
    from biocheck.evidence.local import LocalIndex
    from biocheck.evidence.types import Article

    papers = [Article(pmid=str(1000 + i % 30), title=f"Aspirin trial {i}", abstract="aspirin " * (1 + i % 5),
                      source="t") for i in range(40)]  # repeated pmids: the segment gets a .del file
    LocalIndex.build(papers, path=path)
    return path


@pytest.mark.parametrize("component", ["pos", "idx", "term", "store", "fast", "fieldnorm", "del"])
def test_an_index_missing_any_file_is_refused_when_opened(tmp_path, component):
    from biocheck.evidence.local import IndexUnavailable, LocalIndex

    index = _index_with_deletes(tmp_path / "index")
    [victim] = [p for p in index.iterdir() if p.name.endswith(f".{component}") and len(p.name.split(".")[0]) == 32]
    victim.unlink()
    for verify in (True, False):  # even without the checksums: a missing file is a stat away
        with pytest.raises(IndexUnavailable) as err:
            LocalIndex.open(index, verify=verify)
        text = str(err.value)
        assert victim.name in text and str(index) in text and REBUILD in text and "missing" in text


def test_check_with_a_deleted_pos_file_fails_instead_of_reporting_no_evidence(evidence_workdir):
    (evidence_workdir / "script.json").write_text(json.dumps([search("vitamin D"), {"content": REPORT}]))
    [pos] = [p for p in (evidence_workdir / "index").iterdir() if p.suffix == ".pos"]
    pos.unlink()
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--llm", "scripted:script.json"])
    line = one_error_line(r)
    assert pos.name in line and REBUILD in line
    assert "NOT ENOUGH INFORMATION" not in r.stdout and "Conclusion" not in r.stdout


def test_a_search_backend_failure_mid_episode_fails_the_check(evidence_workdir, monkeypatch):
    import biocheck.evidence.local as local

    def broken(*_a, **_k):
        raise OSError("Input/output error reading segment")

    monkeypatch.setattr(local, "_top", broken)
    (evidence_workdir / "script.json").write_text(json.dumps([search("vitamin D"), {"content": REPORT}]))
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--llm", "scripted:script.json",
                            "--trace", "t.json"])
    line = one_error_line(r)
    assert "Local search failed" in line and REBUILD in line
    assert not (evidence_workdir / "t.json").exists() and "Conclusion" not in r.stdout


def test_a_backend_failure_leaves_the_tool_but_a_bad_query_is_text(evidence):
    import biocheck.evidence.local as local
    from biocheck.evidence.search import SearchConfig, search_tool
    from biocheck.evidence.types import BackendError

    cfg, _ = evidence
    tool = search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store))
    assert "parenthes" in tool.run("aspirin AND (bleeding").error  # the model's mistake: text it can act on
    original = local._top
    try:
        local._top = lambda *a, **k: (_ for _ in ()).throw(ValueError("segment gone"))
        with pytest.raises(BackendError, match="Local search failed"):
            tool.run("aspirin")
    finally:
        local._top = original


# --- PubMed baseline XML: no DTD fetched, no external entity read, PubMed records or an error --------------


ARTICLE = ("<PubmedArticle><MedlineCitation><PMID>7</PMID><Article><ArticleTitle>Zinc and colds</ArticleTitle>"
           "<Abstract><AbstractText>Zinc shortened colds.</AbstractText></Abstract></Article></MedlineCitation>"
           "</PubmedArticle>")


def _xml(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("head", [
    '<?xml version="1.0"?>\n<!DOCTYPE PubmedArticleSet SYSTEM "my_local_pubmed.dtd">\n',  # a local, unknown DTD
    '<?xml version="1.0"?>\n<!DOCTYPE PubmedArticleSet SYSTEM "file:///etc/pubmed.dtd">\n',  # a file URL
    '<?xml version="1.0"?>\n<!DOCTYPE PubmedArticleSet SYSTEM "http://127.0.0.1:9/x/unknown.dtd">\n',
    '<?xml version="1.0"?>\n',  # no DTD at all
    "",  # not even an XML declaration
])
def test_a_pubmed_file_without_a_public_dtd_is_read_offline(tmp_path, head, monkeypatch):
    import urllib.request

    from biocheck.evidence.baseline import iter_baseline

    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: pytest.fail("a DTD download was attempted"))
    path = _xml(tmp_path, "local.xml", f"{head}<PubmedArticleSet>{ARTICLE}</PubmedArticleSet>\n")
    [article] = list(iter_baseline(path))
    assert (article.pmid, article.title, article.abstract) == ("7", "Zinc and colds", "Zinc shortened colds.")


def test_an_external_entity_is_never_read(tmp_path):
    from biocheck.evidence.article_xml import XMLParseError
    from biocheck.evidence.baseline import iter_baseline

    secret = _xml(tmp_path, "secret.txt", "TOP-SECRET-VALUE")
    path = _xml(tmp_path, "xxe.xml", f'<?xml version="1.0"?>\n<!DOCTYPE PubmedArticleSet [ <!ENTITY x SYSTEM '
                f'"file://{secret}"> ]>\n<PubmedArticleSet>{ARTICLE.replace("Zinc and colds", "&x;")}'
                "</PubmedArticleSet>")
    with pytest.raises(XMLParseError) as err:
        list(iter_baseline(path))
    assert "external entity" in str(err.value) and str(path) in str(err.value)
    assert "TOP-SECRET-VALUE" not in str(err.value)


def test_an_entity_expansion_bomb_is_refused(tmp_path):
    from biocheck.evidence.article_xml import XMLParseError
    from biocheck.evidence.baseline import iter_baseline

    levels = ['<!ENTITY a "aaaaaaaaaa">'] + [f'<!ENTITY {c} "{("&" + p + ";") * 10}">'
                                             for p, c in zip("abcdefgh", "bcdefghi", strict=True)]
    path = _xml(tmp_path, "bomb.xml", f'<?xml version="1.0"?>\n<!DOCTYPE PubmedArticleSet [ {" ".join(levels)} ]>\n'
                f'<PubmedArticleSet>{ARTICLE.replace("Zinc and colds", "&i;")}</PubmedArticleSet>')
    with pytest.raises(XMLParseError, match=str(path)):
        list(iter_baseline(path))


@pytest.mark.parametrize("text, why", [
    ('<?xml version="1.0"?>\n<catalog><book id="1"><title>Zinc</title></book></catalog>', "<catalog>"),
    ('<?xml version="1.0"?>\n<!DOCTYPE eSearchResult PUBLIC "-//NLM//DTD esearch 20060628//EN" '
     '"https://eutils.ncbi.nlm.nih.gov/eutils/dtd/20060628/esearch.dtd">\n<eSearchResult><Count>0</Count>'
     "</eSearchResult>", "<eSearchResult>"),
    ('<?xml version="1.0"?>\n<PubmedArticleSet></PubmedArticleSet>', "no PubmedArticle records"),
])
def test_a_file_without_pubmed_records_is_an_error_naming_it(tmp_path, text, why):
    from biocheck.evidence.article_xml import XMLParseError
    from biocheck.evidence.baseline import iter_baseline

    path = _xml(tmp_path, "other.xml", text)
    with pytest.raises(XMLParseError) as err:
        list(iter_baseline(path))
    assert str(path) in str(err.value) and why in str(err.value) and "PubMed baseline" in str(err.value)


def test_an_update_file_of_deletions_only_is_not_an_error(tmp_path):
    from biocheck.evidence.baseline import iter_baseline

    path = _xml(tmp_path, "update.xml", '<?xml version="1.0"?>\n<PubmedArticleSet><DeleteCitation><PMID>5</PMID>'
                "</DeleteCitation></PubmedArticleSet>")
    assert list(iter_baseline(path)) == []


def test_evidence_build_with_a_non_pubmed_baseline_is_one_line_and_changes_nothing(evidence_workdir):
    index = evidence_workdir / "index"
    before = {p.name: p.stat().st_mtime_ns for p in index.iterdir()}
    good = _xml(evidence_workdir, "good.xml", f'<?xml version="1.0"?>\n<PubmedArticleSet>{ARTICLE}</PubmedArticleSet>')
    bad = _xml(evidence_workdir, "other.xml", '<?xml version="1.0"?>\n<!DOCTYPE catalog SYSTEM "catalog.dtd">\n'
               "<catalog/>")
    r = runner.invoke(app, ["evidence", "build", "--baseline", str(good), "--baseline", str(bad), "--no-progress"])
    line = one_error_line(r)
    assert str(bad) in line and "<catalog>" in line
    assert {p.name: p.stat().st_mtime_ns for p in index.iterdir()} == before  # the index is untouched
    from biocheck.evidence.store import PUBMED, EvidenceStore

    with EvidenceStore(evidence_workdir / "ev.sqlite") as store:
        assert list(store.iter_articles(PUBMED)) == []  # nor did the good file's articles go in first


# --- the evidence store: a 0-byte file is not an empty store ---------------------------------------------


def test_a_zero_byte_store_is_an_error_naming_it_and_is_kept(tmp_path):
    from biocheck.evidence.store import EvidenceStore, StoreError

    path = tmp_path / "evidence.sqlite"
    path.write_bytes(b"")
    with pytest.raises(StoreError) as err:
        EvidenceStore(path)
    text = str(err.value)
    assert str(path) in text and "0 bytes" in text and REBUILD in text and "\n" not in text
    assert path.read_bytes() == b""  # left as it was, for the user to look at


def test_cli_over_a_zero_byte_store_is_one_error_line(evidence_workdir):
    (evidence_workdir / "ev.sqlite").write_bytes(b"")
    line = one_error_line(runner.invoke(app, ["evidence", "stats"]))
    assert "ev.sqlite" in line and "0 bytes" in line
    line = one_error_line(runner.invoke(app, ["evidence", "build", "--no-progress"]))
    assert "ev.sqlite" in line and "0 bytes" in line
    assert (evidence_workdir / "ev.sqlite").read_bytes() == b""


def test_a_new_store_never_shows_as_zero_bytes_to_a_concurrent_opener(tmp_path):
    from biocheck.evidence.store import EvidenceStore
    from biocheck.evidence.types import Article, SearchResult

    errors: list[BaseException] = []
    sizes: list[int] = []
    path = tmp_path / "new" / "evidence.sqlite"
    stop = threading.Event()

    def watch() -> None:  # the file, whenever it exists, is a complete database
        while not stop.is_set():
            try:
                sizes.append(path.stat().st_size)
            except FileNotFoundError:
                pass

    def open_and_write(i: int) -> None:
        try:
            with EvidenceStore(path) as store:
                store.put(SearchResult(query=f"q{i}", backend="entrez",
                                       articles=[Article(pmid=str(i), title="t", source="entrez")]))
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    watcher = threading.Thread(target=watch)
    watcher.start()
    workers = [threading.Thread(target=open_and_write, args=(i,)) for i in range(8)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    watcher.join()
    assert errors == []
    assert sizes and 0 not in sizes
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM queries").fetchone()[0] == 8
    assert sorted(p.name for p in path.parent.iterdir() if not p.name.startswith("evidence.sqlite")) == []



def test_an_efetch_reply_without_a_dtd_is_a_parse_error_not_a_traceback():
    from biocheck.evidence.article_xml import XMLParseError, parse_efetch

    with pytest.raises(XMLParseError, match="<html> without a DTD"):  # retried by the transport, then one line
        parse_efetch(b'<?xml version="1.0"?>\n<html><body>proxy error</body></html>')
    [article] = parse_efetch(f'<?xml version="1.0"?>\n<PubmedArticleSet>{ARTICLE}</PubmedArticleSet>'.encode())
    assert article.title == "Zinc and colds"
