"""The evaluation's numbers: per-system metrics, paired tests, DVC plot data and the MLflow runs.

Expected values come from scikit-learn, scipy's binomial test and hand counts, never from the code under test.
"""

from __future__ import annotations

import csv
import json
import math
import random
from collections import Counter
from pathlib import Path

import mlflow
import numpy as np
import pytest
import scipy.stats
from scipy.stats import binomtest, norm
from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, precision_recall_fscore_support

from biocheck.evaluate.compare import (
    EvalRuns,
    cost_seconds,
    mcnemar_exact,
    paired_tests,
    plot_data,
    system_metrics,
)
from biocheck.evaluate.systems.base import Prediction
from biocheck.labels import Label
from biocheck.tracking import EXPERIMENTS, flatten, git_state, tracking_uri

S, R, N = Label.SUPPORTED, Label.REFUTED, Label.NEI
ALL3 = [S.value, R.value, N.value]


def preds(system, golds, answers, dataset="scifact", report=False, **fields):
    return [Prediction(id=f"c{i}", dataset=dataset, system=system, fingerprint=f"fp-{system}", gold=g, pred=p,
                       writes_report=report, **{k: v[i] for k, v in fields.items()})
            for i, (g, p) in enumerate(zip(golds, answers, strict=True))]


def random_preds(system, n=60, seed=1, **kw):
    rnd = random.Random(seed)
    golds = [rnd.choice([S, R, N]) for _ in range(n)]
    answers = [rnd.choice([S, R, N, None]) if rnd.random() < 0.6 else g for g in golds]
    return preds(system, golds, answers, **kw)


def sk(golds, answers, labels):
    """scikit-learn's numbers; None (no label read) becomes a label outside `labels`."""
    g = [x.value for x in golds]
    p = [x.value if x is not None else "NONE" for x in answers]
    prec, rec, f1, sup = precision_recall_fscore_support(g, p, labels=labels, zero_division=0)
    return accuracy_score(g, p), prec, rec, f1, sup, confusion_matrix(g, p, labels=labels)


def test_system_metrics_match_sklearn_3way_and_2way():
    ps = random_preds("cer")
    m = system_metrics(ps, n_resamples=50, seed=0)
    assert m["label_set"] == "3way" and {k: m[k] for k in ("accuracy", "macro_f1")} == {
        k: m["3way"][k] for k in ("accuracy", "macro_f1")}
    for key, sub, labels in (("3way", m["3way"], ALL3), ("2way", m["2way"], ALL3[:2])):
        keep = [p for p in ps if p.gold.value in labels]
        acc, prec, rec, f1, sup, cm = sk([p.gold for p in keep], [p.pred for p in keep], labels)
        assert sub["n"] == len(keep), key
        assert sub["accuracy"] == pytest.approx(acc)
        assert sub["macro_precision"] == pytest.approx(prec.mean())
        assert sub["macro_recall"] == pytest.approx(rec.mean())
        assert sub["macro_f1"] == pytest.approx(f1.mean())
        for i, lab in enumerate(labels):
            assert sub["per_label"][lab] == pytest.approx({"precision": prec[i], "recall": rec[i], "f1": f1[i],
                                                           "support": sup[i]})
            assert [sub["confusion"][lab][c] for c in labels] == cm[i].tolist()
            outside = sum(p.gold.value == lab and (p.pred is None or p.pred.value not in labels) for p in keep)
            assert sub["confusion"][lab]["OTHER"] == outside
    assert m["2way"]["n"] < m["n"]  # NEI gold left out of the 2-way scores


def scipy_bca(statistic, n, resamples, seed):
    """scipy.stats.bootstrap called directly on the claim indices 0..n-1, `statistic(indices)` one resample at a
    time (not vectorized): the interval and the resampled statistic."""
    res = scipy.stats.bootstrap((np.arange(n),), statistic, n_resamples=resamples, vectorized=False, paired=True,
                                method="BCa", rng=np.random.default_rng(seed))
    return res.confidence_interval.low, res.confidence_interval.high, res.bootstrap_distribution


