"""Fuzzing secrets at the writer boundary: any key (any length, any characters a key uses), echoed as typed,
URL-encoded, JSON- or HTML-escaped, inside any text, leaves no trace in any byte that `biocheck.io` writes —
text files, JSON files and JSON lines alike — and the JSON stays valid."""

from __future__ import annotations

import html
import json
import os
import re
import tempfile
import urllib.parse
from pathlib import Path

from hypothesis import assume, given
from hypothesis import strategies as st

from biocheck.io import dump_jsonl, write_json_atomic, write_text_atomic
from biocheck.secrets import MIN_CHARS, PLACEHOLDERS

KEY_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~!@#$%^&*()+=/:;'\"<>?,|{}[]"
# A key starts with a letter or digit (sk-..., ghp_..., a hex token); a lone "," would be JSON's own syntax.
# A short number ("42") is a setting, not a key (docs/mlflow.md), like the placeholders.
secrets = st.text(alphabet=KEY_CHARS, min_size=1, max_size=40).filter(
    lambda s: s[0].isalnum() and s.lower() not in PLACEHOLDERS
    and (len(s) >= MIN_CHARS or not re.fullmatch(r"[-+.\deE]+", s)))
FORMS = [lambda s: s, lambda s: urllib.parse.quote(s, safe=""), urllib.parse.quote, urllib.parse.quote_plus,
         lambda s: json.dumps(s)[1:-1], html.escape]
words = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)


def _leaks(data: str, secret: str) -> bool:
    """The secret as typed or URL-encoded in `data` (a short one as a whole token only: it is blanked
    only there, so "ab" inside "table" is no leak)."""
    for form in {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}:
        if len(secret) >= MIN_CHARS:
            if form in data:
                return True
        elif re.search(rf"(?<!\w){re.escape(form)}(?!\w)", data):
            return True
    return False


@given(secrets, st.sampled_from(range(len(FORMS))), words, words)
def test_no_writer_lets_a_key_through_in_any_common_form(secret, form, before, after):
    echoed = FORMS[form](secret)
    text = f"{before} {echoed} {after}"  # a whole token: what a server echoes ("Incorrect API key: sk-...")
    assume(not _leaks(f"{before} {after}", secret))  # the surrounding text alone must not hold the key
    os.environ["FUZZ_API_KEY"] = secret
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            write_text_atomic(tmp / "a.txt", text)
            # numbers stay numbers (a key "2" must not turn 2 into "***"): none here, so any digit is a leak
            write_json_atomic(tmp / "a.json", {"error": text, text: [text, None]})
            dump_jsonl(tmp / "a.jsonl", [{"trace": text}, {"k": None}])
            for name in ("a.txt", "a.json", "a.jsonl"):
                data = (tmp / name).read_text(encoding="utf-8")
                assert not _leaks(data, secret), (name, data)
                assert not _leaks(urllib.parse.unquote(data), secret) or len(secret) < MIN_CHARS, (name, data)
            json.loads((tmp / "a.json").read_text(encoding="utf-8"))
            rows = [json.loads(x) for x in (tmp / "a.jsonl").read_text(encoding="utf-8").split("\n") if x]
            assert len(rows) == 2 and list(rows[1].values()) == [None]  # valid JSON lines, one per row
    finally:
        os.environ.pop("FUZZ_API_KEY", None)
