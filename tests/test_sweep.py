"""plan sweep and the hardware comparison: GPU counts, rows, pins and flags, JSON rows. The budget columns they
carry are test_budget.py."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import PlannerError
from planner.search import run_search
from planner.sweep import compare_hardware, parse_gpu_counts, sweep

runner = CliRunner()


@pytest.mark.parametrize("text, counts", [("256,512,1024", [256, 512, 1024]), ("256..2048", [256, 512, 1024, 2048]),
                                          ("64..256:64", [64, 128, 192, 256]), ("512, 256", [256, 512])])
def test_parse_gpu_counts(text, counts):
    assert parse_gpu_counts(text) == counts


@pytest.mark.parametrize("bad", ["", "0", "-8", "abc", "512..256", "1..100000000:1"])
def test_parse_gpu_counts_rejects(bad):
    with pytest.raises(PlannerError):
        parse_gpu_counts(bad)


def test_sweep_rows_are_each_counts_best_layout():
    df = sweep("8b", "8..64", tokens=1e12)
    assert list(df.gpus) == [8, 16, 32, 64]
    for _, row in df.iterrows():
        best = run_search("8b", int(row.gpus), find_min_gpus=False).table.iloc[0]
        assert row.tokens_per_s == pytest.approx(best.tokens_per_s)
        assert row.tp * row.pp * row.dp == row.gpus
    assert df.scaling_efficiency.iloc[0] == 1.0
    # days = tokens / tokens/s / 86400; cost from the profile's price
    assert df.time_to_train_days.to_numpy() == pytest.approx(1e12 / df.tokens_per_s.to_numpy() / 86400)
    assert (df.cost_usd > 0).all()


def test_sweep_marks_counts_where_nothing_fits():
    df = sweep("405b", "8,512")
    assert list(df.status) == ["nothing fits in memory", "ok"]


def test_compare_hardware_sorts_and_prices():
    df = compare_hardware("8b", 64, ["a100-80gb", "h100-sxm", "b200"], tokens=1e12, sort="cost")
    assert set(df.hardware) == {"a100-80gb", "h100-sxm", "b200"}
    assert df.cost_usd.is_monotonic_increasing
    df = compare_hardware("8b", 64, ["a100-80gb", "h100-sxm", "b200"])
    assert df.tokens_per_s.is_monotonic_decreasing
    with pytest.raises(PlannerError, match="^sort: sorting by cost needs --tokens"):
        compare_hardware("8b", 64, ["h100-sxm"], sort="cost")


def test_sweep_cli_json_and_table():
    res = runner.invoke(app, ["sweep", "--model", "8b", "--gpus", "8,16", "--tokens", "1T", "--format", "json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["rows"]
    assert [r["gpus"] for r in rows] == [8, 16] and all("cost_usd" in r for r in rows)
    res = runner.invoke(app, ["sweep", "--model", "8b", "--gpus", "8..32", "--tokens", "1T"])
    assert res.exit_code == 0 and "scaling" in res.output and "days" in res.output


def test_plan_with_tokens_and_hardware_comparison_cli():
    res = runner.invoke(app, ["--model", "8b", "--gpus", "16", "--tokens", "1T", "--format", "json", "--top", "2"])
    assert res.exit_code == 0
    c = json.loads(res.stdout)["configs"][0]
    assert c["time_to_train_days"] == pytest.approx(1e12 / c["tokens_per_s"] / 86400)
    res = runner.invoke(app, ["--model", "8b", "--gpus", "16", "--hardware", "h100-sxm,mi300x", "--tokens", "1T"])
    assert res.exit_code == 0 and "mi300x" in res.output and "n/a" in res.output   # MI300X has no price
    res = runner.invoke(app, ["--model", "8b", "--gpus", "16", "--hardware", "h100-sxm,b200", "--tokens", "1T",
                              "--price-per-gpu-hour", "2.5", "--sort", "cost", "--format", "csv"])
    assert res.exit_code == 0
    compared = res.stdout.splitlines()
    assert [line.rsplit(",", 1)[1] for line in compared[1:]] == ["b200", "h100-sxm"]     # cheapest first
    swept = runner.invoke(app, ["sweep", "--model", "8b", "--gpus", "16", "--tokens", "1T", "--price-per-gpu-hour",
                                "2.5", "--format", "csv"]).stdout.splitlines()
    scaling = {"tokens_per_s_per_gpu", "scaling_efficiency"}                   # a sweep's own columns
    assert compared[0].split(",") == [c for c in swept[0].split(",") if c not in scaling]
    assert compared[0].endswith(",hardware")                                   # the two CSVs stack, hardware last


# --- exit codes and reasons: a GPU count no layout can use is bad input (2); nothing fitting is 1 -------------------

def test_sweep_and_comparison_of_a_count_no_layout_can_use_are_bad_input(capsys):
    from cli_contract import assert_mentions, bad, run

    _, _, alone = run(capsys, "--model", "8b", "--gpus", "13")
    for argv in (["sweep", "--model", "8b", "--gpus", "13"], ["--model", "8b", "--gpus", "13", "--hardware",
                                                               "h100-sxm,b200"]):
        line = bad(capsys, *argv)
        assert line == alone.rstrip("\n"), (line, alone)      # the same reasons as the search on its own
        assert_mentions(line, "--gpus", "13 GPUs", "TP does not divide the 32 query heads", "try --global-batch 1664")


def test_rows_without_a_layout_say_why():
    df = sweep("8b", "13,16")                   # one usable count: the other's row names the top rejection
    row = df.set_index("gpus").loc[13]
    assert row.status == "no valid layout" and row.reason.startswith("global batch not divisible by DP x micro-batch")
    assert df.set_index("gpus").loc[16].status == "ok"
    assert [type(v) for v in df.tp] == [type(None), int]          # integers stay integers beside the empty row
    df = sweep("405b", "8,512")
    closest = run_search("405b", 8, find_min_gpus=False).closest.iloc[0]
    assert df.reason[0].startswith(f"closest needs {closest.memory_gib:.1f} GiB of 74.1 GiB") and df.reason.isna()[1]
    df = compare_hardware("gpt-22b", 16, "h100-sxm,gb200", tp=16)     # TP 16 fits the NVL72 domain, not an 8-GPU node
    rows = df.set_index("hardware")
    assert rows.loc["gb200"].status == "ok"
    assert rows.loc["h100-sxm"].status == "no valid layout"
    assert rows.loc["h100-sxm"].reason.startswith("TP exceeds the 8 GPUs of a node")
    # --allow-cross-node-tp makes TP 16 valid on H100 and is redundant inside NVL72: each profile gets what it needs,
    # and the flag is refused only where it would change nothing on any profile (TP 8 fits every node)
    df = compare_hardware("gpt-22b", 16, "h100-sxm,gb200", tp=16, allow_cross_node_tp=True)
    assert (df.status == "ok").all() and (df.tp == 16).all()
    with pytest.raises(PlannerError, match="allow_cross_node_tp.*the pinned --tp 8 fits in one node"):
        compare_hardware("gpt-22b", 16, "h100-sxm,gb200", tp=8, allow_cross_node_tp=True)


def test_sweep_cli_rows_and_exit_codes():
    res = runner.invoke(app, ["sweep", "--model", "8b", "--gpus", "13,16"])
    assert res.exit_code == 0 and "no valid layout: global batch not divisible" in res.output, res.output
    assert "TP1 PP1 DP16" in res.output                           # not TP1.0 PP1.0 DP16.0
    res = runner.invoke(app, ["sweep", "--model", "405b", "--gpus", "8,16", "--format", "json"])
    assert res.exit_code == 1
    need = [run_search("405b", n, find_min_gpus=False).closest.iloc[0].memory_gib for n in (8, 16)]
    assert [r["reason"].split(" GiB")[0] for r in json.loads(res.stdout)["rows"]] == [f"closest needs {x:.1f}"
                                                                                     for x in need]


def test_export_when_nothing_fits_is_nothing_fits_not_bad_input():
    plain = runner.invoke(app, ["--model", "405b", "--gpus", "8"])
    res = runner.invoke(app, ["--model", "405b", "--gpus", "8", "--export", "megatron"])
    assert plain.exit_code == res.exit_code == 1, res.output
    assert res.output == plain.output and "Nothing fits" in res.output and "--tensor-model" not in res.output


# --- the library forms take what the command line takes -------------------------------------------------------------

def test_compare_hardware_takes_a_comma_separated_string():
    listed = compare_hardware("8b", 8, ["h100-sxm", "a100-80gb"])
    text = compare_hardware("8b", 8, "h100-sxm, a100-80gb")
    assert list(text.hardware) == list(listed.hardware) == ["h100-sxm", "a100-80gb"]
    assert list(text.tokens_per_s) == list(listed.tokens_per_s)
    with pytest.raises(PlannerError, match="^hardware:.*listed twice"):
        compare_hardware("8b", 8, "h100-sxm,h100-sxm")


def test_sweep_and_comparison_take_the_pins_search_takes():
    from planner import Pins, search

    df = sweep("8b", "8,16", tp=2, recompute="selective")
    for _, row in df.iterrows():
        best = search("8b", int(row.gpus), tp=2, recompute="selective").iloc[0]
        assert row.tp == 2 and row.recompute == "selective" and row.tokens_per_s == pytest.approx(best.tokens_per_s)
    df = compare_hardware("8b", 8, "h100-sxm,b200", tp=2, micro_batch=2)
    assert set(df.tp) == {2} and set(df.micro_batch) == {2}
    assert list(sweep("8b", "8", pins=Pins(tp=4)).tp) == [4]
    with pytest.raises(PlannerError, match="^tp: given both"):
        sweep("8b", "8", tp=2, pins=Pins(tp=4))
    with pytest.raises(PlannerError, match=r"^tp: none of the 2 GPU counts \(8, 16\) has a valid layout; the "
                                           r"first: tp\(3\) does not divide gpus\(8\)"):
        sweep("8b", "8,16", tp=3)                                # no count can take it: bad input
    df = sweep("8b", "8,12", tp=8)                               # one count can: the other row says why
    assert list(df.status) == ["ok", "no valid layout"] and df.reason[1] == "tp: tp(8) does not divide gpus(12)"


def test_sweep_cli_takes_layout_pins():
    """`plan sweep` pins like the search: every row keeps the pinned TP, recompute and ZeRO stage, a count with no
    valid layout under the pins says why (10 GPUs at TP 2 and ZeRO-1: DP 5 does not divide 1,024 sequences, and
    PP 5, which splits the 32 layers 6/7/7/7/5, leaves DP 1 with nothing to shard over), and a bad value is one
    line with exit 2."""
    res = runner.invoke(app, ["sweep", "--model", "8b", "--gpus", "8,10,16", "--tp", "2", "--recompute", "selective",
                              "--zero", "1", "--format", "json"])
    rows = json.loads(res.stdout)["rows"]
    ok = [r for r in rows if r["status"] == "ok"]
    assert res.exit_code == 0 and [r["gpus"] for r in ok] == [8, 16]
    assert all(r["tp"] == 2 and r["recompute"] == "selective" and r["zero_stage"] == 1 for r in ok)
    ten = next(r for r in rows if r["gpus"] == 10)
    assert ten["status"] == "no valid layout" and ten["reason"].startswith("optimizer sharding needs DP x CP > 1")
    res = runner.invoke(app, ["sweep", "--model", "8b", "--gpus", "8", "--zero", "5"])
    assert res.exit_code == 2 and "error: --zero:" in res.output


def _options(command) -> set[str]:
    """Every option string a click command takes (both halves of an on/off switch)."""
    return {o for param in command.params for o in (*param.opts, *param.secondary_opts)}


def test_sweep_takes_every_layout_and_runtime_flag_of_plan(capsys):
    """A sweep prices each count as `plan` would price it: it takes all of plan's flags except those that are
    per-count (--dp) or belong to one search's output (--top, --sort, --export); --version is the program's."""
    import typer.main

    group = typer.main.get_command(app)
    plan_opts, sweep_opts = _options(group), _options(group.commands["sweep"])
    assert plan_opts - sweep_opts == {"--dp", "--top", "--sort", "--export", "--version"}
    # and says why when one is given, rather than calling it a typo
    from planner.flags import SWEEP_OMITS
    assert set(SWEEP_OMITS) == plan_opts - sweep_opts - {"--version"}
    from cli_contract import bad
    assert "--dp: plan sweep does not take it: DP follows each GPU count" in bad(capsys, "sweep", "--model", "8b",
                                                                                 "--gpus", "8,16", "--dp", "8")


@pytest.mark.parametrize("model, base, flag", [
    ("70b", [], ["--eager-elementwise"]),
    ("70b", [], ["--flash-attention-gen", "1"]),
    ("70b", [], ["--vpp", "2"]),
    ("70b", [], ["--recompute-layers", "1"]),
    ("70b", [], ["--no-sequence-parallel"]),
    ("70b", ["--tp", "8", "--pp", "4", "--no-sequence-parallel"], ["--pp-scatter-gather"]),
    ("70b", ["--tp", "8", "--pp", "4"], ["--tp-comm-overlap"]),
    ("70b", ["--cp", "2"], ["--cp-comm", "allgather"]),
    ("175b", ["--tp", "16"], ["--allow-cross-node-tp"]),         # GPT-3's 96 heads: TP 16 divides them
])
def test_a_sweep_row_is_plans_best_layout_under_the_same_flags(model, base, flag):
    """Each flag reaches the sweep's search: with it, the sweep's row for 64 GPUs is plan's first row for the same
    job, and the flag alone changes that row (or, for --allow-cross-node-tp, makes TP 16 valid at all)."""
    job = ["--model", model, "--gpus", "64", "--format", "json", *base]
    keys = ("tp", "cp", "pp", "dp", "vpp", "micro_batch", "recompute", "recompute_layers", "zero_stage",
            "sequence_parallel", "step_time_s")
    row = json.loads(runner.invoke(app, ["sweep", *job, *flag]).stdout)["rows"][0]
    plan_row = json.loads(runner.invoke(app, [*job, *flag]).stdout)["configs"][0]
    assert row["status"] == "ok" and {k: row[k] for k in keys} == {k: plan_row[k] for k in keys}
    without = runner.invoke(app, ["sweep", *job])
    if without.exit_code == 2:                                 # TP 16 spans two nodes: invalid without the flag
        assert flag == ["--allow-cross-node-tp"] and "TP exceeds the 8 GPUs of a node" in without.output
    else:
        assert {k: row[k] for k in keys} != {k: json.loads(without.stdout)["rows"][0][k] for k in keys}


def test_sweep_and_comparison_json_rows_are_configs():
    """An ok row has the search's public config shape (breakdowns nested), with the same numbers; a row without a
    layout says only what is known."""
    doc = json.loads(runner.invoke(app, ["sweep", "--model", "405b", "--gpus", "8,512", "--format", "json"]).stdout)
    none, ok = doc["rows"]
    assert none == {"gpus": 8, "status": "nothing fits in memory", "reason": none["reason"], "fits": False,
                    "hardware": "h100-sxm"}
    best = json.loads(runner.invoke(app, ["--model", "405b", "--gpus", "512", "--format", "json", "--top",
                                          "1"]).stdout)["configs"][0]
    assert {k: ok[k] for k in best} == best
    doc = json.loads(runner.invoke(app, ["--model", "8b", "--gpus", "8", "--hardware", "h100-sxm,b200", "--format",
                                         "json"]).stdout)
    assert all("time_breakdown_s" in row and "compute_s" not in row for row in doc["rows"])


def test_sweep_and_comparison_json_name_the_runtime_and_precision_they_were_priced_with():
    """As a search's JSON does: a sweep's runtime as its profile runs it (V100: no FlashAttention), flags as set; a
    comparison's as given (FlashAttention null: as each profile runs it, here off on V100 and on on H100)."""
    sweep_doc = json.loads(runner.invoke(app, ["sweep", "--model", "8b", "--gpus", "8,16", "--hardware", "v100",
                                               "--no-grad-accumulation-fusion", "--format", "json"]).stdout)
    assert sweep_doc["runtime"]["flash_attention"] is False and sweep_doc["runtime"]["flash_attention_gen"] is None
    assert sweep_doc["runtime"]["grad_accumulation_fusion"] is False
    assert sweep_doc["precision"] == {"param_bytes": 2, "grad_bytes": 4, "optimizer_bytes": 12, "activation_bytes": 2,
                                      "params_are_master": False}
    both = json.loads(runner.invoke(app, ["--model", "8b", "--gpus", "8", "--hardware", "h100-sxm,v100",
                                          "--zero1-all-reduce", "--format", "json"]).stdout)
    assert both["runtime"]["flash_attention"] is None and both["runtime"]["zero1_all_reduce"] is True
    assert list(both) == ["title", "model", "seq_len", "global_batch", "runtime", "precision", "rows"]


