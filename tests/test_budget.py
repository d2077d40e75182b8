"""The time, money and energy budget (--tokens, --price-per-gpu-hour, --pue): the formulas by hand, count strings,
the same checks in the library as on the command line, and the notes on where prices come from."""

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from planner.cli import app, parse_count
from planner.cost import budget
from planner.errors import PlannerError
from planner.sweep import compare_hardware, sweep

runner = CliRunner()

def test_budget_formulas_by_hand():
    # 15e12 tokens at 1e6 tokens/s = 15e6 s = 173.6 days; 1024 GPUs -> 4,266,667 GPU-hours; at $2/GPU-h $8.53M;
    # 700 W x 1024 x 15e6 s x PUE 1.2 = 12.9e12 J = 3,584 MWh.
    s = budget.time_to_train_s(15e12, 1e6)
    assert s == pytest.approx(15e6)
    h = budget.gpu_hours(1024, s)
    assert h == pytest.approx(1024 * 15e6 / 3600)
    assert budget.cost_usd(h, 2.0) == pytest.approx(2 * 1024 * 15e6 / 3600)
    assert np.isnan(budget.cost_usd(h, None))
    assert budget.energy_j(1024, s, 700, 1.2) == pytest.approx(12.9024e12, rel=1e-12)        # 3,584 MWh


def test_parse_token_counts():
    assert parse_count("15T", "--tokens") == 15 * 10**12
    assert parse_count("1.5B", "--tokens") == 1_500_000_000
    assert parse_count("16M", "--global-batch-tokens", binary=True) == 16 * 2**20
    assert parse_count("1e12", "--tokens") == parse_count("1T", "--tokens") == 10**12
    assert parse_count("1.5e13", "--tokens") == 15 * 10**12 and parse_count("2e3k", "--tokens") == 2 * 10**6
    # exact decimal arithmetic: 8.2 x 10^12 in floats is 8199999999999.999 (was refused as not whole)
    assert parse_count("8.2T", "--tokens") == 8_200_000_000_000 and parse_count("2.01T", "--tokens") == 2_010 * 10**9
    assert parse_count("9007199254740993", "--tokens") == 9007199254740993          # 2^53 + 1, not rounded
    assert parse_count("4.5Mi", "--global-batch-tokens", binary=True) == 4.5 * 2**20
    for bad in ("lots", "1e", "e12", "1e999", "1.5e-1"):
        with pytest.raises(PlannerError):
            parse_count(bad, "--tokens")


@pytest.mark.parametrize("kwargs, field", [
    (dict(tokens=-5), "tokens"), (dict(tokens="lots"), "tokens"), (dict(tokens=True), "tokens"),
    (dict(tokens=float("inf")), "tokens"), (dict(tokens=1e12, price_usd_per_gpu_hour=float("inf")),
                                           "price_usd_per_gpu_hour"),
    (dict(tokens=1e12, price_usd_per_gpu_hour=-1), "price_usd_per_gpu_hour"), (dict(tokens=1e12, pue=0.5), "pue"),
    (dict(pue=1.2), "pue"), (dict(price_usd_per_gpu_hour=2.0), "price_usd_per_gpu_hour"),
])
def test_library_budget_is_checked_like_the_flags(kwargs, field):
    """The library took a negative budget or a PUE below 1 and printed negative days or too little energy; the
    check the flags use (sweep.budget_arguments) now runs first, naming the keyword. A price or PUE without tokens
    would be ignored: refused, as on the command line."""
    for call in (lambda: sweep("8b", "8,16", **kwargs), lambda: compare_hardware("8b", 8, "h100-sxm,b200", **kwargs)):
        with pytest.raises(PlannerError) as info:
            call()
        assert info.value.field == field
    res = runner.invoke(app, ["sweep", "--model", "8b", "--gpus", "8", "--tokens", "15T", "--pue", "5"])
    assert res.exit_code == 2 and "error: --pue: got 5.0" in res.output


def test_library_takes_the_command_lines_count_strings():
    """tokens='15T' (or '1.5e13') and global_batch_tokens='16M' mean what --tokens and --global-batch-tokens do."""
    a = sweep("8b", "8", tokens="15T", global_batch_tokens="4M")
    b = sweep("8b", "8", tokens=15e12, global_batch_tokens=4 * 2**20)
    c = sweep("8b", "8", tokens="1.5e13", global_batch_tokens="4Mi")
    assert a.time_to_train_days[0] == b.time_to_train_days[0] == c.time_to_train_days[0]
    assert a.global_batch[0] == b.global_batch[0] == 4 * 2**20 // 8192