def test_bootstrap_intervals_are_seeded_and_bca():
    ps = random_preds("cer", n=40)
    a, b = system_metrics(ps, 200, seed=3), system_metrics(ps, 200, seed=3)
    assert a == b
    assert system_metrics(ps, 200, seed=4)["ci"] != a["ci"]
    # Independently: scipy's BCa over the claims, macro-F1 computed by sklearn for each resample.
    lo, hi, _ = scipy_bca(lambda i: sk([ps[j].gold for j in i], [ps[j].pred for j in i], ALL3)[3].mean(), 40, 200, 3)
    assert a["label_set"] == "3way" and a["ci"]["macro_f1"] == pytest.approx({"lo": lo, "hi": hi})
    # Accuracy is a proportion of claims: the exact (Clopper-Pearson) interval, never a collapsing bootstrap.
    right = sum(p.pred == p.gold for p in ps)
    ci = binomtest(right, len(ps)).proportion_ci(method="exact")
    assert a["ci"]["accuracy"] == pytest.approx({"lo": ci.low, "hi": ci.high})
    assert a["ci"]["accuracy"]["lo"] <= a["accuracy"] <= a["ci"]["accuracy"]["hi"]


def test_none_right_of_four_has_an_interval_that_does_not_collapse():
    m = system_metrics(preds("eg_grpo", [S, R, S, R], [R, S, None, S]), 500, 0)
    assert m["accuracy"] == 0.0
    assert m["ci"]["accuracy"]["lo"] == 0.0
    assert m["ci"]["accuracy"]["hi"] == pytest.approx(1 - 0.025 ** (1 / 4))  # the exact bound: 0.60
    assert m["ci"]["accuracy"]["hi"] > 0.5


def test_two_way_macro_f1_is_the_headline_on_a_set_without_nei():
    golds, answers = [S, S, R, R, S, R], [S, R, R, R, S, N]
    m = system_metrics(preds("eg_grpo", golds, answers), 50, 0)
    f1_2 = sk(golds, answers, ALL3[:2])[3].mean()
    f1_3 = sk(golds, answers, ALL3)[3].mean()
    assert m["label_set"] == "2way"
    assert m["macro_f1"] == pytest.approx(f1_2) == pytest.approx(m["2way"]["macro_f1"])
    assert m["3way"]["macro_f1"] == pytest.approx(f1_3)
    assert f1_3 < f1_2  # an NEI class with no support drags it down
    perfect = system_metrics(preds("eg_grpo", golds, golds), 50, 0)
    assert perfect["macro_f1"] == 1.0 and perfect["3way"]["macro_f1"] == pytest.approx(2 / 3)
    with_nei = system_metrics(preds("eg_grpo", [*golds, N], [*answers, N]), 50, 0)
    assert with_nei["label_set"] == "3way" and with_nei["macro_f1"] == with_nei["3way"]["macro_f1"]


