"""Rewards for the agent's reports: strict evidence grounding first (a later issue adds the rest)."""
