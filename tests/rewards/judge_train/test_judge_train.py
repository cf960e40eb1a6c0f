"""The trained evidence judge: pairs from SciFact rationales, the head recipe, its metrics and its errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from biocheck.data.schema import ClaimRecord, CorpusDoc, GoldEvidence
from biocheck.io import InputError
from biocheck.outputs import MARK_FILE
from biocheck.params import section
from biocheck.rewards.judge_train import train as train_mod
from biocheck.rewards.judge_train.evaluate import expected_calibration_error, score_metrics
from biocheck.rewards.judge_train.pairs import (
    JudgeDataError,
    build_pairs,
    claim_pairs,
    label_counts,
    read_claims,
    read_corpus,
)
from biocheck.rewards.judge_train.train import JudgeTrainConfig, train_judge


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """data/prepared from a synthetic release through the real `prepare` (train, val and test claims)."""
    from biocheck.data.prepare import PrepareConfig, build, load_raw, write
    from tests.helpers.builders import write_release

    root = tmp_path_factory.mktemp("judge_data")
    full, corpus = load_raw(write_release(root / "raw", scifact_train=36, scifact_dev=12, healthfc=6))
    cfg = PrepareConfig(out_dir=root / "prepared", metrics_path=None)
    write(build(full, corpus, cfg), cfg, {})
    return root / "prepared"


def _doc(i: int, n: int = 3) -> CorpusDoc:
    return CorpusDoc(id=str(i), title=f"Study {i}", abstract=[f"Sentence {k} of study {i}." for k in range(n)])


def _claim(cid: str, label: str, evidence: dict[str, list[int]], cited: list[str], split: str = "train"):
    return ClaimRecord(id=cid, dataset="scifact", split=split, claim=f"claim {cid}", label=label,
                       evidence=[GoldEvidence(doc_id=d, sentences=s, label=label) for d, s in evidence.items()],
                       cited_doc_ids=cited)


def test_claim_pairs_labels_rationale_cited_and_bm25_documents():
    corpus = {str(i): _doc(i) for i in range(1, 6)}
    c = _claim("7", "REFUTED", {"1": [2]}, ["1", "2"])
    pairs = claim_pairs(c, corpus, "abstract", bm25=["1", "2", "3", "4"], bm25_per_claim=1)
    assert [(p.doc_id, p.label, p.source) for p in pairs] == [
        ("1", "REFUTED", "rationale"), ("2", "NEI", "cited"), ("3", "NEI", "bm25")]
    sentences = claim_pairs(c, corpus, "sentence")
    labelled = {(p.doc_id, p.text): p.label for p in sentences}
    assert labelled[("1", "Sentence 2 of study 1.")] == "REFUTED"
    assert labelled[("1", "Sentence 0 of study 1.")] == "NEI"  # a non-rationale sentence of the rationale doc
    assert {labelled[("2", f"Sentence {k} of study 2.")] for k in range(3)} == {"NEI"}
    assert len(sentences) == 6


def test_build_pairs_balanced_seeded_and_only_train_claims(prepared):
    corpus = read_corpus(prepared)
    train = read_claims(prepared, "train")
    held_out = {c.id for s in ("val", "test") for c in read_claims(prepared, s)}
    assert train and held_out
    pairs = build_pairs(train, corpus, bm25_per_claim=1, seed=3)
    counts = label_counts(pairs)
    assert len(set(counts.values())) == 1 and counts["NEI"] > 0  # balanced over the three labels
    assert {p.claim_id for p in pairs} <= {c.id for c in train}
    assert not {p.claim_id for p in pairs} & held_out
    assert pairs == build_pairs(train, corpus, bm25_per_claim=1, seed=3)
    assert pairs != build_pairs(train, corpus, bm25_per_claim=1, seed=4)
    assert len(build_pairs(train, corpus, max_per_label=2, seed=3)) == 6


def test_judge_balance_false_keeps_the_datasets_own_label_mix_under_the_cap(prepared, tiny_model, tmp_path):
    corpus, train = read_corpus(prepared), read_claims(prepared, "train")
    natural = label_counts(build_pairs(train, corpus, balance=False, seed=0))
    assert len(set(natural.values())) > 1  # the fixture's labels are not balanced to begin with
    cap = sorted(natural.values())[1]  # caps the largest label only
    cfg = JudgeTrainConfig(base=tiny_model, prepared_dir=prepared, out_dir=tmp_path / "judge", recipe="align",
                           metrics_path=None, layer=1, eval_max_pairs=4, progress=False, balance=False,
                           max_pairs_per_label=cap)
    stats = train_judge(cfg)
    assert stats["pairs"]["train"] == {k: min(v, cap) for k, v in natural.items()}
    assert stats["config"]["balance"] is False


def test_build_pairs_refuses_val_or_test_claims(prepared):
    corpus = read_corpus(prepared)
    leaking = read_claims(prepared, "train") + read_claims(prepared, "val")[:1]
    with pytest.raises(JudgeDataError, match="val"):
        build_pairs(leaking, corpus)


def test_score_metrics_match_scikit_learn():
    from sklearn.metrics import accuracy_score, f1_score, recall_score

    rng = np.random.default_rng(0)
    keys = ("SUPPORTED", "REFUTED", "NEI")
    gold = [keys[i] for i in rng.integers(0, 3, 60)]
    raw = rng.dirichlet(np.ones(4), 60)[:, :3]  # three answer tokens + the rest of the vocabulary
    scores = [dict(zip(keys, map(float, row), strict=True)) for row in raw]
    pred = [keys[int(np.argmax(row))] for row in raw]
    m = score_metrics(gold, scores)
    assert m["accuracy"] == pytest.approx(accuracy_score(gold, pred))
    assert m["macro_f1"] == pytest.approx(f1_score(gold, pred, labels=list(keys), average="macro", zero_division=0))
    for k, r in zip(keys, recall_score(gold, pred, labels=list(keys), average=None, zero_division=0), strict=True):
        assert m["recall"][k] == pytest.approx(r)
    assert m["above_threshold"] == pytest.approx(np.mean(raw.max(1) > 0.5))
    assert m["majority_accuracy"] == max(gold.count(k) for k in keys) / 60


def test_expected_calibration_error_by_hand():
    # bin (0.2, 0.3]: conf 0.25, acc 0 -> 0.25; bin (0.8, 0.9]: conf 0.9 both, acc 0.5 -> 0.4; weights 1/3, 2/3
    assert expected_calibration_error([0.25, 0.9, 0.9], [False, True, False]) == pytest.approx(0.25 / 3 + 0.4 * 2 / 3)
    assert expected_calibration_error([1.0, 1.0], [True, True]) == 0.0


def test_train_judge_tiny_model_writes_a_judge_the_protocol_loads(prepared, tiny_model, tmp_path, monkeypatch):
    from biocheck.rewards.judge import TransformersJudge
    from biocheck.rewards.judge_train.evaluate import evaluate_judge

    seen = []
    real = train_mod.build_pairs

    def spy(claims, *args, **kwargs):
        seen.append((kwargs.get("split", "train"), {c.split for c in claims}))
        return real(claims, *args, **kwargs)

    monkeypatch.setattr(train_mod, "build_pairs", spy)
    cfg = JudgeTrainConfig(base=tiny_model, prepared_dir=prepared, out_dir=tmp_path / "judge",
                           metrics_path=tmp_path / "metrics" / "judge.json", steps=150, folds=2, progress=False)
    stats = train_judge(cfg)
    assert seen[0] == ("train", {"train"})  # the training pairs come from train claims only
    assert stats["loss"]["last"] < stats["loss"]["first"]
    assert 1 <= stats["layer"] <= stats["layers"]
    metrics = json.loads((tmp_path / "metrics" / "judge.json").read_text())
    assert metrics["accuracy"] == stats["test"]["accuracy"] and 0 <= metrics["ece"] <= 1
    assert metrics["n_test"] == sum(stats["pairs"]["test"].values())

    judge = TransformersJudge(str(cfg.out_dir), max_abstract_chars=cfg.train_max_abstract_chars)
    assert judge.model.config.num_hidden_layers == stats["layer"]
    train_pairs = real(read_claims(prepared, "train"), read_corpus(prepared), seed=cfg.seed)
    scores = judge.score([(p.claim, p.article()) for p in train_pairs])
    assert all(sum(s.values()) <= 1 + 1e-9 and min(s.values()) >= 0 for s in scores)
    # The written model reproduces the fitted head: its protocol scores give the fit's training accuracy.
    again = evaluate_judge(judge, train_pairs)
    assert again["accuracy"] == pytest.approx(stats["train"]["accuracy"])
    assert math.isclose(again["answer_mass"], stats["train"]["answer_mass"], rel_tol=1e-3)


def test_missing_prepared_data_is_one_clear_line(tmp_path):
    with pytest.raises(JudgeDataError) as e:
        train_judge(JudgeTrainConfig(prepared_dir=tmp_path / "nowhere", out_dir=tmp_path / "judge", progress=False))
    assert "\n" not in str(e.value) and "biocheck data prepare" in str(e.value)
    assert not (tmp_path / "judge").exists()


def test_no_pairs_is_one_clear_line():
    claims = [_claim("1", "SUPPORTED", {"99": [0]}, ["99"])]  # its document is not in the corpus
    with pytest.raises(JudgeDataError, match="no judge pairs") as e:
        build_pairs(claims, {"1": _doc(1)}, bm25_per_claim=0)
    assert "\n" not in str(e.value)


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="judge.level"):
        JudgeTrainConfig(level="paragraph")
    # a bound is the field's type (bounds.py), checked where params.yaml's `judge:` is read
    for key, value, message in [("layer", 0, "judge.layer must be >= 1, not 0"),
                                ("folds", 0, "judge.folds must be >= 1, not 0"),
                                ("bm25_per_claim", -1, "judge.bm25_per_claim must be >= 0, not -1")]:
        with pytest.raises(InputError) as e:
            section({"judge": {key: value}}, "judge", JudgeTrainConfig)
        assert str(e.value).endswith(message), str(e.value)


def test_fixed_layer_cuts_the_model_before_the_features(prepared, tiny_model, tmp_path):
    from biocheck.rewards.judge import TransformersJudge

    cfg = JudgeTrainConfig(base=tiny_model, prepared_dir=prepared, out_dir=tmp_path / "judge", metrics_path=None,
                           layer=1, steps=20, eval_max_pairs=5, progress=False)
    stats = train_judge(cfg)
    assert stats["layer"] == 1 and stats["cv_accuracy"] == {} and stats["test"]["n"] == 5
    assert TransformersJudge(str(cfg.out_dir)).model.config.num_hidden_layers == 1


def test_train_false_measures_the_base_zero_shot_and_writes_no_model(prepared, tiny_model, tmp_path):
    """The paper profile's judge: the base itself; the stage records how well it judges and trains nothing."""
    from biocheck.rewards.judge import TransformersJudge
    from biocheck.rewards.judge_train.evaluate import evaluate_judge

    cfg = JudgeTrainConfig(train=False, base=tiny_model, prepared_dir=prepared, out_dir=tmp_path / "judge",
                           metrics_path=tmp_path / "judge.json", eval_max_pairs=6, progress=False)
    stats = train_judge(cfg)
    # no weights to mistake for a judge (the mark says which command wrote the folder: biocheck.outputs)
    assert sorted(p.name for p in cfg.out_dir.iterdir()) == [MARK_FILE, train_mod.STATS_FILE]
    assert stats["pairs"]["train"] == {"SUPPORTED": 0, "REFUTED": 0, "NEI": 0} and stats["test"]["n"] == 6
    metrics = json.loads((tmp_path / "judge.json").read_text())
    assert metrics["trained"] == 0 and metrics["zero_shot_accuracy"] == metrics["accuracy"]
    # the numbers are the base model's own, through the judge protocol
    test = train_mod.build_pairs(read_claims(prepared, "test"), read_corpus(prepared), level="abstract",
                                 bm25_per_claim=0, balance=False, seed=0, split="test")
    import random
    sample = random.Random(0).sample(test, 6)
    again = evaluate_judge(TransformersJudge(str(tiny_model)), sample)
    assert again["accuracy"] == pytest.approx(metrics["accuracy"])