def test_report_fields_and_identical_keys_across_systems():
    golds, answers = [S, R, N, S], [S, R, S, None]
    agent = preds("eg_grpo", golds, answers, report=True, eqs=[0.8, None, 0.4, None], ehr=[0.0, 0.5, None, None],
                  cited=[2, 2, 0, 0], hallucinated=[0, 1, 0, 0], parseable=[True, True, True, False],
                  searches=[2, 3, 1, 5], tokens=[100, 200, 300, 400], seconds=[1.0, 2.0, 3.0, 4.0],
                  error=[None, None, None, "llm_error: timeout"])
    label_only = preds("no_retrieval", golds, answers, parseable=[None] * 4, eqs=[0.5] * 4, ehr=[0.0] * 4)  # scored, no report
    a, b = system_metrics(agent, 20, 0), system_metrics(label_only, 20, 0)
    assert flatten(a).keys() == flatten(b).keys()
    json.dumps(a, allow_nan=False), json.dumps(b, allow_nan=False)  # plain JSON numbers for DVC
    assert a["eqs"] == pytest.approx((0.8 + 0.4) / 2) and a["eqs_n"] == 2
    # EHR over the two citing reports only; the silent ones are neither credited nor blamed, but visible:
    assert a["ehr"] == pytest.approx(0.25) and a["ehr_n"] == 2
    assert a["ehr_micro"] == pytest.approx(1 / 4) and a["ehr_micro_n"] == 4
    assert a["citing_rate"] == pytest.approx(2 / 4) and a["parse_rate"] == pytest.approx(3 / 4)
    assert a["grounded_rate"] == pytest.approx(1 / 4)  # parseable, cites, nothing invented: claim 0 only
    assert a["ci"]["eqs"]["lo"] is not None and a["ci"]["ehr"]["hi"] is not None
    assert (a["errors"], a["searches"], a["tokens"]) == (1, pytest.approx(11 / 4), pytest.approx(250))
    # the seconds are this machine's: MLflow's eval runs have them, the metric files DVC tracks do not
    assert not [k for k in flatten(a) if "seconds" in k]
    assert cost_seconds(agent) == {"seconds_total": pytest.approx(10.0), "seconds_mean": pytest.approx(2.5)}
    assert a["writes_report"] is True and b["writes_report"] is False
    for key in ("eqs", "ehr", "ehr_micro", "citing_rate", "rationale_f1"):
        assert b[key] is None, key
    assert b["parse_rate"] == pytest.approx(3 / 4)  # a label-only system: a label could be read (not from None)
    assert b["eqs_n"] == 0 and b["ci"]["eqs"] == {"lo": None, "hi": None} == b["ci"]["ehr"]


def test_a_silent_or_unparseable_report_earns_no_ehr_credit():
    golds = [S, R, S, R]
    silent = preds("eg_grpo", golds, [S, R, None, None], report=True, cited=[0, 0, 0, 0], hallucinated=[0] * 4,
                   parseable=[True, True, False, False], ehr=[None] * 4)
    m = system_metrics(silent, 50, 0)
    assert m["ehr"] is None and m["ehr_n"] == 0 and m["ehr_micro"] is None  # not 0: there is nothing to rate
    assert m["citing_rate"] == 0.0 and m["grounded_rate"] == 0.0 and m["parse_rate"] == 0.5
    honest = preds("outcome_only", golds, [S, R, S, R], report=True, cited=[1, 1, 1, 1], hallucinated=[0, 0, 0, 1],
                   parseable=[True] * 4, ehr=[0.0, 0.0, 0.0, 1.0])
    h = system_metrics(honest, 50, 0)
    assert h["grounded_rate"] == 0.75 > m["grounded_rate"]  # the metric silence cannot win
    out = paired_tests({"eg_grpo": silent, "outcome_only": honest}, n_resamples=50)["outcome_only"]
    assert out["ehr"]["diff"] is None and out["grounded_rate"]["diff"] == pytest.approx(-0.75)
    assert out["citing_rate"]["diff"] == pytest.approx(-1.0)


def test_no_supported_or_refuted_gold_keeps_every_key():
    only_nei = system_metrics(preds("fire", [N, N], [N, S]), 10, 0)
    normal = system_metrics(random_preds("fire"), 10, 0)
    assert flatten(only_nei).keys() == flatten(normal).keys()
    assert only_nei["2way"]["n"] == 0 and only_nei["2way"]["accuracy"] is None
    assert only_nei["2way"]["ci"]["macro_f1"] == {"lo": None, "hi": None}
    empty = system_metrics([], 10, 0)
    assert flatten(empty).keys() == flatten(normal).keys() and empty["n"] == 0


def test_bad_prediction_lists_are_one_clear_error():
    ps = random_preds("cer", n=3)
    with pytest.raises(ValueError, match="more than once"):
        system_metrics(ps + ps[:1], 10, 0)
    with pytest.raises(ValueError, match="mix"):
        system_metrics(ps + random_preds("fire", n=2), 10, 0)
    with pytest.raises(ValueError, match="reference system 'eg_grpo'"):
        paired_tests({"cer": ps}, n_resamples=10)


