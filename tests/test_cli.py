"""The plan command: output formats, the JSON contract, exit codes, and the installed entry points."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import planner
from planner.cli import app
from planner.specs.hardware import load_hardware

runner = CliRunner()
CONFIG_KEYS = {"tp", "cp", "pp", "dp", "micro_batch", "num_microbatches", "global_batch", "vpp", "sequence_parallel",
               "recompute", "zero_stage", "fits", "memory_gib", "memory_breakdown_gib", "step_time_s",
               "time_breakdown_s", "tokens_per_s", "tflops_per_gpu", "mfu", "hfu"}


def test_table_shows_ranked_layouts_and_reasons():
    res = runner.invoke(app, ["--model", "405b", "--gpus", "512"])
    assert res.exit_code == 0, res.output
    out = res.output
    for needle in ("TP", "PP", "DP", "MFU", "memory GiB", "#1 ", "layouts considered", "TP does not divide the 8 K/V heads",
                   "does not fit in memory", "PaLM"):
        assert needle in out


def test_json_follows_the_contract():
    res = runner.invoke(app, ["--model", "405b", "--gpus", "512", "--format", "json", "--top", "5"])
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert doc["model"]["name"] == "llama-3.1-405b" and abs(doc["model"]["params"] - 405.85e9) < 0.5e9
    assert doc["hardware"]["name"] == "h100-sxm" and doc["gpus"] == 512
    assert doc["considered"] > sum(doc["rejected"].values()) >= 1
    assert isinstance(doc["rejected"], dict) and doc["rejected"]
    assert 1 <= len(doc["configs"]) <= 5
    for c in doc["configs"]:
        assert CONFIG_KEYS <= set(c)
        assert set(c["memory_breakdown_gib"]) == {"weights", "gradients", "optimizer", "activations", "gathered",
                                                  "other"}
        assert set(c["time_breakdown_s"]) == {"compute", "tp_comm", "cp_comm", "pp_comm", "dp_comm", "bubble",
                                              "optimizer"}
        assert c["tp"] * c["cp"] * c["pp"] * c["dp"] == 512 and c["tp"] <= 8 and c["fits"] is True
        assert c["memory_gib"] <= 80 and c["recompute"] in ("none", "selective", "full")
        assert c["zero_stage"] in (0, 1, 2, 3) and 0 < c["mfu"] <= 1
        assert abs(sum(c["time_breakdown_s"].values()) - c["step_time_s"]) < 1e-6 * c["step_time_s"]
    speeds = [c["tokens_per_s"] for c in doc["configs"]]
    assert speeds == sorted(speeds, reverse=True)


def test_csv_has_a_header_and_rows():
    res = runner.invoke(app, ["--model", "8b", "--gpus", "16", "--format", "csv", "--top", "3"])
    assert res.exit_code == 0
    lines = res.stdout.strip().splitlines()
    assert lines[0].startswith("tp,cp,pp,dp,micro_batch") and len(lines) == 4


def test_pinned_layout_prints_breakdown_and_verdict():
    res = runner.invoke(app, ["--model", "405b", "--gpus", "512", "--tp", "8", "--pp", "4", "--dp", "16"])
    assert res.exit_code == 0, res.output              # 405B on TP8 PP4 DP16 fits (exit 1 would mean it does not)
    assert "fits" in res.output and "dominated by" in res.output
    for part in ("weights", "optimizer", "activations", "compute", "tp_comm", "bubble"):
        assert part in res.output


def test_zero3_gathered_units_are_a_part_of_their_own():
    """ZeRO-3's transient full-width units get their own row (and a note saying what they are); a layout below
    stage 3 gathers nothing, so its breakdown has no such row. The parts still add up to the total printed."""
    pinned = ["--model", "70b", "--gpus", "64", "--tp", "1", "--pp", "1", "--dp", "64", "--micro-batch", "1",
              "--recompute", "full"]
    z3 = runner.invoke(app, pinned + ["--zero", "3"])
    assert z3.exit_code == 0, z3.output
    assert "│ gathered" in z3.output and "Gathered: ZeRO-3's full-width units" in z3.output
    doc = json.loads(runner.invoke(app, pinned + ["--zero", "3", "--format", "json"]).output)
    parts = doc["memory_breakdown_gib"]                 # a pinned layout's JSON is that one layout
    assert parts["gathered"] > 0 and sum(parts.values()) == pytest.approx(doc["memory_gib"], rel=1e-4)
    z1 = runner.invoke(app, pinned + ["--zero", "1"])
    assert "│ gathered" not in z1.output and "Gathered:" not in z1.output


def test_pinned_layout_that_does_not_fit_exits_1_with_breakdown():
    res = runner.invoke(app, ["--model", "405b", "--gpus", "64", "--tp", "8", "--pp", "1", "--dp", "8",
                              "--recompute", "none"])
    assert res.exit_code == 1
    assert "does NOT fit" in res.output


def test_nothing_fits_exits_1_and_names_a_gpu_count():
    res = runner.invoke(app, ["--model", "405b", "--gpus", "16"])
    assert res.exit_code == 1
    assert "Nothing fits" in res.output and "Smallest GPU count" in res.output


def test_the_smallest_count_that_fits_pins_says_a_pinned_dp_is_left_free():
    """More GPUs cannot keep a pinned DP (the degrees multiply to the count): the scan frees it and says so, so the
    count it names is not a lie about the other pins."""
    res = runner.invoke(app, ["--model", "405b", "--gpus", "512", "--dp", "4", "--micro-batch", "4",
                              "--recompute", "none", "--zero", "0"])
    assert res.exit_code == 1
    line = next(x for x in res.output.splitlines() if x.startswith("Smallest GPU count"))
    # the library's scan with DP left free (the other pins kept) names the same count
    n = planner.search("405b", 512, micro_batch=4, recompute="none", zero_stage=0,
                       find_min_gpus=True).attrs["min_gpus_that_fit"]
    assert n > 512 and f"these pins: {n:,} (DP left free)." in line, line
    res = runner.invoke(app, ["--model", "405b", "--gpus", "512", "--dp", "4", "--micro-batch", "4",
                              "--recompute", "none", "--zero", "0", "--format", "json"])
    assert f"min GPUs that fit: {n:,} (DP left free)" in res.stderr
    res = runner.invoke(app, ["--model", "405b", "--gpus", "512", "--micro-batch", "4", "--recompute", "none",
                              "--zero", "0"])
    assert "these pins: " in next(x for x in res.output.splitlines() if x.startswith("Smallest GPU count"))


def test_models_and_hardware_lists():
    res = runner.invoke(app, ["models"])
    assert res.exit_code == 0 and "llama-3.1-405b" in res.output and "gpt3-175b" in res.output
    res = runner.invoke(app, ["hardware"])
    assert res.exit_code == 0
    for name in ("a100-40gb", "a100-80gb", "h100-sxm", "h200-sxm", "b200", "mi300x"):
        assert name in res.output


def test_the_hardware_list_shows_each_profiles_aliases_and_each_alias_loads_it():
    from planner.specs.hardware import hardware_aliases, load_hardware

    aliases = hardware_aliases()
    assert "h100" in aliases["h100-sxm"] and "a100" in aliases["a100-80gb"]
    for name, others in aliases.items():
        assert name not in others and all(load_hardware(a).name == name for a in others)
    res = runner.invoke(app, ["hardware"], terminal_width=250)
    assert res.exit_code == 0 and "aliases" in res.output and "h100-80gb, dgx-h100" in res.output


def test_python_dash_m_planner():
    res = subprocess.run([sys.executable, "-m", "planner", "--model", "8b", "--gpus", "8", "--format", "json",
                          "--top", "1"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    best = json.loads(res.stdout)["configs"][0]
    assert best["tp"] * best["cp"] * best["pp"] * best["dp"] == 8


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_reader_that_stops_early_is_not_nothing_fits(fmt):
    """`plan ... | head`: the reader goes away before the output is written. rich (tables) and click (plain prints)
    would exit 1, which `plan` reserves for "nothing fits"; it exits 141, as a shell reports a SIGPIPE, quietly."""
    proc = subprocess.Popen([sys.executable, "-m", "planner", "--model", "8b", "--gpus", "8", "--format", fmt],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                  # before the child has written anything: its first write fails
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err, err


def test_installed_plan_command_runs_from_another_directory(tmp_path):
    """The console script finds its bundled hardware profiles wherever it runs."""
    exe = shutil.which("plan", path=os.path.dirname(sys.executable)) or shutil.which("plan")
    if exe is None:
        pytest.skip("the plan console script is not installed in this environment")
    res = subprocess.run([exe, "--model", "405b", "--gpus", "512", "--format", "json", "--top", "3"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    assert len(json.loads(res.stdout)["configs"]) == 3


def test_cp_flag_pins_context_parallelism(capsys):
    """--cp pins the context-parallel degree; a CP that cannot split the sequence into 2 x CP chunks names --cp."""
    res = runner.invoke(app, ["--model", "8b", "--gpus", "16", "--cp", "2", "--format", "json", "--top", "3"])
    assert res.exit_code == 0, res.output
    configs = json.loads(res.stdout)["configs"]
    assert configs and all(c["cp"] == 2 and c["tp"] * c["cp"] * c["pp"] * c["dp"] == 16 for c in configs)
    pinned = runner.invoke(app, ["--model", "8b", "--gpus", "16", "--tp", "2", "--cp", "4", "--pp", "1", "--dp", "2"])
    assert pinned.exit_code == 0 and "CP4" in pinned.output and "CP (4): K/V exchange inside one node" in pinned.output
    from cli_contract import assert_mentions, bad
    assert_mentions(bad(capsys, "--model", "8b", "--gpus", "64", "--cp", "32", "--seq-len", "48"), "--cp", "2 x CP")


def test_a_huge_top_is_capped_for_the_terminal_table(capsys):
    """--top 10^20 on a table would lay out tens of thousands of rows (minutes); the table stops at 500 and says
    where the rest are."""
    from cli_contract import run as run_cli

    from planner.report import MAX_TABLE_ROWS

    code, out, err = run_cli(capsys, "--model", "gpt3-175b", "--gpus", "32", "--top", str(10**20))
    assert code == 1 and f"Showing the first {MAX_TABLE_ROWS}" in err
    code, _, err = run_cli(capsys, "--model", "8b", "--gpus", "8", "--top", "600")
    ranked = len(planner.search("8b", 8))               # the count the message states, from the library
    assert code == 0 and f"first 500 of the 600 rows asked for ({ranked:,} layouts ranked)" in err
    assert out.count("OOM") == MAX_TABLE_ROWS


def test_cp_comm_choice(capsys):
    """--cp-comm allgather puts CP's K/V exchange on the critical path (Llama 3, torchtitan); the ring hides it here
    behind attention, but for the share the NVLink overlap slowdown leaves exposed (the same bytes inside a node)."""
    args = ["--model", "8b", "--gpus", "16", "--tp", "2", "--cp", "4", "--pp", "1", "--dp", "2", "--format", "json"]
    ring = json.loads(runner.invoke(app, args).stdout)["time_breakdown_s"]["cp_comm"]
    gather = json.loads(runner.invoke(app, args + ["--cp-comm", "allgather"]).stdout)["time_breakdown_s"]["cp_comm"]
    slowdown = load_hardware("h100-sxm").overlap_slowdown_intra
    assert 0 < gather and ring == pytest.approx(slowdown * gather, rel=1e-9)
    from cli_contract import assert_mentions, bad
    assert_mentions(bad(capsys, *args, "--cp-comm", "p2p"), "--cp-comm", "ring or allgather")


def test_flash_attention_generation_flag(capsys):
    """--flash-attention-gen 1 prices FlashAttention-1 / its Triton port at half the FlashAttention-2 rate: at 32K
    tokens, where attention is a large share, the step is longer; anything but 1, 2 or 3 is one line, exit 2."""
    args = ["--model", "8b", "--gpus", "8", "--seq-len", "32768", "--global-batch", "16", "--tp", "1", "--cp", "1",
            "--pp", "1", "--dp", "8", "--format", "json"]
    fa2 = json.loads(runner.invoke(app, args).stdout)
    fa1 = json.loads(runner.invoke(app, args + ["--flash-attention-gen", "1"]).stdout)
    assert fa1["step_time_s"] > 1.2 * fa2["step_time_s"]
    from cli_contract import assert_mentions, bad
    assert_mentions(bad(capsys, *args, "--flash-attention-gen", "4"), "--flash-attention-gen", "1, 2 or 3")
    assert_mentions(bad(capsys, *args, "--no-flash-attention", "--flash-attention-gen", "1"),
                    "--flash-attention-gen", "with FlashAttention off")


def test_a_pinned_json_record_can_be_checked_alone():
    """It carries what its numbers were derived from: tokens/s from its batch, sequence and step, the GPU count from
    its layout, its memory against the limit."""
    res = runner.invoke(app, ["--model", "8b", "--gpus", "16", "--tp", "2", "--pp", "2", "--dp", "4", "--seq-len",
                              "4096", "--format", "json"])
    rec = json.loads(res.stdout)
    assert res.exit_code == 0 and (rec["gpus"], rec["seq_len"]) == (16, 4096)
    assert rec["tp"] * rec["cp"] * rec["pp"] * rec["dp"] == rec["gpus"]
    assert rec["tokens_per_s"] == pytest.approx(rec["global_batch"] * rec["seq_len"] / rec["step_time_s"], rel=1e-9)
    assert rec["fits"] == (rec["memory_gib"] <= rec["memory_capacity_gib"])


def test_a_json_record_names_the_runtime_and_precision_it_was_priced_with():
    """The stack's features travel with the numbers: flags show up as set, FlashAttention as the hardware runs it
    (on by default on H100, off on V100, which has no fused kernels), and the bytes per element are the default's."""
    args = ["--model", "8b", "--gpus", "16", "--tp", "2", "--pp", "2", "--dp", "4", "--format", "json"]
    base = json.loads(runner.invoke(app, args).stdout)
    assert base["runtime"]["flash_attention"] is True and base["runtime"]["flash_attention_gen"] == 2
    assert base["runtime"]["grad_accumulation_fusion"] is True and base["runtime"]["zero1_all_reduce"] is False
    assert base["precision"] == {"param_bytes": 2, "grad_bytes": 4, "optimizer_bytes": 12, "activation_bytes": 2,
                                 "params_are_master": False}
    flagged = json.loads(runner.invoke(app, args + ["--no-grad-accumulation-fusion", "--flash-attention-gen", "1",
                                                    "--zero1-all-reduce"]).stdout)
    assert flagged["runtime"]["grad_accumulation_fusion"] is False and flagged["runtime"]["zero1_all_reduce"] is True
    assert flagged["runtime"]["flash_attention_gen"] == 1
    changed = {k for k in base["runtime"] if base["runtime"][k] != flagged["runtime"][k]}
    assert changed == {"grad_accumulation_fusion", "flash_attention_gen", "zero1_all_reduce"}
    # the record re-prices alone: its layout, runtime and precision give its step time back
    layout = {k: flagged[k] for k in ("tp", "cp", "pp", "dp", "micro_batch", "vpp", "sequence_parallel", "recompute",
                                      "zero_stage", "dp_replicate")}
    again = planner.evaluate("8b", 16, **layout, runtime=planner.Runtime(**flagged["runtime"]),
                             precision=planner.Precision(**flagged["precision"]))
    assert again.row["step_time_s"] == flagged["step_time_s"] != base["step_time_s"]
    search = json.loads(runner.invoke(app, ["--model", "8b", "--gpus", "16", "--hardware", "v100", "--format",
                                            "json", "--top", "1"]).stdout)
    assert search["runtime"]["flash_attention"] is False and search["runtime"]["flash_attention_gen"] is None