def test_judge_train_cli_writes_the_judge_and_fails_in_one_line(prepared, tiny_model, tmp_path, monkeypatch):
    import yaml
    from typer.testing import CliRunner

    from biocheck.cli import app
    from tests.helpers.paths import REPO

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BIOCHECK_TRACKING", "off")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["out_dir"] = str(prepared)
    params["judge"].update(base=str(tiny_model), steps=20, folds=2, eval_max_pairs=4)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    result = CliRunner().invoke(app, ["judge", "train", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "judge: test accuracy" in result.output and "n=4" in result.output
    assert (tmp_path / "models" / "judge" / "config.json").is_file()
    assert json.loads((tmp_path / "metrics" / "judge.json").read_text())["n_test"] == 4

    params["data"]["out_dir"] = "nowhere"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    result = CliRunner().invoke(app, ["judge", "train", "--no-progress", "--out-dir", "models/judge2"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.startswith("error:") and len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "models" / "judge2").exists()


# --- the align recipe ----------------------------------------------------------------------------------------


def test_prompt_rows_find_the_claim_and_paper_tokens_of_the_chat_prompt(tiny_model):
    from biocheck.evidence.types import Article
    from biocheck.llm.load import load_causal_lm
    from biocheck.rewards.judge.align_judge import prompt_rows

    _, tok, _ = load_causal_lm(tiny_model, "cpu", None)
    article = Article(pmid="7", title="Aspirin trial.", abstract="Aspirin lowered stroke risk in adults. It did "
                      "not change bleeding. (Funded by NIH.)")
    row = prompt_rows(tok, "Aspirin prevents strokes.", article, 6000)
    ids, claim_idx, paper_idx = row.ids, row.claim_idx, row.paper_idx
    text = lambda idx: tok.decode([ids[i] for i in idx])  # noqa: E731
    # tokens wholly inside the span: the claim's final "." may merge with the newline after it
    assert text(claim_idx).strip() in ("Aspirin prevents strokes.", "Aspirin prevents strokes")
    assert text(paper_idx).strip().startswith("Aspirin trial") and "lowered stroke risk in adults" in text(paper_idx)
    assert max(claim_idx) < min(paper_idx) < max(paper_idx) < len(ids) - 1  # the answer instruction follows
    assert row.claim == "Aspirin prevents strokes."
    assert row.sentences[0] == "Aspirin trial."  # the title; "Abstract: ..." opens the next sentence
    assert row.sentences[-3:] == ["Abstract: Aspirin lowered stroke risk in adults.", "It did not change bleeding.",
                                  "(Funded by NIH.)"]
    # each paper token is in the sentence its text comes from (a token's leading space joins the next sentence)
    assert len(row.sentence_of) == len(paper_idx) and row.sentence_of == sorted(row.sentence_of)
    for n, sentence in enumerate(row.sentences):
        words = tok.decode([ids[i] for i, m in zip(paper_idx, row.sentence_of, strict=True) if m == n]).split()
        assert words == sentence.split(), (n, words)


def _row(claim_idx, paper_idx, sentence_of, claim="X raises Y.", sentences=("A is B.", "C is D.")):
    from biocheck.rewards.judge.align_judge import Row

    return Row(list(range(40)), list(claim_idx), list(paper_idx), list(sentence_of), claim, list(sentences))


def test_alignment_features_see_a_claim_the_paper_repeats():
    import torch

    from biocheck.rewards.judge.align_judge import N_ALIGN, N_FEATURES, features

    g = torch.Generator().manual_seed(0)
    states = torch.randn(40, 16, generator=g)
    states[30:34] = states[2:6]  # the paper (20-39) repeats the claim's tokens (2-5) at 30-33
    halves = [0] * 10 + [1] * 10
    same = features(states, _row(range(2, 6), range(20, 40), halves))
    other = features(torch.randn(40, 16, generator=g), _row(range(2, 6), range(20, 40), halves))
    assert same.shape == (N_FEATURES,) and N_FEATURES > N_ALIGN
    assert same[0] == pytest.approx(1.0) and same[1] == pytest.approx(1.0)  # every claim token found exactly
    assert other[0] < 0.9
    empty = features(states, _row([], range(20, 40), halves))
    assert torch.equal(empty, torch.zeros(N_FEATURES))  # no claim tokens: no signal


def test_the_cues_come_from_the_sentences_that_match_the_claim():
    import torch

    from biocheck.rewards.judge.align_judge import N_ALIGN, features
    from biocheck.rewards.judge.cues import N_CUES, cue_features

    g = torch.Generator().manual_seed(1)
    states = torch.randn(40, 16, generator=g)
    claim = "Aspirin lowers stroke risk."
    sentences = ["Stroke was common.", "Rainfall increased sharply.", "Aspirin did not lower stroke risk."]
    of = [0] * 6 + [1] * 7 + [2] * 7  # paper tokens 20-25, 26-32, 33-39
    states[35:38] = states[2:5]  # the claim's tokens reappear in the third sentence
    states[20] = states[4]  # and one of them in the first: the second-best match; the rainfall is never read
    cues = features(states, _row(range(2, 5), range(20, 40), of, claim, sentences))[N_ALIGN:]
    assert cues.shape == (N_CUES,)
    assert torch.equal(cues, torch.tensor(cue_features(claim, [sentences[2], sentences[0]], 3, 1)))
    assert cues[1] == 1.0  # a negation in the best-matched sentences
    assert cues[3] == -1.0  # the claim's effect goes down ("lowers")
    assert cues[4] == 1.0  # "did not lower": a negated decrease (the rainfall's "increased" is not counted)
    assert cues[5] == -1.0  # so the two disagree


def test_cue_polarity_counts_direction_words_and_flips_on_negation():
    from biocheck.rewards.judge.cues import counts, cue_features
    from biocheck.text import sentence_spans, split_sentences

    assert counts("Levels did not increase; they were reduced and lower.") == (1, 1, 2)
    text = 'It rose. It fell (a lot). 3 mice died. [Methods] Mice. "Quoted" end.'
    spans = [text[a:b] for a, b in sentence_spans(text)]
    assert spans == ["It rose.", "It fell (a lot).", "3 mice died.", "[Methods] Mice.", '"Quoted" end.']
    assert split_sentences(text) == spans  # the one splitter: the judge's cues and the search tool's snippets agree
    agree = cue_features("X increases Y.", ["X increased Y in mice."], 1, 0)
    differ = cue_features("X increases Y.", ["X decreased Y in mice."], 1, 0)
    negated = cue_features("X does not increase Y.", ["X increased Y in mice."], 1, 0)
    assert (agree[3], agree[4], agree[5]) == (1.0, 1.0, 1.0)
    assert (differ[3], differ[4], differ[5]) == (1.0, -1.0, -1.0)
    assert (negated[0], negated[3], negated[5], negated[14]) == (1.0, -1.0, -1.0, 1.0)
    assert cue_features("X increases Y.", [], 0, 0)[4] == 0.0  # no sentence: no direction


def test_align_recipe_writes_a_judge_make_judge_loads_and_its_scores_reproduce_the_fit(prepared, tiny_model, tmp_path):
    from biocheck.rewards.judge import AlignJudge, make_judge
    from biocheck.rewards.judge.align_judge import HEAD_FILE
    from biocheck.rewards.judge_train.evaluate import evaluate_judge

    cfg = JudgeTrainConfig(base=tiny_model, prepared_dir=prepared, out_dir=tmp_path / "judge", recipe="align",
                           metrics_path=tmp_path / "judge.json", folds=2, progress=False)
    stats = train_judge(cfg)
    assert 1 <= stats["layer"] <= stats["layers"] and stats["l2"] > 0
    assert len(stats["cv_accuracy"]) == stats["layers"] * 4  # every layer x every L2 weight was cross-validated
    assert (cfg.out_dir / HEAD_FILE).is_file()

    judge = make_judge(f"transformers:{cfg.out_dir}", max_abstract_chars=cfg.train_max_abstract_chars)
    assert isinstance(judge, AlignJudge) and judge.model.config.num_hidden_layers == stats["layer"]
    train_pairs = build_pairs(read_claims(prepared, "train"), read_corpus(prepared), seed=cfg.seed)
    scores = judge.score([(p.claim, p.article()) for p in train_pairs])
    assert all(sum(s.values()) == pytest.approx(1.0) and min(s.values()) >= 0 for s in scores)
    # Batched through the saved, cut model, the judge gives the fit's own training predictions.
    again = evaluate_judge(judge, train_pairs)
    assert again["accuracy"] == pytest.approx(stats["train"]["accuracy"])
    assert again["ece"] == pytest.approx(stats["train"]["ece"], abs=1e-4)


def test_align_judge_fingerprint_and_prompt_hash_follow_the_head(prepared, tiny_model, tmp_path):
    from biocheck.rewards.judge import AlignJudge, TransformersJudge
    from biocheck.rewards.judge.align_judge import HEAD_FILE

    cfg = JudgeTrainConfig(base=tiny_model, prepared_dir=prepared, out_dir=tmp_path / "judge", recipe="align",
                           metrics_path=None, layer=1, eval_max_pairs=4, progress=False)
    train_judge(cfg)
    first = AlignJudge(cfg.out_dir)
    before = first.fingerprint()
    assert first.prompt_hash != TransformersJudge(str(cfg.out_dir)).prompt_hash  # another read-out, another key
    head = json.loads((cfg.out_dir / HEAD_FILE).read_text())
    head["bias"] = [b + 1.0 for b in head["bias"]]
    (cfg.out_dir / HEAD_FILE).write_text(json.dumps(head))
    assert AlignJudge(cfg.out_dir).fingerprint() != before  # the cache never mixes two heads


def test_a_broken_head_file_is_one_clear_line(prepared, tiny_model, tmp_path):
    from biocheck.rewards.judge import JudgeError, make_judge
    from biocheck.rewards.judge.align_judge import HEAD_FILE

    cfg = JudgeTrainConfig(base=tiny_model, prepared_dir=prepared, out_dir=tmp_path / "judge", recipe="align",
                           metrics_path=None, layer=1, eval_max_pairs=4, progress=False)
    train_judge(cfg)
    head = json.loads((cfg.out_dir / HEAD_FILE).read_text())
    head["weight"] = head["weight"][:2]
    (cfg.out_dir / HEAD_FILE).write_text(json.dumps(head))
    with pytest.raises(JudgeError) as e:
        make_judge(f"transformers:{cfg.out_dir}")
    assert "\n" not in str(e.value) and HEAD_FILE in str(e.value) and "biocheck judge train" in str(e.value)


def test_config_rejects_an_unknown_recipe():
    with pytest.raises(ValueError, match="judge.recipe"):
        JudgeTrainConfig(recipe="finetune")


def test_judge_train_refuses_a_wrong_out_dir_before_any_work(tmp_path, monkeypatch):
    from biocheck.io import InputError

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "thesis.tex").write_text("years of work\n")
    read = []
    monkeypatch.setattr(train_mod, "read_corpus", lambda d: read.append(d) or [])
    cfg = JudgeTrainConfig(base=tmp_path / "base", prepared_dir=tmp_path / "prepared", out_dir=folder, progress=False)
    with pytest.raises(InputError, match=r"--out-dir / judge\.out_dir.*mine: holds files that it did not write"):
        train_judge(cfg)
    assert read == [] and [p.name for p in folder.iterdir()] == ["thesis.tex"]


def test_a_sentence_judge_is_measured_on_balanced_sentence_pairs(prepared, tiny_model, tmp_path, monkeypatch):
    """It will read quotes (reward.judge_reads: quote), so its test pairs are sentences, NEI cut to the rarest."""
    seen = {}
    real = train_mod.build_pairs

    def spy(claims, *args, **kwargs):
        pairs = real(claims, *args, **kwargs)
        seen[kwargs.get("split", "train")] = (kwargs, pairs)
        return pairs

    monkeypatch.setattr(train_mod, "build_pairs", spy)
    cfg = JudgeTrainConfig(base=tiny_model, prepared_dir=prepared, out_dir=tmp_path / "judge", metrics_path=None,
                           level="sentence", layer=1, steps=20, progress=False)
    stats = train_judge(cfg)
    kwargs, test = seen["test"]
    stats_train_pairs = seen["train"][1]
    assert kwargs["level"] == "sentence" and kwargs["balance"] is True
    corpus = read_corpus(prepared)
    assert all(p.text in corpus[p.doc_id].abstract for p in test)  # one sentence each, not the abstract
    counts = stats["pairs"]["test"]
    assert len(set(counts.values())) == 1 and stats["test"]["n"] == sum(counts.values()) == len(test) > 0
    # a judge of another seed is measured on the same test pairs (its own training sample, the same test sample)
    cfg = JudgeTrainConfig(base=tiny_model, prepared_dir=prepared, out_dir=tmp_path / "judge1", metrics_path=None,
                           level="sentence", layer=1, steps=20, seed=1, progress=False)
    train_judge(cfg)
    assert seen["test"][1] == test and seen["train"][1] != stats_train_pairs
    # an abstract judge keeps the whole unbalanced test set, as before
    cfg = JudgeTrainConfig(base=tiny_model, prepared_dir=prepared, out_dir=tmp_path / "judge2", metrics_path=None,
                           layer=1, steps=20, progress=False)
    train_judge(cfg)
    assert seen["test"][0]["level"] == "abstract" and seen["test"][0]["balance"] is False


def test_same_inputs_give_the_same_judge_bytes_in_another_folder(prepared, tiny_model, tmp_path, monkeypatch):
    """models/judge and metrics/judge.json are DVC outputs hashed into dvc.lock: the same inputs in another folder
    (another machine, another speed) must give the same bytes, so no run's seconds are written (issue 49)."""
    import hashlib
    import shutil

    digests = []
    for name in ("a", "b"):
        work = tmp_path / name
        (work / "data").mkdir(parents=True)
        shutil.copytree(tiny_model, work / "models" / "base")
        (work / "data" / "prepared").symlink_to(prepared, target_is_directory=True)
        monkeypatch.chdir(work)
        stats = train_judge(JudgeTrainConfig(base=Path("models/base"), prepared_dir=Path("data/prepared"),
                                             out_dir=Path("models/judge"), metrics_path=Path("metrics/judge.json"),
                                             layer=1, steps=20, eval_max_pairs=5, progress=False))
        assert stats["seconds"] > 0  # the run's time is still reported to the caller (log, MLflow)
        files = sorted([*Path("models/judge").rglob("*"), Path("metrics/judge.json")])
        digests.append({str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files if f.is_file()})
        assert "seconds" not in json.loads(Path("metrics/judge.json").read_text())
    assert digests[0] == digests[1] and len(digests[0]) > 3