def test_mcnemar_exact_on_a_known_table():
    binom = pytest.importorskip("scipy.stats").binomtest
    expected = 2 * sum(math.comb(12, k) for k in range(3)) / 2**12  # 2 * P(X <= 2), X ~ Bin(12, 1/2)
    assert mcnemar_exact(10, 2) == pytest.approx(expected) == pytest.approx(binom(2, 12, 0.5).pvalue)
    assert mcnemar_exact(2, 10) == mcnemar_exact(10, 2)
    assert mcnemar_exact(5, 5) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(300, 250) == pytest.approx(binom(250, 550, 0.5).pvalue)  # big n: no overflow
    # The same table built from predictions: 10 claims only the reference gets right, 2 only the other.
    golds = [S] * 20
    ref = [S] * 10 + [R] * 2 + [S] * 4 + [N] * 4
    other = [R] * 10 + [S] * 2 + [S] * 4 + [None] * 4
    out = paired_tests({"eg_grpo": preds("eg_grpo", golds, ref), "cer": preds("cer", golds, other)}, n_resamples=50)
    assert out["cer"]["mcnemar"] == {"b": 10, "c": 2, "p": pytest.approx(expected)}
    # each per-claim binary rate carries its own test (accuracy's is the same table); label-only systems cite nothing
    by_metric = out["cer"]["mcnemar_by_metric"]
    assert set(by_metric) == {"accuracy", "citing_rate", "grounded_rate"} and by_metric["accuracy"] == out["cer"]["mcnemar"]
    assert by_metric["citing_rate"] == {"b": None, "c": None, "p": None}
    cites = paired_tests({"eg_grpo": preds("eg_grpo", golds, ref, report=True, cited=[1] * 7 + [0] * 13),
                          "cer": preds("cer", golds, other, report=True, cited=[0] * 5 + [1] * 15)}, n_resamples=50)
    assert cites["cer"]["mcnemar_by_metric"]["citing_rate"] == {"b": 5, "c": 13,
                                                               "p": pytest.approx(binom(5, 18, 0.5).pvalue)}


def test_paired_bootstrap_difference_interval_and_overlap():
    ref, other = random_preds("eg_grpo", n=50, seed=7), random_preds("cer", n=50, seed=7)
    rnd = random.Random(0)
    for p in ref:  # the reference is right more often
        if rnd.random() < 0.5:
            p.pred = p.gold
    other = other[5:]  # 5 claims only the reference answered
    out = paired_tests({"eg_grpo": ref, "cer": other}, n_resamples=300, seed=11)["cer"]
    assert (out["n"], out["only_reference"], out["only_other"]) == (45, 5, 0)
    common = ref[5:]
    acc = lambda ps: sum(p.pred == p.gold for p in ps) / len(ps)  # noqa: E731
    assert out["accuracy"]["diff"] == pytest.approx(acc(common) - acc(other))
    f1 = lambda ps: sk([p.gold for p in ps], [p.pred for p in ps], ALL3)[3].mean()  # noqa: E731
    assert out["macro_f1"]["diff"] == pytest.approx(f1(common) - f1(other))
    for m in ("accuracy", "macro_f1"):
        assert out[m]["lo"] <= out[m]["diff"] <= out[m]["hi"]
        assert 0.0 <= out[m]["p"] <= 1.0
    assert out["accuracy"]["diff"] > 0 and out["accuracy"]["p"] < 0.05
    assert out["accuracy"]["p"] >= 2 / 301  # not one of 300 resamples on the other side of 0: p is 2 x 1/301, not 0
    assert out["accuracy"] == pytest.approx(accuracy_bootstrap(common, other, 300, 11))
    shuffled = other[:]
    random.Random(3).shuffle(shuffled)  # pairing is by claim id: the other system's file order does not matter
    assert paired_tests({"eg_grpo": ref, "cer": shuffled}, n_resamples=300, seed=11)["cer"] == out
    again = paired_tests({"eg_grpo": ref, "cer": other}, n_resamples=300, seed=11)["cer"]
    assert again == out
    assert paired_tests({"eg_grpo": ref, "cer": other}, n_resamples=300, seed=12)["cer"]["accuracy"] != out["accuracy"]
    same = paired_tests({"eg_grpo": ref, "twin": [p.model_copy(update={"system": "twin"}) for p in ref]},
                        n_resamples=100)["twin"]
    assert same["accuracy"]["diff"] == 0 and same["accuracy"]["p"] == 1.0 and same["mcnemar"]["p"] == 1.0
    assert same["macro_f1"]["lo"] == same["macro_f1"]["hi"] == 0.0  # paired: identical answers never differ