def test_a_plan_on_your_own_node_network(capsys):
    """--nics-per-node/--nic-gbit-per-s price the profile's GPUs on another network (HardwareSpec.with_network):
    the profile's own (DGX A100: 8 HDR NICs of 200 Gb/s) changes nothing, a quarter of it (4 x 100 Gb/s, as on
    many cloud A100 nodes) only lengthens the DP traffic that crosses nodes (short 1,024-token sequences, one per
    GPU: the gradient reduction outlasts the backward), and every output names the network."""
    args = ["--model", "8b", "--gpus", "64", "--hardware", "a100-80gb", "--tp", "1", "--pp", "1", "--dp", "64",
            "--dp-replicate", "1", "--global-batch", "64", "--seq-len", "1024", "--format", "json"]
    base = json.loads(runner.invoke(app, args).stdout)
    same = json.loads(runner.invoke(app, args + ["--nics-per-node", "8", "--nic-gbit-per-s", "200"]).stdout)
    slow = json.loads(runner.invoke(app, args + ["--nics-per-node", "4", "--nic-gbit-per-s", "100"]).stdout)
    assert same["time_breakdown_s"] == base["time_breakdown_s"]
    assert base["hardware"]["name"] == "a100-80gb"
    assert slow["hardware"]["name"] == "a100-80gb on 4 x 100 Gb/s NICs per node"
    parts = slow["time_breakdown_s"]
    assert parts["dp_comm"] > base["time_breakdown_s"]["dp_comm"]
    assert {k: v for k, v in parts.items() if k != "dp_comm"} == {k: v for k, v in base["time_breakdown_s"].items()
                                                                  if k != "dp_comm"}
    search = runner.invoke(app, ["--model", "8b", "--gpus", "64", "--hardware", "a100-80gb", "--nics-per-node", "4",
                                 "--nic-gbit-per-s", "100", "--top", "1", "--format", "json"])
    assert json.loads(search.stdout)["hardware"]["name"] == "a100-80gb on 4 x 100 Gb/s NICs per node"
    sweep = runner.invoke(app, ["sweep", "--model", "8b", "--gpus", "8,16", "--hardware", "a100-80gb",
                                "--nics-per-node", "4", "--nic-gbit-per-s", "100"])
    assert sweep.exit_code == 0 and "8b on a100-80gb on 4 x 100 Gb/s NICs per node" in sweep.stdout
    csv = runner.invoke(app, ["sweep", "--model", "8b", "--gpus", "8,16", "--hardware", "a100-80gb",
                              "--nics-per-node", "4", "--nic-gbit-per-s", "100", "--format", "csv"]).stdout.splitlines()
    assert csv[0].endswith(",hardware") and all(r.endswith(",a100-80gb on 4 x 100 Gb/s NICs per node")
                                                for r in csv[1:])


