"""Fuzzing params.yaml: any value at any key, and any text as the file, is either accepted or refused with an
InputError (one line naming the file and the key) — never another exception, which the CLI would show as a
traceback."""

from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st

from biocheck.io import InputError
from biocheck.params import Params, load_params
from biocheck.pipeline import stage_inputs
from tests.helpers.params import stages
from tests.helpers.paths import REPO

PROFILES = {p.stem: dict(load_params(p)) for p in sorted((REPO / "profiles").glob("*.yaml"))}  # base + values
STAGES = list(stages())


def _keys(tree: dict, prefix: tuple = ()) -> list[tuple]:
    """Every key path of a profile, down to two levels below a section (train.sft.epochs)."""
    out = []
    for k, v in tree.items():
        out.append((*prefix, k))
        if isinstance(v, dict) and len(prefix) < 2:
            out.extend(_keys(v, (*prefix, k)))
    return out


KEYS = sorted({(name, path) for name, tree in PROFILES.items() for path in _keys(tree)})

values = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**12), 10**12), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["", "-1", "0", "1e9", "../../etc", "/", "tiny", "local", "openai:x"]),
    st.lists(st.integers(-3, 3), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(-3, 3), max_size=2),
)


def _set(tree: dict, path: tuple, value) -> None:
    for k in path[:-1]:
        tree = tree[k]
    tree[path[-1]] = value


def _read_all(params: dict) -> None:
    for stage in STAGES:
        stage_inputs(params, stage)  # builds every Config the stage's code builds


@given(st.sampled_from(KEYS), values)
def test_any_value_at_any_key_is_accepted_or_refused_with_an_input_error(where, value):
    profile, path = where
    tree = yaml.safe_load(yaml.safe_dump(PROFILES[profile]))  # a deep copy
    _set(tree, path, value)
    params = Params(tree)
    params.path = Path(f"{profile}.yaml")
    try:
        _read_all(params)
    except InputError as e:
        text = str(e)
        assert "\n" not in text.strip() and (text.startswith(f"{profile}.yaml") or text.startswith("-")), text


@given(st.text(max_size=200))
def test_any_text_as_the_parameters_file_loads_or_is_refused(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("p") / "params.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        params = load_params(path)
    except InputError as e:
        assert str(e).startswith(str(path)), str(e)
        return
    try:
        _read_all(params)
    except InputError:
        pass