def accuracy_bootstrap(ref, other, resamples, seed):
    """The paired bootstrap of the accuracy difference, computed independently of the code under test: claims
    paired by id (in id order), scipy's BCa interval over them; p and MDD from its resampled differences."""
    by_id = {p.id: p for p in other}
    pairs = sorted(((a.id, a, by_id[a.id]) for a in ref if a.id in by_id), key=lambda t: t[0])
    delta = np.array([(a.pred == a.gold) - (b.pred == b.gold) for _, a, b in pairs], float)
    right_a = np.array([a.pred == a.gold for _, a, _ in pairs], float)
    right_b = np.array([b.pred == b.gold for _, _, b in pairs], float)
    # each accuracy as its own sum / count, as the code does: on a discrete statistic BCa's bias term counts
    # resamples below the observed value, where one rounding (mean of differences) can flip a tie
    lo, hi, d = scipy_bca(lambda i: right_a[i].sum() / len(i) - right_b[i].sum() / len(i), len(delta), resamples, seed)
    k = np.sum(d <= 0) if delta.mean() > 0 else np.sum(d >= 0)
    beyond = (k + 1) / (len(d) + 1)  # a resampling p is never 0: (k + 1) / (R + 1)
    return {"reference": np.mean([a.pred == a.gold for _, a, _ in pairs]),
            "other": np.mean([b.pred == b.gold for _, _, b in pairs]), "diff": delta.mean(), "mean": d.mean(),
            "lo": lo, "hi": hi, "p": min(1.0, 2 * beyond), "mdd": (norm.ppf(0.975) + norm.ppf(0.8)) * d.std(ddof=1),
            "interval": "paired BCa bootstrap over claims", "n": len(pairs)}  # accuracy counts every paired claim


@pytest.mark.parametrize("seed", [0, 5])
def test_paired_bootstrap_p_value_for_a_small_difference(seed):
    golds = [S, R, N] * 8
    ref = preds("eg_grpo", golds, golds[:14] + [N] * 10)  # right on 14 + the NEI ones among the rest
    other = preds("fire", golds, [R] * 3 + golds[3:13] + [S] * 11)
    out = paired_tests({"eg_grpo": ref, "fire": other}, n_resamples=400, seed=seed)["fire"]
    expected = accuracy_bootstrap(ref, other, 400, seed)
    assert out["accuracy"] == pytest.approx(expected)
    assert 0.05 < out["accuracy"]["p"] < 1.0  # a small difference: neither certain nor impossible


def test_paired_tests_reject_mismatched_gold():
    ref = preds("eg_grpo", [S, R], [S, R])
    with pytest.raises(ValueError, match="same data"):
        paired_tests({"eg_grpo": ref, "cer": preds("cer", [S, N], [S, R])}, n_resamples=10)


