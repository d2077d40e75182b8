"""The one rule for numbers given in Python: any integral or real number, numpy scalars included, never a bool."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np

from planner.errors import PlannerError


def is_int(value) -> bool:
    """A whole number: int or a numpy integer (numbers.Integral), not True/False."""
    return isinstance(value, Integral) and not isinstance(value, (bool, np.bool_))


def is_real(value) -> bool:
    """A real number: int, float or a numpy integer or float (numbers.Real), not True/False."""
    return isinstance(value, Real) and not isinstance(value, (bool, np.bool_))


def checked_int(value, field: str, minimum: int = 1) -> int:
    """`value` as a Python int, or the one-line error: an integer of at least `minimum` was expected."""
    if not is_int(value) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise PlannerError(field, f"got {value!r}, expected {what}")
    return int(value)
