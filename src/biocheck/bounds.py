"""Bounds a Config field declares in its type: `epochs: Count = 3`.

`biocheck.params.check_types` has pydantic enforce them when a section of params.yaml is read, so a bad value
fails at once with its key ("train.max_steps must be >= 1, not -5") rather than as a 192-step run, a model replaced
by untrained weights, or a traceback an hour later. Plain `typing.Annotated` + annotated_types (pydantic's
vocabulary), so a dataclass built in code is unaffected.
"""

from __future__ import annotations

from typing import Annotated

import annotated_types as at

Count = Annotated[int, at.Ge(1)]  # how many of something: steps, epochs, generations, workers, attempts
NonNegative = Annotated[int, at.Ge(0)]  # a count that may be zero (retries, refusals)
Positive = Annotated[float, at.Gt(0)]  # a duration, a rate, a learning rate
NonNegativeFloat = Annotated[float, at.Ge(0)]  # a wait that may be zero (a backoff)
