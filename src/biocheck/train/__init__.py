"""EG-GRPO training (TRL GRPOTrainer), the SFT warm start, and checkpoint selection."""