def test_counts_of_one_are_singular(capsys):
    from cli_contract import bad, run

    from planner.explain import rejection_summary

    code, out, err = run(capsys, "--model", "8b", "--gpus", "8", "--global-batch", "1", "--top", "1")
    assert code == 0, err
    assert "global batch 1 sequence (" in out and "1 sequences" not in out
    line = bad(capsys, "--model", "405b", "--gpus", "64", "--tp", "8", "--pp", "8", "--dp", "1", "--micro-batch", "3",
               "--vpp", "1", "--recompute", "full", "--zero", "0", "--no-sequence-parallel")
    assert "(1 layout)" in line and "layouts)" not in line, line
    assert rejection_summary(1, {}, 1) == "1 layout considered, 1 fit."
    assert rejection_summary(2, {}, 2).startswith("2 layouts considered")


def test_nothing_fits_at_any_gpu_count_says_so(capsys, tmp_path):
    """A model no GPU count up to the search's limit can hold still gets the 'Smallest GPU count' line."""
    from cli_contract import run, write

    from planner.search import MAX_GPUS_TRIED

    huge = write(tmp_path / "huge.yaml", "name: huge\nlayers: 2\nhidden: 1000000\nffn_hidden: 10000000\nheads: 8\n"
                                         "vocab: 1000000\nseq_len: 8192\nglobal_batch: 64\n")
    code, out, err = run(capsys, "--model", huge, "--gpus", "8", "--top", "1")
    assert code == 1, err
    assert f"with a layout that fits: none up to {MAX_GPUS_TRIED:,} GPUs" in err, err
    code, out, err = run(capsys, "--model", huge, "--gpus", "8", "--top", "1", "--format", "json")
    assert code == 1 and json.loads(out)["min_gpus_that_fit"] is None
    assert f"min GPUs that fit: none up to {MAX_GPUS_TRIED:,}" in err, err