def test_a_comparison_says_when_its_prices_come_from_different_providers():
    from planner.report import price_note

    df = compare_hardware("8b", 8, "h100-sxm,h200-sxm,mi300x", tokens=1e12)
    providers = dict(zip(df.hardware, df.price_provider))
    assert providers["h100-sxm"] == "Lambda" and providers["h200-sxm"] == "AWS" and pd.isna(providers["mi300x"])
    assert price_note(df).startswith("Costs use prices from different providers (AWS: h200-sxm; Lambda: "
                                           "h100-sxm)")
    assert price_note(compare_hardware("8b", 8, "h100-sxm,b200", tokens=1e12)).startswith(       # both Lambda
        "Costs use the profile's Lambda on-demand price")
    same = compare_hardware("8b", 8, "h100-sxm,h200-sxm", tokens=1e12, price_usd_per_gpu_hour=2.0)
    assert set(same.price_provider) == {"given"} and price_note(same) == "Costs use your --price-per-gpu-hour."
    assert price_note(compare_hardware("8b", 8, "h100-sxm,b200")) is None                     # no costs
    res = runner.invoke(app, ["--model", "8b", "--gpus", "8", "--hardware", "h100-sxm,h200-sxm", "--tokens", "1T"])
    assert res.exit_code == 0 and "not like for like" in res.output


def test_search_and_evaluate_take_a_token_budget_as_plan_does():
    """`plan --tokens 15T` gives a layout's days, GPU-hours, cost and energy; the library's search and evaluate take
    tokens= (and price, PUE) too, with the same figures and the same refusal of a PUE without tokens."""
    import json

    import planner

    pins = dict(tp=8, pp=16, dp=4, micro_batch=1, recompute="selective", zero_stage=1, vpp=4, sequence_parallel=True)
    ev = planner.evaluate("405b", 512, tokens="15T", **pins)
    argv = ["--model", "405b", "--gpus", "512", "--tp", "8", "--pp", "16", "--dp", "4", "--micro-batch", "1",
            "--recompute", "selective", "--zero", "1", "--vpp", "4", "--sequence-parallel", "--tokens", "15T",
            "--format", "json"]
    doc = json.loads(runner.invoke(app, argv).stdout)
    for key in ("time_to_train_days", "gpu_hours", "cost_usd", "energy_mwh"):
        assert ev.row[key] == pytest.approx(doc[key], rel=1e-12), key
    assert ev.row["time_to_train_days"] == pytest.approx(15e12 / ev.row["tokens_per_s"] / 86400, rel=1e-12)
    df = planner.search("8b", 64, tokens=15e12, price_usd_per_gpu_hour=2.0)
    assert np.allclose(df["cost_usd"], df["gpu_hours"] * 2.0, rtol=1e-12)
    assert np.allclose(df["gpu_hours"], 64 * df["time_to_train_days"] * 24, rtol=1e-12)
    with pytest.raises(planner.PlannerError, match="^pue: only applies to a token budget"):
        planner.search("8b", 64, pue=1.3)


def test_a_budget_under_one_step_is_refused_in_the_library_too():
    """15 tokens where 15T was meant: every entry point that prices a budget says so, naming one step's tokens."""
    import planner

    for call in (lambda: planner.search("8b", 8, tokens=15),
                 lambda: planner.evaluate("8b", 8, tp=1, pp=1, dp=8, tokens=15),
                 lambda: planner.sweep("8b", "8,16", tokens=15)):
        with pytest.raises(PlannerError, match="fewer than one step's 16,777,216 tokens"):
            call()
    assert planner.search("8b", 8, tokens=16 * 2**20)["time_to_train_days"].notna().all()     # exactly one step



def test_a_cost_of_n_a_says_which_profile_has_no_price_and_how_to_give_one():
    from planner.report import price_note

    df = compare_hardware("8b", 8, "h100-sxm,h200-sxm,mi300x", tokens=1e12)
    assert price_note(df).endswith("Cost n/a: the mi300x profile carries no sourced price; --price-per-gpu-hour "
                                   "gives one (to every row).")
    mixed = compare_hardware("8b", 8, "mi300x,gb200", tokens=1e12)
    assert price_note(mixed) == ("Cost n/a: the gb200, mi300x profiles carry no sourced price; --price-per-gpu-hour "
                                 "gives one (to every row).")
    assert price_note(compare_hardware("8b", 8, "mi300x,gb200", tokens=1e12, price_usd_per_gpu_hour=2.0)) == \
        "Costs use your --price-per-gpu-hour."
    res = runner.invoke(app, ["--model", "8b", "--gpus", "8", "--hardware", "mi300x", "--tokens", "1T"])
    assert res.exit_code == 0
    assert "Cost n/a: the mi300x profile carries no sourced price; --price-per-gpu-hour gives one." in \
        " ".join(res.output.split())
    res = runner.invoke(app, ["--model", "8b", "--gpus", "8", "--hardware", "h100-sxm", "--tokens", "1T"])
    assert res.exit_code == 0 and "Cost n/a" not in res.output


