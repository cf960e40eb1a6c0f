"""One error root (biocheck.errors.BioCheckError): every exception class the package defines derives from it,
except the internal ones listed here, which their module turns into a BioCheckError before they reach a user;
the CLI and the flows' entry catch that root, so a new user-facing error can't be missing from either."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import biocheck
from biocheck.errors import BioCheckError
from biocheck.orchestration import entry

# Raised and caught inside the package (a retry, a fallback, a message rewritten by the caller), by class
# name; private classes (`_Retry`) are internal by their name.
INTERNAL = {"ReplyError", "XMLParseError", "MissingDTDError", "NotPubMedXMLError", "UnsafeXMLError",  # evidence
            "DamagedFile",  # evidence/local_files.py: the index turns it into IndexUnavailable
            "Unavailable"}  # tracking: a store that fails turns tracking off, with one warning


def _exception_classes() -> dict[str, type]:
    found = {}
    for info in pkgutil.walk_packages(biocheck.__path__, "biocheck."):
        if info.name.endswith("served_model"):  # an MLflow models-from-code script: runs when imported
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                found[f"{info.name}.{name}"] = obj
    return found


def test_every_error_of_the_package_derives_from_the_one_root():
    classes = _exception_classes()
    assert len(classes) >= 15, sorted(classes)  # the walk found the package's errors
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, BioCheckError)
                     and cls.__name__ not in INTERNAL and not cls.__name__.startswith("_"))
    assert outside == [], f"derive these from biocheck.errors.BioCheckError, or list them as internal: {outside}"
    assert {cls.__name__ for cls in classes.values()} >= INTERNAL, "an internal error listed here no longer exists"


def test_the_cli_prints_any_error_of_the_root_as_one_line_and_exit_1(capsys):
    import typer

    from biocheck.cli.errors import _run

    class Fresh(BioCheckError):  # an error class nobody listed anywhere
        pass

    def stage():
        raise Fresh("data/x.jsonl: no claims; run `dvc repro prepare`")

    try:
        _run(stage)
    except typer.Exit as e:
        assert e.exit_code == 1
    else:
        raise AssertionError("_run let the error through")
    assert capsys.readouterr().err.strip().splitlines() == ["error: data/x.jsonl: no claims; run `dvc repro prepare`"]


def test_the_flows_entry_prints_any_error_of_the_root_as_its_own_line():
    class Fresh(BioCheckError):  # an error class nobody listed anywhere
        pass

    assert entry.error_line(Fresh("models/x: no model; run `dvc repro model`")) == \
        "models/x: no model; run `dvc repro model`"
    assert entry.error_line(RuntimeError("boom\nmore")) == "RuntimeError: boom"
