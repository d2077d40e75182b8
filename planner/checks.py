"""The one rule for numbers given in Python: any integral or real number, numpy scalars included, never a bool."""

from __future__ import annotations

import re
from decimal import Decimal
from numbers import Integral, Real

import numpy as np

from planner.errors import PlannerError


def is_int(value) -> bool:
    """A whole number: int or a numpy integer (numbers.Integral), not True/False."""
    return isinstance(value, Integral) and not isinstance(value, (bool, np.bool_))


MAX_COUNT_TEXT = "1e30"  # tokens and batch tokens: far beyond any training run, and finite in float arithmetic
MAX_COUNT = float(MAX_COUNT_TEXT)     # the text is what messages print ({MAX_COUNT} would print 1e+30)


def shown(value) -> str:
    """A value for an error message: repr, with a huge integer as its digit count (10**400 is 401 digits)."""
    text = repr(value)
    return f"a {len(text)}-digit integer" if isinstance(value, int) and len(text) > 32 else text


def is_real(value) -> bool:
    """A real number: int, float or a numpy integer or float (numbers.Real), not True/False."""
    return isinstance(value, Real) and not isinstance(value, (bool, np.bool_))


def checked_int(value, field: str, minimum: int = 1) -> int:
    """`value` as a Python int, or the one-line error: an integer of at least `minimum` was expected. A 0-d integer
    array (np.array(64)) is the integer it holds."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iu":
        value = value.item()
    if not is_int(value) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise PlannerError(field, f"got {value!r}, expected {what}")
    return int(value)


def checked_array(value, field: str, least: float = 1, most: float = np.inf):
    """`value` (a number or an array of them) as an array, or the one-line error naming the first value that is
    not a finite number in [least, most]: the cost functions' guard against a sign or a NaN priced silently."""
    a = np.asarray(value)
    if a.dtype.kind not in "iuf":
        raise PlannerError(field, f"got {shown(value)}, expected numbers (not {a.dtype})")
    bad = ~np.isfinite(a) | (a < least) | (a > most)
    if np.any(bad):
        first = (a[bad] if a.ndim else a).flat[0].item()
        span = f">= {least:g}" if most == np.inf else f"from {least:g} to {most:g}"
        raise PlannerError(field, f"got {'an array holding ' if a.ndim else ''}{first!r}, expected finite numbers "
                                  f"{span}")
    return a


# The one suffix rule of counts (--tokens, --global-batch-tokens): K, M, G and T are powers of 1000, or of 1024 for
# a flag that counts in powers of two (batch tokens); B (billion) is G; Ki, Mi, Gi, Ti are always powers of 1024.
SUFFIX_RULE = ("K, M, G (or B), T: powers of 1000 for --tokens, of 1024 for --global-batch-tokens; Ki, Mi, Gi, Ti: "
               "always powers of 1024")
_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_count(text: str, flag: str, binary: bool = False) -> int:
    """A count with an optional suffix under SUFFIX_RULE: '16M' is 16 * 2^20 when `binary` (batch tokens: whole
    power-of-two sequences), else 16e6; '1.5B' is '1.5G'; 'Mi' is always 2^20; '1e12' is 10^12. The CLI reads
    --tokens and --global-batch-tokens with it, and the library takes the same strings."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgt]i?|b)?\s*", str(text).lower())
    if not match:
        raise PlannerError(flag, f"got {text!r}, expected a number with an optional suffix ({SUFFIX_RULE})")
    suffix = (match.group(2) or "").replace("b", "g")
    if binary and suffix in ("k", "m", "g", "t"):
        suffix += "i"
    value = Decimal(match.group(1)) * _SUFFIX[suffix]          # exact: 8.2T is 8,200,000,000,000 (floats: ...999.999)
    if value > Decimal(MAX_COUNT_TEXT):
        raise PlannerError(flag, f"got {text!r}, expected at most {MAX_COUNT_TEXT}")
    if value < 1 or value != value.to_integral_value():
        raise PlannerError(flag, f"got {text!r}, expected a positive whole number")
    return int(value)
