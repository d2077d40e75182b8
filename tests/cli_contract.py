"""The bad-input contract the CLI tests share: `main(argv)` in-process; bad input is one stderr line
("error: FIELD: message") naming the flag or field, exit code 2, nothing on stdout, no traceback, and no exception
escaping `main()`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planner.cli import main


def run(capsys, *argv):
    """main(argv) in-process: (exit code, stdout, stderr); an exception escaping main() fails the test."""
    try:
        code = main([str(a) for a in argv])
    except Exception as exc:  # noqa: BLE001 - any escaping exception is a contract failure
        pytest.fail(f"{type(exc).__name__} escaped main(): {exc}")
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def error_line(code, out, err) -> str:
    """Assert the bad-input contract and return the single error line."""
    assert code == 2, f"exit code {code}, expected 2; stderr={err!r}"
    assert "Traceback" not in err, err
    assert err.endswith("\n") and err.count("\n") == 1, f"expected exactly one stderr line, got {err!r}"
    assert err.startswith("error: "), err
    assert out == "", f"nothing may be printed on stdout for bad input, got {out[:300]!r}"
    return err.rstrip("\n")


def bad(capsys, *argv) -> str:
    """Run argv, assert the bad-input contract, return the error line."""
    return error_line(*run(capsys, *argv))


def assert_mentions(line: str, *needles: str) -> None:
    """Each needle appears in the line (numbers may be printed with thousands separators)."""
    plain = line.replace(",", "")
    for n in needles:
        assert n in line or n in plain, f"{n!r} not in {line!r}"


def mentions_value(line: str, value: str) -> bool:
    """`value` appears as a token of its own (so '3' is not found inside '384', 'llama-3.1' or '2,130')."""
    return re.search(rf"(?<![\w.])(?<!\d,){re.escape(value)}(?![\w.])(?!,\d)", line) is not None


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