def test_the_min_gpu_line_is_true_above_the_scan_limit(capsys, tmp_path):
    """A request beyond the scan's limit does not claim that counts below the request were the ones tried."""
    from cli_contract import run, write

    from planner.search import MAX_GPUS_TRIED

    huge = write(tmp_path / "huge.yaml", "name: huge\nlayers: 2\nhidden: 1000000\nffn_hidden: 10000000\nheads: 8\n"
                                         "vocab: 1000000\nseq_len: 8192\nglobal_batch: 64\n")
    code, out, err = run(capsys, "--model", huge, "--gpus", MAX_GPUS_TRIED, "--top", "1")
    assert code == 1, err
    assert (f"that fits: none tried: the scan for a larger count stops at {MAX_GPUS_TRIED:,} GPUs, not above the "
            f"{MAX_GPUS_TRIED:,} asked.") in err, err


def test_count_suffixes_follow_one_rule():
    """K, M, G (B is G), T: powers of 1024 for batch tokens, of 1000 for a token budget; Ki..Ti always binary."""
    from planner.errors import PlannerError
    from planner.flags import parse_count

    for flag, base in (("--global-batch-tokens", 1024), ("--tokens", 1000)):
        binary = base == 1024
        assert parse_count("16B", flag, binary) == parse_count("16G", flag, binary) == 16 * base**3
        assert parse_count("2K", flag, binary) == 2 * base and parse_count("3T", flag, binary) == 3 * base**4
        assert parse_count("16Gi", flag, binary) == 16 * 2**30
        with pytest.raises(PlannerError, match="G \\(or B\\)"):
            parse_count("16Bi", flag, binary)
    gb = runner.invoke(app, ["--model", "8b", "--gpus", "8", "--tp", "1", "--pp", "1", "--dp", "8", "--format",
                             "json", "--global-batch-tokens", "1B"])
    gg = runner.invoke(app, ["--model", "8b", "--gpus", "8", "--tp", "1", "--pp", "1", "--dp", "8", "--format",
                             "json", "--global-batch-tokens", "1G"])
    assert json.loads(gb.stdout)["global_batch"] == json.loads(gg.stdout)["global_batch"] == 2**30 // 8192


