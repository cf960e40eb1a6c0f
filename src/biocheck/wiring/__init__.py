"""The build layer (`wiring`; `build/` is a folder name git, ruff and packaging tools skip): params -> typed configs (`config.py`) -> the shared components (`components.py`).

It sits below `train/` and `evaluate/` (which build their tools, prompts and judges here) and above the
parts it assembles (data, evidence, llm, agent, rewards, base_model); `pipeline/` adds the stages. The layer order
is checked by import-linter (pyproject.toml, [tool.importlinter]; tests/project/test_layers.py).
"""

from biocheck.wiring.components import agent, agent_generation, make_agent, make_judge, make_prompts, make_search_tool
from biocheck.wiring.config import (
    JUDGE_KEYS,
    SECTIONS,
    JudgeConfig,
    agent_config,
    evidence_config,
    fetch_config,
    judge_config,
    model_config,
    params_of,
    prepare_config,
    prepared_dir,
    primary_variant,
    refresh_config,
    reward_config,
    search_config,
    sft_dir,
    tracked,
    tracking_config,
    validate_config,
    variant_path,
    variant_suffix,
    with_default,
)

__all__ = ["JUDGE_KEYS", "SECTIONS", "JudgeConfig", "agent", "agent_generation", "agent_config", "evidence_config", "fetch_config",
           "judge_config", "make_agent", "make_judge", "make_prompts", "make_search_tool", "model_config",
           "params_of", "prepare_config", "prepared_dir", "primary_variant", "refresh_config", "reward_config",
           "search_config", "sft_dir", "tracked", "tracking_config", "validate_config", "variant_path",
           "variant_suffix", "with_default"]
