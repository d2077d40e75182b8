"""Launch settings: Megatron-LM arguments for a plan's layout, the layout each framework can run, the refusals, and
the rank order and attention the exported plan is priced with (torchtitan's and DeepSpeed's own rules:
test_export_torchtitan.py, test_export_deepspeed.py)."""

import json
import tomllib

import pytest
from cli_contract import assert_mentions, bad
from typer.testing import CliRunner

import planner
from planner.cli import app
from planner.errors import PlannerError
from planner.export import best_supported, blockers, export, unsupported

runner = CliRunner()


def _best(model="405b", gpus=512, **pins):
    return planner.evaluate(model, gpus, **pins)


def test_megatron_flags_match_megatron_lm_argument_names():
    ev = _best(tp=8, pp=16, dp=4, vpp=1, recompute="selective", zero_stage=1, sequence_parallel=True)
    text, notes = export("megatron", ev.row, ev.result.model, ev.result.job)
    for flag in ("--tensor-model-parallel-size 8", "--pipeline-model-parallel-size 16", "--sequence-parallel",
                 "--recompute-granularity selective", "--use-distributed-optimizer", "--micro-batch-size 1",
                 "--global-batch-size 2048", "--seq-length 8192",
                 # 126 layers on 16 stages: Megatron's embedding/loss accounting, (126 + 2) / 16 = 8
                 "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"):
        assert flag in text, flag
    ev = _best("gpt3-175b", 64, tp=8, pp=8, dp=1, vpp=3, recompute="full")
    text, _ = export("megatron", ev.row, ev.result.model, ev.result.job)
    assert "--num-virtual-stages-per-pipeline-rank 3" in text
    assert "--recompute-granularity full" in text and "--recompute-method uniform" in text


def test_megatron_fsdp_for_zero_3():
    ev = _best("8b", 64, tp=1, pp=1, dp=64, zero_stage=3)
    text, _ = export("megatron", ev.row, ev.result.model, ev.result.job)
    assert "--use-megatron-fsdp" in text and "--data-parallel-sharding-strategy optim_grads_params" in text


def test_export_picks_the_best_layout_the_framework_can_run(capsys):
    res = runner.invoke(app, ["--model", "70b", "--gpus", "64", "--tp", "4", "--pp", "2", "--export", "deepspeed"])
    assert res.exit_code == 0
    cfg = json.loads(res.stdout)
    assert cfg["zero_optimization"]["stage"] <= 1             # DeepSpeed: no ZeRO-2/3 with pipeline parallelism
    row = {"pp": 2, "vpp": 1, "zero_stage": 1, "tp": 4, "sequence_parallel": True}
    assert unsupported("deepspeed", {**row, "vpp": 2}) and unsupported("megatron", row) is None
    # Megatron-FSDP (ZeRO-2/3) and pipeline parallelism do not combine; DeepSpeed's pipeline has no ZeRO-2/3.
    assert unsupported("megatron", {**row, "zero_stage": 2}) and unsupported("deepspeed", {**row, "zero_stage": 3})
    assert unsupported("megatron", {**row, "pp": 1, "zero_stage": 3}) is None
    megatron = runner.invoke(app, ["--model", "70b", "--gpus", "512", "--export", "megatron"]).stdout
    assert not ("--use-megatron-fsdp" in megatron and "--pipeline-model-parallel-size 1 " not in megatron)
    assert_mentions(bad(capsys, "--model", "70b", "--gpus", "64", "--export", "jax"), "--export", "jax")


