"""Which way a claim and a paper's sentences say an effect goes: negation and direction words, counted.

The alignment features (align_judge.py) find where a paper speaks about the claim, but cosine similarity does
not see "not" or "lower" against "higher": a refuting paper matches the claim as well as a supporting one. So
the alignment judge adds these 15 numbers, read from the claim and from the paper sentences its layer aligns
best with the claim. A fixed lexicon, not learnt: the judge's training set (a few hundred pairs) is too small
to learn negation from, and the words are the field's ordinary ways of saying an effect's direction.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

N_CUES = 15
NEGATION = re.compile(
    r"\b(not|no|never|none|neither|nor|without|cannot|can't|doesn't|don't|didn't|isn't|aren't|wasn't|weren't|"
    r"fail(s|ed)?|lack(s|ed|ing)?|absence|absent|unaffected|unchanged|unrelated|independent(ly)?|insufficient|"
    r"non-?significant|irrespective)\b", re.I)
UP = re.compile(
    r"\b(increas\w*|higher|more|greater|elevat\w*|enhanc\w*|promot\w*|improv\w*|rais\w*|upregulat\w*|"
    r"up-regulat\w*|positive\w*|better|gain\w*|induc\w*|activat\w*|stimulat\w*|accelerat\w*|augment\w*|boost\w*|"
    r"rise|rises|risen|exceed\w*|superior|larger|longer|stronger|faster|benefit\w*|protect\w*|effective)\b", re.I)
DOWN = re.compile(
    r"\b(decreas\w*|lower|less|fewer|reduc\w*|declin\w*|inhibit\w*|suppress\w*|impair\w*|downregulat\w*|"
    r"down-regulat\w*|negative\w*|worse|loss|lost|attenuat\w*|prevent\w*|block\w*|diminish\w*|smaller|shorter|"
    r"weaker|slower|abolish\w*|deplet\w*|inferior|harm\w*|risk|ineffective|abrogat\w*)\b", re.I)


def counts(text: str) -> tuple[int, int, int]:
    """(negation, up, down) word counts."""
    return len(NEGATION.findall(text)), len(UP.findall(text)), len(DOWN.findall(text))


def _polarity(neg: int, up: int, down: int) -> int:
    """+1 the effect goes up, -1 down, 0 neither; an odd number of negations flips it."""
    v = (up > down) - (up < down)
    return -v if neg % 2 else v


def cue_features(claim: str, top: Sequence[str], n_sentences: int, paper_negations: int) -> list[float]:
    """[N_CUES] from the claim, the best-aligned paper sentences `top`, the paper's sentence count and negations."""
    cn, cu, cd = counts(claim)
    sn, su, sd = (sum(v) for v in zip(*(counts(s) for s in top), strict=True)) if top else (0, 0, 0)
    pc, ps = _polarity(cn, cu, cd), _polarity(sn, su, sd)
    c_up, c_down, s_up, s_down = cu > 0, cd > 0, su > 0, sd > 0
    return [float(v) for v in (
        cn > 0, sn > 0, paper_negations / max(1, n_sentences), pc, ps, pc * ps,
        c_up, c_down, s_up, s_down, c_up and s_down, c_down and s_up, c_up and s_up, c_down and s_down,
        cn > 0 and sn == 0)]
