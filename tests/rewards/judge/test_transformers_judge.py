"""TransformersJudge details pinned by mutation testing: answer tokens, chat-template arguments, both padding paths."""

from __future__ import annotations

import logging

import pytest

from biocheck.evidence.types import Article
from biocheck.rewards.judge import JudgeError, TransformersJudge
from biocheck.rewards.judge.base import ANSWER_WORDS, KEYS, render_prompt
from biocheck.rewards.judge.transformers_judge import _has_per_row_logits_to_keep, answer_continuations

CLAIM = "Vitamin D supplementation prevents hip fractures."
PAPER = Article(pmid="1", title="Vitamin D trial", abstract="Vitamin D supplementation reduced hip fractures.",
                source="corpus:test")
BOS = 1


class FakeTok:
    """A character tokenizer whose text-initial character gets its own id (like a word-start marker), so a word
    encoded alone differs from the same word after the header; `add_special_tokens` (default on) prepends BOS."""

    chat_template = "fake"
    pad_token_id = 0
    eos_token_id = 0

    def __init__(self, encode=None):
        self.encode = encode or (lambda text: [ord(text[0]) + 1000] + [ord(c) for c in text[1:]])
        self.calls: list[tuple[list, dict]] = []

    def __call__(self, text, add_special_tokens=True):
        ids = list(self.encode(text))
        return {"input_ids": ([BOS] if add_special_tokens is not False else []) + ids}

    def apply_chat_template(self, messages, **kw):
        self.calls.append((messages, kw))
        text = f"U:{messages[0]['content']}" + ("|A:" if kw["add_generation_prompt"] else "")
        if not kw["tokenize"]:
            return text
        ids = self(text, add_special_tokens=False)["input_ids"]
        return {"input_ids": ids} if kw.get("return_dict") else ids


def in_context(word):
    return [ord(c) for c in word]


def alone(word):
    return [ord(word[0]) + 1000] + [ord(c) for c in word[1:]]


@pytest.fixture(scope="module")
def loaded(tiny_model):
    from biocheck.llm.load import load_causal_lm

    model, tok, _ = load_causal_lm(tiny_model, "cpu")
    return model, tok


def test_answer_continuations_follow_the_generation_header_without_special_tokens():
    tok = FakeTok()
    assert answer_continuations(tok) == {k: in_context(ANSWER_WORDS[k]) for k in KEYS}
    assert tok.calls == [([{"role": "user", "content": "x"}],
                          {"add_generation_prompt": True, "tokenize": False, "enable_thinking": False})]


def test_a_word_merged_with_the_header_falls_back_to_the_word_alone():
    header = "U:x|A:"

    def merging(text):  # the header's last character and the word's first merge into one token (id 5)
        if text.startswith(header) and len(text) > len(header):
            return [ord(c) for c in header[:-1]] + [5] + [ord(c) for c in text[len(header) + 1:]]
        return [ord(text[0]) + 1000] + [ord(c) for c in text[1:]]

    assert answer_continuations(FakeTok(merging)) == {k: alone(ANSWER_WORDS[k]) for k in KEYS}

    def swallowing(text):  # the word vanishes after the header: exactly the header's ids
        if text.startswith(header):
            return [ord(c) for c in header]
        return [ord(text[0]) + 1000] + [ord(c) for c in text[1:]]

    assert answer_continuations(FakeTok(swallowing)) == {k: alone(ANSWER_WORDS[k]) for k in KEYS}


def test_a_word_encoded_to_no_tokens_is_an_error_naming_it():
    word = ANSWER_WORDS[KEYS[0]]
    tok = FakeTok(lambda text: [ord(c) for c in text.removesuffix(word)])  # the word encodes to nothing
    with pytest.raises(JudgeError, match=rf"^the tokenizer encodes {ANSWER_WORDS[KEYS[0]]!r} to no tokens$"):
        answer_continuations(tok)


