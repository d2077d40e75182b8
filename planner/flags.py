"""Command-line values: text flags turned into checked numbers and formats, each error naming its flag.

Typer reads every numeric flag as text so that a bad value gets the planner's own one-line message, which
restates the value (typer's would not).
"""

from __future__ import annotations

import difflib
import math
import re
from enum import Enum

from planner.checks import SUFFIX_RULE, parse_count  # noqa: F401  (the CLI's parser, re-exported)
from planner.errors import KEYWORD_FLAGS, PlannerError


class Format(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


def show_version(value: bool) -> None:
    """--version: the installed distribution's version, then exit (an eager option, before any other check)."""
    if value:
        from importlib.metadata import PackageNotFoundError, version

        import typer

        try:
            print(f"planner {version('planner')}")
        except PackageNotFoundError:                    # run from a source tree that was never installed
            print("planner (not installed: version unknown)")
        raise typer.Exit()


def int_flag(value, flag: str):
    """A whole-number option (typer's own message would not restate the value)."""
    if value is None:
        return None
    text = str(value).strip()
    if not re.fullmatch(r"[+-]?[0-9]{1,30}", text):             # ASCII digits: int() also reads '８' as 8
        raise PlannerError(flag, f"got {value!r}, expected a positive integer")
    number = int(text)
    if number < 1:
        raise PlannerError(flag, f"got {number}, expected a positive integer")
    return number


def int_pins(**values) -> dict:
    """Whole-number layout pins (tp=..., vpp=...) as `plan` and `plan sweep` take them: each parsed in the order
    given, as its own flag (KEYWORD_FLAGS); None where absent."""
    return {k: int_flag(v, KEYWORD_FLAGS[k]) for k, v in values.items()}


def float_flag(value, flag: str):
    if value is None:
        return None
    text = str(value).strip()
    try:
        if not text.isascii():                    # float() reads '１.５' as 1.5
            raise ValueError(text)
        number = float(text)
    except ValueError:
        raise PlannerError(flag, f"got {value!r}, expected a number") from None
    if not math.isfinite(number):
        raise PlannerError(flag, f"got {value!r}, expected a finite number")
    return number


def budget_options(tokens, price, pue) -> dict:
    """--tokens and the price and PUE that only matter with it (given without it, they would be ignored)."""
    from planner.sweep import budget_arguments

    price, pue = float_flag(price, "--price-per-gpu-hour"), float_flag(pue, "--pue")
    tokens = budget_arguments(tokens, price, pue)[0]
    return {"tokens": tokens, "price_usd_per_gpu_hour": price, "pue": pue}       # PUE None: not given


def _suffix(output) -> str:
    """The file name's suffix, lower case, without the dot ("" for none)."""
    name = str(output).lower()
    return name.rsplit(".", 1)[-1] if "." in name else ""


def output_format(fmt: "Format", output) -> "Format":
    """--output writes data, not a rich table: a .json/.csv name picks the format when --format is left at table."""
    suffix = _suffix(output) if output is not None else ""
    if suffix in ("json", "csv") and fmt is not Format.table and fmt.value != suffix:
        raise PlannerError("--output", f"{output!r} names a .{suffix} file but --format is {fmt.value}; give one of "
                                       "them, or make them agree")
    if output is None or fmt is not Format.table:
        return fmt
    if suffix in ("json", "csv"):
        return Format(suffix)
    raise PlannerError("--output", f"{output!r}: give --format json or csv, or a file name ending in .json or .csv")


# What each export writes, and the file-name suffixes that would say it is something else.
EXPORT_SUFFIXES = {"megatron": ("shell arguments", ()), "torchtitan": ("a TOML job config", ("toml",)),
                   "deepspeed": ("a JSON config", ("json",))}
DATA_SUFFIXES = ("json", "csv", "toml", "yaml", "yml")


def check_export_path(export: str, output) -> None:
    """--export with --output: the file name must not claim another format (Megatron flags in x.json)."""
    if output is None:
        return
    what, wanted = EXPORT_SUFFIXES[export]
    suffix = _suffix(output)
    if (wanted and suffix != wanted[0]) or (not wanted and suffix in DATA_SUFFIXES):
        expected = (f"a .{wanted[0]} name" if wanted else
                    "a name that is not .json, .csv, .toml, .yaml or .yml (e.g. .sh)")
        raise PlannerError("--output", f"{output!r}: --export {export} writes {what}; expected {expected}")


# plan's flags that a sweep leaves out on purpose, and why
SWEEP_OMITS = {"--dp": "DP follows each GPU count", "--top": "a sweep shows the best layout of each count",
               "--sort": "a sweep is ordered by GPU count", "--export": "export one count's best with plan"}


def usage_error_line(exc) -> str:
    """A typer/click usage error (unknown option, missing value, bad choice) as 'FLAG: message', one line."""
    message = " ".join(str(getattr(exc, "message", None) or exc).split()).removeprefix("Value error, ").rstrip(".")
    name, param = getattr(exc, "option_name", None), getattr(exc, "param", None)
    ctx = getattr(exc, "ctx", None)                               # the (sub)command whose options were read
    see = f"see plan {ctx.info_name} --help" if ctx is not None and ctx.parent is not None else "see plan --help"
    if name and hasattr(exc, "possibilities"):                    # NoSuchOption
        if ctx is not None and ctx.info_name == "sweep" and name in SWEEP_OMITS:
            return f"{name}: plan sweep does not take it: {SWEEP_OMITS[name]} ({see})"
        close = difflib.get_close_matches(name, list(exc.possibilities or []), n=3, cutoff=0.7)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        return f"{name}: no such option{hint} ({see})"
    if name:                                                      # BadOptionUsage: "Option '--gpus' requires ..."
        return f"{name}: " + message.replace(f"Option '{name}' ", "")
    if param is not None:
        opts = [o for o in getattr(param, "opts", None) or [] if o.startswith("--")]
        flag = opts[0] if opts else str(getattr(param, "name", "argument")).upper()
        if not message or type(exc).__name__ == "MissingParameter":
            return f"{flag}: required ({see})"
        choice = re.fullmatch(r"'(.*)' is not one of (.*)", message)
        if choice:
            return f"{flag}: got {choice.group(1)!r}, expected one of {choice.group(2).replace(chr(39), '')}"
        return f"{flag}: {message}"
    return f"usage: {message} ({see})"


NETWORK_FLAGS = "--nics-per-node/--nic-gbit-per-s"        # set together: named together in their errors


def reject_unused(hardware: bool, pinned: bool, export, plot, sort: str, fmt, top, budget_flags: dict,
                  network=None) -> None:
    """A flag the chosen mode would ignore is an error, not a silent no-op."""
    from planner.sweep import check_sort

    if network is not None and hardware:
        raise PlannerError(NETWORK_FLAGS, "sets one profile's node network; not with several --hardware profiles")

    if top is not None and (hardware or pinned or export is not None):
        mode = ("a hardware comparison shows one row per profile" if hardware else
                "a pinned layout shows one layout" if pinned else "--export prints one layout")
        raise PlannerError("--top", f"ranks a search; {mode}")
    given = [flag for flag, value in budget_flags.items() if value is not None]
    if export is not None and given:
        raise PlannerError("--export", f"prints launch settings; it does not combine with {given[0]}")

    check_sort(sort)
    if sort != "throughput" and not hardware:
        raise PlannerError("--sort", "orders a hardware comparison; give several profiles (--hardware a,b)")
    if export is not None and (hardware or plot is not None or fmt is not Format.table):
        other = "--hardware with several profiles" if hardware else ("--plot" if plot is not None else "--format")
        raise PlannerError("--export", f"prints one layout's launch settings; it does not combine with {other}")
    if plot is not None and (hardware or pinned):
        raise PlannerError("--plot", "draws a ranked search of one hardware profile; not with "
                                     + ("several --hardware profiles" if hardware else "a pinned --tp/--pp/--dp"))


def check_paths(output=None, plot=None) -> None:
    """The --output and --plot targets, checked before the work: a bad path fails at once, not after a search."""
    from planner.output import check_writable
    from planner.plot import check_plot_path

    if output is not None:
        check_writable(output, "--output")
    if plot is not None:
        check_plot_path(plot)


def runtime_flags(flash_attention: bool | None, flash_gen: str | None, cp_comm: str, tp_comm_overlap: bool, *,
                  pins: dict, pinned: bool = False, eager_elementwise: bool = False,
                  pp_scatter_gather: bool = False, microbatch_groups: bool = True,
                  grad_accumulation_fusion: bool = True, zero1_all_reduce: bool = False, eager_loss: bool = False):
    """The runtime features the flags choose. FlashAttention and its generation stay None unless given: the engine
    then follows the hardware (Runtime.for_hardware), and rejects them on hardware without fused attention. A
    feature the pinned knobs (`pins`: tp, cp, pp, vpp, sequence_parallel, zero_stage; None or absent when searched)
    cannot use is an error (CP is 1 when TP, PP and DP are pinned without --cp)."""
    from planner.specs.strategy import FLASH_GENERATIONS, Runtime

    tp, cp, pp, vpp, sp, zero = (pins.get(k) for k in ("tp", "cp", "pp", "vpp", "sequence_parallel", "zero_stage"))
    if cp_comm not in ("ring", "allgather"):
        raise PlannerError("--cp-comm", f"got {cp_comm!r}, expected ring or allgather")
    gen = flash_gen.strip() if flash_gen is not None else None
    if gen is not None and gen not in [str(g) for g in FLASH_GENERATIONS]:
        raise PlannerError("--flash-attention-gen", f"got {flash_gen!r}, expected 1, 2 or 3")
    if tp_comm_overlap and sp is False:        # Megatron asserts it; the cost model ignores it
        raise PlannerError("--tp-comm-overlap", "needs sequence parallelism; drop --no-sequence-parallel or this flag")
    if tp_comm_overlap and tp == 1:
        raise PlannerError("--tp-comm-overlap", "overlaps TP communication, and --tp 1 has none; drop one of them")
    if cp_comm == "allgather" and (cp == 1 or (pinned and cp is None)):
        raise PlannerError("--cp-comm", "allgather is how CP exchanges K and V, and the pinned layout has CP 1 "
                                        "(--cp 1, or TP, PP and DP pinned without --cp); drop one")
    # Each of these changes one mechanism only (cost.step): a layout pinned without it would price it as not given.
    unused = [("--zero1-all-reduce", zero1_all_reduce and zero is not None and zero != 1,
               f"changes how ZeRO-1 reduces the gradients, and --zero {zero} is pinned"),
              ("--pp-scatter-gather", pp_scatter_gather and pp == 1, "splits pipeline sends, and --pp 1 has none"),
              ("--pp-scatter-gather", pp_scatter_gather and tp == 1,
               "splits pipeline sends over the TP ranks, and --tp 1 has a single rank"),
              ("--pp-scatter-gather", pp_scatter_gather and sp is True,
               "splits pipeline sends over the TP ranks, as sequence parallelism (pinned on) already does"),
              ("--no-microbatch-groups", not microbatch_groups and (pp == 1 or vpp == 1),
               f"limits interleaved pipelines, and --{'pp' if pp == 1 else 'vpp'} 1 has none")]
    for flag, ignored, why in unused:
        if ignored:
            raise PlannerError(flag, f"{why}; drop one of them")
    return Runtime(flash_attention=flash_attention, tp_comm_overlap=tp_comm_overlap, cp_comm_overlap=cp_comm == "ring",
                   flash_attention_gen=None if gen is None else int(gen), eager_elementwise=eager_elementwise,
                   pp_scatter_gather=pp_scatter_gather, microbatch_groups=microbatch_groups,
                   grad_accumulation_fusion=grad_accumulation_fusion, zero1_all_reduce=zero1_all_reduce,
                   fused_cross_entropy=not eager_loss)


def precision_flags(fp32_params: bool, zero: int | None = None):
    """The precision the flags choose. fp32 parameters change only what ZeRO-3 stores (no 16-bit shard beside the
    master), so a pinned lower stage would ignore the flag."""
    from planner.specs.strategy import Precision

    if fp32_params and zero is not None and zero < 3:
        raise PlannerError("--fp32-params", f"changes only what ZeRO-3 stores, and --zero {zero} is pinned; drop one "
                                            "of them")
    return Precision(params_are_master=fp32_params)


def network_flags(nics_per_node, nic_gbit_per_s):
    """--nics-per-node N --nic-gbit-per-s G, the cluster's node network (a validation run's `network` block): both
    or neither; (N, G) or None."""
    n, g = int_flag(nics_per_node, "--nics-per-node"), float_flag(nic_gbit_per_s, "--nic-gbit-per-s")
    if (n is None) != (g is None):
        given, missing = ("--nics-per-node", "--nic-gbit-per-s") if g is None else ("--nic-gbit-per-s",
                                                                                  "--nics-per-node")
        raise PlannerError(missing, f"required with {given}: a node network is its NICs per server and each NIC's "
                                    "rate (e.g. --nics-per-node 4 --nic-gbit-per-s 100)")
    if g is not None and g <= 0:
        raise PlannerError("--nic-gbit-per-s", f"got {g:g}, expected a positive rate in Gb/s per NIC and direction")
    return None if n is None else (n, g)


def on_network(hardware: str, network):
    """The profile (a name or YAML path) on the user's node network, or the name itself when the flags are absent.
    The NICs are shared by a server's GPUs (HardwareSpec.with_network); the profile is renamed after the network,
    so that every table and JSON record built on it says which cluster it describes."""
    from dataclasses import replace

    from planner.specs.hardware import load_hardware
    from planner.specs.hardware_file import gbit_to_bytes

    if network is None:
        return hardware
    n, gbit = network
    hw = load_hardware(hardware)
    rate = gbit_to_bytes(gbit)
    if not math.isfinite(rate):                      # 1e308 Gb/s overflows
        raise PlannerError("--nic-gbit-per-s", f"got {gbit:g}, too large to be a rate; expected a NIC's rate "
                                              "in Gb/s")
    try:
        spec = hw.with_network(n, rate)
    except PlannerError as exc:
        raise PlannerError(NETWORK_FLAGS, exc.message) from None
    server = "tray" if hw.gpus_per_host else "node"
    return replace(spec, name=f"{hw.name} on {n} x {gbit:g} Gb/s NICs per {server}")
