"""EG-GRPO's reward: its components (components.py), strict evidence grounding (grounding.py) and the
evidence judge (judge/). The trainer's reward functions (train/reward_funcs.py) and trace scoring
(evaluate/score.py) are thin layers over these."""