def test_a_shared_first_token_warns_and_scores_sequences(loaded, caplog):
    model, _ = loaded
    with caplog.at_level(logging.WARNING, logger="biocheck.rewards.judge.transformers_judge"):
        j = TransformersJudge(model, FakeTok())
    assert j.mode == "first_token" and not caplog.records

    def shared(text):  # every label word starts with the same token (7) after the header
        ids = [ord(c) for c in text]
        return ids[:6] + [7] + ids[7:] if len(ids) > 6 else ids

    with caplog.at_level(logging.WARNING, logger="biocheck.rewards.judge.transformers_judge"):
        j = TransformersJudge(model, FakeTok(shared))
    assert j.mode == "sequence" and "share a first token" in caplog.text


def test_a_tokenizer_without_a_chat_template_attribute_is_refused(loaded):
    model, _ = loaded

    class NoTemplate(FakeTok):
        chat_template = property(lambda self: (_ for _ in ()).throw(AttributeError("chat_template")))

    with pytest.raises(JudgeError, match=r"the tokenizer has no chat template"):
        TransformersJudge(model, NoTemplate())


def test_a_model_without_a_name_or_a_position_limit(loaded, monkeypatch):
    import torch

    model, tok = loaded

    class Bare(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.config = inner, type("Cfg", (), {})()

    j = TransformersJudge(Bare(model), tok)
    assert j.spec == "transformers:Bare" and j.max_positions is None


def test_prompt_ids_use_the_tokenized_chat_template_and_the_abstract_limit(loaded, monkeypatch):
    model, tok = loaded
    j = TransformersJudge(model, tok, max_abstract_chars=12)
    calls = []
    real = tok.apply_chat_template

    def recording(messages, **kw):
        calls.append((messages, kw))
        return real(messages, **kw)

    monkeypatch.setattr(tok, "apply_chat_template", recording)
    ids = j.prompt_ids(CLAIM, PAPER)
    content = render_prompt(CLAIM, PAPER, 12)
    assert calls == [([{"role": "user", "content": content}],
                      {"add_generation_prompt": True, "tokenize": True, "enable_thinking": False, "return_dict": True})]
    assert ids == list(real([{"role": "user", "content": content}], add_generation_prompt=True, tokenize=True,
                            enable_thinking=False, return_dict=True)["input_ids"])
    monkeypatch.setattr(tok, "apply_chat_template", lambda messages, **kw: {"input_ids": [ids, [9, 9]]})
    assert j.prompt_ids(CLAIM, PAPER) == ids  # a batched [[...]] encoding: its one row


def test_left_padded_path_scores_as_the_right_padded_one(loaded):
    model, tok = loaded
    short = Article(pmid="2", title="T", abstract="Short.", source="corpus:test")
    pairs = [(CLAIM, PAPER), ("Short claim.", short), (CLAIM + " Really.", PAPER)]
    for mode in ("first_token", "sequence"):
        j = TransformersJudge(model, tok, batch_size=3, mode=mode)
        right = j.score(pairs)
        j._per_row_keep = False  # what an older transformers (no per-row logits_to_keep) gets
        left = j.score(pairs)
        alone = [j.score([p])[0] for p in pairs]
        for a, b, c in zip(right, left, alone, strict=True):
            for k in KEYS:
                assert a[k] == pytest.approx(b[k], abs=1e-6) and b[k] == pytest.approx(c[k], abs=1e-6)



def _batch_shapes(model, judge, pairs) -> list[tuple[int, ...]]:
    """The input_ids shape of every forward pass the judge makes while scoring `pairs`."""
    shapes: list[tuple[int, ...]] = []
    hook = model.register_forward_pre_hook(lambda m, a, kw: shapes.append(tuple(kw["input_ids"].shape)),
                                           with_kwargs=True)
    try:
        judge.score(pairs)
    finally:
        hook.remove()
    return shapes

def test_prompts_are_batched_by_length_eight_at_a_time_by_default(loaded):
    model, tok = loaded
    j = TransformersJudge(model, tok)
    short = Article(pmid="2", title="T", abstract="Short.", source="corpus:test")
    pairs = [(CLAIM, PAPER)] * 4 + [("Short claim.", short)] * 5  # 9 prompts, long ones first
    n_short = len(j.prompt_ids("Short claim.", short))
    widths = _batch_shapes(model, j, pairs)
    assert widths[0] == (8, len(j.prompt_ids(CLAIM, PAPER))) and len(widths) == 2
    widths = _batch_shapes(model, TransformersJudge(model, tok, batch_size=5), pairs)
    assert widths[0] == (5, n_short)  # the five short prompts go together, unpadded


def test_per_row_logits_to_keep_is_detected_from_transformers(monkeypatch):
    import transformers.modeling_utils as mu

    assert _has_per_row_logits_to_keep() == hasattr(mu, "slice_logits_to_keep")
    monkeypatch.setattr(mu, "slice_logits_to_keep", object(), raising=False)
    assert _has_per_row_logits_to_keep() is True
    monkeypatch.delattr(mu, "slice_logits_to_keep")
    assert _has_per_row_logits_to_keep() is False


def test_a_model_path_passes_its_dtype(tiny_model):
    import torch

    j = TransformersJudge(str(tiny_model), device="cpu", dtype="float64")
    assert next(j.model.parameters()).dtype == torch.float64


def test_left_padding_keeps_each_rows_own_positions_for_absolute_position_embeddings(loaded):
    """GPT-2 adds an embedding per absolute position (unlike RoPE): a left-padded row must start at position 0."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    _, tok = loaded
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tok), n_positions=1024, n_embd=32, n_layer=1, n_head=2)
    gpt2 = GPT2LMHeadModel(config).eval()
    short = Article(pmid="2", title="T", abstract="Short.", source="corpus:test")
    pairs = [(CLAIM, PAPER), ("Short claim.", short)]
    for mode in ("first_token", "sequence"):
        j = TransformersJudge(gpt2, tok, batch_size=2, mode=mode)
        right = j.score(pairs)  # right padding: every row starts at position 0
        j._per_row_keep = False  # the older-transformers path: left padding, a mask and explicit positions
        together, alone = j.score(pairs), [j.score([p])[0] for p in pairs]
        for a, b, c in zip(right, together, alone, strict=True):
            assert all(a[k] == pytest.approx(b[k], abs=1e-9) and b[k] == pytest.approx(c[k], abs=1e-9) for k in KEYS)


def test_every_input_goes_to_the_models_device_and_only_the_needed_logits_are_asked_for():
    """A stub model on the `meta` device (no GPU needed) records what the judge hands it."""
    import torch

    class Stub(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.empty(1, device="meta"))
            self.config = type("Cfg", (), {"max_position_embeddings": 4096})()
            self.calls: list[dict] = []

        def forward(self, input_ids, logits_to_keep, **kw):
            self.calls.append({"input_ids": input_ids, "logits_to_keep": logits_to_keep, **kw})
            n = logits_to_keep if isinstance(logits_to_keep, int) else logits_to_keep.shape[1]
            return type("Out", (), {"logits": torch.zeros(input_ids.shape[0], n, 2000)})()

    stub = Stub()
    j = TransformersJudge(stub, FakeTok(), batch_size=2)
    assert j.device == torch.device("meta")
    j.score([(CLAIM, PAPER), ("Short claim.", PAPER)])
    j._per_row_keep = False
    j.score([(CLAIM, PAPER), ("Short claim.", PAPER)])
    right, left = stub.calls
    assert right["input_ids"].device.type == "meta" and right["logits_to_keep"].device.type == "meta"
    assert {k: v.device.type for k, v in left.items() if k != "logits_to_keep"} == {
        "input_ids": "meta", "attention_mask": "meta", "position_ids": "meta"}
    assert left["logits_to_keep"] == 1  # one position per row, not the whole vocabulary for every position
