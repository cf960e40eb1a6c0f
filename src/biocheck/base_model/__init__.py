"""Model artefacts: the tiny local Qwen3 model (`biocheck model init`) and model references (path or hub id)."""