def test_plot_data_files_dvc_reads(tmp_path):
    a, b = random_preds("eg_grpo", n=30, seed=2), random_preds("cer", n=30, seed=3)
    metrics = {"eg_grpo": {"scifact": system_metrics(a, 50, 0)}, "cer": {"scifact": system_metrics(b, 50, 0)}}
    plot_data(metrics, tmp_path)
    with open(tmp_path / "confusion.csv") as f:  # the reference system's matrix only: cer is a baseline
        rows = Counter((r["system"], r["dataset"], r["actual"], r["predicted"]) for r in csv.DictReader(f))
    assert rows == Counter(("eg_grpo", "scifact", p.gold.value, p.pred.value if p.pred is not None else "OTHER")
                           for p in a)
    with open(tmp_path / "scores.csv") as f:
        scores = {r["system"]: r for r in csv.DictReader(f)}
    assert set(scores) == {"eg_grpo", "cer"}
    row, m = scores["cer"], metrics["cer"]["scifact"]
    assert float(row["accuracy"]) == pytest.approx(m["accuracy"])
    assert float(row["macro_f1_lo"]) == pytest.approx(m["ci"]["macro_f1"]["lo"])
    assert float(row["accuracy_lo"]) <= float(row["accuracy"]) <= float(row["accuracy_hi"])
    no_ci = {"cer": {"scifact": system_metrics(b, 0, 0)}}  # bootstrap 0: no interval, so no bound columns
    plot_data(no_ci, tmp_path / "no_ci")
    with open(tmp_path / "no_ci" / "scores.csv") as f:
        assert list(csv.reader(f)) == [["name", "system", "dataset", "accuracy", "macro_f1"],
                                       ["cer / scifact", "cer", "scifact", str(no_ci["cer"]["scifact"]["accuracy"]),
                                        str(no_ci["cer"]["scifact"]["macro_f1"])]]
    with open(tmp_path / "no_ci" / "confusion.csv") as f:  # without eg_grpo or outcome_only: the first system's
        assert {r["system"] for r in csv.DictReader(f)} == {"cer"}


def log_runs(metrics, paired, predictions, config, profile, system_tags=None, gallery=None) -> list[str]:
    """The runs of an evaluation whose predictions are made already, driven as the stage drives them."""
    runs = EvalRuns(config, profile)
    with runs.evaluation():
        for system, by_dataset in metrics.items():
            for dataset, m in by_dataset.items():
                with runs.pair(system, dataset):
                    runs.log_pair(system, dataset, m, predictions[system][dataset], (system_tags or {}).get(system, {}))
        return runs.finish(metrics, paired, predictions, system_tags or {}, gallery=gallery)