def test_a_search_without_gradient_accumulation_fusion_says_so_and_is_not_faster():
    """--no-grad-accumulation-fusion prices a separate gradient add per micro-batch: the table's note says so, and
    no row gets faster (ZeRO-1, several micro-batches: every row pays it)."""
    def best(*flags):
        out = CliRunner().invoke(app, ["--model", "8b", "--gpus", "16", "--zero", "1", "--format", "json", *flags])
        assert out.exit_code == 0, out.output
        return json.loads(out.stdout)["configs"][0]["step_time_s"]
    assert best("--no-grad-accumulation-fusion") > best()
    text = CliRunner().invoke(app, ["--model", "8b", "--gpus", "16", "--top", "1", "--no-grad-accumulation-fusion"])
    assert "separate add per micro-batch" in text.output


def test_a_pinned_layout_without_gradient_accumulation_fusion_says_what_its_compute_includes():
    pins = ["--model", "8b", "--gpus", "16", "--tp", "1", "--pp", "1", "--dp", "16", "--zero", "1"]
    text = CliRunner().invoke(app, pins + ["--no-grad-accumulation-fusion"]).output
    assert "no gradient-accumulation fusion" in text
    assert "no gradient-accumulation fusion" not in CliRunner().invoke(app, pins).output


def test_a_batch_of_fewer_sequences_than_gpus_says_what_it_forces(capsys):
    # gpt-22b keeps its source's batch of 4 (Korthikanti Table 3, 8 GPUs): on 64 GPUs DP divides both 64 and 4, so
    # every ranked layout has TP x CP x PP >= 64 / gcd(64, 4) = 16, and the plan says so; a batch the user sets
    # (or a long-context job's few long sequences) gets no note.
    from cli_contract import run

    from planner.explain import small_batch_note
    from planner.specs.strategy import Job

    code, out, _ = run(capsys, "-m", "22b", "-g", "64", "--top", "3", "--format", "json")
    assert code == 0 and all(r["tp"] * r["cp"] * r["pp"] >= 16 for r in json.loads(out)["configs"])
    code, out, _ = run(capsys, "-m", "22b", "-g", "64", "--top", "1")
    assert code == 0 and ("Note: the model's default global batch (4 sequences) is smaller than the 64 GPUs, so the "
                          "model-parallel group (TP x CP x PP) spans at least 16 GPUs") in " ".join(out.split())
    for batch in (["--global-batch", "4"], ["--global-batch-tokens", "8K"], ["--global-batch", "64"]):
        code, out, _ = run(capsys, "-m", "22b", "-g", "64", "--top", "1", *batch)
        assert code == 0 and "smaller than the" not in out, batch
    assert "spans at least 8 GPUs" in small_batch_note(Job(64, 2048, 24))        # 64 / gcd(64, 24), not 3
    assert small_batch_note(Job(64, 2048, 64)) is None

