"""Run one system on one dataset's claims: cached episodes, a progress bar, one `Prediction` per claim.

Every episode is written, as soon as it finishes, to traces/<system>/<fingerprint>/<dataset>/<claim>.json (atomically,
named like `biocheck check` names its traces), so a rerun after any interruption (kill -9 included) runs
only the claims that have no trace, and a new model or prompt (a new fingerprint) reruns only that system.
The predictions file is written once, atomically, after every claim has an answer: it never holds a
duplicate or a cut line. A failed episode (the model could not answer) leaves no trace: the rerun retries it;
when no claim of a system and dataset got an answer, the run stops with an LLMError (nothing to score).

A trace holds what the inputs determine, nothing of the machine: an episode's times (`started_at`, `timing`,
`clock`: when it ran and how long each step took) are written beside it, to `<claim>.times`, which
`.dvcignore` leaves out of DVC's hash. So the same inputs give the same trace and predictions bytes in any
folder, on any machine (`eval/` and `audit/` in dvc.lock), while an episode read back here has its real times
(MLflow trace spans, the cost seconds). The times name the trace they belong to (its sha256): times that a
`dvc checkout` left beside another trace (DVC never touches a file it ignores) are not read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter
from tqdm.auto import tqdm

from biocheck.agent.episode import Episode
from biocheck.agent.run import episode_error, trace_path
from biocheck.data.gold import EVIDENCE_DATASETS, REVALIDATE, check_usable, label_problem
from biocheck.data.schema import ClaimRecord
from biocheck.evaluate.rationale import Cited, CorpusSentences, RationaleCounts, rationale_counts
from biocheck.evaluate.systems.base import Prediction, System
from biocheck.evidence.types import SearchError
from biocheck.io import InputError, atomic_path, dump_jsonl, remove_stale_tmp, write_json_atomic
from biocheck.llm.base import LLMError
from biocheck.rewards.components import EpisodeView, RewardBreakdown, RewardConfig, score_many
from biocheck.rewards.funnel import Funnel, funnel, gold_papers
from biocheck.secrets import redact

log = logging.getLogger(__name__)
# Without progress bars (stderr not a terminal, as under `dvc repro`, or --no-progress) a line every this many
# finished claims, and one at the end: a long evaluation shows it is alive and how far it got.
PROGRESS_EVERY = 10


class ReportScore(BaseModel):
    """What the evaluation reads off one report (the fields of the same names on `Prediction`)."""

    cited: int
    hallucinated: int
    ehr: float | None  # None when nothing is cited or the report does not parse
    eqs: float | None
    eqs_supporting: float | None
    eqs_refuting: float | None
    eqs_reward_judge: float | None
    rationale: RationaleCounts | None
    funnel: Funnel | None = None


def _side_mean(b: RewardBreakdown, side: str | None = None) -> float | None:
    s = [e.s for e in b.entries if side is None or e.side == side]
    return sum(s) / len(s) if s and b.judge_used else None  # without a judge every s is 0: nothing to report


@dataclass
class ReportScorer:
    """Scores report episodes with the reward library: citations and EHR (no judge needed); EQS, overall and
    per side, by `judge` (the EQS judge, evaluate.eqs_judge), and by `reward_judge` too when that is another
    judge (did the policy learn to please the judge it trained on?); SciFact's rationale counts and the
    evidence funnel (rewards/funnel.py; its credit is the training judge's, `credit_judge`) where a claim has
    gold rationales and `corpus` holds the sentences of the abstracts it cites. One judge call per judge for
    all episodes (cached)."""

    judge: Any = None
    cfg: RewardConfig | None = None
    reward_judge: Any = None
    corpus: CorpusSentences | None = None
    credit_by: str = "judge"  # which judge's s the funnel's credit step reads: "judge", "reward_judge" or "none"

    def __call__(self, episodes: Sequence[Episode],
                 claims: Sequence[ClaimRecord | None] | None = None) -> list[ReportScore]:
        self.check_gold([c for c in claims or () if c is not None])
        views = [EpisodeView.from_episode(ep) for ep in episodes]
        main = score_many(views, self.cfg, self.judge)
        other = score_many(views, self.cfg, self.reward_judge) if self.reward_judge is not None else None
        claims = list(claims) if claims is not None else [None] * len(episodes)
        credit = {"judge": main, "reward_judge": other}.get(self.credit_by) or [None] * len(episodes)
        out = []
        for i, (ep, b) in enumerate(zip(episodes, main, strict=True)):
            claim = claims[i]
            rationale = found = None
            if self.corpus is not None and claim is not None and _has_rationales(claim):
                items = [Cited(e.side, e.pmid, e.quote) for e in b.entries]
                rationale = rationale_counts(claim.evidence, items, self.corpus, ep.ledger, where=_where(claim))
                found = self._funnel(claim, ep, b, credit[i])
            out.append(ReportScore(
                cited=b.n_cited, hallucinated=b.n_hallucinated, ehr=b.ehr if b.n_cited and _parsed(b) else None,
                eqs=_side_mean(b), eqs_supporting=_side_mean(b, "supporting"),
                eqs_refuting=_side_mean(b, "refuting"),
                eqs_reward_judge=_side_mean(other[i]) if other is not None else None, rationale=rationale,
                funnel=found))
        return out

    def check_gold(self, claims: Sequence[ClaimRecord]) -> None:
        """Refuse, before any claim is run, gold this scorer cannot score: a SciFact label its rationales
        disagree with (SUPPORTED or REFUTED without any), a paper outside the corpus, a sentence outside its
        abstract (data/gold.py; `biocheck data validate` names them all)."""
        if self.corpus is None:
            return
        corpus = self.corpus
        for claim in claims:
            if not _has_rationales(claim):
                continue
            if problem := label_problem(claim.dataset, claim.label, [e.label for e in claim.evidence]):
                raise InputError(f"{_where(claim)}: {problem}, so its evidence cannot be scored. {REVALIDATE}")
            check_usable(claim.evidence, lambda d: len(corpus.docs[d][1]) if d in corpus.docs else None,
                         _where(claim))

    def _funnel(self, claim: ClaimRecord, ep: Episode, b: RewardBreakdown, credit: RewardBreakdown | None):
        """The claim's evidence funnel; without the credit judge's scores no citation is credited."""
        corpus = self.corpus
        gold = gold_papers(claim.evidence, lambda d: corpus.docs[d][1] if d in corpus.docs else None,
                           where=_where(claim))
        entries = credit.entries if credit is not None else [e.model_copy(update={"s": 0.0}) for e in b.entries]
        threshold = (self.cfg or RewardConfig()).threshold
        return funnel(gold, claim.label, ep.ledger, entries, b.conclusion, threshold, resolve=corpus.resolve)


def _parsed(b: RewardBreakdown) -> bool:
    """A conclusion and no parse problem: an unparseable report is a failure (parse rate), never an EHR."""
    return b.conclusion is not None and not b.parse_problems


def _where(claim: ClaimRecord) -> str:
    return f"claim {claim.key} ({claim.split})"


def _has_rationales(claim: ClaimRecord) -> bool:
    """SciFact claims carry their gold rationales (none for NEI, which still scores what a report cites)."""
    return claim.dataset in EVIDENCE_DATASETS


Scorer = Callable[..., Sequence[ReportScore]]


def make_scorer(judge: Any = None, cfg: RewardConfig | None = None, *, reward_judge: Any = None,
                corpus: CorpusSentences | None = None) -> ReportScorer:
    """The evaluation's scorer (see ReportScorer); `reward_judge` only when it is not `judge` itself."""
    other = reward_judge if reward_judge is not judge else None
    credit_by = "reward_judge" if other is not None else "judge" if reward_judge is judge and judge is not None else "none"
    return ReportScorer(judge=judge, cfg=cfg, reward_judge=other, corpus=corpus, credit_by=credit_by)


def trace_dir(out_dir: Path, system: str, fingerprint: str, dataset: str) -> Path:
    # Per dataset: claim ids are unique within a dataset only (SciFact's 13 and HealthFC's 13 differ).
    return Path(out_dir) / "traces" / system / fingerprint / dataset


def predictions_path(out_dir: Path, system: str, dataset: str) -> Path:
    return Path(out_dir) / "predictions" / system / f"{dataset}.jsonl"


def trace_key(system: System, fingerprint: str, claim: ClaimRecord) -> dict[str, Any]:
    """What a cached trace must have been produced by to be reused (the folder already names the fingerprint;
    the key also catches a claim whose text changed under the same id, or a file copied from elsewhere)."""
    return {"system": system.name, "fingerprint": fingerprint, "dataset": claim.dataset, "claim_id": claim.id,
            "claim": claim.claim}


# An episode's fields that are this machine's, not the inputs': in `<claim>.times` beside the trace, not in it.
TIMES = frozenset({"started_at", "timing", "clock"})
TIMES_SUFFIX = ".times"  # a trace ends in .json: no trace name is ever a times file's (.dvcignore: *.times)


def times_path(trace: Path) -> Path:
    """Where the times of the trace `trace` (`<claim>.json`) lie: `<claim>.times`."""
    return trace.with_suffix(TIMES_SUFFIX)


def write_episode(ep: Episode, path: Path) -> None:
    """The trace at `path` without the episode's times, then its times beside it (with the trace's sha256).
    In that order: a run killed in between leaves a trace without times, read back with none."""
    write_json_atomic(path, ep.model_dump(mode="json", exclude=set(TIMES)))  # secrets blanked from its texts
    times = ep.model_dump(mode="json", include=set(TIMES))
    write_json_atomic(times_path(path), {"trace_sha256": _sha256(path.read_bytes()), **times})


def read_episode(path: Path) -> Episode:
    """The trace at `path`, with the times beside it when they are this trace's (OSError, ValueError: no
    readable trace)."""
    return _read(path)[0]


def _read(path: Path) -> tuple[Episode, bool]:
    """(the episode with its times, whether the trace itself holds times: an older BioCheck wrote it)."""
    raw = path.read_bytes()
    ep = Episode.model_validate_json(raw)
    inside = bool(TIMES & ep.model_fields_set)
    times = {} if inside else _times(times_path(path), _sha256(raw))
    return (ep.model_copy(update=times) if times else ep), inside


_TIME_TYPES = {name: TypeAdapter(Episode.model_fields[name].annotation) for name in TIMES}


def _times(path: Path, trace_sha256: str) -> dict[str, Any]:
    """The times in `path` when they belong to the trace of that sha256; else none (a missing or stale file:
    the episode's steps then have no recorded times, as in a trace written before they were)."""
    try:
        times = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(times, dict) or times.get("trace_sha256") != trace_sha256:
            return {}
        return {k: _TIME_TYPES[k].validate_python(v) for k, v in times.items() if k in TIMES}
    except (OSError, ValueError):  # a validation error is a ValueError
        return {}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cached(path: Path, key: dict[str, Any]) -> Episode | None:
    """The trace at `path` when it is complete and was produced for `key`; else None (the claim runs). A trace
    an older BioCheck wrote with its times inside is rewritten without them (its times beside it)."""
    if not path.exists():
        return None
    try:
        ep, inside = _read(path)
    except (OSError, ValueError) as e:  # emptied, cut short, not ours: run the claim again
        log.warning("%s: unreadable trace (%s); rerunning that claim", path, str(e).splitlines()[0][:120])
        return None
    if ep.run_key != key:
        log.warning("%s: trace was made for another claim or system; rerunning that claim", path)
        return None
    if inside:
        try:
            write_episode(ep, path)
        except (OSError, ValueError) as e:  # the episode is still good: reused, its trace left as it was
            log.warning("%s: could not move its times out of the trace (%s)", path, str(e).splitlines()[0][:120])
    return ep


def episode_tokens(ep: Episode) -> int:
    """Prompt + completion tokens the backend reported on the episode's assistant messages (0 when none)."""
    total = 0
    for m in ep.messages:
        usage = m.get("usage") if m.get("role") == "assistant" else None
        if isinstance(usage, dict):
            total += sum(v for k, v in usage.items() if k in ("prompt_tokens", "completion_tokens")
                         and isinstance(v, int) and not isinstance(v, bool))
    return total


def _run_one(system: System, claim: ClaimRecord, key: dict[str, Any], path: Path) -> tuple[Episode | None, str | None]:
    """(episode, error): the episode is written to `path` unless the model failed."""
    t0 = time.perf_counter()
    try:
        ep = system.run(claim)
    except (LLMError, SearchError, InputError) as e:  # one claim fails, the evaluation goes on
        return None, redact(e)
    timing = {"total_s": round(time.perf_counter() - t0, 4), **ep.timing}  # the system's own timing wins
    ep = ep.model_copy(update={"run_key": key, "timing": timing, "dataset": ep.dataset or claim.dataset,
                               "gold_label": ep.gold_label or claim.label})
    error = episode_error(ep)
    if error is not None:
        return ep, redact(error)
    try:
        write_episode(ep, path)
    except (OSError, ValueError) as e:  # text JSON cannot hold, a full disk: this claim fails, not the evaluation
        return ep, redact(f"could not write its trace {path.name}: {' '.join(str(e).split())[:200]}")
    return ep, None


def _prediction(system: System, fingerprint: str, dataset: str, claim: ClaimRecord, ep: Episode | None,
                error: str | None, trace: str | None) -> Prediction:
    pred = Prediction(id=claim.id, dataset=dataset, system=system.name, fingerprint=fingerprint, gold=claim.label,
                      writes_report=system.writes_report, error=error)
    if ep is None:
        return pred
    pred.pred = None if error else ep.report.conclusion
    pred.trace = trace
    pred.searches, pred.tokens = ep.searches, episode_tokens(ep)
    pred.seconds = float(ep.timing.get("total_s", 0.0))
    if system.writes_report and not error:
        pred.parseable = ep.report.conclusion is not None and not ep.parse_problems
    return pred


def progress_line(system: str, dataset: str, done: int, total: int, failed: int, seconds: float) -> str:
    """`evaluate: eg_grpo scifact 20/50 claims (40%), 3 failed, 1m12s` (the time this system and dataset took)."""
    s = int(seconds)
    took = f"{s}s" if s < 60 else f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"evaluate: {system} {dataset} {done}/{total} claims ({done / total:.0%}), {failed} failed, {took}"


def run_system(system: System, claims: list[ClaimRecord], dataset: str, out_dir: Path, workers: int = 1,
               progress: bool = True, scorer: Scorer | None = None, shard: bool = False,
               progress_every: int = PROGRESS_EVERY) -> list[Prediction]:
    """Every claim through `system` (cached episodes reused); write and return the predictions, in claim order.

    `scorer` (see make_scorer) adds EQS and EHR to report-writing systems' predictions; EQS is left None when
    the scorer has no judge or the report cites nothing, as the metrics expect. `shard`: these claims are one
    shard of an evaluation whose other shards write into the same trace folder at the same time (evaluate/
    shards.py): only the traces are written (the full pass writes the predictions from them), and no
    temporaries are swept (they may be another shard's trace in the middle of its rename). Without `progress`
    bars, a progress line is logged every `progress_every` claims and when the last one finishes.
    """
    if not claims:
        raise InputError(f"{dataset}: no claims to evaluate; check the prepared split (biocheck prepare).")
    dup = [k for k, n in Counter(c.id for c in claims).items() if n > 1]
    if dup:
        raise InputError(f"{dataset}: duplicate claim ids {dup[:5]}; each claim needs its own id (traces are per id).")
    if system.writes_report and isinstance(scorer, ReportScorer):
        scorer.check_gold(claims)  # before any claim runs, not after the last
    out_dir = Path(out_dir)
    fp = system.fingerprint()
    folder = trace_dir(out_dir, system.name, fp, dataset)
    folder.mkdir(parents=True, exist_ok=True)
    if not shard:
        remove_stale_tmp(folder)  # temporaries left by a killed run
    keys = {c.id: trace_key(system, fp, c) for c in claims}
    paths = {c.id: trace_path(folder, c.id) for c in claims}
    episodes: dict[str, Episode | None] = {c.id: cached(paths[c.id], keys[c.id]) for c in claims}
    errors: dict[str, str] = {}
    todo = [c for c in claims if episodes[c.id] is None]
    if len(todo) < len(claims):
        log.info("%s/%s: reusing %d of %d episodes from %s", system.name, dataset, len(claims) - len(todo),
                 len(claims), folder)

    right = sum(ep.report.conclusion == c.label for c in claims if (ep := episodes[c.id]) is not None)
    done = len(claims) - len(todo)
    started = time.monotonic()
    with (
        tqdm(total=len(claims), initial=done, desc=f"{system.name}/{dataset}", unit="claim",
             disable=not progress) as bar,
        ThreadPoolExecutor(max_workers=max(1, workers)) as pool,
    ):
        if done:
            bar.set_postfix(acc=f"{right / done:.3f}")
        # At most `workers` claims in flight, the next submitted as one finishes: after a bug or Ctrl-C only
        # those already running finish (their traces stay cached), however slowly this thread wakes up.
        waiting, running = iter(todo), {}

        def submit_next() -> None:
            c = next(waiting, None)
            if c is not None:
                running[pool.submit(_run_one, system, c, keys[c.id], paths[c.id])] = c

        for _ in range(max(1, workers)):
            submit_next()
        try:
            while running:
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in finished:
                    c = running.pop(fut)
                    ep, error = fut.result()
                    episodes[c.id] = ep
                    if error is not None:
                        errors[c.id] = error
                        log.warning("%s/%s: claim %s failed: %s", system.name, dataset, c.id, error)
                    right += int(error is None and ep is not None and ep.report.conclusion == c.label)
                    done += 1
                    bar.update(1)
                    bar.set_postfix(acc=f"{right / done:.3f}")
                    if not progress and (done % max(1, progress_every) == 0 or done == len(claims)):
                        log.info(progress_line(system.name, dataset, done, len(claims), len(errors),
                                               time.monotonic() - started))
                    submit_next()
        except BaseException:  # a bug or Ctrl-C: stop now (finished traces stay cached), not after every claim
            pool.shutdown(wait=True, cancel_futures=True)
            raise

    if len(errors) == len(claims):  # accuracy 0.000 [0, 0] would read as a result: it is a dead model
        raise _nothing_answered(system.name, dataset, {c.id: errors[c.id] for c in claims})
    preds = [_prediction(system, fp, dataset, c, episodes[c.id], errors.get(c.id),
                         None if c.id in errors else paths[c.id].relative_to(out_dir).as_posix()) for c in claims]
    if system.writes_report and scorer is not None:
        _score(preds, [episodes[c.id] for c in claims], claims, scorer)
    if shard:
        return preds
    path = predictions_path(out_dir, system.name, dataset)
    with atomic_path(path) as tmp:
        dump_jsonl(tmp, preds)
    return preds


def _nothing_answered(system: str, dataset: str, errors: dict[str, str]) -> LLMError:
    """The error when no claim of a (system, dataset) got an answer: nothing to score, so nothing is written."""
    cid, first = next(iter(errors.items()))
    return LLMError(f"{system}/{dataset}: no claim got an answer, all {len(errors)} failed (first: {cid}: {first}); "
                    "check that the model is reachable, then rerun.")


def load_episode(out_dir: Path, pred: Prediction) -> Episode | None:
    """A prediction's trace (None when it has none or it cannot be read)."""
    if not pred.trace:
        return None
    try:
        return read_episode(Path(out_dir) / pred.trace)
    except (OSError, ValueError):
        return None


def _score(preds: list[Prediction], episodes: list[Episode | None], claims: list[ClaimRecord],
           scorer: Scorer) -> None:
    """Citations, EHR, EQS and rationale counts onto the predictions of answered claims (a failed claim has
    no report to score)."""
    scored = [(p, ep, c) for p, ep, c in zip(preds, episodes, claims, strict=True) if ep is not None and p.error is None]
    if not scored:
        return
    for (p, _, _), r in zip(scored, scorer([ep for _, ep, _ in scored], [c for _, _, c in scored]), strict=True):
        for key, value in r:
            setattr(p, key, value)
