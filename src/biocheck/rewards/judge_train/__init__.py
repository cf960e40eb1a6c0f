"""Training and measuring the evidence judge (`biocheck judge train`, docs/rewards.md "Training the judge").

pairs.py builds claim–paper pairs from SciFact rationales, head.py is the recipe (a label head on a frozen
backbone, written into the LM head), train.py runs it (`JudgeTrainConfig`, `train_judge`), evaluate.py
measures any judge on labelled pairs (`evaluate_judge`).
"""
