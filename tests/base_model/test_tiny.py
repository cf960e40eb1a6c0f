"""The tiny local Qwen3 model (`biocheck model init`) and model references (`resolve_model`)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from biocheck.agent.prompts import prompt_texts
from biocheck.base_model import tiny
from biocheck.base_model.tiny import CONTROL_TOKENS, SPECIAL_TOKENS, TinyModelConfig, build_tiny_model
from biocheck.io import InputError
from biocheck.llm.resolve import ModelNotFoundError, resolve_model
from biocheck.outputs import MARK_FILE
from tests.helpers.tiny import small_config, write_corpus

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_pubmed",
        "description": "Search PubMed.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "A query."}},
                       "required": ["query"]},
    },
}
QUERY = '("vitamin D" OR cholecalciferol) AND fractur* AND elderly[tiab]'
CONVERSATION = [
    {"role": "system", "content": "You are BioCheck, a biomedical fact-checker."},
    {"role": "user", "content": "Claim: Vitamin D prevents fractures."},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "search_pubmed", "arguments": {"query": QUERY}}}]},
    {"role": "tool", "tool_call_id": "call_0", "name": "search_pubmed", "content": "PMID: 123\nTitle: Vitamin D."},
    {"role": "assistant", "content": "## Conclusion\nNOT ENOUGH INFORMATION"},
]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.fixture(scope="module")
def built(tmp_path_factory, corpus):
    cfg = small_config(tmp_path_factory.mktemp("build"), corpus)
    stats = build_tiny_model(cfg, prompt_texts())
    return cfg, stats


@pytest.fixture(scope="module")
def tokenizer(built):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(built[0].out_dir)


# ------------------------------------------------------------------------------------------------ the build


def test_build_stats_and_files(built):
    cfg, stats = built
    names = {p.name for p in cfg.out_dir.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "chat_template.jinja", tiny.INFO_FILE} <= names
    assert stats["sha256"] == sha256(cfg.out_dir / "model.safetensors")
    assert 0 < stats["params"] < 2_000_000 and stats["vocab"] <= cfg.vocab_size and stats["seconds"] >= 0
    info = json.loads((cfg.out_dir / tiny.INFO_FILE).read_text())
    assert info["corpus_sha256"] == sha256(cfg.corpus) and info["config"]["seed"] == 0
    assert not [p for p in cfg.out_dir.parent.iterdir() if p.name.startswith(".tmp-")]


def test_loads_with_auto_classes(built, tokenizer):
    import torch
    from transformers import AutoModelForCausalLM

    cfg, stats = built
    model = AutoModelForCausalLM.from_pretrained(cfg.out_dir)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    c = model.config
    assert (c.hidden_size, c.num_hidden_layers, c.max_position_embeddings) == (64, 2, 4096)
    assert c.vocab_size == len(tokenizer) == stats["vocab"]
    assert c.tie_word_embeddings and model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert sum(p.numel() for p in model.parameters()) == stats["params"]
    im_end, eot = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    assert c.eos_token_id == im_end and c.pad_token_id == eot
    assert model.generation_config.eos_token_id == [im_end, eot] and model.generation_config.pad_token_id == eot
    with torch.no_grad():
        logits = model(torch.tensor([tokenizer.encode("Vitamin D and fractures.")])).logits
    assert logits.shape[-1] == len(tokenizer) and torch.isfinite(logits).all()


def test_special_and_control_tokens_are_single_ids(tokenizer):
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    ids = {}
    for t in SPECIAL_TOKENS + CONTROL_TOKENS:
        enc = tokenizer.encode(t, add_special_tokens=False)
        assert len(enc) == 1, (t, enc)
        ids[t] = enc[0]
    assert len(set(ids.values())) == len(ids)
    # Qwen-style: the chat markers are special, the tool/think tags ordinary added tokens (kept when decoding).
    text = "<|im_start|>assistant\n<tool_call>\nx\n</tool_call><|im_end|>"
    assert tokenizer.decode(tokenizer.encode(text), skip_special_tokens=True) == "assistant\n<tool_call>\nx\n</tool_call>"
    assert tokenizer.decode(tokenizer.encode(text)) == text  # byte-level: lossless
    assert tokenizer.decode(tokenizer.encode("Ünïcode µg/kg ≥ 5 – 🙂")) == "Ünïcode µg/kg ≥ 5 – 🙂"


def test_prompt_words_tokenise_well(tokenizer):
    text = "\n".join(prompt_texts())
    assert len(text) / len(tokenizer.encode(text)) > 2.5  # chars per token (bytes alone: ~1; vocab 1024 here)
    for word in ("search_pubmed", " PMID", " Quote", " evidence"):
        assert len(tokenizer.encode(word)) <= 2, (word, tokenizer.tokenize(word))


def test_chat_template_is_trl_verbatim(built, tokenizer):
    shipped = Path(__import__("trl").__file__).parent / "chat_templates" / "qwen3_5_nothink.jinja"
    assert tokenizer.chat_template == shipped.read_text(encoding="utf-8")
    assert (built[0].out_dir / "chat_template.jinja").read_bytes() == shipped.read_bytes()


def test_chat_template_renders_a_tool_conversation(tokenizer):
    text = tokenizer.apply_chat_template(CONVERSATION, tools=[SEARCH_TOOL], tokenize=False)
    assert text.startswith("<|im_start|>system\n# Tools\n")
    assert '"name": "search_pubmed"' in text and "You are BioCheck, a biomedical fact-checker.<|im_end|>" in text
    assert "<|im_start|>user\nClaim: Vitamin D prevents fractures.<|im_end|>" in text
    call = f"<tool_call>\n<function=search_pubmed>\n<parameter=query>\n{QUERY}\n</parameter>\n</function>\n</tool_call>"
    assert call in text
    assert "<|im_start|>user\n<tool_response>\nPMID: 123\nTitle: Vitamin D.\n</tool_response><|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n## Conclusion\nNOT ENOUGH INFORMATION<|im_end|>\n")
    prompt = tokenizer.apply_chat_template(CONVERSATION[:2], tools=[SEARCH_TOOL], add_generation_prompt=True,
                                           tokenize=False)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_trl_parses_a_rendered_tool_call(tokenizer):
    from trl.chat_template_utils import add_response_schema, parse_response, supports_tool_calling

    add_response_schema(tokenizer)
    assert supports_tool_calling(tokenizer)
    msgs = CONVERSATION[:2]
    prompt = tokenizer.apply_chat_template(msgs, tools=[SEARCH_TOOL], add_generation_prompt=True, tokenize=True,
                                           return_dict=True)["input_ids"]
    full = tokenizer.apply_chat_template(msgs + [CONVERSATION[2]], tools=[SEARCH_TOOL], tokenize=True,
                                         return_dict=True)["input_ids"]
    assert full[:len(prompt)] == prompt
    parsed = parse_response(tokenizer, full[len(prompt):], prefix=prompt, tools=[SEARCH_TOOL])
    assert parsed["tool_calls"] == [{"type": "function", "function": {"name": "search_pubmed",
                                                                      "arguments": {"query": QUERY}}}]


# ------------------------------------------------------------------------------------- inputs and validation


def test_scifact_doc_id_corpus_is_accepted(tmp_path):
    corpus = write_corpus(tmp_path / "scifact.jsonl", n_docs=30, id_key="doc_id")
    texts = list(tiny.iter_corpus_texts(corpus, max_docs=10))
    assert len(texts) == 10 and all("\n" in t for t in texts)


@pytest.mark.parametrize("content, match", [
    (None, "no such corpus file"),
    ("", "no documents"),
    ('{"id": "1", "title": "x"}\nnot json\n', r":2: not valid JSON"),
    ('{"title": "x", "abstract": []}\n', "expected an object with 'id'"),
])
def test_bad_corpus_is_a_clear_error(tmp_path, content, match):
    path = tmp_path / "corpus.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InputError, match=match):
        build_tiny_model(small_config(tmp_path, path))
    assert not (tmp_path / "model").exists()


@pytest.mark.parametrize("kw", [{"num_attention_heads": 4, "num_key_value_heads": 3}, {"vocab_size": 100}])
def test_bad_config_values(tmp_path, kw):
    with pytest.raises(ValueError):
        TinyModelConfig(out_dir=tmp_path, **kw)


@pytest.mark.parametrize("kw", [{"max_docs": 0}, {"hidden_size": 0}])
def test_bad_sizes_are_refused_where_params_are_read(kw):  # the bounds are the fields' types (bounds.py)
    from biocheck.params import check_nested

    with pytest.raises(ValueError, match=rf"^tiny\.{next(iter(kw))} must be >= 1, not 0$"):
        check_nested(TinyModelConfig, kw, "tiny")


def test_unknown_chat_template_name(tmp_path, corpus):
    with pytest.raises(InputError, match="no trl/chat_templates/nope.jinja"):
        build_tiny_model(small_config(tmp_path, corpus, chat_template="nope"))


# -------------------------------------------------------------------------------- determinism and atomicity


def test_same_seed_is_byte_identical_and_seed_changes_weights(tmp_path, built, corpus):
    import torch

    cfg0, stats0 = built
    rng = torch.get_rng_state()
    again = build_tiny_model(small_config(tmp_path / "a", corpus), prompt_texts())
    assert torch.equal(torch.get_rng_state(), rng)  # seeded init does not reseed the caller
    assert again["sha256"] == stats0["sha256"]
    assert tree_bytes(tmp_path / "a" / "model") == tree_bytes(cfg0.out_dir)  # every file, not just the weights

    other = build_tiny_model(small_config(tmp_path / "b", corpus, seed=1), prompt_texts())
    assert other["sha256"] != stats0["sha256"]
    a, b = tree_bytes(cfg0.out_dir), tree_bytes(tmp_path / "b" / "model")
    assert a["tokenizer.json"] == b["tokenizer.json"]  # the seed only drives the weights
    assert a["model.safetensors"] != b["model.safetensors"]


def test_byte_identical_across_processes(tmp_path, built, corpus):
    """A fresh interpreter (other hash seed, other thread count) builds the very same files."""
    code = ("import sys; from pathlib import Path; from biocheck.base_model.tiny import TinyModelConfig, build_tiny_model; "
            "from biocheck.agent.prompts import prompt_texts; "
            "build_tiny_model(TinyModelConfig(out_dir=Path(sys.argv[1]), corpus=Path(sys.argv[2]), vocab_size=1024, "
            "max_docs=100, prompt_repeats=20, max_position_embeddings=4096), prompt_texts())")
    env = {**os.environ, "PYTHONHASHSEED": "123", "RAYON_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "m"), str(corpus)], check=True, env=env, timeout=300)
    assert tree_bytes(tmp_path / "m") == tree_bytes(built[0].out_dir)


def test_failed_build_leaves_no_model_dir(tmp_path, corpus, monkeypatch):
    def boom(directory):  # the last step inside the temporary directory: every file is already written
        raise RuntimeError("disk full")

    monkeypatch.setattr(tiny, "_normalise_permissions", boom)
    cfg = small_config(tmp_path, corpus)
    with pytest.raises(RuntimeError, match="disk full"):
        build_tiny_model(cfg)
    assert list(tmp_path.iterdir()) == []  # neither model/ nor a leftover temporary

    cfg.out_dir.mkdir()
    (cfg.out_dir / "old.txt").write_text("previous model")
    (cfg.out_dir / MARK_FILE).write_text("biocheck model init\n")  # an earlier build's output
    with pytest.raises(RuntimeError):
        build_tiny_model(cfg)
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
    assert sorted(p.name for p in cfg.out_dir.iterdir()) == [MARK_FILE, "old.txt"]  # untouched


def test_rebuild_replaces_the_whole_dir(tmp_path, corpus):
    cfg = small_config(tmp_path, corpus)
    cfg.out_dir.mkdir()
    (cfg.out_dir / "stale.bin").write_text("x")
    (cfg.out_dir / MARK_FILE).write_text("biocheck model init\n")  # an earlier build's output
    (tmp_path / ".tmp-model.killed").mkdir()  # left by a killed build: removed
    (tmp_path / ".tmp-other.x").mkdir()  # another output's temporary: kept
    build_tiny_model(cfg)
    assert not (cfg.out_dir / "stale.bin").exists() and (cfg.out_dir / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-other.x", "model"]


# ----------------------------------------------------------------------------------------------- resolve


def test_resolve_local_dir_as_is(built):
    assert resolve_model(str(built[0].out_dir)) == built[0].out_dir
    assert resolve_model(built[0].out_dir) == built[0].out_dir


@pytest.mark.parametrize("ref", ["./no/such/model", "/nonexistent/model/dir", "a/b/c", "models/base/"])
def test_resolve_missing_path_says_how_to_build(tmp_path, ref, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotFoundError, match="no such model directory.*biocheck model init"):
        resolve_model(ref)


def test_resolve_file_is_not_a_model(tmp_path):
    f = tmp_path / "weights.txt"
    f.write_text("x")
    with pytest.raises(ModelNotFoundError, match="is a file"):
        resolve_model(str(f))


def _resolve_in_subprocess(ref: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    """resolve_model in a fresh interpreter (clean HF env); the timeout is the "no hang" bound."""
    code = ("import sys\nfrom biocheck.llm.resolve import resolve_model, ModelNotFoundError\n"
            "try:\n    resolve_model(sys.argv[1])\nexcept ModelNotFoundError as e:\n    print(e); sys.exit(3)\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    base |= {"HF_HOME": str(tmp_path / "hf"), **env}
    return subprocess.run([sys.executable, "-c", code, ref], env=base, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)


@pytest.fixture
def hanging_up_hub():
    """A local "hub" that accepts every connection and closes it without an answer; counts the connections."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)  # closing a socket does not wake a blocked accept() on Linux: poll a stop flag
    connections: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            connections.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", connections
    stop.set()
    thread.join(5)
    server.close()


