"""Run the agent from the command line: which model, one trace per claim, resumable batches and a summary.

The agent itself is built from params by `biocheck.wiring.agent`. A batch (`biocheck check --claims`)
writes one trace per claim as it finishes; each trace carries the key of what produced it (`run_key`),
so a rerun reuses exactly the traces that the same claim, model, prompts and settings would produce again.
An --out folder holds one run: its key's run part (model, prompts, settings, the evidence index's content)
is the same for every trace in it, and a batch with another one is refused rather than mixed in.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from biocheck.agent.episode import Agent, AgentConfig, Episode
from biocheck.agent.graph import LLM_ERROR
from biocheck.evidence.types import SearchError
from biocheck.io import InputError, parse_jsonl, write_json_atomic
from biocheck.labels import LABELS
from biocheck.llm.base import LLMError
from biocheck.llm.load import is_model_dir
from biocheck.outputs import claim_folder, one_writer
from biocheck.secrets import redact_json

log = logging.getLogger(__name__)

SUMMARY = "summary.json"
RESERVED = frozenset({"summary", "metrics", "scores"})  # files written beside the traces (biocheck score skips them)
# A trace's name is at most MAX_SLUG bytes of UTF-8 plus "-" and the hash, then ".json": with the 14 bytes an
# atomic write adds for its temporary, 110 bytes, within every common file system's limit (eCryptfs: 143).
MAX_SLUG = 80
HASH_CHARS = 10
_HASHED = re.compile(rf".*-[0-9a-f]{{{HASH_CHARS}}}")
_PLAIN = re.compile(r"[a-z0-9_-][a-z0-9._-]*")  # ASCII only: other scripts fold case unlike Python's lower()
CLAIM_FIELDS = ("claim_id", "claim", "dataset", "gold_label")  # the claim's part of a run key; the rest is the run's
# how, not what: no effect on a trace
NOT_IN_KEY = {"agent": ("workers", "request_timeout_s"), "search": ("timeout_s", "max_attempts", "deadline_s")}
EXAMPLE = '{"claim": "Vitamin D prevents fractures.", "id": "c1"}'

# --- claims --------------------------------------------------------------------------------------------------


def read_claims(path: Path | str) -> list[dict[str, Any]]:
    """Claims for a batch: prepared records (id, claim, label, dataset) or just {"claim": ...} per line.

    Every record is checked here, before any episode runs, so a bad record never aborts a batch half way. A
    file that is not claims (bad JSON, a record without a claim, a duplicate id) is refused as a whole; a
    record whose text cannot leave the process (a lone surrogate) keeps its place with a `problem`: the
    batch lists it as failed and runs the others.
    """
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: is a folder; --claims wants a JSONL file with one claim per line, e.g. {EXAMPLE}.")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such claims file.") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read the claims file ({e.strerror or e}).") from None
    if not data.strip():
        raise InputError(f"{path}: no claims in the file; write one JSON object per line, e.g. {EXAMPLE}.")
    claims = [_claim(row, i, path) for i, row in enumerate(parse_jsonl(data, str(path)), start=1)]
    ids = Counter(c["claim_id"] for c in claims)
    dup = [k for k, n in ids.items() if n > 1]
    if dup:
        raise InputError(f"{path}: duplicate claim ids {dup[:5]}; traces are written per id.")
    return claims


def _claim(row: dict[str, Any], i: int, path: Path) -> dict[str, Any]:
    where = f"{path}, record {i}"
    claim, cid, label, dataset = row.get("claim"), row.get("id"), row.get("label"), row.get("dataset")
    problem = None
    for name, value in (("id", cid), ("claim", claim), ("dataset", dataset)):
        why = text_problem(value) if isinstance(value, str) else None
        if why and problem is None:
            problem = (f"{where}: '{name}' {why}; it cannot be written to a trace or sent to a model, so fix that "
                       "text in the file.")
    if not isinstance(claim, str) or not claim.strip():
        raise InputError(f"{where}: needs a non-empty 'claim' string.")
    if cid is not None and (isinstance(cid, bool) or not isinstance(cid, (str, int))):
        raise InputError(f"{where}: 'id' must be a string or an integer, not {type(cid).__name__} {cid!r:.40}.")
    if isinstance(cid, str) and not cid.strip():
        raise InputError(f"{where}: 'id' must not be empty.")
    if label is not None and label not in LABELS:
        raise InputError(f"{where}: unknown label {label!r:.40}; use one of {', '.join(LABELS)} (or leave it out).")
    if dataset is not None and not isinstance(dataset, str):
        raise InputError(f"{where}: 'dataset' must be a string, not {type(dataset).__name__} {dataset!r:.40}.")
    out = {"claim": claim, "claim_id": str(i if cid is None else cid), "dataset": dataset, "gold_label": label}
    return {**out, "problem": problem} if problem else out


def shown_id(claim_id: str) -> str:
    """A claim id as it can be written and printed: a lone surrogate as its escape (\\ud800)."""
    return claim_id.encode("utf-8", "backslashreplace").decode("utf-8")


def text_problem(value: str) -> str | None:
    """Why `value` cannot leave the process (a lone surrogate such as a JSON "\\ud800" escape: UTF-8 files,
    JSON writers and model servers refuse it), or None for valid text."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"is not valid Unicode text (a lone surrogate {value[e.start]!r} at character {e.start + 1})"
    return None


