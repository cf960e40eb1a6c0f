"""`biocheck model init`: a tiny, random Qwen3-architecture causal LM with a locally trained tokenizer.

Nothing is downloaded. The build is deterministic: the same seed and the same corpus give byte-identical
files (weights, config, tokenizer, chat template). Output directory (replaced as a whole, never half-written):
  config.json, generation_config.json, model.safetensors      `Qwen3ForCausalLM` (tied embeddings)
  tokenizer.json, tokenizer_config.json, chat_template.jinja  byte-level BPE + TRL's `qwen3_5_nothink` template
  biocheck_model.json                                         the build settings and input checksums

The tokenizer is a byte-level BPE (Qwen2-style pre-tokenisation, so every byte string is encodable) trained on
the corpus titles and abstracts plus the agent's prompt files and the chat scaffolding, so prompt words and the
tool-call syntax tokenise into few pieces. The chat template is read verbatim from the installed TRL package:
TRL recognises templates by exact text, which is what makes `add_response_schema` / `parse_response` and
GRPO's tool calling work with this model.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from biocheck.base_model.chat import check_tool_round_trip, example_search_tool, trl_chat_template
from biocheck.base_model.output import INFO_FILE, OUTPUT, quiet_progress, remove_stale_builds, sha256_file
from biocheck.base_model.output import normalise_permissions as _normalise_permissions  # a seam the tests patch
from biocheck.bounds import Count
from biocheck.io import InputError, write_json_atomic
from biocheck.outputs import output_dir

log = logging.getLogger(__name__)

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
# Added as ordinary (non-special) tokens, as Qwen does: they survive `skip_special_tokens=True`.
CONTROL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")
DEFAULT_TEMPLATE = "qwen3_5_nothink"
WEIGHTS_FILE = "model.safetensors"
# Qwen2/Qwen3 pre-tokenisation: contractions, letter runs, single digits, punctuation runs, whitespace.
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass
class TinyModelConfig:
    out_dir: Path = Path("models/base")
    corpus: Path = Path("data/prepared/corpus.jsonl")  # JSON lines with title + abstract (id or doc_id)
    seed: int = 0
    # tokenizer
    vocab_size: Count = 4096  # target size including special/added tokens (smaller if the corpus runs out of merges)
    max_docs: Count | None = 2000  # corpus documents used to train the tokenizer (first N lines; None = all)
    min_frequency: Count = 2  # a merge needs at least this many occurrences
    prompt_repeats: Count = 100  # weight of the prompt files + chat scaffolding in tokenizer training (x copies)
    chat_template: str = DEFAULT_TEMPLATE  # name of a template shipped in trl/chat_templates/ (used verbatim)
    # model (Qwen3Config)
    hidden_size: Count = 64
    intermediate_size: Count = 192
    num_hidden_layers: Count = 2
    num_attention_heads: Count = 4
    num_key_value_heads: Count = 2
    head_dim: Count = 16
    max_position_embeddings: Count = 16384  # 5 searches x 5 abstracts + the report fit comfortably
    rope_theta: float = 1_000_000.0
    initializer_range: float = 0.02

    def __post_init__(self) -> None:
        self.out_dir, self.corpus = Path(self.out_dir), Path(self.corpus)
        if self.vocab_size < 512:
            raise ValueError(f"tiny.vocab_size={self.vocab_size}: needs at least 512 (256 bytes + merges + tokens)")
        if self.num_key_value_heads < 1 or self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"tiny.num_attention_heads={self.num_attention_heads} must be a multiple of "
                             f"tiny.num_key_value_heads={self.num_key_value_heads}")


# --------------------------------------------------------------------------------------------------- inputs


def iter_corpus_texts(path: Path, max_docs: int | None) -> Iterator[str]:
    """Title + abstract of the first `max_docs` documents of a corpus JSONL (`id` or SciFact's `doc_id`)."""
    if not path.is_file():
        raise InputError(f"{path}: no such corpus file (run `biocheck data prepare` first, or set model.corpus).")
    n = 0
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            if max_docs is not None and n >= max_docs:
                break
            try:
                doc = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{lineno}: not valid JSON ({e.msg}).") from None
            if not isinstance(doc, dict) or ("id" not in doc and "doc_id" not in doc):
                raise InputError(f"{path}:{lineno}: expected an object with 'id' (or 'doc_id'), 'title', 'abstract'.")
            abstract = doc.get("abstract") or []
            if isinstance(abstract, str):
                abstract = [abstract]
            yield "\n".join([str(doc.get("title") or ""), " ".join(str(s) for s in abstract)])
            n += 1
    if n == 0:
        raise InputError(f"{path}: the corpus has no documents to train the tokenizer on.")


def scaffolding_texts(chat_template: str) -> list[str]:
    """Example conversations rendered with the chat template: the tool block, a tool call, a tool result."""
    from transformers.utils.chat_template_utils import render_jinja_template

    query = '("vitamin D" OR cholecalciferol) AND (fractur* OR "bone density") AND elderly[tiab]'
    messages = [
        {"role": "system", "content": "You are BioCheck, a biomedical fact-checker."},
        {"role": "user", "content": "Claim: Vitamin D supplements prevent fractures in older adults."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "search_pubmed", "arguments": {"query": query}}},
        ]},
        {"role": "tool", "tool_call_id": "call_0", "name": "search_pubmed",
         "content": "PMID: 12345678\nTitle: Vitamin D and fractures.\nAbstract: A randomised trial."},
        {"role": "assistant", "content": "## Conclusion\nNOT ENOUGH INFORMATION"},
    ]
    texts = []
    for tools in ([example_search_tool()], None):
        rendered, _ = render_jinja_template(conversations=[messages], tools=tools, chat_template=chat_template,
                                            add_generation_prompt=False)
        texts.append(rendered[0])
        rendered, _ = render_jinja_template(conversations=[messages[:2]], tools=tools, chat_template=chat_template,
                                            add_generation_prompt=True)
        texts.append(rendered[0])
    return texts


