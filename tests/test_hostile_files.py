"""Hostile input files: YAML is read with safe_load only (python tags never run), aliases that contain themselves or
expand past the limit, nesting deeper than 64 levels, and a config.json key given twice each get one line, exit
code 2, in well under a second."""

from __future__ import annotations

import pytest
from cli_contract import assert_mentions, bad, write


EVIL_TAGS = [
    '!!python/object/apply:os.system ["echo pwned > {marker}"]',
    '!!python/object/apply:subprocess.check_output [["touch", "{marker}"]]',
    '!!python/object/new:os.system ["echo pwned > {marker}"]',
    '!!python/name:os.system',
]


@pytest.mark.parametrize("tag", EVIL_TAGS)
@pytest.mark.parametrize("where", ["--model", "--hardware", "validate"])
def test_yaml_python_tags_are_rejected_without_side_effects(capsys, tmp_path, tag, where):
    marker = tmp_path / "pwned"
    doc = write(tmp_path / "evil.yaml", f"name: x\nlayers: {tag.format(marker=marker)}\n")
    if where == "--model":
        argv = ["--model", doc, "--gpus", "8"]
    elif where == "--hardware":
        argv = ["--model", "8b", "--gpus", "8", "--hardware", doc]
    else:
        argv = ["validate", doc]
    line = bad(capsys, *argv)
    assert "evil.yaml" in line and "python" in line
    assert not marker.exists(), "a python tag in a YAML input executed code"


def test_duplicate_key_in_config_json_is_named(capsys, tmp_path):
    """json.loads keeps the last of two equal keys; a config.json that says num_hidden_layers twice is refused."""
    d = tmp_path / "dup"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "llama", "num_hidden_layers": 2, "num_hidden_layers": 32}')
    assert_mentions(bad(capsys, "--model", str(d / "config.json"), "--gpus", "8"), "'num_hidden_layers' is given twice")


def _laughs(levels: int) -> str:
    """The "billion laughs": each level a list of nine aliases to the one below (9^levels values, ~1 KB)."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


HOSTILE_YAML = [
    ("self-alias", "a: &a [*a]\n", ["an alias contains itself", "line 1"]),
    ("laughs", _laughs(9), ["aliases expand to more than", "values"]),
    ("deep-flow", "a: " + "[" * 70 + "]" * 70 + "\n", ["nested more than 64 levels"]),
    ("deeper-than-the-parser", "[" * 2000 + "]" * 2000, ["not valid YAML", "nesting depth"]),
]


@pytest.mark.parametrize("name, text, needles", [pytest.param(n, t, k, id=n) for n, t, k in HOSTILE_YAML])
@pytest.mark.parametrize("where", ["--model", "--hardware", "validate"])
def test_hostile_yaml_is_one_line_fast(capsys, tmp_path, name, text, needles, where):
    """An alias that contains itself used to hang every reader (the key check walked the node graph without end),
    nine levels of aliases took 41 s of CPU, and deep brackets raised a RecursionError traceback (a reviewer found
    all three). Each node is now walked once, before anything is constructed: one line, exit 2, in well under a
    second."""
    import time

    doc = write(tmp_path / "hostile.yaml", text)
    argv = {"--model": ["--model", doc, "--gpus", "8"], "--hardware": ["--model", "8b", "--gpus", "8", "--hardware",
                                                                       doc], "validate": ["validate", doc]}[where]
    start = time.perf_counter()
    line = bad(capsys, *argv)
    assert time.perf_counter() - start < 5
    assert_mentions(line, "hostile.yaml", *needles)


def test_deep_json_is_one_line(capsys, tmp_path):
    """json.loads stops near Python's recursion limit with a RecursionError; shallower but absurd nesting is bounded
    like YAML's."""
    for depth in (2000, 70):
        d = tmp_path / f"d{depth}"
        d.mkdir()
        (d / "config.json").write_text('{"a": ' + "[" * depth + "]" * depth + "}")
        assert_mentions(bad(capsys, "--model", str(d / "config.json"), "--gpus", "8"), "config.json", "nested")


def test_plain_aliases_still_read(capsys, tmp_path):
    """Anchors and aliases that expand to plain data are fine: one mapping shared by two fields."""
    from planner.specs._files import read_mapping

    doc = write(tmp_path / "ok.yaml", "base: &b {x: 1, y: [1, 2]}\nfirst: *b\nsecond: *b\n")
    assert read_mapping(doc, "--model") == {"base": {"x": 1, "y": [1, 2]}, "first": {"x": 1, "y": [1, 2]},
                                            "second": {"x": 1, "y": [1, 2]}}
