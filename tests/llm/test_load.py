"""The one model-folder test (`llm.load.model_dir_gap` / `is_model_dir`): every place that asks "is there a model
here yet" (evaluation, selection's copy, the study, the SFT warm start, `biocheck check`) answers as the loader
does, so a LoRA adapter checkpoint (adapter_config.json + adapter weights, no config.json), which the loader
loads, is a model everywhere; a folder without weights is one everywhere nowhere."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from biocheck import pipeline, wiring
from biocheck.cli import app
from biocheck.io import InputError
from biocheck.llm.load import ModelFilesError, check_model_dir, is_model_dir, model_dir_gap
from tests.helpers.builders import write_test_splits

runner = CliRunner()
RANK = 2
CLAIMS = {"scifact": [("1", "Vitamin D prevents fractures.", "SUPPORTED")]}


def write_lora_adapter(base: Path, out: Path) -> Path:
    """A LoRA adapter over `base` as PEFT's `save_pretrained` writes one (adapter_config.json, adapter_model.
    safetensors with PEFT's tensor names) plus the tokenizer, as TRL saves a LoRA checkpoint; lora_B non-zero,
    so the adapted model's logits differ from the base's. Written by hand: the suite does not need PEFT."""
    import torch
    from safetensors.torch import save_file

    config = json.loads((base / "config.json").read_text())
    hidden, head = config["hidden_size"], config["head_dim"]
    outs = {"q_proj": config["num_attention_heads"] * head, "v_proj": config["num_key_value_heads"] * head}
    gen = torch.Generator().manual_seed(0)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for proj, width in outs.items():
            name = f"base_model.model.model.layers.{layer}.self_attn.{proj}"
            tensors[f"{name}.lora_A.weight"] = torch.randn(RANK, hidden, generator=gen)
            tensors[f"{name}.lora_B.weight"] = torch.randn(width, RANK, generator=gen)
    out.mkdir(parents=True)
    save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    (out / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": str(base.resolve()), "r": RANK,
        "lora_alpha": 2 * RANK, "lora_dropout": 0.0, "target_modules": sorted(outs), "bias": "none",
        "inference_mode": True}))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy2(base / name, out / name)
    return out


@pytest.fixture
def adapter(tiny_model, tmp_path) -> Path:
    return write_lora_adapter(tiny_model, tmp_path / "checkpoint-2")


@pytest.fixture
def project(evidence_workdir: Path, tiny_model: Path) -> Path:
    """A project whose agent.llm is the tiny base model; models/selected is for each test to fill."""
    write_test_splits(evidence_workdir, CLAIMS)
    params = yaml.safe_load((evidence_workdir / "params.yaml").read_text())
    params["agent"].update(llm=f"transformers:{tiny_model}", max_new_tokens=4, max_searches=0)
    params["reward"]["judge"] = None
    params["evaluate"].update(eqs_judge=None, systems=["eg_grpo"], datasets=["scifact"], bootstrap=10, workers=1)
    (evidence_workdir / "params.yaml").write_text(yaml.safe_dump(params))
    return evidence_workdir


def test_a_lora_adapter_is_a_model_folder_and_a_folder_without_weights_is_not(adapter, tiny_model, tmp_path):
    assert is_model_dir(adapter) and is_model_dir(tiny_model)
    check_model_dir(adapter)  # the loader's own check: the adapter's JSON and weights are intact
    config_only = tmp_path / "config_only"
    config_only.mkdir()
    shutil.copy2(tiny_model / "config.json", config_only / "config.json")
    adapter_only = tmp_path / "adapter_only"
    adapter_only.mkdir()
    shutil.copy2(adapter / "adapter_config.json", adapter_only / "adapter_config.json")
    other_name = tmp_path / "other_name"  # weights under a name the loader does not read
    other_name.mkdir()
    shutil.copy2(tiny_model / "config.json", other_name / "config.json")
    shutil.copy2(tiny_model / "model.safetensors", other_name / "weights.safetensors")
    for folder in (config_only, adapter_only, other_name):
        assert not is_model_dir(folder) and model_dir_gap(folder).startswith("no weights file (model.safetensors")
        with pytest.raises(ModelFilesError, match=r"no weights file \(model.safetensors, pytorch_model.bin or a "):
            check_model_dir(folder)
    assert model_dir_gap(tmp_path / "missing") == "no such model folder"
    assert model_dir_gap(tmp_path) == "not a model folder (no config.json)"


def test_a_lora_checkpoint_passes_selection_and_the_evaluations_model_check(project, adapter):
    from biocheck.train.select import checkpoint_table

    checkpoints = project / "models" / "checkpoints"
    ckpt = Path(shutil.copytree(adapter, checkpoints / "checkpoint-2"))
    (ckpt / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": 2, "eval_reward": 0.5}]}))
    rows, _ = checkpoint_table(checkpoints)  # `biocheck select`: its state and model files checked
    assert [r["step"] for r in rows] == [2]
    shutil.copytree(adapter, project / "models" / "selected")  # what `biocheck select` copies for it
    setup = pipeline.evaluate_setup("params.yaml")  # the default: models/selected (failed: no config.json)
    assert list(setup.systems) == ["eg_grpo"]
    assert pipeline.eval_model(wiring.params_of("params.yaml"), str(adapter)) == f"transformers:{adapter}"
    from biocheck.agent.run import choose_llm  # `biocheck check` after select: the adapter, not agent.llm

    assert choose_llm(None, None, Path("models/selected"))[0] == "transformers:models/selected"


def test_a_selected_folder_without_weights_is_refused_in_one_line_naming_the_stage(project, adapter):
    selected = project / "models" / "selected"
    selected.mkdir(parents=True)
    shutil.copy2(adapter / "adapter_config.json", selected / "adapter_config.json")
    with pytest.raises(InputError) as e:
        pipeline.evaluate_setup("params.yaml")
    assert str(e.value) == "eg_grpo: no model in models/selected; run `dvc repro select@eg_grpo` first."
    r = runner.invoke(app, ["evaluate", "--no-progress"])
    assert r.exit_code == 1 and "eg_grpo: no model in models/selected; run `dvc repro select@eg_grpo`" in r.output
    assert "Traceback" not in r.output


def test_a_lora_checkpoint_loads_and_is_evaluated(project, adapter, tiny_model):
    """With PEFT installed (TRL's LoRA training needs it), the loader loads the adapter over its base, and
    `biocheck evaluate` runs it as the selected model."""
    pytest.importorskip("peft")
    import torch

    from biocheck.llm.load import load_model

    adapted, base = load_model(adapter, device="cpu"), load_model(tiny_model, device="cpu")
    ids = torch.tensor([[1, 5, 9, 12]])
    with torch.no_grad():
        assert not torch.allclose(adapted.model(ids).logits, base.model(ids).logits)  # the adapter is applied
    shutil.copytree(adapter, project / "models" / "selected")
    r = runner.invoke(app, ["evaluate", "--out", "adhoc", "--no-progress"])
    assert r.exit_code == 0, r.output
    preds = (project / "adhoc" / "predictions" / "eg_grpo" / "scifact.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in preds] == ["1"]
