"""Training and measuring the evidence judge (`biocheck judge train`, docs/rewards.md "Training the judge").

pairs.py builds claim–paper pairs from SciFact rationales; head.py and align.py are the two recipes (a label
head written into the LM head; a classifier over token alignments, read by rewards/judge/align_judge.py);
train.py runs either (`JudgeTrainConfig`, `train_judge`); evaluate.py measures any judge on labelled pairs
(`evaluate_judge`).
"""
