"""--output: a file gets exactly what stdout would, written atomically (temporary file, then rename); a failed run
never creates, truncates or clobbers a file and leaves no temporary file behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_contract import assert_mentions, bad, run


# --- output files ----------------------------------------------------------------------------------------------------

def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp"))


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_output_file_gets_exactly_what_stdout_would(capsys, tmp_path, fmt):
    argv = ["--model", "8b", "--gpus", "16", "--top", "3"]
    code, expected, _ = run(capsys, *argv, "--format", fmt)
    assert code == 0
    target = tmp_path / f"plan.{fmt}"
    code, out, err = run(capsys, *argv, "--output", target)        # the suffix picks the format
    assert code == 0, err
    assert out == "" and str(target) in err
    assert target.read_text() == expected
    if fmt == "json":
        assert len(json.loads(target.read_text())["configs"]) == 3
    else:
        assert target.read_text().splitlines()[0].startswith("tp,cp,pp,dp,micro_batch")
    assert leftovers(tmp_path) == []


def test_output_with_explicit_format_and_other_suffix(capsys, tmp_path):
    target = tmp_path / "plan.txt"
    code, _, err = run(capsys, "--model", "8b", "--gpus", "8", "--format", "json", "--output", target)
    assert code == 0, err
    json.loads(target.read_text())
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("argv", [
    pytest.param(["--model", "8b", "--gpus", "8", "--tp", "8", "--pp", "1", "--dp", "1"], id="pinned-layout"),
    pytest.param(["--model", "8b", "--gpus", "8", "--hardware", "h100,b200"], id="hardware-comparison"),
    pytest.param(["sweep", "--model", "8b", "--gpus", "8,16"], id="sweep"),
])
def test_other_commands_write_output_files(capsys, tmp_path, argv):
    target = tmp_path / "out.json"
    code, out, err = run(capsys, *argv, "--output", target)
    assert code == 0, err
    assert out == ""
    json.loads(target.read_text())
    assert leftovers(tmp_path) == []


def test_output_into_missing_directory_is_rejected_and_creates_nothing(capsys, tmp_path):
    target = tmp_path / "no" / "such" / "dir" / "plan.json"
    line = bad(capsys, "--model", "8b", "--gpus", "8", "--output", target)
    assert_mentions(line, "--output", "does not exist")
    assert not (tmp_path / "no").exists()
    assert list(tmp_path.iterdir()) == []


def test_output_onto_a_directory_is_rejected(capsys, tmp_path):
    (tmp_path / "plan.json").mkdir()
    line = bad(capsys, "--model", "8b", "--gpus", "8", "--output", tmp_path / "plan.json")
    assert_mentions(line, "--output", "directory")
    assert leftovers(tmp_path) == [] and (tmp_path / "plan.json").is_dir()


def test_output_without_a_format_is_rejected(capsys, tmp_path):
    target = tmp_path / "x.txt"
    line = bad(capsys, "--model", "8b", "--gpus", "8", "--output", target)
    assert_mentions(line, "--output", "x.txt", "--format")
    assert not target.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad_args", [
    pytest.param(["--model", "450b", "--gpus", "8"], id="unknown-model"),
    pytest.param(["--model", "8b", "--gpus", "0"], id="gpus-zero"),
    pytest.param(["--model", "8b", "--gpus", "8", "--tp", "3"], id="layout"),
    pytest.param(["--model", "8b", "--gpus", "8", "--zero", "7"], id="zero"),
    pytest.param(["--model", "8b", "--gpus", "8", "--hardware", "MISSING"], id="hardware-file"),
    pytest.param(["--model", "8b", "--gpus", "8", "--tokens", "lots"], id="tokens"),
    pytest.param(["sweep", "--model", "8b", "--gpus", "64..8"], id="sweep-range"),
])
def test_failed_run_leaves_an_existing_output_file_untouched(capsys, tmp_path, bad_args):
    target = tmp_path / "plan.json"
    code, _, err = run(capsys, "--model", "8b", "--gpus", "8", "--output", target)
    assert code == 0, err
    before = target.read_bytes()
    stat = target.stat()
    args = [str(tmp_path / "missing-hw.yaml") if a == "MISSING" else a for a in bad_args]
    bad(capsys, *args, "--output", target)
    assert target.read_bytes() == before
    assert target.stat().st_mtime_ns == stat.st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]      # no temp file left behind


def test_nothing_fits_still_writes_the_closest_layouts_atomically(capsys, tmp_path):
    target = tmp_path / "closest.json"
    code, out, err = run(capsys, "--model", "405b", "--gpus", "16", "--output", target)
    assert code == 1 and out == "" and "nothing fits" in err.lower()
    doc = json.loads(target.read_text())
    assert doc["configs"] == [] and doc["closest"] and doc["min_gpus_that_fit"]
    assert leftovers(tmp_path) == []


# --- a path the file system refuses: checked before the work ---------------------------------------------------------

LONG = "a" * 300                # longer than any file system's name limit (255 bytes)


@pytest.fixture
def no_search(monkeypatch):
    """Any search fails the test: a bad output path must be rejected before the work."""
    def searched(*args, **kwargs):
        raise AssertionError("the search ran before the output path was checked")
    import sys

    import planner.sweep  # noqa: F401 - loaded, so that its reference can be replaced
    for module in ("planner.search", "planner.sweep"):   # the package's `search` attribute is the function
        monkeypatch.setattr(sys.modules[module], "run_search", searched)


@pytest.mark.parametrize("argv, flag", [
    pytest.param(["--model", "8b", "--gpus", "8", "-o", f"{LONG}.json"], "--output", id="search-output"),
    pytest.param(["--model", "8b", "--gpus", "8", "--plot", f"{LONG}.png"], "--plot", id="search-plot"),
    pytest.param(["--model", "8b", "--gpus", "8", "--export", "megatron", "-o", f"{LONG}.txt"], "--output",
                 id="export-output"),
    pytest.param(["--model", "8b", "--gpus", "8", "--tp", "8", "--pp", "1", "--dp", "1", "-o", f"{LONG}.json"],
                 "--output", id="pinned-output"),
    pytest.param(["--model", "8b", "--gpus", "8", "--hardware", "h100-sxm,b200", "-o", f"{LONG}.json"], "--output",
                 id="comparison-output"),
    pytest.param(["sweep", "--model", "8b", "--gpus", "8,16", "-o", f"{LONG}.json"], "--output", id="sweep-output"),
    pytest.param(["sweep", "--model", "8b", "--gpus", "8,16", "--plot", f"{LONG}.png"], "--plot", id="sweep-plot"),
    pytest.param(["sweep", "--model", "8b", "--gpus", "8,16", "--plot", "/nonexistent/x.png"], "--plot",
                 id="sweep-plot-missing-dir"),
    pytest.param(["validate", "-o", f"{LONG}.json"], "--output", id="validate-output"),
])
def test_an_unwritable_path_is_bad_input_before_any_search(capsys, tmp_path, monkeypatch, no_search, argv, flag):
    monkeypatch.chdir(tmp_path)
    line = bad(capsys, *argv)                      # exit 2, one line, nothing on stdout (no table first)
    assert line.startswith(f"error: {flag}: "), line
    assert list(tmp_path.iterdir()) == []


def test_an_oserror_while_writing_names_the_flag(monkeypatch, tmp_path):
    """Whatever the OS refuses at write time (a full disk, ...) is a PlannerError naming the flag, not a traceback."""
    import os

    from planner.errors import PlannerError
    from planner.output import write_atomic

    def refuse(*args):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(PlannerError, match=r"^--plot: cannot write .*No space left on device"):
        write_atomic(tmp_path / "x.png", b"data", flag="--plot")
    assert leftovers(tmp_path) == [] and list(tmp_path.iterdir()) == []


def test_a_long_but_legal_name_is_written(capsys, tmp_path):
    """The temporary file beside the target stays within the name limit even when the target's name is near it."""
    target = tmp_path / ("b" * 245 + ".json")
    code, out, err = run(capsys, "--model", "8b", "--gpus", "8", "--top", "1", "-o", target)
    assert code == 0, err
    assert json.loads(target.read_text())["configs"] and leftovers(tmp_path) == []


