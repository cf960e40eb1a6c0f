"""The episode trace (agent/episode.py) and batch running (agent/run.py): every field, every error text."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import asdict

import pytest

from biocheck.agent.episode import Agent, AgentConfig, Episode, QueryRecord
from biocheck.agent.prompts import Prompts
from biocheck.agent.run import read_claims, run_batch, summarize, trace_path, write_trace
from biocheck.evidence.search import SearchConfig
from biocheck.io import InputError
from biocheck.labels import Label
from biocheck.llm import GenerationConfig
from biocheck.llm.scripted import ScriptedChat
from biocheck.params import section
from biocheck.wiring import make_agent
from tests.helpers.turns import A1, A1_EDITED, A2, REPORT, TABLE, TableTool, calls

# -- AgentConfig ----------------------------------------------------------------------------------------


def _agent(**values):
    """AgentConfig as params.yaml's `agent:` section builds it: its bounds are its fields' types (bounds.py)."""
    return section({"agent": values}, "agent", AgentConfig)


@pytest.mark.parametrize("kw", [{"max_searches": -1}, {"max_refusals": -1}])
def test_negative_limits_are_rejected_with_the_keys_named(kw):
    key, value = next(iter(kw.items()))
    with pytest.raises(InputError, match=rf"section 'agent': agent\.{key} must be >= 0, not -1$"):
        _agent(**kw)


def test_zero_limits_are_allowed():
    assert (_agent(max_searches=0, max_refusals=0).max_searches, _agent(max_refusals=0).max_refusals) == (0, 0)


@pytest.mark.parametrize("kw, message", [
    ({"abstract_chars": -5}, "agent.abstract_chars must be >= 1, not -5"),
    ({"abstract_chars": 0}, "agent.abstract_chars must be >= 1, not 0"),
    ({"max_new_tokens": 0}, "agent.max_new_tokens must be >= 1, not 0"),
    ({"temperature": -0.1}, "agent.temperature must be >= 0, not -0.1"),
    ({"temperature": float("nan")}, "agent.temperature must be >= 0, not nan"),
    ({"temperature": float("inf")}, "agent.temperature must be a finite number, not inf"),
    ({"top_p": 0.0}, "agent.top_p must be > 0, not 0.0"),
    ({"top_p": 1.5}, "agent.top_p must be <= 1, not 1.5"),
    ({"workers": 0}, "agent.workers must be >= 1, not 0"),
    ({"request_timeout_s": 0.0}, "agent.request_timeout_s must be > 0, not 0.0"),
])
def test_nonsense_generation_and_batch_settings_are_rejected_with_the_key_named(kw, message):
    with pytest.raises(InputError) as e:
        _agent(**kw)
    assert str(e.value).endswith(f"section 'agent': {message}"), str(e.value)


def test_edge_settings_that_make_sense_are_allowed():
    cfg = _agent(abstract_chars=None, temperature=0.0, top_p=1.0, max_new_tokens=1, workers=1)
    assert (cfg.abstract_chars, cfg.temperature, cfg.top_p) == (None, 0.0, 1.0)
    assert _agent(abstract_chars=1, top_p=1e-3, temperature=2.0).abstract_chars == 1


# -- Agent and its Episode ------------------------------------------------------------------------------


def test_the_prompts_follow_the_budget_and_the_tools_paper_count():
    agent = Agent(ScriptedChat([]), TableTool(TABLE), AgentConfig(llm="x", max_searches=3, max_refusals=4,
                                                                  abstract_chars=77))
    assert agent.prompts == Prompts(max_searches=3, papers_per_search=TableTool.max_results)
    assert (agent.graph_cfg.max_searches, agent.graph_cfg.max_refusals, agent.new_budget().abstract_chars) == (3, 4, 77)
    assert agent.initial_messages("Claim X.") == [{"role": "system", "content": agent.prompts.system()},
                                                  {"role": "user", "content": agent.prompts.user("Claim X.")}]




def test_episode_records_everything_that_happened():
    cfg = AgentConfig(llm="scripted:<inline>", max_searches=4, max_refusals=1, abstract_chars=500)
    llm = ScriptedChat([calls("vit", "vit2"), {"content": REPORT}])
    ep = Agent(llm, TableTool(TABLE), cfg, search_backend="table-backend").run(
        "Vitamin D prevents fractures.", claim_id="c7", dataset="scifact", gold_label="REFUTED")
    assert (ep.claim, ep.claim_id, ep.dataset, ep.gold_label) == ("Vitamin D prevents fractures.", "c7", "scifact",
                                                                  Label.REFUTED)
    assert ep.messages[:2] == Agent(llm, TableTool(TABLE), cfg).initial_messages("Vitamin D prevents fractures.")
    assert ep.queries == [QueryRecord(query="vit", pmids=["1", "2"], n_results=2, backend="table",
                                      translation="vit[All Fields]"),
                          QueryRecord(query="vit2", pmids=["1"], n_results=1, backend="table",
                                      translation="vit2[All Fields]")]
    assert ep.ledger == {"1": A1, "2": A2} and ep.ledger["1"] != A1_EDITED  # first retrieval wins
    assert ep.tool_errors == [] and ep.final_text == REPORT and ep.report.conclusion is Label.SUPPORTED
    assert (ep.stop_reason, ep.searches, ep.llm_calls) == ("final_answer", 2, 2)
    assert (ep.llm, ep.llm_fingerprint, ep.search_backend) == ("scripted:<inline>", llm.fingerprint(), "table-backend")
    assert ep.config == asdict(cfg)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", ep.started_at)
    assert set(ep.timing) == {"total_s", "llm_s", "search_s"}


def test_no_gold_label_and_no_ids_by_default():
    ep = Agent(ScriptedChat([{"content": REPORT}]), TableTool(TABLE), AgentConfig(llm="x")).run("A claim.")
    assert (ep.claim_id, ep.dataset, ep.gold_label, ep.search_backend) == (None, None, None, "")


def test_the_final_text_is_only_an_assistants():
    class Dead(ScriptedChat):
        def chat(self, messages, tools):
            from biocheck.llm import LLMError

            raise LLMError("down")

    ep = Agent(Dead([]), TableTool(TABLE), AgentConfig(llm="x")).run(REPORT)  # the claim text looks like a report
    assert ep.messages[-1]["role"] == "user" and ep.final_text == "" and ep.report.conclusion is None


# -- wiring.make_agent -------------------------------------------------------------------------------------------


def test_build_agent_passes_the_generation_settings_and_the_search_backend(monkeypatch, evidence):
    seen = {}

    def fake_make_llm(spec, gen):
        seen["spec"], seen["gen"] = spec, gen
        return ScriptedChat([], spec=spec)

    import biocheck.llm as llm_mod

    monkeypatch.setattr(llm_mod, "make_llm", fake_make_llm)
    search_cfg, _ = evidence
    cfg = AgentConfig(llm="scripted:x.json", max_new_tokens=77, temperature=0.7, top_p=0.9, seed=11, max_searches=2)
    agent = make_agent(cfg, SearchConfig(index_dir=search_cfg.index_dir, store=search_cfg.store, max_results=4))
    assert seen == {"spec": "scripted:x.json", "gen": GenerationConfig(max_new_tokens=77, temperature=0.7, top_p=0.9,
                                                                      seed=11)}
    assert agent.search_backend == "local" and agent.tool.max_results == 4 and agent.cfg is cfg
    assert agent.prompts == Prompts(max_searches=2, papers_per_search=4)


# -- read_claims ------------------------------------------------------------------------------------------


def test_load_claims_reads_prepared_records_and_bare_claims(tmp_path):
    p = tmp_path / "claims.jsonl"
    p.write_text('{"id": 7, "claim": "A.", "label": "SUPPORTED", "dataset": "scifact"}\n{"claim": "B."}\n')
    assert read_claims(p) == [{"claim": "A.", "claim_id": "7", "dataset": "scifact", "gold_label": "SUPPORTED"},
                              {"claim": "B.", "claim_id": "2", "dataset": None, "gold_label": None}]


@pytest.mark.parametrize("second", ['{"claim": "  "}', '{"claim": 3}', '{"text": "B."}'])
def test_load_claims_names_the_record_without_a_claim(tmp_path, second):
    p = tmp_path / "claims.jsonl"
    p.write_text('{"claim": "A."}\n' + second + "\n")
    with pytest.raises(InputError) as e:
        read_claims(p)
    assert str(e.value) == f"{p}, record 2: needs a non-empty 'claim' string."


@pytest.mark.parametrize("record, message", [
    ('{"claim": "B.", "label": "TRUE"}', "unknown label 'TRUE'; use one of SUPPORTED, REFUTED, NEI (or leave it out)."),
    ('{"claim": "B.", "label": "supported"}', "unknown label 'supported'; use one of SUPPORTED, REFUTED, NEI (or leave "
                                              "it out)."),
    ('{"claim": "B.", "dataset": 5}', "'dataset' must be a string, not int 5."),
    ('{"claim": "B.", "dataset": ["x"]}', "'dataset' must be a string, not list ['x']."),
    ('{"claim": "B.", "id": ["x"]}', "'id' must be a string or an integer, not list ['x']."),
    ('{"claim": "B.", "id": true}', "'id' must be a string or an integer, not bool True."),
    ('{"claim": "B.", "id": " "}', "'id' must not be empty."),
])
def test_load_claims_checks_labels_datasets_and_ids_up_front(tmp_path, record, message):
    p = tmp_path / "claims.jsonl"
    p.write_text('{"claim": "A.", "label": "NEI", "dataset": "scifact"}\n' + record + "\n")
    with pytest.raises(InputError) as e:
        read_claims(p)
    assert str(e.value) == f"{p}, record 2: {message}"


def test_a_null_id_is_the_record_number(tmp_path):
    p = tmp_path / "claims.jsonl"
    p.write_text('{"claim": "A.", "id": null}\n')
    assert read_claims(p)[0]["claim_id"] == "1"


@pytest.mark.parametrize("content", ["", "\n  \n"])
def test_an_empty_claims_file_says_it_has_no_claims(tmp_path, content):
    p = tmp_path / "claims.jsonl"
    p.write_text(content)
    with pytest.raises(InputError) as e:
        read_claims(p)
    assert str(e.value).startswith(f"{p}: no claims in the file; write one JSON object per line, e.g. {{\"claim\": ")
    assert "fetch" not in str(e.value)


def test_a_folder_or_a_missing_file_as_claims_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="is a folder; --claims wants a JSONL file"):
        read_claims(tmp_path)
    with pytest.raises(InputError, match="no such claims file"):
        read_claims(tmp_path / "nope.jsonl")


def test_load_claims_rejects_duplicate_ids(tmp_path):
    p = tmp_path / "claims.jsonl"
    rows = [{"id": f"d{i}", "claim": "x"} for i in range(7)] * 2 + [{"id": "u", "claim": "y"}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError) as e:
        read_claims(p)
    assert str(e.value) == (f"{p}: duplicate claim ids ['d0', 'd1', 'd2', 'd3', 'd4']; "
                            "traces are written per id.")


# -- traces -----------------------------------------------------------------------------------------------


def test_trace_path_keeps_plain_ids_and_slugs_the_rest_with_a_hash(tmp_path):
    assert trace_path(tmp_path, "ab9-_.x") == tmp_path / "ab9-_.x.json"
    assert re.fullmatch(r"a_b_c_d-[0-9a-f]{10}\.json", trace_path(tmp_path, "a/b c:d").name)
    assert re.fullmatch(r"Ab9-[0-9a-f]{10}\.json", trace_path(tmp_path, "Ab9").name)  # case-insensitive disks


def test_write_trace_is_indented_json_with_a_final_newline(tmp_path):
    ep = Agent(ScriptedChat([{"content": REPORT}]), TableTool(TABLE), AgentConfig(llm="x")).run("A claim.")
    write_trace(ep, tmp_path / "t.json")
    assert (tmp_path / "t.json").read_text() == ep.model_dump_json(indent=2) + "\n"


# -- run_batch and summarize --------------------------------------------------------------------------------

CLAIMS = [{"claim": f"Claim {i}.", "claim_id": f"c{i}", "dataset": "ds", "gold_label": "SUPPORTED" if i else None}
          for i in range(3)]


def test_run_batch_writes_each_trace_and_the_summary(tmp_path):
    agent = Agent(ScriptedChat([calls("vit"), {"content": REPORT}]), TableTool(TABLE), AgentConfig(llm="x"))
    summary = run_batch(agent, CLAIMS, tmp_path / "out", progress=False)
    eps = [Episode.model_validate_json(trace_path(tmp_path / "out", c["claim_id"]).read_text()) for c in CLAIMS]
    assert [(e.claim, e.claim_id, e.dataset, e.gold_label) for e in eps] == [
        ("Claim 0.", "c0", "ds", None), ("Claim 1.", "c1", "ds", Label.SUPPORTED), ("Claim 2.", "c2", "ds",
                                                                                      Label.SUPPORTED)]
    assert summary == {**summarize(eps), "failed": [], "reused": 0, "rerun": {}}
    assert (tmp_path / "out" / "summary.json").read_text() == json.dumps(summary, indent=2) + "\n"


def test_summarize_counts_and_means():
    def ep(conclusion: str | None, searches: int, total: float, problems=(), stop="final_answer"):
        from biocheck.agent.report.schema import Report

        return Episode(claim="c", messages=[], report=Report(conclusion=conclusion), parse_problems=list(problems),
                       searches=searches, stop_reason=stop, timing={"total_s": total})

    eps = [ep("SUPPORTED", 2, 1.0), ep("SUPPORTED", 3, 2.0, problems=["no summary"]), ep(None, 5, 3.5, stop="x"),
           ep("REFUTED", 0, 0.5)]
    eps.append(Episode(claim="c", messages=[], report=ep(None, 0, 0).report))  # no timing recorded
    assert summarize(eps) == {
        "episodes": 5, "mean_searches": (2 + 3 + 5 + 0 + 0) / 5, "parsed_ok_rate": 2 / 5,
        "conclusions": {"SUPPORTED": 2, "none": 2, "REFUTED": 1},
        "stop_reasons": {"final_answer": 3, "x": 1, "": 1}, "mean_seconds": (1.0 + 2.0 + 3.5 + 0.5) / 5}


def test_summarize_nothing_is_zeros():
    assert summarize([]) == {"episodes": 0, "mean_searches": 0.0, "parsed_ok_rate": 0.0, "conclusions": {},
                             "stop_reasons": {}, "mean_seconds": 0.0}


def test_zero_workers_still_runs_the_batch(tmp_path):
    agent = Agent(ScriptedChat([{"content": REPORT}]), TableTool(TABLE), AgentConfig(llm="x"))
    assert run_batch(agent, CLAIMS, tmp_path, workers=0, progress=False)["episodes"] == 3


class OverlapChat(ScriptedChat):
    """Notices two episodes in flight at once: the first one waits a little for a second to start."""

    def __init__(self) -> None:
        super().__init__([{"content": REPORT}])
        self.active, self.overlap, self.lock = 0, False, threading.Lock()
        self.second_started = threading.Event()

    def chat(self, messages, tools):
        with self.lock:
            self.active += 1
            first = self.active == 1
            if not first:
                self.overlap = True
                self.second_started.set()
        if first:
            self.second_started.wait(timeout=0.5)  # no timing is asserted: only whether another episode started
        with self.lock:
            self.active -= 1
        return super().chat(messages, tools)


@pytest.mark.parametrize("workers, overlap", [(1, False), (2, True)])
def test_workers_bound_the_episodes_in_flight(tmp_path, workers, overlap):
    llm = OverlapChat()
    run_batch(Agent(llm, TableTool(TABLE), AgentConfig(llm="x")), CLAIMS[:2], tmp_path, workers=workers,
              progress=False)
    assert llm.overlap is overlap


@pytest.mark.parametrize("progress", [True, False])
def test_progress_bar_only_when_asked(tmp_path, capsys, progress):
    agent = Agent(ScriptedChat([{"content": REPORT}]), TableTool(TABLE), AgentConfig(llm="x"))
    run_batch(agent, CLAIMS, tmp_path, progress=progress)
    err = capsys.readouterr().err
    # the bar: named, counting claims to the total (tqdm shows the rate as "?claim/s" before the first one)
    shown = [bool(re.search(r"(^|[\r\n])episodes: ", err)), "| 0/3 [" in err, "| 3/3 [" in err, "?claim/s]" in err]
    assert shown == [progress] * 4


def test_by_default_one_episode_at_a_time_with_a_progress_bar_into_a_new_folder(tmp_path, capsys):
    llm = OverlapChat()
    out = tmp_path / "runs" / "today"  # parents are created
    summary = run_batch(Agent(llm, TableTool(TABLE), AgentConfig(llm="x")), CLAIMS[:2], out)
    assert llm.overlap is False and summary["episodes"] == 2 and (out / "summary.json").is_file()
    assert "| 2/2 [" in capsys.readouterr().err


# -- the scripted model's file (llm/scripted.py) --------------------------------------------------------------

@pytest.mark.parametrize("arguments", [[1, 2], 5, True, "[1, 2]", "7"])
def test_scripted_tool_arguments_that_are_not_an_object_are_refused_when_loading(tmp_path, arguments):
    from biocheck.llm import LLMError

    p = tmp_path / "s.json"
    p.write_text(json.dumps([{"content": "x"}, {"tool_calls": [{"name": "search_pubmed", "arguments": arguments}]}]))
    with pytest.raises(LLMError) as e:
        ScriptedChat.from_file(p)
    assert str(e.value) == (f"scripted:{p}: turn 1, tool call 0: 'arguments' must be an object such as "
                            f'{{"query": "..."}} (or a JSON string of one), not {arguments!r:.60}.')


@pytest.mark.parametrize("arguments, parsed", [({"query": "q"}, {"query": "q"}), ('{"query": "q"}', {"query": "q"}),
                                               ("vitamin D", {"query": "vitamin D"}), (None, {}), ({}, {})])
def test_scripted_tool_arguments_objects_json_strings_and_plain_text(tmp_path, arguments, parsed):
    chat = ScriptedChat([{"tool_calls": [{"name": "search_pubmed", "arguments": arguments}]}])
    assert chat.chat([], []).tool_calls[0].arguments == parsed


def test_a_folder_as_script_is_an_llm_error(tmp_path):
    from biocheck.llm import LLMError

    with pytest.raises(LLMError, match=rf"^scripted: {re.escape(str(tmp_path))} is a folder; give a JSON file"):
        ScriptedChat.from_file(tmp_path)