def test_sweep_columns_keep_their_order_whichever_count_comes_first():
    """CSV readers go by position: a sweep whose first count fits nothing has the same columns, in the same order,
    as one whose first count fits."""
    unfit_first = sweep(model="70b", gpus=[8, 64])
    fit_first = sweep(model="70b", gpus=[64, 128])
    assert unfit_first["status"].iloc[0] != "ok" and fit_first["status"].iloc[0] == "ok"
    assert list(unfit_first.columns) == list(fit_first.columns)


def test_a_row_without_a_layout_has_none_in_integer_and_boolean_columns():
    """405B does not fit on 64 H100s but does on 64 B200s: the H100 row's knobs are None, whatever their type (the
    boolean column once held NaN beside True), and the B200 row's stay int and bool."""
    df = compare_hardware("405b", 64, ["h100-sxm", "b200"])
    ok, empty = df[df.status == "ok"].iloc[0], df[df.status != "ok"].iloc[0]
    assert empty.tp is None and empty.sequence_parallel is None and empty.zero_stage is None
    assert isinstance(ok.tp, int) and isinstance(ok.sequence_parallel, bool)


def test_different_hardware_files_that_share_a_name_are_compared_by_path(tmp_path):
    """Two files named alike but with different numbers are two profiles (rows labelled by path); an identical
    copy is the same profile, listed twice."""
    text = (Path(__file__).resolve().parents[1] / "hardware_specs" / "h100-sxm.yaml").read_text()
    text = text.replace("name: h100-sxm", "name: my-h100", 1)
    assert "gpus_per_node: 8" in text
    eight, four, copy = tmp_path / "eight.yaml", tmp_path / "four.yaml", tmp_path / "copy.yaml"
    eight.write_text(text)
    four.write_text(text.replace("gpus_per_node: 8", "gpus_per_node: 4", 1))
    copy.write_text(text)
    df = compare_hardware("70b", 64, f"{eight},{four}")
    assert set(df.hardware) == {f"my-h100 ({eight})", f"my-h100 ({four})"}
    steps = df.set_index("hardware")["step_time_s"]
    assert steps[f"my-h100 ({four})"] > steps[f"my-h100 ({eight})"]       # half the NVLink domain: slower
    with pytest.raises(PlannerError, match="are the same profile \\(my-h100\\)"):
        compare_hardware("70b", 64, f"{eight},{four},{copy}")