# "Fails fast" is pinned by what the hub client does, never by seconds: no request at all when offline, and no
# retry loop (huggingface_hub logs "Retrying in Ns" before each backoff sleep).
NO_BACKOFF = "Retrying in"


def test_resolve_fake_hub_id_offline_fails_fast(tmp_path, hanging_up_hub):
    endpoint, connections = hanging_up_hub
    proc = _resolve_in_subprocess("biocheck-test/no-such-model", {"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": endpoint},
                                  tmp_path)
    assert proc.returncode == 3, proc.stderr
    msg = proc.stdout
    assert "'biocheck-test/no-such-model'" in msg and "HF_HUB_OFFLINE" in msg and "local model directory" in msg
    assert connections == []  # offline means offline: not one connection
    assert NO_BACKOFF not in proc.stderr


def test_resolve_unreachable_hub_fails_fast(tmp_path):
    """Online mode, but the endpoint refuses connections: a clear message, no retry loop."""
    proc = _resolve_in_subprocess("biocheck-test/no-such-model", {"HF_ENDPOINT": "http://127.0.0.1:9"}, tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "could not be reached" in proc.stdout and "HF_HUB_OFFLINE=1" in proc.stdout
    assert NO_BACKOFF not in proc.stderr and "Traceback" not in proc.stderr


def test_resolve_hub_that_hangs_up_is_a_clear_error(tmp_path, hanging_up_hub):
    """The connection opens but the server drops it (a proxy, a firewall): one clear line, not a traceback."""
    endpoint, connections = hanging_up_hub
    proc = _resolve_in_subprocess("biocheck-test/no-such-model", {"HF_ENDPOINT": endpoint}, tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "could not be reached" in proc.stdout and "HF_HUB_OFFLINE=1" in proc.stdout
    assert "Traceback" not in proc.stderr and NO_BACKOFF not in proc.stderr
    assert 1 <= len(connections) <= 2  # the client may re-send once on a dropped connection; a backoff loop makes 6


def test_resolve_invalid_hub_id(tmp_path):
    proc = _resolve_in_subprocess("not a valid id!!", {"HF_HUB_OFFLINE": "1"}, tmp_path)
    assert proc.returncode == 3 and "not a valid Hugging Face model id" in proc.stdout
