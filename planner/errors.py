"""The one user-facing exception type."""

from __future__ import annotations


class PlannerError(ValueError):
    """Bad input: names the offending field or flag, what it got and what was expected.

    The CLI prints ``str(error)`` as one line on stderr and exits with code 2; the library raises it as is.
    """

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")