# ------------------------------------------------------------------------------------------------ tokenizer


def train_tokenizer(cfg: TinyModelConfig, chat_template: str, prompts: Sequence[str] = ()):
    """Train the byte-level BPE and wrap it as a `PreTrainedTokenizerFast` carrying `chat_template`; `prompts`
    (the agent's prompt texts, `biocheck.agent.prompts.prompt_texts()`) are repeated into the training text so
    the words the model reads in every episode tokenise well."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size - len(CONTROL_TOKENS),
        min_frequency=cfg.min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    extra = list(prompts) + scaffolding_texts(chat_template)

    def texts() -> Iterator[str]:
        yield from iter_corpus_texts(cfg.corpus, cfg.max_docs)
        for _ in range(cfg.prompt_repeats):
            yield from extra

    tok.train_from_iterator(texts(), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in CONTROL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        model_max_length=cfg.max_position_embeddings,
        chat_template=chat_template,
        clean_up_tokenization_spaces=False,
    )


def check_tokenizer(tokenizer) -> None:
    """Fail loudly if the tokenizer/template pair would not work with TRL's tool calling."""
    for t in SPECIAL_TOKENS + CONTROL_TOKENS:
        ids = tokenizer.encode(t, add_special_tokens=False)
        if len(ids) != 1:
            raise RuntimeError(f"tokenizer: {t!r} encodes to {ids}, expected a single id")
    check_tool_round_trip(tokenizer)


# ----------------------------------------------------------------------------------------------------- build


def make_model(cfg: TinyModelConfig, tokenizer):
    """The randomly initialised `Qwen3ForCausalLM` (deterministic in `cfg.seed`)."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    eos, pad = tokenizer.convert_tokens_to_ids(IM_END), tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        initializer_range=cfg.initializer_range,
        tie_word_embeddings=True,
        bos_token_id=pad,
        eos_token_id=eos,
        pad_token_id=pad,
        use_cache=True,
    )
    with torch.random.fork_rng(devices=[]):  # seeded init without touching the caller's RNG state
        torch.manual_seed(cfg.seed)
        model = Qwen3ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad)
    return model


def build_tiny_model(cfg: TinyModelConfig, prompts: Sequence[str] = ()) -> dict[str, Any]:
    """Build tokenizer + model into `cfg.out_dir` (atomically); `prompts`: see `train_tokenizer`. Returns stats:
    params, vocab, seconds, sha256."""
    t0 = time.perf_counter()
    template = trl_chat_template(cfg.chat_template)
    tokenizer = train_tokenizer(cfg, template, prompts)
    check_tokenizer(tokenizer)
    model = make_model(cfg, tokenizer)
    n_params = sum(p.numel() for p in model.parameters())
    remove_stale_builds(cfg.out_dir)
    with output_dir(cfg.out_dir, *OUTPUT) as tmp, quiet_progress():
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        info = {
            "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()
                       if k not in ("out_dir", "corpus")},
            "corpus_sha256": sha256_file(cfg.corpus),
            "params": n_params,
            "vocab": len(tokenizer),
        }
        write_json_atomic(tmp / INFO_FILE, info, sort_keys=True)
        weights_sha = sha256_file(tmp / WEIGHTS_FILE)
        _normalise_permissions(tmp)
    stats = {
        "params": n_params,
        "vocab": len(tokenizer),
        "seconds": round(time.perf_counter() - t0, 2),
        "sha256": weights_sha,
        "out_dir": str(cfg.out_dir),
    }
    log.info("tiny model: %d params, vocab %d, %.1f s -> %s", n_params, len(tokenizer), stats["seconds"], cfg.out_dir)
    return stats
