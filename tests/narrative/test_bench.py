"""The passage benchmark: deterministic, exact spans, 2-4 claims and one non-claim a passage."""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import pytest

from biocheck.data.schema import ClaimRecord
from biocheck.io import InputError
from biocheck.labels import Label
from biocheck.narrative.bench import (
    CONNECTIVES,
    MAX_CLAIMS,
    MIN_CLAIMS,
    NON_CLAIMS,
    build_passages,
    held_out_claims,
    write_passages,
)
from biocheck.narrative.extract import extract
from biocheck.narrative.match import extraction_scores
from biocheck.narrative.sentences import skip_reason

TOPICS = ["blood pressure", "LDL cholesterol", "fasting glucose", "resting heart rate", "body weight",
          "bone density", "liver fat", "kidney function", "sleep quality", "grip strength"]
LABELS = [Label.SUPPORTED, Label.REFUTED, Label.NEI]


def claims(n: int = 30) -> list[SimpleNamespace]:
    return [SimpleNamespace(id=str(i), claim=f"Drug {i} changes   {TOPICS[i % len(TOPICS)]} in adults",
                            label=LABELS[i % 3]) for i in range(n)]


def test_the_same_seed_gives_byte_identical_files_in_any_input_order(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_passages(a, build_passages(claims(), seed=7, n_passages=8))
    write_passages(b, build_passages(list(reversed(claims())), seed=7, n_passages=8))
    assert a.read_bytes() == b.read_bytes() and a.stat().st_size > 0


def test_another_seed_gives_other_passages():
    one = [p.text for p in build_passages(claims(), seed=7, n_passages=8)]
    two = [p.text for p in build_passages(claims(), seed=8, n_passages=8)]
    assert one != two


def test_spans_are_exact_and_each_passage_has_2_to_4_claims_and_one_non_claim():
    source = {c.id: c for c in claims()}
    passages = build_passages(claims(), seed=1, n_passages=50)
    for p in passages:
        assert MIN_CLAIMS <= len(p.claims) <= MAX_CLAIMS
        for c in p.claims:
            assert p.text[c.start:c.end] == c.text == " ".join(source[c.claim_id].claim.split())
            assert c.label == source[c.claim_id].label
        non_claim = p.text[p.non_claim.start:p.non_claim.end]
        assert (non_claim, p.non_claim.reason) in NON_CLAIMS
        assert len(p.connectives) == len(p.claims) - 1
        assert all(p.text[s.start:s.end] in CONNECTIVES for s in p.connectives)
        # nothing but the pieces and one space between them
        pieces = sorted([*p.claims, p.non_claim, *p.connectives], key=lambda s: s.start)
        covered = sum(s.end - s.start for s in pieces)
        ends_added = sum(1 for c in p.claims if not c.text.endswith((".", "!", "?")))
        assert len(p.text) == covered + ends_added + len(pieces) - 1


def test_every_claim_is_used_at_most_once_and_the_pool_caps_the_passages():
    passages = build_passages(claims(9), seed=3, n_passages=100)
    used = Counter(c.claim_id for p in passages for c in p.claims)
    assert max(used.values()) == 1
    # 9 claims in passages of 2 to 4: at least 2 passages, at most 4, and fewer than 2 claims left unused
    assert 2 <= len(passages) <= 4 and 9 - sum(used.values()) < MIN_CLAIMS


def test_n_passages_is_the_ceiling():
    assert len(build_passages(claims(), seed=0, n_passages=2)) == 2


def test_too_few_claims_give_no_passage_and_a_bad_count_is_one_line():
    assert build_passages(claims(1), seed=0, n_passages=5) == []
    with pytest.raises(InputError, match="at least 1 passage"):
        build_passages(claims(), seed=0, n_passages=0)


def test_a_claim_with_its_own_full_stop_gets_none_added():
    rows = [SimpleNamespace(id="a", claim="Statins cut LDL.", label="SUPPORTED"),
            SimpleNamespace(id="b", claim="Aspirin thins blood", label="REFUTED")]
    (p,) = build_passages(rows, seed=0, n_passages=1)
    assert "Statins cut LDL.." not in p.text and "Aspirin thins blood." in p.text


def test_every_non_claim_is_skipped_by_the_sentence_rule_with_its_reason():
    for sentence, reason in NON_CLAIMS:
        assert skip_reason(sentence) == reason


def test_the_sentence_rule_finds_each_claim_and_skips_the_non_claim():
    for p in build_passages(claims(), seed=5, n_passages=5):
        out = extract(p.text)
        # each claim's sentence starts at the claim and adds at most the full stop the passage put after it
        starts = {c.start: c.end for c in out.claims}
        assert all(starts.get(c.start) in (c.end, c.end + 1) for c in p.claims)
        assert [(s.start, s.end, s.reason) for s in out.skipped] == [(p.non_claim.start, p.non_claim.end,
                                                                      p.non_claim.reason)]
        # the connectives count as claims: k gold claims and k - 1 connectives found, k matched
        k = len(p.claims)
        scores = extraction_scores(out.texts(), [c.text for c in p.claims])
        assert (scores.n_extracted, scores.n_matched) == (2 * k - 1, k)
        assert (scores.precision, scores.recall) == (k / (2 * k - 1), 1.0)


def test_rows_are_plain_json():
    (p,) = build_passages(claims(4), seed=5, n_passages=1)
    row = json.loads(json.dumps(p.to_row()))
    assert row["text"] == p.text and {c["label"] for c in row["claims"]} <= {"SUPPORTED", "REFUTED", "NEI"}


def test_held_out_claims_are_the_test_split_of_the_full_release(tmp_path):
    (tmp_path / "full").mkdir()
    records = [ClaimRecord(id=str(i), dataset="scifact", split=split, claim=f"Claim {i}.", label=Label.SUPPORTED)
               for i, split in enumerate(["train", "test", "val", "test"])]
    (tmp_path / "full" / "scifact.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
    assert [c.id for c in held_out_claims(tmp_path)] == ["1", "3"]