def test_mlflow_runs_per_system_and_dataset(tmp_path, monkeypatch):
    monkeypatch.setenv("NCBI_API_KEY", "sekret-key-123")  # a secret in an error text must not be logged
    ref = preds("eg_grpo", [S, R, N], [S, R, None], report=True, eqs=[0.5, 0.7, None], ehr=[0.0, 0.0, 1.0],
                parseable=[True, True, False], error=[None, None, "llm_error: key sekret-key-123 refused"])
    lab = preds("no_retrieval", [S, R, N], [S, S, N])
    predictions = {"eg_grpo": {"scifact": ref}, "no_retrieval": {"scifact": lab}}
    metrics = {s: {"scifact": system_metrics(ps["scifact"], 20, 0)} for s, ps in predictions.items()}
    paired = {"scifact": paired_tests({s: ps["scifact"] for s, ps in predictions.items()}, n_resamples=20)}
    gallery = tmp_path / "gallery"
    gallery.mkdir()
    (gallery / "index.html").write_text("<html>gallery</html>")
    ids = log_runs(metrics, paired, predictions, {"bootstrap": 20, "seed": 0}, "quickstart",
                     system_tags={"eg_grpo": {"model_fingerprint": "m123", "prompt_hash": "p456"}}, gallery=gallery)
    mlflow.set_tracking_uri(tracking_uri())
    client = mlflow.MlflowClient()
    runs = {r.info.run_id: r for r in mlflow.search_runs(experiment_names=[EXPERIMENTS["eval"]], output_format="list")}
    assert set(ids) <= set(runs)
    parent, *children = (runs[i] for i in ids)
    assert [a.path for a in client.list_artifacts(parent.info.run_id, "gallery")] == ["gallery/index.html"]
    by_system = {r.data.tags["system"]: r for r in children}
    assert set(by_system) == {"eg_grpo", "no_retrieval"}
    for r in children:
        assert r.data.tags["dataset"] == "scifact" and r.data.tags["profile"] == "quickstart"
        assert r.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert {"git_commit", "git_dirty", "model_fingerprint", "prompt_hash"} <= set(r.data.tags)
    g, nr = by_system["eg_grpo"].data, by_system["no_retrieval"].data
    assert (g.tags["model_fingerprint"], g.tags["prompt_hash"]) == ("m123", "p456")
    assert g.metrics.keys() == nr.metrics.keys()  # the compare view lines them up
    assert g.metrics["accuracy"] == pytest.approx(metrics["eg_grpo"]["scifact"]["accuracy"])
    assert g.metrics["eqs"] == pytest.approx(0.6) and math.isnan(nr.metrics["eqs"])
    # Only the headline numbers are metrics; the paired tests and intervals are the run's metrics.json artifact.
    assert not any(k.startswith(("paired.", "ci.")) for k in g.metrics)
    detail = json.loads(Path(client.download_artifacts(by_system["no_retrieval"].info.run_id, "metrics.json", str(tmp_path))).read_text())
    assert detail["paired"]["mcnemar"]["b"] == paired["scifact"]["no_retrieval"]["mcnemar"]["b"]
    assert detail["metrics"]["accuracy"] == pytest.approx(metrics["no_retrieval"]["scifact"]["accuracy"])
    table = mlflow.load_table("predictions.json", run_ids=[by_system["eg_grpo"].info.run_id])
    assert list(table["id"]) == ["c0", "c1", "c2"] and list(table["pred"])[:2] == ["SUPPORTED", "REFUTED"]
    assert "sekret-key-123" not in json.dumps(table.to_dict(), default=str)
    assert "***" in table["error"].iloc[2]


def test_mlflow_off_and_no_git(tmp_path, monkeypatch):
    monkeypatch.setenv("BIOCHECK_TRACKING", "off")
    ps = {"eg_grpo": {"scifact": preds("eg_grpo", [S], [S])}}
    assert log_runs({"eg_grpo": {"scifact": system_metrics(ps["eg_grpo"]["scifact"], 5, 0)}}, {}, ps, {}, "x") == []
    assert git_state(tmp_path) == {"git_commit": "unknown", "git_dirty": "unknown"}


@pytest.mark.parametrize("golds", [[S, R] * 6, [S, R, N] * 4], ids=["2way-set", "3way-set"])
def test_paired_macro_f1_observed_and_bootstrapped_equals_sklearn_over_the_named_labels(golds):
    """Over the label set docs/evaluation.md names for the set (2-way without NEI gold, 3-way with), even when
    a label never occurs in a resample or is never predicted: never the labels present only."""
    ref_answers = [R if i % 5 == 0 else g for i, g in enumerate(golds)]  # never predicts NEI
    other_answers = [S] * len(golds)  # only ever SUPPORTED
    ref, other = preds("eg_grpo", golds, ref_answers), preds("cer", golds, other_answers)
    labels = ALL3 if N in golds else ALL3[:2]
    out = paired_tests({"eg_grpo": ref, "cer": other}, n_resamples=200, seed=4)["cer"]["macro_f1"]

    def f1(ps):
        return f1_score([p.gold.value for p in ps], [p.pred.value for p in ps], labels=labels, average="macro",
                        zero_division=0)

    order = sorted(range(len(golds)), key=lambda i: ref[i].id)  # paired by claim id
    a, b = [ref[i] for i in order], [other[i] for i in order]
    assert out["reference"] == pytest.approx(f1(a)) and out["other"] == pytest.approx(f1(b))
    lo, hi, diffs = scipy_bca(lambda i: f1([a[j] for j in i]) - f1([b[j] for j in i]), len(a), 200, 4)
    assert (out["mean"], out["lo"], out["hi"]) == pytest.approx((diffs.mean(), lo, hi))
