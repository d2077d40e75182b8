"""Explain report, what-if advice, plots, units, notebook helpers and the examples script."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_contract import assert_mentions, bad, run
from typer.testing import CliRunner

import planner
from planner.cli import app, main

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent


def _best(model="405b", gpus=512, **pins):
    return planner.evaluate(model, gpus, **pins)


def test_explain_report_shows_bars_bubble_placement_and_advice():
    res = runner.invoke(app, ["--model", "405b", "--gpus", "512", "--tp", "8", "--pp", "16", "--dp", "4",
                              "--recompute", "selective", "--micro-batch", "1", "--zero", "1"])
    out = res.output
    assert res.exit_code == 1 and "does NOT fit" in out
    assert "█" in out and "of HBM" in out
    assert "bubble (1F1B) = (p-1)/(v*m) = (16-1)/(1*512)" in out
    assert "TP (8): inside one node, on NVLink." in out and "P2P over the NICs" in out
    assert "To make it fit" in out and "full recompute" in out and "so it fits" in out


def test_bubble_line_share_is_of_the_whole_step():
    from planner.evaluate import evaluate
    from planner.explain import bubble_line

    row = evaluate(model="175b", gpus=1024, hardware="a100-80gb", tp=8, pp=16, dp=8, micro_batch=1,
                   recompute="selective", zero_stage=1, vpp=1).row      # 7.1% of the step; r/(1 + r) = 7.2%
    # the whole step includes PP, DP and optimizer time, which r/(1 + r) leaves out: the two differ here
    from planner.cost.pipeline import bubble_fraction
    assert row["pp_comm_s"] + row["dp_comm_s"] > 0
    share = f"{row['bubble_s'] / row['step_time_s']:.1%}"
    old = f"{float(bubble_fraction(row['pp'], row['num_microbatches'], row['vpp'])):.1%}"
    assert share != old and f"{share} of the step" in bubble_line(row)


def test_whatif_suggestions_are_real_improvements():
    from planner.whatif import suggestions

    ev = _best("405b", 512, tp=8, pp=16, dp=4, recompute="selective", micro_batch=1, zero_stage=1)
    tips = suggestions(ev)
    assert tips and all("so it fits" in t for t in tips)
    # the advice can be followed: the layout with the suggested knob changed (all others as evaluated) fits
    layout = {k: ev.row[k] for k in ("tp", "cp", "pp", "dp", "micro_batch", "vpp", "sequence_parallel", "recompute",
                                     "recompute_layers", "zero_stage")}
    for tip in tips:
        assert _best("405b", 512, **{**layout, **_knob_of(tip.split(":")[0])}).fits, tip


def test_whatif_drops_a_change_another_one_beats_on_memory_and_time():
    """70B TP8 PP4 DP2 with full recompute: no recompute is 26% faster; with FlashAttention selective recompute
    keeps the same memory and is slower, so it is no advice (it was listed right below); the bubble, 0% either
    way, gets no '0% -> 0%' note."""
    from planner.whatif import suggestions

    ev = _best("70b", 64, tp=8, pp=4, dp=2, recompute="full", micro_batch=1, vpp=1, zero_stage=1,
               sequence_parallel=True)
    tips = suggestions(ev)
    assert tips[0].startswith("no recompute: step -") and "bubble" not in tips[0]
    assert not any(t.startswith("selective recompute") for t in tips)
    sel = _best("70b", 64, tp=8, pp=4, dp=2, recompute="selective", micro_batch=1, vpp=1, zero_stage=1,
                sequence_parallel=True)
    none = _best("70b", 64, tp=8, pp=4, dp=2, recompute="none", micro_batch=1, vpp=1, zero_stage=1,
                 sequence_parallel=True)
    assert sel.row["memory_gib"] == pytest.approx(none.row["memory_gib"]) and sel.row["step_time_s"] > none.row[
        "step_time_s"]
    for tip in tips:
        assert _best("70b", 64, **{**{k: ev.row[k] for k in ("tp", "cp", "pp", "dp", "micro_batch", "vpp",
                                                             "sequence_parallel", "recompute", "recompute_layers",
                                                             "zero_stage")}, **_knob_of(tip.split(":")[0])}).fits


def test_whatif_trades_dp_for_cp_by_as_much_as_it_takes():
    """8B at 131,072 tokens on 8 GPUs, DP 8: CP 2 is not enough (the advice was 'add GPUs or pipeline stages'),
    CP 4 or 8 on the same GPUs fits, and the advice says so and holds when followed."""
    from planner.whatif import suggestions

    ev = _best("8b", 8, seq_len=131072, tp=1, pp=1, dp=8)
    assert not ev.fits
    tips = [t for t in suggestions(ev) if t.startswith("CP ")]
    assert {t.split(":")[0] for t in tips} >= {"CP 4 with DP 2", "CP 8 with DP 1"}
    layout = {k: ev.row[k] for k in ("tp", "cp", "pp", "dp", "micro_batch", "vpp", "sequence_parallel", "recompute",
                                     "recompute_layers", "zero_stage")}
    for tip in tips:
        assert _best("8b", 8, seq_len=131072, **{**layout, **_knob_of(tip.split(":")[0])}).fits, tip


def _knob_of(label: str) -> dict:
    """The pin a what-if label stands for ('full recompute', 'ZeRO-3', 'VPP 4 interleaving', ...)."""
    words = label.split()
    if label.endswith(" recompute"):                        # 'no recompute' is recompute none
        return {"recompute": "none" if words[0] == "no" else words[0], "recompute_layers": 0}
    if label.startswith("full recompute of "):              # 'full recompute of 4 of 8 layers per chunk'
        return {"recompute": "full", "recompute_layers": int(words[3])}
    if label.startswith("ZeRO-"):
        return {"zero_stage": int(label.removeprefix("ZeRO-"))}
    if label.startswith("VPP "):                             # 'VPP 2 interleaving[, full recompute of k of n ...]'
        extra = label.split(", ", 1)[1] if ", " in label else ""
        return {"vpp": int(words[1]), **(_knob_of(extra) if extra else {})}
    if label.startswith("micro-batch "):
        return {"micro_batch": int(words[1])}
    if label.startswith("CP "):                              # 'CP 2 with DP 2': two degrees, same GPUs
        return {"cp": int(words[1]), "dp": int(words[-1])}
    assert label.startswith("sequence parallelism "), label
    return {"sequence_parallel": words[-1] == "on"}


def test_plots_are_valid_png_and_svg(tmp_path, capsys):
    png, svg = tmp_path / "search.png", tmp_path / "sweep.svg"
    assert main(["--model", "8b", "--gpus", "64", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["sweep", "--model", "8b", "--gpus", "8..64", "--tokens", "1T", "--plot", str(svg)]) == 0
    head = svg.read_text()[:500]
    assert "<svg" in head or "<?xml" in head
    capsys.readouterr()
    assert_mentions(bad(capsys, "--model", "8b", "--gpus", "64", "--plot", tmp_path / "x.jpg"), "--plot")
    # an unwritable plot path is named by the flag that gave it
    line = bad(capsys, "--model", "8b", "--gpus", "64", "--plot", tmp_path / "missing" / "x.png")
    assert line.startswith("error: --plot:") and "does not exist" in line


def test_plot_without_matplotlib_says_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)       # import matplotlib -> ImportError
    line = bad(capsys, "--model", "8b", "--gpus", "64", "--plot", tmp_path / "a.png")
    assert 'pip install ".[plot]"' in line                      # README's command (PyPI's "planner" is another project)
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert 'pip install ".[plot]"' in readme
    assert not (tmp_path / "a.png").exists()
    # checked before the work: a sweep prints no table and writes no -o file first
    code, out, err = run(capsys, "sweep", "--model", "8b", "--gpus", "8..16", "--plot", tmp_path / "s.png",
                         "-o", tmp_path / "s.json")
    assert code == 2 and out == "" and 'pip install ".[plot]"' in err and not (tmp_path / "s.json").exists()


def test_notebook_helpers():
    df = planner.search("8b", 8)
    html = planner.style(df.head(3)).to_html()
    assert "<table" in html and "%" in html and "mfu" in html
    ev = planner.evaluate("8b", 8, tp=1, pp=1, dp=8)
    assert "<table" in ev._repr_html_() and "memory part" in ev._repr_html_()


def test_examples_script_runs():
    res = subprocess.run([sys.executable, str(ROOT / "examples" / "workflows.py")], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert "published runs" in res.stdout and "styled HTML table" in res.stdout


def test_whatif_numbers_use_the_evaluated_precision():
    """A what-if is the same evaluation with one knob changed: its memory must equal evaluating that variant with
    the same (non-default) precision."""
    import re

    from planner.specs.strategy import Precision
    from planner.whatif import suggestions

    prec = Precision(grad_bytes=2)
    pins = dict(tp=8, pp=16, dp=4, recompute="selective", zero_stage=0, sequence_parallel=True, micro_batch=1)
    ev = _best("405b", 512, precision=prec, **pins)
    tips = suggestions(ev)
    assert tips
    for tip in tips:
        label, rest = tip.split(":", 1)
        variant = _best("405b", 512, precision=prec, **{**pins, "vpp": int(ev.row["vpp"]), **_knob_of(label)})
        shown = float(re.search(r"\(([\d.]+) GiB\)", rest).group(1))
        assert shown == pytest.approx(variant.row["memory_gib"], abs=0.051), tip


def test_tokens_budget_for_a_pinned_layout(capsys):
    """--tokens works with a pinned layout too: the breakdown prints the budget and the JSON carries it, computed
    from that layout's own throughput (days = tokens / tokens_per_s / 86400)."""
    argv = ["--model", "405b", "--gpus", "512", "--tp", "8", "--pp", "16", "--dp", "4", "--tokens", "15T"]
    main(argv + ["--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["time_to_train_days"] == pytest.approx(15e12 / doc["tokens_per_s"] / 86400, rel=1e-9)
    assert doc["gpu_hours"] == pytest.approx(doc["time_to_train_days"] * 24 * 512, rel=1e-9)
    main(argv)
    out = " ".join(capsys.readouterr().out.split())
    assert f"Training budget for 15T tokens: {doc['time_to_train_days']:,.1f} days, {doc['gpu_hours']:,.0f} GPU-hours" in out


def test_why_first_names_knobs_as_the_table_writes_them():
    import pandas as pd

    from planner.explain import knob_differences, why_first

    base = dict(tp=4, cp=1, pp=1, dp=16, micro_batch=1, vpp=1, sequence_parallel=True, recompute="full",
                recompute_layers=0, zero_stage=3, memory_gib=50.0, step_time_s=100.0,
                **{f"{k}_s": 10.0 for k in ("compute", "tp_comm", "cp_comm", "pp_comm", "dp_comm", "bubble",
                                             "optimizer")})
    a, b = dict(base), dict(base, sequence_parallel=False, recompute_layers=40)
    # full recompute of every layer (recompute_layers 0) against the first 40 layers: not "0 vs 40"
    assert knob_differences(a, b) == ["SP on vs off", "recompute full vs full(40)"]
    tie = why_first(pd.DataFrame([a, dict(a, tp=8, memory_gib=60.0)]))
    assert tie.startswith("#1 and #2 are equally fast; #1 uses less memory (TP 4 vs 8;")
    # by hand: #1 wins 24.8 s of TP; loses 13 s of compute and 8.7 s of DP; the other parts lose 1.3 s; net 1.8 s:
    # both losses are named and the remainder too, so the named parts add up to the net
    one = dict(a, step_time_s=100.0)
    two = dict(a, step_time_s=101.8, tp=8, tp_comm_s=10.0 + 24.8, compute_s=10.0 - 13.0, dp_comm_s=10.0 - 8.7,
               pp_comm_s=10.0 - 0.8, bubble_s=10.0 - 0.5)
    line = why_first(pd.DataFrame([one, two]))
    assert "TP communication 24.8 s shorter; despite compute 13 s longer, exposed DP communication 8.7 s longer, " \
           "other parts 1.3 s longer, 1.8 s net" in line, line


def test_a_layout_inside_the_headroom_is_called_tight():
    """Llama 3 405B's production layout: 78.7 GiB predicted, over the 74.1 GiB a plan uses, under the 79.7 GiB of
    HBM that plan validate checks against."""
    args = ["--model", "405b", "--gpus", "8192", "--tp", "8", "--pp", "16", "--dp", "64", "--zero", "2",
            "--sequence-parallel", "--micro-batch", "1", "--vpp", "8", "--recompute", "none"]
    res = runner.invoke(app, args)
    assert res.exit_code == 1 and "does NOT fit (it is under the 79.7 GiB of HBM" in res.output and "tight" in res.output
    assert runner.invoke(app, args + ["--headroom-gib", "0"]).exit_code == 0


def test_token_and_money_units_scale():
    from planner.report import _binary_count, _money

    assert [_binary_count(n) for n in (512, 24_576, 16 * 2**20, 3 * 2**30)] == ["512", "24.00Ki", "16.00Mi", "3.00Gi"]
    assert [_money(x) for x in (950, 12_000, 2.5e6, 1.1175e12, 3e15, 1.3378e23)] == \
        ["$950", "$12k", "$2.50M", "$1.12T", "$3e+15", "$1.34e+23"]                   # past $T: no suffix helps
    assert [_money(x) for x in (999.6, 999_600, 999_996_000, 999.996e12)] == ["$1k", "$1.00M", "$1.00B", "$1e+15"]
    assert _binary_count(1_048_575) == "1.00Mi"


def test_reports_name_what_the_user_can_change():
    tight = ["--model", "405b", "--gpus", "8192", "--tp", "8", "--pp", "16", "--dp", "64", "--zero", "2", "--vpp", "8",
             "--micro-batch", "1", "--recompute", "none", "--sequence-parallel", "--export", "megatron"]
    res = runner.invoke(app, tight)
    assert res.exit_code == 1 and "tight" in res.stderr and "--headroom-gib 0 accepts it" in res.stderr
    res = runner.invoke(app, ["--model", "8b", "--gpus", "16", "--hardware", "mi300x", "--tp", "2", "--pp", "2",
                              "--dp", "4"])
    assert "TP (2): inside one node, on the node's mesh links." in res.output and "NVLink" not in res.output
    res = runner.invoke(app, ["--model", "8b", "--gpus", "8", "--tp", "1", "--pp", "1", "--dp", "8", "--tokens", "1T",
                              "--hardware", "mi300x"])
    assert "no price in the profile (--price-per-gpu-hour)" in res.output
    res = runner.invoke(app, ["--model", "8b", "--gpus", "8", "--tokens", "1T", "--top", "2"])
    assert "Costs use the profile's Lambda on-demand price" in res.output


def test_small_numbers_and_partial_pipeline_crossings_are_shown_as_they_are():
    """GPT-2 is 124M params, not '0.1B'; a 0.06 s step keeps three figures; a pipeline whose PP group spans two
    nodes has one boundary on the NICs, not all of them."""
    from planner.explain import placement_lines
    from planner.report import _fmt_params, _fmt_step

    assert _fmt_params(124_439_808) == "124M" and _fmt_params(405.9e9) == "405.9B"
    assert _fmt_params(999.7e6) == "1.0B" and _fmt_params(300e3) == "0.3M"        # no "1000M", no "0M"
    assert _fmt_step(0.05812) == "0.0581" and _fmt_step(264.314) == "264.31" and _fmt_step(0.9996) == "1.00"
    hw = planner.load_hardware("h100-sxm")
    row = {"tp": 4, "cp": 1, "pp": 4, "dp": 4, "placement": "tp-pp-dp"}
    assert "1 of 3 stage boundaries crosses nodes" in placement_lines(row, hw)[-1]
    assert "every stage boundary crosses nodes" in placement_lines({**row, "placement": "tp-dp-pp"}, hw)[-1]
    assert "neighbouring stages share a node" in placement_lines({**row, "tp": 2}, hw)[-1]
    # 12 GPUs on 8-GPU nodes: the pipeline at ranks 0/6 stays in a node, the one at 2/8 crosses: the worst counts
    odd = {"tp": 1, "cp": 2, "pp": 2, "dp": 3, "placement": "tp-cp-dp-pp"}
    assert "up to 1 of 1 stage boundaries cross nodes" in placement_lines(odd, hw)[-1]


def test_gb200_jobs_beyond_one_domain_are_placed_in_segments_and_say_so():
    """256 GB200s fill four 64-GPU segments (16 trays each, one per NVL72 domain): the placement lines name them and
    count nodes in segments (a DP of 128 at stride 2: 32 ranks on each of 4). On 144 GPUs (two whole domains) a DP
    group of 2 at stride 8 is split where its 16-rank block straddles the domains (ranks 64-79): one rank on each,
    on the NICs. 64 GPUs sit inside one domain: no segment line."""
    from planner.explain import placement_lines
    from planner.candidates import Pins
    from planner.search import run_search

    res = run_search("70b", 256, hardware="gb200", pins=Pins(tp=2, pp=1, dp=128))
    lines = placement_lines(res.table.iloc[0].to_dict(), res.hardware)
    assert lines[0].startswith("256 GPUs as 4 segments of 64 (16 hosts of 4), each inside one 72-GPU NVLink domain")
    assert "DP (128): across 4 nodes, 32 ranks per node" in lines[2]
    gb = planner.load_hardware("gb200").for_job(144)
    row = {"tp": 8, "cp": 1, "pp": 9, "dp": 2, "placement": "tp-dp-pp"}
    assert gb.gpus_per_node == 72 and "DP (2): across 2 nodes, one rank per node" in placement_lines(row, gb)[2]
    small = planner.load_hardware("gb200").for_job(64)
    assert placement_lines({**row, "pp": 4, "dp": 2}, small)[0].startswith("TP (8): inside one node")
    # 144 = two whole domains; PP between CP and DP (tp-cp-pp-dp): the DP x CP groups counted rank by rank,
    # ranks 0-1, 4-5, ... 68-69 and 72-... : 10 on one domain, 8 on the other for the group that straddles
    lines = placement_lines({"tp": 4, "cp": 2, "pp": 2, "dp": 9, "placement": "tp-cp-pp-dp"}, gb)
    assert lines[0] == "144 GPUs fill 2 whole 72-GPU NVLink domains, in rank order."
    assert "DP x CP (9 x 2): across 2 nodes, 8-10 ranks per node" in lines[3]
    odd = planner.load_hardware("gb200").for_job(100)
    lines = placement_lines({"tp": 4, "cp": 1, "pp": 5, "dp": 5, "placement": "tp-dp-pp"}, odd)
    assert lines[0] == "100 GPUs fill 1 whole 72-GPU NVLink domain and 28 GPUs of another, in rank order."
    assert "DP (5): across 2 nodes, 2-3 ranks per node" in lines[2]


def test_layout_report_says_what_the_mfu_convention_and_a_cp_ring_do():
    """PaLM's MFU counts causal attention in full, 12·L·q·s per token beside 6·N, while FlashAttention computes
    half: at 8K tokens on 405B the note gives MFU x (6N + 6Lqs)/(6N + 12Lqs) (1.5 points lower); a CP ring's extra
    kernels are said to count under compute (a reviewer read a 5.6x 'compute' as slower GEMMs)."""
    import re

    from planner.cost.flops import model_flops_per_token

    res = runner.invoke(app, ["--model", "405b", "--gpus", "512", "--tp", "8", "--pp", "16", "--dp", "4"])
    mfu = float(re.search(r"MFU (\d+\.\d)%, HFU", res.output).group(1)) / 100
    halved = float(re.search(r"counted at half, MFU is (\d+\.\d)%", res.output).group(1)) / 100
    m = planner.load_model("405b")
    n6 = float(model_flops_per_token(m, 8192)) - 12 * m.layers * m.q_dim * 8192       # 6N: the weights' part
    ratio = (n6 + 6 * m.layers * m.q_dim * 8192) / (n6 + 12 * m.layers * m.q_dim * 8192)
    assert 0.95 < ratio < 0.97 and halved == pytest.approx(mfu * ratio, abs=0.0011)
    short = runner.invoke(app, ["--model", "405b", "--gpus", "512", "--tp", "8", "--pp", "16", "--dp", "4",
                                "--seq-len", "1024", "--global-batch", "8192"])
    assert "counted at half" not in short.output                     # under a point of MFU: no note
    ring = runner.invoke(app, ["--model", "8b", "--gpus", "16", "--tp", "1", "--cp", "16", "--pp", "1", "--dp", "1"])
    assert "CP ring: each layer's attention runs as 16 partial kernels and 15 merges per pass" in ring.output
    gather = runner.invoke(app, ["--model", "8b", "--gpus", "16", "--tp", "1", "--cp", "16", "--pp", "1", "--dp", "1",
                                 "--cp-comm", "allgather"])
    assert "CP ring" not in gather.output