def test_rows_where_nothing_fits_are_not_called_unpriced():
    """A row without a fitting layout has no cost because it has no rate, not for want of a price."""
    from planner.report import price_note

    df = compare_hardware("70b", 16, "h100-sxm,b200,mi300x", tokens=1e12)
    assert not df.set_index("hardware").loc["h100-sxm", "fits"]                      # 70B on 16 H100s: none fits
    assert price_note(df).endswith("Cost n/a: the mi300x profile carries no sourced price; --price-per-gpu-hour "
                                   "gives one (to every row).")
    given = compare_hardware("70b", 16, "h100-sxm,b200", tokens=1e12, price_usd_per_gpu_hour=3.0)
    assert price_note(given) == "Costs use your --price-per-gpu-hour."
    res = runner.invoke(app, ["sweep", "--model", "70b", "--gpus", "8..32", "--tokens", "1T"])
    assert res.exit_code == 0 and "Cost n/a" not in res.output


def test_a_records_budget_checks_alone_and_the_ranked_table_shows_all_of_it():
    """Every budget record carries its inputs (tokens, price, PUE) beside its results, so cost and energy can be
    recomputed from the record; the ranked table's line for #1 shows GPU-hours and energy, which --pue moves."""
    import json

    base = ["--model", "8b", "--gpus", "64", "--tokens", "1T", "--top", "2"]
    doc = json.loads(runner.invoke(app, base + ["--format", "json", "--price-per-gpu-hour", "2", "--pue", "1.5"]).stdout)
    rec = doc["configs"][0]
    assert (rec["train_tokens"], rec["price_usd_per_gpu_hour"], rec["pue"], rec["price_provider"]) == (1e12, 2.0, 1.5,
                                                                                                     "given")
    seconds = rec["train_tokens"] / rec["tokens_per_s"]
    assert rec["gpu_hours"] == pytest.approx(64 * seconds / 3600, rel=1e-12)
    assert rec["cost_usd"] == pytest.approx(rec["gpu_hours"] * 2.0, rel=1e-12)
    assert rec["energy_mwh"] == pytest.approx(64 * 700 * seconds * 1.5 / 3.6e9, rel=1e-12)     # H100 SXM: 700 W TDP
    unpriced = json.loads(runner.invoke(app, ["--model", "8b", "--gpus", "8", "--hardware", "mi300x", "--tokens", "1T",
                                              "--top", "1", "--format", "json"]).stdout)["configs"][0]
    assert unpriced["price_usd_per_gpu_hour"] is None and unpriced["cost_usd"] is None and unpriced["pue"] == 1.2
    lines = {pue: next(line for line in runner.invoke(app, base + ["--pue", pue]).stdout.splitlines()
                       if line.startswith("#1's training budget"))
             for pue in ("1.2", "1.5")}
    assert lines["1.2"] != lines["1.5"] and lines["1.5"].endswith(" MWh at PUE 1.5.")
    assert " tokens: " in lines["1.5"] and " GPU-hours, " in lines["1.5"] and lines["1.5"].startswith(
        "#1's training budget for 1T tokens: ")


def test_sweep_and_comparison_json_name_the_job_their_rows_price():
    import json

    doc = json.loads(runner.invoke(app, ["sweep", "--model", "8b", "--gpus", "64..128", "--seq-len", "4096",
                                         "--format", "json"]).stdout)
    assert (doc["model"], doc["seq_len"], doc["global_batch"]) == ("llama-3.1-8b", 4096, 4096)
    doc = json.loads(runner.invoke(app, ["--model", "8b", "--gpus", "8", "--hardware", "h100-sxm,b200",
                                         "--global-batch", "64", "--format", "json"]).stdout)
    assert (doc["model"], doc["seq_len"], doc["global_batch"]) == ("llama-3.1-8b", 8192, 64)
