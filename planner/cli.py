"""`plan`: argument parsing and exit codes only (0 success, 1 nothing fits, 2 bad input)."""

from __future__ import annotations

import functools
import sys
from typing import Optional

import typer
from rich.console import Console

from planner import options
from planner.errors import PlannerError, flag_name
from planner.flags import (Format, budget_options, check_export_path, check_paths, float_flag, int_flag, int_pins,
                           network_flags, on_network, output_format, parse_count, precision_flags, reject_unused,
                           runtime_flags, show_version, usage_error_line)
from planner.output import EXIT_BROKEN_PIPE, console

app = typer.Typer(cls=options.HelpGroup, add_completion=False, pretty_exceptions_enable=False, no_args_is_help=False,
                  rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]},
                  help="Plan the parallel layout of LLM training: memory, step time, MFU.")
EXIT_OK, EXIT_NOTHING_FITS, EXIT_BAD_INPUT = 0, 1, 2
# Typer's usage-error class (click's, vendored in recent typer); found through the public BadParameter.
_USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def _out() -> Console:
    return console()


def _err() -> Console:
    return console(stderr=True)


def handle_errors(fn):
    """Bad input becomes one line on stderr and exit code 2, never a traceback."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PlannerError as exc:      # a library keyword the CLI sets from a flag is named as that flag
            print(f"error: {flag_name(exc.field)}: {exc.message}", file=sys.stderr)
            raise typer.Exit(EXIT_BAD_INPUT) from None
    return wrapper


@app.callback(invoke_without_command=True)
@handle_errors
def plan(
    ctx: typer.Context,
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Preset name/alias, model YAML or HF config.json."),
    gpus: Optional[str] = typer.Option(None, "--gpus", "-g", help="Number of GPUs."),
    hardware: str = typer.Option("h100-sxm", "--hardware", help="Built-in profile name or a YAML path."),
    nics_per_node: Optional[str] = typer.Option(None, "--nics-per-node", help="Your cluster's NICs per server (a "
                                                "gb200 server is a 4-GPU tray; with --nic-gbit-per-s; default: the "
                                                "profile's network)."),
    nic_gbit_per_s: Optional[str] = typer.Option(None, "--nic-gbit-per-s", help="Each NIC's rate per direction, "
                                                 "Gb/s (with --nics-per-node)."),
    seq_len: Optional[str] = typer.Option(None, "--seq-len", help="Sequence length (default: the model's; for a "
                                          "config.json max_position_embeddings, at most 4096, or GPT-2's "
                                          "n_positions)."),
    global_batch: Optional[str] = typer.Option(None, "--global-batch", help="Global batch in sequences."),
    global_batch_tokens: Optional[str] = typer.Option(None, "--global-batch-tokens", help="Global batch in tokens; "
                                                      "K/M/G(=B)/T in powers of 1024: 16M = 16*2^20."),
    top: Optional[str] = typer.Option(None, "--top", help="Rows of a ranked search to show (default 10)."),
    tp: Optional[str] = typer.Option(None, "--tp", help="Pin tensor-parallel degree."),
    cp: Optional[str] = typer.Option(None, "--cp", help="Pin context-parallel degree (sequence split; 1 when TP, "
                                     "PP and DP are all pinned)."),
    pp: Optional[str] = typer.Option(None, "--pp", help="Pin pipeline-parallel degree."),
    dp: Optional[str] = typer.Option(None, "--dp", help="Pin data-parallel degree."),
    micro_batch: Optional[str] = typer.Option(None, "--micro-batch", help="Pin micro-batch size (sequences)."),
    vpp: Optional[str] = options.vpp_opt(),
    recompute: Optional[str] = typer.Option(None, "--recompute", help="Pin recompute: none, selective, full, or op "
                                            "(torchtitan's per-op policy; tried only when pinned)."),
    recompute_layers: Optional[str] = options.recompute_layers_opt(),
    zero: Optional[str] = typer.Option(None, "--zero", help="Pin optimizer sharding: ZeRO stage 0-3."),
    dp_replicate: Optional[str] = typer.Option(None, "--dp-replicate", help="Pin hybrid sharding (HSDP): ZeRO "
                                               "shards within DP x CP / N ranks, replicated N times (1: over all)."),
    sequence_parallel: Optional[bool] = options.sequence_parallel_opt(),
    headroom_gib: Optional[str] = typer.Option(None, "--headroom-gib", help="HBM kept free for fragmentation, GiB "
                                                 "(default: 7% of the GPU's HBM)."),
    allow_cross_node_tp: bool = options.cross_node_tp_opt(),
    tp_comm_overlap: bool = options.tp_comm_overlap_opt(),
    flash_attention: Optional[bool] = options.flash_attention_opt(),
    flash_gen: Optional[str] = options.flash_gen_opt(),
    cp_comm: str = options.cp_comm_opt(),
    eager_elementwise: bool = options.eager_opt(), eager_loss: bool = options.eager_loss_opt(),
    pp_scatter_gather: bool = options.pp_scatter_gather_opt(),
    microbatch_groups: bool = options.microbatch_groups_opt(),
    grad_accumulation_fusion: bool = options.grad_accumulation_fusion_opt(),
    zero1_all_reduce: bool = options.zero1_all_reduce_opt(),
    fp32_params: bool = options.fp32_params_opt(),
    tokens: Optional[str] = typer.Option(None, "--tokens", help="Token budget to train (K/M/G(=B)/T in powers of "
                                         "1000, e.g. 15T): adds days, GPU-hours, cost and energy."),
    price: Optional[str] = typer.Option(None, "--price-per-gpu-hour", help="USD per GPU-hour (default: profile)."),
    pue: Optional[str] = typer.Option(None, "--pue", help="Facility power usage effectiveness for the energy "
                                      "estimate (default 1.2; with --tokens)."),
    sort: str = typer.Option("throughput", "--sort", help="Comparison order: throughput, time or cost."),
    fmt: Format = typer.Option(Format.table, "--format", help="table, json or csv."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write the JSON/CSV to this file (atomically; "
                                         "a .json or .csv name picks the format)."),
    export: Optional[str] = typer.Option(None, "--export", help="Print the best (or pinned) layout as launch "
                                         "settings: megatron, torchtitan or deepspeed."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Draw step-time parts and step time vs memory to a "
                                       ".png or .svg file (needs the plot extra)."),
    _version: bool = typer.Option(False, "--version", is_eager=True, callback=show_version, help="Print the version."),
):
    """Rank the parallel layouts of MODEL on GPUS GPUs (or show one layout's breakdown when TP, PP, DP are pinned);
    several hardware profiles (--hardware h100-sxm,b200) compare the best layout on each."""
    if ctx.invoked_subcommand is not None:
        return
    if model is None or gpus is None:
        missing = "--model" if model is None else "--gpus"
        raise PlannerError(missing, "required (e.g. plan --model 405b --gpus 512; see plan --help)")
    gpus, seq_len, global_batch, top = (int_flag(v, f) for v, f in ((gpus, "--gpus"), (seq_len, "--seq-len"),
                                                                 (global_batch, "--global-batch"), (top, "--top")))
    tp, cp, pp, dp, micro_batch, vpp, recompute_layers, dp_replicate = int_pins(
        tp=tp, cp=cp, pp=pp, dp=dp, micro_batch=micro_batch, vpp=vpp, recompute_layers=recompute_layers,
        dp_replicate=dp_replicate).values()
    headroom_gib = float_flag(headroom_gib, "--headroom-gib")
    network = network_flags(nics_per_node, nic_gbit_per_s)
    from planner import report
    from planner.candidates import Pins
    from planner.evaluate import evaluate
    from planner.search import min_gpus_text, require_valid, run_search
    from planner.specs.hardware import parse_hardware_list
    from planner.specs.strategy import recompute_code, zero_code

    if recompute is not None:
        recompute_code(recompute)
    pinned = tp is not None and pp is not None and dp is not None
    names = parse_hardware_list(hardware) if "," in hardware else None    # a malformed list first: its own error
    reject_unused(hardware=names is not None, pinned=pinned, export=export, plot=plot, sort=sort, fmt=fmt,
                  top=top, budget_flags={"--tokens": tokens, "--price-per-gpu-hour": price, "--pue": pue},
                  network=network)
    budget = budget_options(tokens, price, pue)
    if export is not None and export not in ("megatron", "torchtitan", "deepspeed"):
        raise PlannerError("--export", f"got {export!r}, expected one of megatron, torchtitan, deepspeed")
    fmt = output_format(fmt, output) if export is None else fmt
    if export is not None:
        check_export_path(export, output)
    check_paths(output, plot)                             # fail on a bad file name before the work
    zero_stage = zero_code(zero) if zero is not None else None
    batch_tokens = (parse_count(global_batch_tokens, "--global-batch-tokens", binary=True)
                    if global_batch_tokens else None)
    pins = dict(tp=tp, cp=cp, pp=pp, dp=dp, micro_batch=micro_batch, vpp=vpp, sequence_parallel=sequence_parallel,
                recompute=recompute, recompute_layers=recompute_layers, zero_stage=zero_stage,
                dp_replicate=dp_replicate)
    runtime = runtime_flags(flash_attention, flash_gen, cp_comm, tp_comm_overlap, pins=pins, pinned=pinned,
                            eager_elementwise=eager_elementwise, pp_scatter_gather=pp_scatter_gather,
                            microbatch_groups=microbatch_groups, grad_accumulation_fusion=grad_accumulation_fusion,
                            zero1_all_reduce=zero1_all_reduce, eager_loss=eager_loss)
    common = dict(hardware=on_network(hardware, network), seq_len=seq_len, global_batch=global_batch,
                  global_batch_tokens=batch_tokens, headroom_gib=headroom_gib,
                  allow_cross_node_tp=allow_cross_node_tp, runtime=runtime,
                  precision=precision_flags(fp32_params, zero_stage))
    out = _out()
    top = 10 if top is None else top

    if names is not None:
        from planner.sweep import compare_hardware

        del common["hardware"]
        df = compare_hardware(model, gpus, names, sort=sort, pins=Pins(**pins), **budget, **common)
        _print_frame(df, f"{model} on {gpus} GPUs: best layout per hardware (sorted by {sort})", "hardware", fmt,
                     output)
        raise typer.Exit(EXIT_OK if (df["status"] == "ok").any() else EXIT_NOTHING_FITS)

    if pinned and export is None:
        ev = evaluate(model, gpus, **pins, **common)
        if budget["tokens"] is not None:
            from planner.sweep import add_budget_to_row

            add_budget_to_row(ev.row, budget["tokens"], gpus, ev.result.hardware, budget["price_usd_per_gpu_hour"],
                              budget["pue"])
        if fmt is Format.table:
            report.print_breakdown(ev, out)
        elif fmt is Format.json:
            _emit(report.json_text(report.pinned_record(ev)), output)
        else:
            import pandas as pd
            _emit(pd.DataFrame([{**ev.row, "hardware": ev.result.hardware.name}]).to_csv(index=False), output)
        raise typer.Exit(EXIT_OK if ev.fits else EXIT_NOTHING_FITS)

    result = require_valid(run_search(model, gpus, pins=Pins(**pins), **common))
    if export is not None and len(result.table):          # nothing fits: the search's report below, exit 1
        _export_layout(export, result, output)
        raise typer.Exit(EXIT_OK)
    if plot is not None:
        from planner.plot import plot_search

        print(f"wrote {plot_search(result, plot, top)}", file=sys.stderr)
    if budget["tokens"] is not None:
        from planner.sweep import add_budget_columns

        for frame in (result.table, result.closest):
            if len(frame):
                add_budget_columns(frame, budget["tokens"], frame["tp"] * frame["cp"] * frame["pp"] * frame["dp"],
                                   result.hardware, budget["price_usd_per_gpu_hour"], budget["pue"])
    if fmt is Format.table:
        # with --export, stdout is the launch file: a search that found nothing to export reports on stderr
        report.print_search(result, top, _err() if export is not None else out, _err(),
                            default_batch=global_batch is None and batch_tokens is None)
    elif fmt is Format.json:
        _emit(report.to_json(result, top), output)
    else:
        _emit(report.to_csv(result, top), output)
    if len(result.table) == 0:
        if fmt is not Format.table:
            print(f"nothing fits; closest layouts are listed{' under closest' * (fmt is Format.json)} (min GPUs that "
                  f"fit: {min_gpus_text(result)})", file=sys.stderr)
        raise typer.Exit(EXIT_NOTHING_FITS)


def _export_layout(framework: str, result, output) -> None:
    """The best fitting layout of the search the framework can run, written as its launch settings."""
    from planner.export import best_supported

    text, notes = best_supported(framework, result)
    _emit(text, output)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)


def _emit(text: str, output) -> None:
    from planner.output import emit

    emit(text, output)


def _print_frame(df, title: str, first: str, fmt: "Format", output=None) -> None:
    from planner import report

    if "reason" in df:                            # a row's error names the library keyword: say the flag here
        df = df.assign(reason=[flag_name(r) if isinstance(r, str) else r for r in df["reason"]])

    if fmt is Format.json:
        _emit(report.json_text(report.frame_document(title, df)), output)
    elif fmt is Format.csv:
        _emit(df.to_csv(index=False), output)
    else:
        _out().print(report.summary_table(df, title, "GPUs" if first == "gpus" else first))
        if note := report.price_note(df):
            _out().print(note)


@app.command("sweep", cls=options.HelpCommand)
@handle_errors
def sweep_cmd(
    model: str = typer.Option(..., "--model", "-m", help="Preset name/alias, model YAML or HF config.json."),
    gpus: Optional[str] = typer.Option(None, "--gpus", "-g", help="GPU counts: 256,512,1024, 256..16384 (doubling), "
                                       "64..512:64; default: 8 doubling from the smallest that fits."),
    hardware: str = typer.Option("h100-sxm", "--hardware", help="Built-in profile name or a YAML path."),
    nics_per_node: Optional[str] = typer.Option(None, "--nics-per-node", help="Your cluster's NICs per server (a "
                                                "gb200 server is a 4-GPU tray; with --nic-gbit-per-s; default: the "
                                                "profile's network)."),
    nic_gbit_per_s: Optional[str] = typer.Option(None, "--nic-gbit-per-s", help="Each NIC's rate per direction, "
                                                 "Gb/s (with --nics-per-node)."),
    seq_len: Optional[str] = typer.Option(None, "--seq-len", help="Sequence length (default: the model's)."),
    global_batch: Optional[str] = typer.Option(None, "--global-batch", help="Global batch in sequences."),
    global_batch_tokens: Optional[str] = typer.Option(None, "--global-batch-tokens", help="K/M/G(=B)/T in powers "
                                                      "of 1024: 16M = 16*2^20."),
    tokens: Optional[str] = typer.Option(None, "--tokens", help="Token budget (K/M/G(=B)/T in powers of 1000, "
                                         "e.g. 15T): days and cost per count."),
    price: Optional[str] = typer.Option(None, "--price-per-gpu-hour", help="USD per GPU-hour (default: profile)."),
    pue: Optional[str] = typer.Option(None, "--pue", help="Power usage effectiveness for the energy estimate "
                                      "(default 1.2; with --tokens)."),
    headroom_gib: Optional[str] = typer.Option(None, "--headroom-gib", help="Default: 7% of HBM."),
    tp: Optional[str] = typer.Option(None, "--tp", help="Pin TP at every count (a count it does not divide says so)."),
    cp: Optional[str] = typer.Option(None, "--cp", help="Pin context parallelism at every count."),
    pp: Optional[str] = typer.Option(None, "--pp", help="Pin pipeline parallelism at every count."),
    micro_batch: Optional[str] = typer.Option(None, "--micro-batch", help="Pin the micro-batch size."),
    recompute: Optional[str] = typer.Option(None, "--recompute", help="Pin recompute: none, selective, full or op."),
    zero: Optional[str] = typer.Option(None, "--zero", help="Pin the ZeRO stage (0-3)."),
    dp_replicate: Optional[str] = typer.Option(None, "--dp-replicate", help="Pin hybrid sharding: N copies of the "
                                               "ZeRO shard groups at every count (1: sharded over all ranks)."),
    vpp: Optional[str] = options.vpp_opt(),
    recompute_layers: Optional[str] = options.recompute_layers_opt(),
    sequence_parallel: Optional[bool] = options.sequence_parallel_opt(),
    allow_cross_node_tp: bool = options.cross_node_tp_opt(),
    tp_comm_overlap: bool = options.tp_comm_overlap_opt(),
    flash_attention: Optional[bool] = options.flash_attention_opt(),
    flash_gen: Optional[str] = options.flash_gen_opt(),
    cp_comm: str = options.cp_comm_opt(),
    eager_elementwise: bool = options.eager_opt(), eager_loss: bool = options.eager_loss_opt(),
    pp_scatter_gather: bool = options.pp_scatter_gather_opt(),
    microbatch_groups: bool = options.microbatch_groups_opt(),
    grad_accumulation_fusion: bool = options.grad_accumulation_fusion_opt(),
    zero1_all_reduce: bool = options.zero1_all_reduce_opt(),
    fp32_params: bool = options.fp32_params_opt(),
    fmt: Format = typer.Option(Format.table, "--format", help="table, json or csv."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write the JSON/CSV to this file (atomically)."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Draw tokens/s and cost vs GPU count to a .png or .svg."),
):
    """Best layout per GPU count: step time, tokens/s, MFU, scaling efficiency, and days and cost for --tokens."""
    from planner.specs.strategy import recompute_code, zero_code
    from planner.sweep import sweep

    given = int_pins(tp=tp, cp=cp, pp=pp, micro_batch=micro_batch, vpp=vpp, recompute_layers=recompute_layers,
                     dp_replicate=dp_replicate)
    pins = {k: v for k, v in given.items() if v is not None}
    if sequence_parallel is not None:
        pins["sequence_parallel"] = sequence_parallel
    if recompute is not None:
        recompute_code(recompute)
        pins["recompute"] = recompute
    if zero is not None:
        pins["zero_stage"] = zero_code(zero)
    runtime = runtime_flags(flash_attention, flash_gen, cp_comm, tp_comm_overlap, pins=pins,
                            eager_elementwise=eager_elementwise, eager_loss=eager_loss,
                            pp_scatter_gather=pp_scatter_gather, microbatch_groups=microbatch_groups,
                            grad_accumulation_fusion=grad_accumulation_fusion, zero1_all_reduce=zero1_all_reduce)
    budget = budget_options(tokens, price, pue)
    fmt = output_format(fmt, output)
    check_paths(output, plot)                             # before the sweep, not after its table
    seq_len, global_batch = int_flag(seq_len, "--seq-len"), int_flag(global_batch, "--global-batch")
    headroom_gib = float_flag(headroom_gib, "--headroom-gib")
    tokens_b = parse_count(global_batch_tokens, "--global-batch-tokens", binary=True) if global_batch_tokens else None
    hardware = on_network(hardware, network_flags(nics_per_node, nic_gbit_per_s))
    df = sweep(model, gpus, hardware=hardware, seq_len=seq_len, global_batch=global_batch,
               global_batch_tokens=tokens_b, headroom_gib=headroom_gib, allow_cross_node_tp=allow_cross_node_tp,
               runtime=runtime, precision=precision_flags(fp32_params, pins.get("zero_stage")), **budget, **pins)
    title = f"{model} on {df.attrs['hardware']}: best layout per GPU count"
    _print_frame(df, title, "gpus", fmt, output)
    if plot is not None:
        from planner.plot import plot_sweep

        print(f"wrote {plot_sweep(df, plot, title)}", file=sys.stderr)
    if not (df["status"] == "ok").any():
        raise typer.Exit(EXIT_NOTHING_FITS)


@app.command("models", cls=options.HelpCommand)
@handle_errors
def models_cmd():
    """List the built-in model presets."""
    from planner import report

    _out().print(report.models_table())


@app.command("hardware", cls=options.HelpCommand)
@handle_errors
def hardware_cmd():
    """List the built-in hardware profiles."""
    from planner import report

    _out().print(report.hardware_table())


@app.command("validate", cls=options.HelpCommand)
@handle_errors
def validate_cmd(
    runs_file: Optional[str] = typer.Argument(
        None, help="YAML of measured runs, in the bundled file's format or the shared dataset's flat one "
                   "(default: the bundled published runs)."),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="Only the runs on this profile (name or "
                                           "alias)."),
    group: Optional[str] = typer.Option(None, "--group", help="Only the runs whose source group contains this text "
                                        "(case-insensitive)."),
    fmt: Format = typer.Option(Format.table, "--format", help="table, json or csv (one row per run)."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write the JSON or CSV to this file "
                                                                      "(atomically)."),
):
    """Re-predict measured training runs and report the error (the bundled published runs, or your own file)."""
    from planner import report, validation_report
    from planner.validate import predict_file, summarize

    fmt = output_format(fmt, output)
    check_paths(output)
    preds, skipped = predict_file(runs_file, hardware, group)
    stats = summarize(preds)
    if fmt is Format.json:
        _emit(report.json_text(validation_report.validation_document(preds, stats, skipped)), output)
    elif fmt is Format.csv:
        _emit(validation_report.validation_csv(preds), output)
    else:
        validation_report.print_validation(preds, stats, _out(), skipped)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: usage errors become one line and exit code 2."""
    try:
        code = app(args=argv, prog_name="plan", standalone_mode=False)
    except _USAGE_ERROR as exc:
        print(f"error: {usage_error_line(exc)}", file=sys.stderr)
        code = EXIT_BAD_INPUT
    except (typer.Abort, KeyboardInterrupt):
        print("aborted", file=sys.stderr)
        code = 130
    except PlannerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = EXIT_BAD_INPUT
    except SystemExit as exc:      # click exits 1 on a closed stdout, which here would read as "nothing fits"
        if exc.code != 1 or type(sys.stdout).__name__ != "PacifyFlushWrapper":
            raise
        code = EXIT_BROKEN_PIPE
    if argv is None:
        sys.exit(code or 0)
    return code or 0
