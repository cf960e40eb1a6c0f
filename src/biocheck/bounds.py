"""Bounds a Config field declares in its type: `epochs: Count = 3`.

The one statement of a field's range: `biocheck.params.check_types` has pydantic enforce them when a section of
params.yaml is read (and `check_nested` for a sub-section such as evaluate.cer), so a bad value fails at once with
its key ("train.max_steps must be >= 1, not -5") rather than as a 192-step run, a model replaced by untrained
weights, or a traceback an hour later. A Config's `__post_init__` checks only what a type cannot say (a rule
between fields, a name among choices). Plain `typing.Annotated` + annotated_types (pydantic's vocabulary), so a
dataclass built in code is unaffected.
"""

from __future__ import annotations

import math
from typing import Annotated

import annotated_types as at

_FINITE = at.Predicate(math.isfinite)  # YAML's .inf / .nan: no duration, rate or weight

Count = Annotated[int, at.Ge(1)]  # how many of something: steps, epochs, generations, workers, attempts
NonNegative = Annotated[int, at.Ge(0)]  # a count that may be zero (retries, refusals)
Positive = Annotated[float, at.Gt(0), _FINITE]  # a duration, a rate, a learning rate
NonNegativeFloat = Annotated[float, at.Ge(0), _FINITE]  # a wait that may be zero (a backoff), a temperature, a weight
Share = Annotated[float, at.Ge(0), at.Le(1)]  # a share or a probability threshold, 0 and 1 included
PositiveShare = Annotated[float, at.Gt(0), at.Le(1)]  # top_p, a cosine threshold: above 0, at most 1
