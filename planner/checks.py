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


def checked_array(value, field: str, least: float = 1, most: float = np.inf, whole: bool = False):
    """`value` (a number or an array of them) as an array, or the one-line error naming the first value that is
    not a finite number in [least, most] (with `whole`, a whole number: a degree or a count, 8.0 but not 1.5): the
    cost functions' guard against a sign, a NaN or a fraction priced silently."""
    a = np.asarray(value)
    if a.dtype.kind not in "iuf":
        raise PlannerError(field, f"got {shown(value)}, expected numbers (not {a.dtype})")
    if not a.size:
        return a
    floating = a.dtype.kind == "f"
    if not floating and a.min() >= least and a.max() <= most:     # integers: two reductions, no masks
        return a
    bad = (a < least) | (a > most)
    if floating:
        bad |= ~np.isfinite(a) | ((a != np.floor(a)) if whole else False)
    if np.any(bad):
        first = (a[bad] if a.ndim else a).flat[0].item()
        span = f">= {least:g}" if most == np.inf else f"from {least:g} to {most:g}"
        kind = "whole numbers" if whole else "finite numbers"
        raise PlannerError(field, f"got {'an array holding ' if a.ndim else ''}{first!r}, expected {kind} {span}")
    return a


def integral(a: np.ndarray) -> np.ndarray:
    """A float array of whole, finite numbers (8.0: a table column pandas made float) as int64; anything else
    unchanged, for the checks to judge."""
    if a.dtype.kind == "f" and np.all(np.isfinite(a)) and np.all(a == np.floor(a)):
        return a.astype(np.int64)
    return a


def checked_flag(value, field: str):
    """`value` (a switch, or an array of them) as a bool array: booleans, or numbers that are 0 or 1; a string
    ("False" is truthy to numpy) or a NaN is the one-line error naming the argument."""
    a = np.asarray(value)
    if a.dtype.kind == "b":
        return a
    if a.dtype.kind in "iuf" and np.all((a == 0) | (a == 1)):
        return a.astype(bool)
    bad = a.flat[0] if a.dtype.kind not in "iuf" or not a.size else a[(a != 0) & (a != 1)].flat[0]
    bad = bad.item() if isinstance(bad, np.generic) else bad
    raise PlannerError(field, f"got {'an array holding ' if a.ndim else ''}{bad!r}, expected true/false (or 1/0)")


def tokens_and_tp(seq_len, micro_batch, tp):
    """(s·b tokens as floats, the TP degree) of a cost function's arguments, checked: tokens per rank may be a
    fraction (s/cp), the micro-batch and the degree are whole numbers of at least 1."""
    s = checked_array(seq_len, "seq_len").astype(float)
    return s * checked_array(micro_batch, "micro_batch", whole=True).astype(float), checked_array(tp, "tp", whole=True)


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
        what = "a positive number" if str(text).strip().startswith("-") else "a number"
        raise PlannerError(flag, f"got {text!r}, expected {what} with an optional suffix ({SUFFIX_RULE})")
    suffix = (match.group(2) or "").replace("b", "g")
    if binary and suffix in ("k", "m", "g", "t"):
        suffix += "i"
    value = Decimal(match.group(1)) * _SUFFIX[suffix]          # exact: 8.2T is 8,200,000,000,000 (floats: ...999.999)
    if value > Decimal(MAX_COUNT_TEXT):
        raise PlannerError(flag, f"got {text!r}, expected at most {MAX_COUNT_TEXT}")
    if value < 1 or value != value.to_integral_value():
        raise PlannerError(flag, f"got {text!r}, expected a positive whole number")
    return int(value)