# --- traces --------------------------------------------------------------------------------------------------


def trace_name(claim_id: str) -> str:
    """The trace file's name (without .json) for a claim id; no two ids share one, and it fits in bytes.

    A plain id (at most MAX_SLUG lower-case ASCII letters, digits, - _ .) is its own name. Any other id, or
    one that could be mistaken for the summary or for a hashed name, becomes a readable slug (cut to MAX_SLUG
    bytes of UTF-8) plus a hash of the exact id: `a/b` and `a_b` (and `A` and `a`, on a case-insensitive
    disk) then never write the same file. Any string is taken, lone surrogates included.
    """
    plain = (len(claim_id) <= MAX_SLUG and _PLAIN.fullmatch(claim_id) is not None and claim_id not in RESERVED
             and not _HASHED.fullmatch(claim_id))
    if plain:
        return claim_id
    digest = hashlib.sha256(claim_id.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    return f"{_slug(claim_id) or 'claim'}-{digest}"


def _slug(claim_id: str) -> str:
    """The readable part of a hashed name: letters and digits of any script, - _ . kept, the rest "_", no
    leading dot, at most MAX_SLUG bytes."""
    out, size = [], 0
    for ch in claim_id:
        ch = ch if ch.isalnum() or ch in "-_." else "_"  # a lone surrogate is not alnum: never in a name
        size += len(ch.encode("utf-8"))
        if size > MAX_SLUG:
            break
        out.append(ch)
    return "".join(out).lstrip(".")


def trace_path(out_dir: Path, claim_id: str) -> Path:
    return out_dir / f"{trace_name(claim_id)}.json"


def write_trace(episode: Episode, path: Path) -> None:
    write_json_atomic(path, episode.model_dump(mode="json"))  # secrets blanked from every text in it


def episode_error(episode: Episode) -> str | None:
    """Why the model could not finish the episode (server down, prompt too long), or None."""
    if not episode.stop_reason.startswith(LLM_ERROR):
        return None
    return episode.stop_reason.removeprefix(LLM_ERROR).lstrip(":").strip() or "the model failed"


def run_key(agent: Agent, claim: dict[str, Any], search: dict[str, Any] | None = None,
            settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything a claim's trace depends on; a rerun reuses the trace only when all of it is unchanged.
    `settings`: the run's part, `run_settings(agent, search)`, when already computed."""
    claim_part = {"claim_id": claim["claim_id"], "claim": claim["claim"], "dataset": claim.get("dataset"),
                  "gold_label": claim.get("gold_label")}
    return {**_as_stored(claim_part), **(settings if settings is not None else run_settings(agent, search))}


def run_settings(agent: Agent, search: dict[str, Any] | None = None) -> dict[str, Any]:
    """The part of a run key every claim of a run shares: model, prompts, agent and search settings, and the
    content of the evidence index searched (`evidence`)."""
    settings = {k: v for k, v in asdict(agent.cfg).items() if k not in NOT_IN_KEY["agent"]}
    return _as_stored({"llm": agent.llm.spec, "llm_fingerprint": agent.llm_fingerprint,
                       "prompt_hash": agent.prompts_hash, "agent": settings, "search_backend": agent.search_backend,
                       "search": {k: v for k, v in (search or {}).items() if k not in NOT_IN_KEY["search"]},
                       "evidence": evidence_fingerprint(search)})


def _as_stored(key: dict[str, Any]) -> dict[str, Any]:
    # As it reads back from a trace: paths and tuples as JSON, secrets blanked (a secret in a spec or a claim
    # would otherwise never match the stored key, and every rerun would redo the claim).
    return redact_json(json.loads(json.dumps(key, default=str)))


def evidence_fingerprint(search: Any) -> str | None:
    """What the searched evidence holds, for a local index (`search` as a dict or a SearchConfig): its content
    fingerprint, so a rebuilt index with other papers makes another run. None for PubMed, live or replayed."""
    get = search.get if isinstance(search, dict) else lambda k: getattr(search, k, None)
    if search is None or get("backend") != "local" or not get("index_dir"):
        return None
    from biocheck.evidence.local import index_fingerprint  # tantivy, only when a local index is named

    return index_fingerprint(get("index_dir"))


def changed(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The keys (one level into `agent` and `search`) whose values differ."""
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{k}.{sub}" for sub in sorted(set(a) | set(b)) if a.get(sub) != b.get(sub)]
        elif a != b:
            out.append(k)
    return out


def check_one_run(out_dir: Path, settings: dict[str, Any]) -> None:
    """InputError when `out_dir` holds a trace of another run (another model, prompts, settings or evidence):
    rerunning into it would overwrite some of that run's traces and leave the others, two runs mixed."""
    for path in sorted(out_dir.glob("*.json")):
        old = _stored_key(path) if path.stem not in RESERVED else None
        if old is None:
            continue
        # A part an older BioCheck did not record (`evidence`) is no sign of another run: its key differs, so
        # that trace is rerun, not mixed.
        diff = changed({k: v for k, v in old.items() if k not in CLAIM_FIELDS},
                       {k: v for k, v in settings.items() if k in old})
        if diff:
            more = f" and {len(diff) - 5} more" if len(diff) > 5 else ""
            raise InputError(f"--out {out_dir}: holds the traces of another run ({path.name} differs in "
                             f"{', '.join(diff[:5])}{more}); give this run a new --out, or remove that folder to "
                             "start it over (a rerun with the same model, prompts, settings and evidence resumes).")


def _stored_key(path: Path) -> dict[str, Any] | None:
    """The run key a trace file records; None for a file that is unreadable or not a trace (it is rerun or left)."""
    try:
        key = json.loads(path.read_bytes()).get("run_key")
    except (OSError, ValueError, AttributeError):
        return None
    return key if isinstance(key, dict) and key else None


def reuse(path: Path, key: dict[str, Any]) -> str | None:
    """None when the trace at `path` can be reused for `key`; otherwise why the claim must run (again)."""
    if not path.exists():
        return "new"
    try:
        old = Episode.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # truncated by a kill, emptied, not ours: run the claim again
        log.warning("%s: unreadable trace (%s); rerunning that claim", path, str(e).splitlines()[0][:120])
        return "unreadable trace"
    if not old.run_key:
        return "trace has no run key (written by an older BioCheck)"
    diff = changed(old.run_key, key)
    return f"changed: {', '.join(diff)}" if diff else None


# --- batch ---------------------------------------------------------------------------------------------------


def run_batch(
    agent: Agent,
    claims: list[dict[str, Any]],
    out_dir: Path,
    workers: int = 1,
    progress: bool = True,
    resume: bool = True,
    search: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run every claim, writing one trace per claim as it finishes; a rerun reuses traces whose key matches.

    `search` holds the search settings (they go into each trace's key). A claim whose model fails gets no
    trace and is listed under "failed" in the summary; the other claims still run.
    """
    out_dir = Path(out_dir)
    claim_folder(out_dir, "--out")
    settings = run_settings(agent, search)
    out_dir.mkdir(parents=True, exist_ok=True)
    # two batches started together would each pass the one-run check, then mix their traces
    with one_writer(out_dir, "--out", "another batch", "give another --out"):
        check_one_run(out_dir, settings)
        return _run_batch(agent, claims, out_dir, workers, progress, resume, settings)


def _run_batch(agent: Agent, claims: list[dict[str, Any]], out_dir: Path, workers: int, progress: bool,
               resume: bool, settings: dict[str, Any]) -> dict[str, Any]:
    bad = {c["claim_id"]: c["problem"] for c in claims if c.get("problem")}  # fail alone, never run
    for cid, problem in bad.items():
        log.warning("claim %s failed: %s", shown_id(cid), problem)
    claims, every = [c for c in claims if c["claim_id"] not in bad], claims
    keys = {c["claim_id"]: run_key(agent, c, settings=settings) for c in claims}
    why = {c["claim_id"]: reuse(trace_path(out_dir, c["claim_id"]), keys[c["claim_id"]]) if resume else "no resume"
           for c in claims}
    todo = [c for c in claims if why[c["claim_id"]] is not None]
    rerun = Counter(w for w in why.values() if w not in (None, "new", "no resume"))
    _say_resume(out_dir, claims, todo, why)

    def one(c: dict[str, Any]) -> tuple[str, str | None]:
        cid = c["claim_id"]
        try:
            ep = agent.run(c["claim"], claim_id=cid, dataset=c.get("dataset"), gold_label=c.get("gold_label"))
        except (LLMError, SearchError, InputError) as e:
            return cid, str(e)
        error = episode_error(ep)
        if error is None:  # a failed episode leaves no trace: the rerun retries it
            path = trace_path(out_dir, cid)
            try:
                write_trace(ep.model_copy(update={"run_key": keys[cid]}), path)
            except (OSError, ValueError, InputError) as e:  # this claim fails, not the batch
                return cid, f"could not write its trace {path.name}: {' '.join(str(e).split())[:200]}"
        return cid, error

    errors: dict[str, str] = {}
    with (
        ThreadPoolExecutor(max_workers=max(1, workers)) as pool,
        tqdm(total=len(todo), desc="episodes", unit="claim", disable=not progress) as bar,
    ):
        for cid, error in pool.map(one, todo):
            if error is not None:
                errors[cid] = error
                log.warning("claim %s failed: %s", cid, error)
            bar.update(1)
    done = [c for c in claims if c["claim_id"] not in errors]
    summary = summarize([Episode.model_validate_json(trace_path(out_dir, c["claim_id"]).read_text(encoding="utf-8"))
                         for c in done])
    errors.update(bad)
    summary["failed"] = [{"id": shown_id(c["claim_id"]), "error": errors[c["claim_id"]]} for c in every
                         if c["claim_id"] in errors]
    summary["reused"] = len(claims) - len(todo)
    summary["rerun"] = dict(rerun)
    write_json_atomic(out_dir / SUMMARY, summary)
    return summary


def _say_resume(out_dir: Path, claims: list[dict[str, Any]], todo: list[dict[str, Any]],
                why: dict[str, str | None]) -> None:
    """One line on what is reused, one per reason for what runs again (with the first few ids)."""
    if len(todo) == len(claims) and all(w in ("new", "no resume") for w in why.values()):
        return
    log.info("resume: reused %d of %d traces in %s", len(claims) - len(todo), len(claims), out_dir)
    by_reason: dict[str, list[str]] = {}
    for c in todo:
        by_reason.setdefault(why[c["claim_id"]] or "", []).append(c["claim_id"])
    for reason, ids in by_reason.items():
        more = f" (+{len(ids) - 5} more)" if len(ids) > 5 else ""
        log.info("resume: running %d claim(s) (%s): %s%s", len(ids), reason, ", ".join(ids[:5]), more)


def summarize(episodes: list[Episode]) -> dict[str, Any]:
    n = len(episodes) or 1
    conclusions = Counter(e.report.conclusion.value if e.report.conclusion else "none" for e in episodes)
    return {
        "episodes": len(episodes),
        "mean_searches": sum(e.searches for e in episodes) / n,
        "parsed_ok_rate": sum(1 for e in episodes if e.report.conclusion and not e.parse_problems) / n,
        "conclusions": dict(conclusions),
        "stop_reasons": dict(Counter(e.stop_reason for e in episodes)),
        "mean_seconds": sum(e.timing.get("total_s", 0.0) for e in episodes) / n,
    }


# --- which model ---------------------------------------------------------------------------------------------

DEFAULT_LLM = AgentConfig.llm  # the untrained base model: what a fresh checkout's params.yaml names


def choose_llm(option: str | None, configured: str | None, selected_dir: Path,
               champion: Callable[[], tuple[str, str] | None] | None = None) -> tuple[str | None, str]:
    """(the spec to use, or None to keep agent.llm; where it comes from, as stderr says it).

    --llm wins, then a non-default agent.llm (both given by the user); otherwise the registry's champion
    (`champion()`: its spec and where it is from, or None when the registry has none; asked only here), then
    the selected checkpoint (`biocheck select`, whether or not it became the champion), so a new user's first
    check after the quickstart runs the trained model, not the random base; else agent.llm.
    """
    if option:
        return option, "--llm"
    if configured and configured != DEFAULT_LLM:
        return None, "agent.llm"
    found = champion() if champion is not None else None
    if found is not None:
        return found
    none = "; no champion from the model registry" if champion is not None else ""
    if is_model_dir(selected_dir):
        return f"transformers:{selected_dir.as_posix()}", f"the selected checkpoint (biocheck select{none})"
    return None, f"agent.llm (no selected checkpoint in {selected_dir.as_posix()} yet{none})"


def describe_model(spec: str, fingerprint: str = "") -> str:
    """The model as a report names it: spec, and for a local folder which one (and the checkpoint's step)."""
    from biocheck.llm.spec import split_spec

    kind, ref = split_spec(spec)
    facts = []
    folder = Path(ref) if kind in ("transformers", "vllm") and ref else None
    if folder is not None and folder.is_dir():
        step = _selected_step(folder)
        if step is not None:
            facts.append(f"selected checkpoint, step {step}")
        facts.append(f"folder {folder.resolve()}")
    if fingerprint:
        facts.append(f"fingerprint {fingerprint}")
    return f"{spec} ({'; '.join(facts)})" if facts else spec


def _selected_step(folder: Path) -> int | None:
    """The training step of a folder written by `biocheck select` (its selection.json), else None."""
    try:
        step = json.loads((folder / "selection.json").read_text(encoding="utf-8")).get("step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None