def test_tp_comm_overlap_needs_sequence_parallelism_and_is_exported(capsys):
    """Megatron asserts that TP communication overlap runs only with sequence parallelism: without SP the flag buys
    nothing in the cost model and is refused by the CLI and the library alike; with it, the step shrinks and the
    Megatron export carries --tp-comm-overlap."""
    base = ["--model", "405b", "--gpus", "512", "--tp", "8", "--pp", "64", "--dp", "1", "--micro-batch", "1",
            "--recompute", "full", "--zero", "0", "--vpp", "1"]

    def step(*extra):
        return json.loads(runner.invoke(app, base + list(extra) + ["--format", "json"]).stdout)["step_time_s"]
    import numpy as np

    import planner
    from planner.cost.step import step_columns
    from planner.evaluate import evaluate
    from planner.specs.strategy import Runtime
    layout = dict(tp=8, pp=64, dp=1, micro_batch=1, recompute="full", zero_stage=0, vpp=1, sequence_parallel=False)
    with pytest.raises(planner.PlannerError, match="^runtime: tp_comm_overlap=True .* sequence_parallel is pinned"):
        evaluate("405b", 512, runtime=Runtime(tp_comm_overlap=True), **layout)
    ev = evaluate("405b", 512, **layout)
    cols = {k: np.array([v]) for k, v in {**layout, "cp": 1, "recompute_layers": 0}.items()}
    priced = step_columns(ev.result.model, ev.result.hardware, ev.result.job, cols, runtime=Runtime(tp_comm_overlap=True))
    assert float(priced["step_time_s"][0]) == ev.row["step_time_s"]
    assert_mentions(bad(capsys, *base, "--no-sequence-parallel", "--tp-comm-overlap"), "--tp-comm-overlap",
                    "sequence parallelism")
    assert step("--sequence-parallel", "--tp-comm-overlap") < step("--sequence-parallel")
    megatron = runner.invoke(app, base + ["--sequence-parallel", "--tp-comm-overlap", "--export", "megatron"]).stdout
    assert "--tp-comm-overlap" in megatron
    assert "--tp-comm-overlap" not in runner.invoke(app, base + ["--sequence-parallel", "--export", "megatron"]).stdout


def test_megatron_export_carries_the_model_and_the_plan():
    """The flags come with the architecture they were planned for (Megatron's defaults are GeLU, LayerNorm,
    learned positions, biases and tied embeddings, none of them Llama's) and the plan's own figures."""
    ev = _best(tp=8, pp=16, dp=4, vpp=1, recompute="selective", zero_stage=1, sequence_parallel=True)
    text, _ = export("megatron", ev.row, ev.result.model, ev.result.job)
    for flag in ("--num-layers 126", "--hidden-size 16384", "--ffn-hidden-size 53248", "--num-attention-heads 128",
                 "--group-query-attention", "--num-query-groups 8", "--position-embedding-type rope",
                 "--normalization RMSNorm", "--swiglu", "--disable-bias-linear",
                 "--untie-embeddings-and-output-weights", "--max-position-embeddings 8192"):
        assert flag in text, flag
    assert f"step {ev.row['step_time_s']:.3g} s" in text and f"MFU {ev.row['mfu']:.1%}" in text
    assert "--transformer-impl" not in text                       # Transformer Engine, Megatron's default
    assert "--rotary-base" in text.splitlines()[1]                # RoPE: its base is the user's to add
    gpt = _best("gpt3-175b", 1024, hardware="v100-sxm", tp=8, pp=16, dp=8, vpp=1)
    text, _ = export("megatron", gpt.row, gpt.result.model, gpt.result.job, gpt.result.runtime, "fp16",
                     gpt.result.hardware.fused_attention)
    assert "--transformer-impl local" in text                     # TE needs sm80; V100 is sm70
    assert "--rotary-base" not in text                            # learned positions: nothing to add
    assert "--position-embedding-type learned_absolute" in text and "--normalization LayerNorm" in text
    assert "--swiglu" not in text and "--disable-bias-linear" not in text


