"""TransformersJudge's set-up rules and errors (what, where, how to fix), on the session's tiny model."""

from __future__ import annotations

import copy

import pytest

from biocheck.evidence.types import Article
from biocheck.rewards.judge import JudgeError, TransformersJudge

CLAIM = "Vitamin D supplementation prevents hip fractures."
PAPER = Article(pmid="1", title="Vitamin D trial", abstract="Vitamin D supplementation reduced hip fractures.",
                source="corpus:test")


@pytest.fixture(scope="module")
def loaded(tiny_model):
    from biocheck.llm.load import load_causal_lm

    model, tok, _ = load_causal_lm(tiny_model, "cpu")
    return model, tok


def test_batch_size_must_be_positive():
    with pytest.raises(ValueError, match=r"^judge batch_size=0: must be >= 1$"):
        TransformersJudge("not/loaded", batch_size=0)  # checked before anything is loaded


def test_a_model_path_spec_and_fingerprint(tiny_model):
    from biocheck.llm.load import model_fingerprint

    j = TransformersJudge(f"transformers:{tiny_model}", batch_size=1)
    assert j.spec == f"transformers:{tiny_model}" and j.path == tiny_model and j.batch_size == 1
    assert j.fingerprint() == model_fingerprint(tiny_model)
    missing = tiny_model.parent / "missing"
    with pytest.raises(JudgeError, match=rf"^{missing}: no such model directory"):
        TransformersJudge(str(missing))


def test_a_folder_without_a_model_says_it_is_not_one(tmp_path):
    with pytest.raises(JudgeError, match=rf"^transformers:{tmp_path}: {tmp_path}: not a model folder \(no config"):
        TransformersJudge(str(tmp_path))


def test_a_loaded_model_needs_its_tokenizer_and_is_named_after_it(loaded, monkeypatch):
    model, tok = loaded
    with pytest.raises(JudgeError, match=r"^TransformersJudge: a loaded model needs its tokenizer$"):
        TransformersJudge(model)
    assert TransformersJudge(model, tok).spec == f"transformers:{model.name_or_path}"
    monkeypatch.setattr(model, "name_or_path", "")
    assert TransformersJudge(model, tok).spec == f"transformers:{type(model).__name__}"


def test_tokenizer_requirements(loaded):
    model, tok = loaded
    bare = copy.deepcopy(tok)
    bare.chat_template = None
    with pytest.raises(JudgeError, match=r"^transformers:.*: the tokenizer has no chat template \(an instruct/chat "
                                         r"model is needed\)$"):
        TransformersJudge(model, bare)
    no_pad = copy.deepcopy(tok)
    no_pad.pad_token = None
    assert no_pad.eos_token_id is not None and TransformersJudge(model, no_pad).pad_id == no_pad.eos_token_id
    assert TransformersJudge(model, tok).pad_id == tok.pad_token_id
    neither = copy.deepcopy(no_pad)
    neither.eos_token = None
    with pytest.raises(JudgeError, match=r"^transformers:.*: the tokenizer has neither a pad nor an eos token$"):
        TransformersJudge(model, neither)


def test_a_prompt_longer_than_the_model_handles_is_refused(loaded, monkeypatch):
    model, tok = loaded
    n = len(TransformersJudge(model, tok).prompt_ids(CLAIM, PAPER))
    monkeypatch.setattr(model.config, "max_position_embeddings", n + 32)  # 32 positions left for the answer: fits
    assert len(TransformersJudge(model, tok).prompt_ids(CLAIM, PAPER)) == n
    monkeypatch.setattr(model.config, "max_position_embeddings", n + 31)
    short = TransformersJudge(model, tok)
    assert short.max_positions == n + 31
    with pytest.raises(JudgeError, match=rf"^transformers:.*: a judge prompt is {n} tokens but the model handles "
                                         rf"{n + 31} positions; lower max_abstract_chars$"):
        short.prompt_ids(CLAIM, PAPER)
    monkeypatch.setattr(model.config, "max_position_embeddings", 0)  # unknown: no limit
    assert TransformersJudge(model, tok).max_positions is None


def test_scoring_runs_in_eval_mode_and_restores_training_mode(loaded):
    model, tok = loaded
    j = TransformersJudge(model, tok, batch_size=2)
    modes = []
    hook = model.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    model.train()
    try:
        j.score([(CLAIM, PAPER)] * 3)
        assert modes == [False, False] and model.training  # two batches without dropout, then training again
        model.eval()
        j.score([(CLAIM, PAPER)])
        assert not model.training
    finally:
        hook.remove()
        model.eval()


def test_weights_fingerprint_follows_the_weights(loaded):
    import torch

    model, tok = loaded
    clone = copy.deepcopy(model)
    before = TransformersJudge(clone, tok).fingerprint()
    assert TransformersJudge(copy.deepcopy(model), tok).fingerprint() == before
    with torch.no_grad():
        next(clone.parameters()).view(-1)[0] += 1.0
    assert TransformersJudge(clone, tok).fingerprint() != before