def test_a_pipe_or_a_link_is_written_through_not_replaced(capsys, tmp_path):
    """A rename would swap a FIFO, a device (/dev/null, /dev/stdout's terminal) or a symbolic link for a regular
    file, and as root destroy /dev/null: a non-regular target is written in place, a link's target is replaced
    atomically and the link stays (a reviewer found both replaced)."""
    import os
    import stat
    import threading

    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    code, _, err = run(capsys, "--model", "8b", "--gpus", "8", "--top", "1", "-o", fifo)
    reader.join(timeout=30)
    assert code == 0, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and json.loads(got[0])["configs"]

    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real.name)
    code, _, err = run(capsys, "--model", "8b", "--gpus", "8", "--top", "1", "-o", link)
    assert code == 0, err
    assert link.is_symlink() and json.loads(real.read_text())["configs"] and leftovers(tmp_path) == []


def test_output_to_dev_stdout_redirected_to_a_file_appends_where_the_shell_is(tmp_path):
    """`plan -o /dev/stdout >> log` once renamed a new file over the shell's log (its old lines lost) and `{ echo a;
    plan -o /dev/stdout; echo b; } > f` kept only the JSON: this process's stdout is written through its descriptor."""
    import os
    import subprocess
    import sys

    if not os.path.exists("/dev/stdout"):
        pytest.skip("needs /dev/stdout")
    log = tmp_path / "log.txt"
    log.write_text("old\n")
    script = (f"echo header >> {log}; {sys.executable} -m planner --model 8b --gpus 8 --top 1 --format csv "
              f"-o /dev/stdout >> {log}; echo footer >> {log}")
    subprocess.run(["sh", "-c", script], check=True, capture_output=True, timeout=120)
    lines = log.read_text().splitlines()
    assert lines[:3] == ["old", "header", lines[2]] and lines[2].startswith("tp,cp,pp,dp") and lines[-1] == "footer"