def test_export_files_and_reports_keep_to_their_streams(tmp_path):
    res = runner.invoke(app, ["--model", "8b", "--gpus", "64", "--export", "megatron", "-o", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "--export megatron writes shell arguments" in res.output
    res = runner.invoke(app, ["--model", "8b", "--gpus", "64", "--export", "deepspeed", "-o", str(tmp_path / "x.toml")])
    assert res.exit_code == 2 and "expected a .json name" in res.output
    res = runner.invoke(app, ["--model", "405b", "--gpus", "64", "--export", "megatron"])
    assert res.exit_code == 1 and res.stdout == ""                # nothing to export: the report goes to stderr
    res = runner.invoke(app, ["--model", "405b", "--gpus", "512", "--tp", "8", "--pp", "16", "--dp", "4",
                              "--recompute", "selective", "--micro-batch", "1", "--zero", "1", "--export", "megatron"])
    assert res.exit_code == 1 and "with tp=8, cp=1, pp=16, dp=4" in res.stderr and "drop a pin" in res.stderr


def test_exports_price_the_rank_order_the_framework_launches():
    """The plan may place PP stages next to each other (tp-pp-dp): Megatron launches that with
    --use-tp-pp-dp-mapping; DeepSpeed (and torchtitan) place PP outermost, so the export is priced in that order
    and says so."""
    from dataclasses import replace

    from planner.export import best_supported
    from planner.search import repriced, run_search

    mega = run_search("8b", 16, pins=planner.Pins(tp=1, pp=2, dp=8, micro_batch=1, vpp=16, recompute="none",
                                                  zero_stage=1))
    assert mega.table.iloc[0]["placement"] == "tp-pp-dp"
    text, notes = best_supported("megatron", mega)
    assert "--use-tp-pp-dp-mapping" in text and f"step {mega.table.iloc[0]['step_time_s']:.3g} s" in text
    assert notes == []
    ds = run_search("8b", 16, pins=planner.Pins(tp=1, pp=2, dp=8, micro_batch=1, vpp=1, recompute="none",
                                                zero_stage=1))
    assert ds.table.iloc[0]["placement"] == "tp-pp-dp"
    ordered = repriced(ds, ds.table, replace(ds.runtime, rank_order="dp-pp")).iloc[0]
    assert ordered["placement"] == "tp-dp-pp" and ordered["step_time_s"] > ds.table.iloc[0]["step_time_s"]
    _, notes = best_supported("deepspeed", ds)
    assert f"step {ordered['step_time_s']:.3g} s" in notes[1]
    assert notes[0].startswith("priced in deepspeed's rank order tp-dp-pp (PP outermost): 0.5% slower than the "
                               "table's tp-pp-dp")
    with pytest.raises(planner.PlannerError, match="^rank_order: got 'pp-tp'"):
        planner.Runtime(rank_order="pp-tp")


def test_exports_say_which_attention_the_plan_priced():
    """--no-flash-attention is Megatron's --attention-backend unfused; torchtitan always runs SDPA's fused kernels
    and DeepSpeed's attention is the model's, so they say what the plan priced instead."""
    unfused = runner.invoke(app, ["--model", "8b", "--gpus", "64", "--no-flash-attention", "--export", "megatron"])
    assert "--attention-backend unfused" in unfused.stdout
    assert "--attention-backend" not in runner.invoke(app, ["--model", "8b", "--gpus", "64", "--export",
                                                            "megatron"]).stdout
    fa1 = runner.invoke(app, ["--model", "8b", "--gpus", "64", "--flash-attention-gen", "1", "--export", "megatron"])
    assert "# attention: the plan priced FlashAttention-1-class kernels" in fa1.stdout
    titan = runner.invoke(app, ["--model", "8b", "--gpus", "64", "--no-flash-attention", "--export", "torchtitan"])
    assert "# attention: the plan priced unfused attention" in titan.stdout and "less activation memory" in titan.stdout
    ds = runner.invoke(app, ["--model", "8b", "--gpus", "64", "--no-flash-attention", "--export", "deepspeed"])
    assert "attention kernels come from the model code: the plan priced unfused attention" in ds.stderr


def test_a_search_prices_pp_next_to_tp_only_where_a_framework_launches_it():
    """PP next to TP (tp-pp-dp) is Megatron's --use-tp-pp-dp-mapping: not with CP, and ZeRO-2/3 under PP runs only
    in torchtitan (PP outermost). Elsewhere the cheaper order; a forced order is priced as given, except where
    PP or DP is 1 and both orders are one."""
    from planner.search import run_search

    t = run_search("70b", 256, hardware="a100-80gb").table
    order = t["placement"].str.endswith("pp-dp")
    assert order.any()                                               # the cheaper order does get used
    blocked = (t["cp"] > 1) | ((t["zero_stage"] >= 2) & (t["pp"] > 1)) | (t["pp"] == 1) | (t["dp"] == 1)
    assert not (order & blocked).any()
    layout = dict(tp=1, pp=2, dp=8, micro_batch=1, vpp=16, recompute="none", zero_stage=1)
    steps = {o: planner.evaluate("8b", 16, runtime=planner.Runtime(rank_order=o), **layout).step_time_s
             for o in ("dp-pp", "pp-dp")}
    assert steps["dp-pp"] > 1.05 * steps["pp-dp"]                    # interleaving's P2P: NVLink vs the NICs
    assert planner.evaluate("8b", 16, **layout).step_time_s == pytest.approx(steps["pp-dp"])
    fsdp = planner.evaluate("8b", 16, **{**layout, "zero_stage": 2})   # ZeRO-2 under PP: torchtitan's order only
    assert fsdp.placement == "tp-dp-pp"
    one_stage = planner.evaluate("8b", 8, tp=1, pp=1, dp=8, runtime=planner.Runtime(rank_order="pp-dp"))
    assert one_stage.placement == "tp-dp-pp"
    # a library caller's forced order that Megatron cannot launch is said, not flagged
    from planner.export import best_supported, export

    forced = run_search("8b", 64, hardware="a100-40gb", pins=planner.Pins(cp=2, pp=2),
                        runtime=planner.Runtime(rank_order="pp-dp"))
    row = forced.table.iloc[0]
    assert row["placement"] == "tp-cp-pp-dp"
    text, _ = export("megatron", row, forced.model, forced.job, forced.runtime)
    assert "--use-tp-pp-dp-mapping" not in text and "which megatron cannot launch" in text
    text, notes = best_supported("megatron", forced)                # priced again in an order it launches
    assert "--use-tp-pp-dp-mapping" not in text and "cannot launch" not in text


def test_a_refused_export_names_what_blocks_every_layout():
    """Every fitting layout must be blocked for the export to be refused; the message names the reason they all
    share (the pinned VPP here, not ZeRO-2/3, which only some rows have), else each first reason with its count."""
    import pandas as pd

    from planner.export import _blocking

    res = runner.invoke(app, ["--model", "70b", "--gpus", "64", "--tp", "8", "--pp", "2", "--dp", "4", "--vpp", "2",
                              "--export", "deepspeed"])
    assert res.exit_code == 2
    assert "(DeepSpeed's pipeline engine has no interleaved schedule)" in " ".join(res.output.split())
    base = {"tp": 8, "cp": 1, "pp": 2, "dp": 4, "vpp": 1, "zero_stage": 1, "dp_replicate": 1, "recompute": "none",
            "sequence_parallel": True}
    rows = pd.DataFrame([{**base, "vpp": 2, "zero_stage": 3}, {**base, "cp": 2}, {**base, "cp": 2, "vpp": 2}])
    assert blockers("deepspeed", rows.iloc[0]) == ["DeepSpeed's pipeline engine supports ZeRO stages 0-1 only",
                                                   "DeepSpeed's pipeline engine has no interleaved schedule"]
    found = [blockers("deepspeed", r) for _, r in rows.iterrows()]
    assert _blocking(found) == (                                            # no shared reason: most first
        "DeepSpeed has no context parallelism (its Ulysses sequence parallelism splits heads instead): 2 of 3 "
        "layouts; DeepSpeed's pipeline engine supports ZeRO stages 0-1 only: 1 of 3 layouts")
    assert _blocking(found[1:]).startswith("DeepSpeed has no context parallelism")


@pytest.mark.parametrize("framework", ["megatron", "torchtitan", "deepspeed"])
def test_blockers_refuse_a_mixed_precision_format_that_is_neither_bf16_nor_fp16(framework):
    row = {"tp": 8, "cp": 1, "pp": 2, "dp": 4, "vpp": 1, "zero_stage": 1, "dp_replicate": 1, "recompute": "none",
           "sequence_parallel": True}
    with pytest.raises(PlannerError, match="dtype.*expected bf16 or fp16"):
        blockers(framework, row, "fp32")


def test_exports_say_when_the_framework_splits_pipeline_sends_otherwise():
    """Without SP, Megatron-Core sends each stage's output whole and DeepSpeed's pipeline engine splits it over the
    TP ranks (Runtime.pp_scatter_gather): each export says so when the plan priced the other."""
    from planner.specs.strategy import Runtime

    ev = planner.evaluate("70b", 256, tp=8, pp=8, dp=4, vpp=1, zero_stage=1, sequence_parallel=False,
                          micro_batch=1, recompute="full", recompute_layers=0)
    m, job = ev.result.model, ev.result.job
    split = "splits each stage's output over the TP ranks"
    assert any(split in n for n in export("deepspeed", ev.row, m, job)[1])
    assert not any(split in n for n in export("deepspeed", ev.row, m, job, Runtime(pp_scatter_gather=True))[1])
    whole = "Megatron-Core sends each whole"
    assert whole in export("megatron", ev.row, m, job, Runtime(pp_scatter_gather=True))[0]
    assert whole not in export("megatron", ev.row, m, job)[0]
    base = ["--model", "70b", "--gpus", "256", "--tp", "8", "--pp", "8", "--dp", "4", "--vpp", "1", "--zero", "1",
            "--no-sequence-parallel", "--recompute", "full", "--micro-batch", "1", "--format", "json"]
    pp_s = [json.loads(runner.invoke(app, base + flag).stdout)["time_breakdown_s"]["pp_comm"]
            for flag in ([], ["--pp-scatter-gather"])]
    # the flag: 1/8 of the bytes over the network, then an NVLink all-gather of the other 7/8 (the latencies stay)
    assert pp_s[1] < pp_s[0] / 3
    with_sp = planner.evaluate("70b", 256, tp=8, pp=8, dp=4, vpp=1, zero_stage=1, sequence_parallel=True,
                               micro_batch=1, recompute="full", recompute_layers=0)
    assert not any(split in n for n in export("deepspeed", with_sp.row, m, job)[1])


def test_megatron_export_says_when_the_plan_priced_deepspeeds_zero1():
    """--zero1-all-reduce prices DeepSpeed's BF16_Optimizer (whole gradients all-reduced); Megatron's distributed
    optimizer, which the export writes, reduce-scatters them: the header says so, as the DeepSpeed export does."""
    from planner.specs.strategy import Runtime

    ev = planner.evaluate("70b", 256, tp=8, pp=4, dp=8, zero_stage=1)
    m, job = ev.result.model, ev.result.job
    note = "Megatron's distributed optimizer reduce-scatters them"
    assert note in export("megatron", ev.row, m, job, Runtime(zero1_all_reduce=True))[0]
    assert note not in export("megatron", ev.row, m, job)[0]


def test_interleaving_with_micro_batches_pp_does_not_divide():
    """Megatron-Core takes any m >= PP with --microbatch-group-size-per-virtual-pipeline-stage (schedules.py); torch's
    Interleaved1F1B only an m that its ⌊m/PP⌋ rounds divide. 405B on 12,288 GPUs, TP8 CP4 PP6 DP64: m = 32
    micro-batches, which 6 does not divide: groups of 8 (32 mod 6 = 2 and 32 mod 7 = 4 leave a last group under 6);
    torch's 5 rounds do not divide 32."""
    ev = _best("405b", 12288, tp=8, cp=4, pp=6, dp=64, vpp=7, micro_batch=1)
    assert int(ev.row["num_microbatches"]) == 32
    text, _ = export("megatron", ev.row, ev.result.model, ev.result.job)
    assert "--num-virtual-stages-per-pipeline-rank 7" in text
    assert "--microbatch-group-size-per-virtual-pipeline-stage 8" in text
    assert "32 micro-batches, which PP 6 does not divide" in text and "older releases refuse" in text
    why = blockers("torchtitan", ev.row)
    assert any("Interleaved1F1B needs the micro-batches to split into m // PP equal rounds" in w for w in why), why
    # p divides m: Megatron's default group (no flag) and torch's rounds both apply
    ev = _best("405b", 12288, tp=8, cp=4, pp=8, dp=48, vpp=2, micro_batch=1, global_batch=1536)
    assert int(ev.row["num_microbatches"]) == 32
    text, _ = export("megatron", ev.row, ev.result.model, ev.result.job)
    assert "--microbatch-group-size" not in text and "older releases" not in text
    assert not any("rounds" in w for w in blockers("torchtitan", ev.row))


def test_interleaving_needs_at_least_pp_micro_batches():
    with pytest.raises(PlannerError, match="interleaving needs at least PP micro-batches"):
        _best("405b", 2048, tp=8, pp=16, dp=16, vpp=2, micro_batch=1, global_batch=128)     # m = 8 < 16


def test_explicit_edge_stages():
    """70B's 80 layers on PP 6 (80, 81 and 82 are not multiples of 6): Megatron-Core's --decoder-first/last-pipeline-
    num-layers 12 and 12 around four stages of 14 (TransformerConfig: the middle stages divide the 56 left), never with
    the accounting flags, which Megatron refuses beside them; torchtitan takes weights of 14 - 12 = 2 per edge."""
    ev = _best("70b", 96, tp=4, pp=6, dp=4, vpp=1)
    text, _ = export("megatron", ev.row, ev.result.model, ev.result.job)
    assert "--decoder-first-pipeline-num-layers 12" in text and "--decoder-last-pipeline-num-layers 12" in text
    assert "--account-for" not in text
    par = tomllib.loads(export("torchtitan", ev.row, ev.result.model, ev.result.job)[0])["parallelism"]
    assert (par["pipeline_parallel_first_stage_less_layers"], par["pipeline_parallel_last_stage_less_layers"]) == (2, 2)
    # VPP must split the edge stages too (Megatron-Core: first and last divisible by the virtual degree): 14 layers
    # allow VPP 7, the 12 on the edges do not
    with pytest.raises(PlannerError, match="VPP must divide.*12, 14 and 12 layers"):
        _best("70b", 96, tp=4, pp=6, dp=4, vpp=7)


def test_megatron_export_turns_gradient_accumulation_fusion_off_when_the_plan_priced_it_off():
    """Runtime(grad_accumulation_fusion=False) prices a separate gradient add per micro-batch; Megatron fuses it
    into the weight-gradient GEMM unless told --no-gradient-accumulation-fusion, so the export says so (from the
    command line too), and writes nothing by default."""
    from planner.specs.strategy import Runtime

    ev = _best("8b", 64, tp=1, pp=1, dp=64, zero_stage=1)
    assert "--no-gradient-accumulation-fusion" not in export("megatron", ev.row, ev.result.model, ev.result.job)[0]
    text = export("megatron", ev.row, ev.result.model, ev.result.job, Runtime(grad_accumulation_fusion=False))[0]
    assert "--no-gradient-accumulation-fusion" in text
    out = CliRunner().invoke(app, ["--model", "8b", "--gpus", "64", "--export", "megatron",
                                   "--no-grad-accumulation-fusion"])
    assert out.exit_code == 0 and "--no-gradient-accumulation-fusion" in out.output


def test_exports_say_where_the_framework_stores_zero3_parameters_otherwise_than_priced():
    """torchtitan's FSDP2 keeps fp32 parameters as the master weights (no bf16 shard); Megatron-FSDP and DeepSpeed
    ZeRO-3 keep a 16-bit shard beside the fp32 master. The export names the difference, that shard's GiB, where the
    plan priced the other (--fp32-params or not), and says nothing where they agree or below ZeRO-3."""
    from planner.specs.strategy import Precision

    fsdp = Precision(params_are_master=True)
    mega = planner.run_search("70b", 64, pins=planner.Pins(zero_stage=3, pp=1, cp=1), find_min_gpus=False)
    torch = planner.run_search("70b", 64, pins=planner.Pins(zero_stage=3, pp=1, cp=1), find_min_gpus=False,
                               precision=fsdp)
    shard = float(mega.table.iloc[0]["weights_gib"])               # the bf16 shard, 2 bytes/param / d
    assert float(torch.table.iloc[0]["weights_gib"]) == pytest.approx(2 * shard, rel=1e-12)    # the fp32 master
    text, _ = best_supported("torchtitan", mega)
    assert (f"# torchtitan's FSDP2 keeps fp32 parameters as the optimizer's master weights and no bf16 shard: about "
            f"{shard:.1f} GiB per GPU less than planned (--fp32-params prices it)") in text
    assert "master weights" not in best_supported("torchtitan", torch)[0]
    assert "master weights" not in best_supported("megatron", mega)[0]
    assert (f"# Megatron-FSDP keeps a 16-bit parameter shard beside the fp32 master weights, where the plan priced fp32 "
            f"parameters alone (--fp32-params): about {shard:.1f} GiB per GPU more than planned") in best_supported(
        "megatron", torch)[0]
    assert any(n.startswith("DeepSpeed ZeRO-3 keeps a 16-bit parameter shard") for n in best_supported("deepspeed",
                                                                                                      torch)[1])
    zero2 = planner.run_search("70b", 64, pins=planner.Pins(zero_stage=2, pp=1), find_min_gpus=False)
    assert "master weights" not in best_supported("torchtitan", zero2)[0]


def test_exports_carry_the_sliding_window_the_plan_priced():
    """Megatron-LM takes the window (--window-size left,right, TransformerConfig.window_size); torchtitan's Llama has
    none, so its export warns where the window is shorter than the sequence; DeepSpeed leaves it to the model code."""
    from dataclasses import replace
    m = replace(planner.load_model("8b"), sliding_window=4096)
    for seq, binds in ((32768, True), (4096, False)):
        ev = planner.evaluate(m, 64, tp=1, cp=1, pp=1, seq_len=seq, global_batch=64)
        text, _ = export("megatron", ev.row, m, ev.result.job)
        assert "--window-size 4096,0" in text
        toml_text, _ = export("torchtitan", ev.row, m, ev.result.job)
        assert ("torchtitan's Llama attends to the whole 32,768-token sequence" in toml_text) is binds
        ds_text, ds_notes = export("deepspeed", ev.row, m, ev.result.job)
        assert ("sliding window of 4,096 tokens" in ds_text + " ".join(ds_notes)) is binds
    ev = planner.evaluate("8b", 64, tp=1, cp=1, pp=1)
    assert "--window-size" not in export("megatron", ev.row, ev.result.model, ev.result.job)[0]


def test_exports_note_biases_their_framework_cannot_build():
    from dataclasses import replace
    m = replace(planner.load_model("8b"), qkv_bias=True, out_bias=True, mlp_bias=True)
    ev = planner.evaluate(m, 8, tp=1, cp=1, pp=1)
    megatron = export("megatron", ev.row, m, ev.result.job)[0]
    assert "--add-qkv-bias" in megatron and "biases on the attention output and the MLP" in megatron
    assert "torchtitan's Llama has no biases" in export("torchtitan", ev.row, m, ev.result.job)[0]
    plain = planner.evaluate("8b", 8, tp=1, cp=1, pp=1)
    assert "biases on" not in export("megatron", plain.row, plain.result.model, plain.result.job)[0]
