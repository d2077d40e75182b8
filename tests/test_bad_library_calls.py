"""Bad input to the library: planner.search, evaluate, run_search and the loaders raise PlannerError (a ValueError)
with the same text the command line prints for the same input, the field named by the caller's keyword."""

from __future__ import annotations

import pytest
from cli_contract import bad

import planner


def lib(case_id, argv, call, **kw):
    return pytest.param(argv, call, id=case_id, **kw)


LIBRARY_CASES = [
    lib("unknown-model-search", ["--model", "450b", "--gpus", "512"], lambda: planner.search(model="450b", gpus=512)),
    lib("unknown-model-evaluate", ["--model", "450b", "--gpus", "512"],
        lambda: planner.evaluate(model="450b", gpus=512, tp=8, pp=16, dp=4)),
    lib("unknown-model-load", ["--model", "450b", "--gpus", "512"], lambda: planner.load_model("450b")),
    lib("unknown-hardware-load", ["--model", "405b", "--gpus", "512", "--hardware", "h100-sx"],
        lambda: planner.load_hardware("h100-sx")),
    lib("unknown-hardware-search", ["--model", "405b", "--gpus", "512", "--hardware", "h100-sx"],
        lambda: planner.search(model="405b", gpus=512, hardware="h100-sx")),
    lib("gpus-zero-search", ["--model", "405b", "--gpus", "0"], lambda: planner.search(model="405b", gpus=0)),
    lib("gpus-zero-evaluate", ["--model", "405b", "--gpus", "0"],
        lambda: planner.evaluate(model="405b", gpus=0, tp=8, pp=16, dp=4)),
    lib("gpus-negative-run-search", ["--model", "405b", "--gpus", "-8"], lambda: planner.run_search("405b", -8)),
    lib("pinned-tp-3-evaluate", ["--model", "405b", "--gpus", "384", "--tp", "3"],
        lambda: planner.evaluate(model="405b", gpus=384, tp=3)),
    lib("pinned-tp-3-all-pinned", ["--model", "405b", "--gpus", "384", "--tp", "3", "--pp", "1", "--dp", "128"],
        lambda: planner.evaluate(model="405b", gpus=384, tp=3, pp=1, dp=128)),
    lib("recompute-search", ["--model", "405b", "--gpus", "512", "--recompute", "sometimes"],
        lambda: planner.search(model="405b", gpus=512, recompute="sometimes")),
    lib("seq-len-zero", ["--model", "405b", "--gpus", "512", "--seq-len", "0"],
        lambda: planner.search(model="405b", gpus=512, seq_len=0)),
    lib("layout-product", ["--model", "405b", "--gpus", "512", "--tp", "8", "--pp", "4", "--dp", "8"],
        lambda: planner.evaluate(model="405b", gpus=512, tp=8, pp=4, dp=8)),
    lib("pinned-tp-3-search", ["--model", "405b", "--gpus", "384", "--tp", "3"],
        lambda: planner.search(model="405b", gpus=384, tp=3)),
]


@pytest.mark.parametrize("argv, call", LIBRARY_CASES)
def test_library_raises_the_error_the_cli_prints(capsys, argv, call):
    """The same message; the field is the keyword the caller typed (seq_len, zero_stage), which the CLI names as
    its flag (--seq-len, --zero)."""
    from planner.errors import KEYWORD_FLAGS, flag_name

    line = bad(capsys, *argv)
    with pytest.raises(planner.PlannerError) as info:
        call()
    assert isinstance(info.value, ValueError)
    assert f"{flag_name(info.value.field)}: {info.value.message}" == line.removeprefix("error: ")
    assert str(info.value).startswith(info.value.field + ": ")
    assert not info.value.field.startswith("--")
    head = info.value.field.partition(": ")[0]
    assert head in KEYWORD_FLAGS or head == "layout", head


def test_library_rejects_a_non_bool_sequence_parallel_with_a_planner_error():
    with pytest.raises(planner.PlannerError, match="sequence"):
        planner.search(model="8b", gpus=8, sequence_parallel="yes")


@pytest.mark.parametrize("kwargs, field", [
    (dict(gpus=2.5), "gpus"), (dict(gpus=True), "gpus"), (dict(gpus=8, tp=2.0), "tp"),
    (dict(gpus=8, micro_batch=0), "micro_batch"), (dict(gpus=8, vpp=True), "vpp"),
    (dict(gpus=8, seq_len=2.5), "seq_len"), (dict(gpus=8, global_batch=0), "global_batch"),
    (dict(gpus=8, headroom_gib=float("nan")), "headroom_gib"), (dict(gpus=8, zero_stage=7), "zero_stage"),
    (dict(gpus=8, global_batch=8, global_batch_tokens=2**20), "global_batch"),
])
def test_library_type_errors_are_planner_errors(kwargs, field):
    with pytest.raises(planner.PlannerError) as info:
        planner.search(model="8b", **kwargs)
    assert info.value.field == field