def test_when_no_count_or_profile_has_a_valid_layout_the_error_lists_them_all(capsys):
    """8B on 13, 19 and 23 GPUs (primes: no layout divides the 2,048-sequence batch, and none of them splits the 32
    layers: 11 splits 33 = 32 + the loss, but 11 middle stages of ceil(34/13) = 3 leave the two edges of 13 stages
    nothing; 7 splits them 4/5/5/5/5/5/3): one line naming every count, then the first count's reasons; one count
    alone, or one reason on every profile, keeps its own message."""
    with pytest.raises(PlannerError) as exc:
        sweep("8b", [13, 19, 23])
    assert exc.value.field == "gpus"
    assert exc.value.message.startswith("none of the 3 GPU counts (13, 19, 23) has a valid layout; the first: no "
                                        "valid layout of llama-3.1-8b on 13 GPUs: ")
    with pytest.raises(PlannerError, match=r"^gpus: no valid layout of llama-3.1-8b on 13 GPUs"):
        compare_hardware("8b", 13, "h100-sxm,b200")                       # the same reason on both
    with pytest.raises(PlannerError) as exc:
        sweep("8b", [13])
    assert exc.value.message.startswith("no valid layout of llama-3.1-8b on 13 GPUs: ")
    assert sweep("8b", [7]).pp.tolist() == [7]


def test_without_gpus_a_sweep_doubles_from_the_smallest_count_that_fits():
    """Eight counts doubling from a node times the smallest power of two on which a layout fits (README)."""
    assert list(sweep("8b").gpus) == [8 * 2**k for k in range(8)]            # one node fits
    df = sweep("405b")
    assert list(df.gpus) == [128 * 2**k for k in range(8)] and (df.status == "ok").all()
    assert not len(run_search("405b", 64, find_min_gpus=False).table)       # half the first count does not fit
    res = runner.invoke(app, ["sweep", "--model", "8b", "--format", "json"])
    assert res.exit_code == 0 and [r["gpus"] for r in json.loads(res.stdout)["rows"]][-1] == 1024
    with pytest.raises(PlannerError) as info:                                 # a pin no node can start with
        sweep("8b", tp=3)
    assert info.value.field == "gpus" and "give the counts" in info.value.message      # the library's keyword
    res = runner.invoke(app, ["sweep", "--model", "8b", "--tp", "3"])
    assert res.exit_code == 2 and "--gpus: none given" in res.output
