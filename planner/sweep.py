"""The best layout at each GPU count: where scaling stops paying."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from planner.checks import MAX_COUNT, MAX_COUNT_TEXT, checked_int, is_int, is_real, parse_count, shown
from planner.constraints import invalid_layout_error, ranked_rejections
from planner.cost import budget
from planner.errors import PlannerError, library_api
from planner.search import BUDGET_KEYWORDS, DEFAULT_HARDWARE, cross_node_tp_unused, pop_pins, run_search
from planner.specs.strategy import MAX_GPUS, Precision, Runtime

MAX_SWEEP_POINTS = 64
AUTO_COUNTS = 8                         # the default range: this many counts, doubling
MAX_PRICE_USD_PER_GPU_HOUR = 1e6       # above this a price is a typo (and costs stay finite)


def parse_gpu_counts(text: str) -> list[int]:
    """'256,512,1024' or '256..16384' (doubling) or '64..512:64' (steps of 64)."""
    counts: list[int] = []
    for part in str(text).replace(" ", "").split(","):
        m = re.fullmatch(r"([0-9]+)\.\.([0-9]+)(?::([0-9]+))?", part)     # ASCII digits: int() also reads '８'
        whole = re.fullmatch(r"[0-9]+", part) is not None
        if m:
            lo, hi, step = int(m.group(1)), int(m.group(2)), m.group(3)
            if hi > MAX_GPUS:                          # name what was typed, not the first count past the limit
                raise PlannerError("--gpus", f"range {part!r} goes up to {hi:,} GPUs, expected at most {MAX_GPUS:,}")
            if lo < 1 or hi < lo or (step is not None and int(step) < 1):
                raise PlannerError("--gpus", f"range {part!r} must be LOW..HIGH with 1 <= LOW <= HIGH (and STEP >= 1)")
            if step is not None and (hi - lo) // int(step) + 1 > MAX_SWEEP_POINTS:
                raise PlannerError("--gpus", f"range {part!r} has {(hi - lo) // int(step) + 1:,} points, expected at "
                                             f"most {MAX_SWEEP_POINTS}")
            if step is None:
                x = lo
                while x <= hi:
                    counts.append(x)
                    x *= 2
            else:
                counts.extend(range(lo, hi + 1, int(step)))
        elif whole and int(part) > MAX_GPUS:
            raise PlannerError("--gpus", f"got {part!r}, expected at most {MAX_GPUS:,}")
        elif whole and int(part) >= 1:
            counts.append(int(part))
        else:
            raise PlannerError("--gpus", f"got {part!r}; expected counts like 256,512 or a range 256..16384 "
                                         "(doubling) or 64..512:64")
    counts = sorted(set(counts))
    if not counts or len(counts) > MAX_SWEEP_POINTS:
        raise PlannerError("--gpus", f"expected 1 to {MAX_SWEEP_POINTS} GPU counts, got {len(counts)}")
    return counts


def check_budget(tokens, price_usd_per_gpu_hour=None, pue=budget.DEFAULT_PUE) -> None:
    """The token budget and what prices it: a positive token count (or None), a positive price (or None: the
    profile's), a PUE from 1.0 to 3.0. One check for the command line (after it parses suffixes) and the library."""
    if tokens is not None and (not is_real(tokens) or not 0 < tokens <= MAX_COUNT):
        raise PlannerError("--tokens", f"got {shown(tokens)}, expected a positive number of tokens (e.g. 15e12), "
                                       f"at most {MAX_COUNT_TEXT}")
    price = price_usd_per_gpu_hour
    if price is not None and (not is_real(price) or not 0 < price <= MAX_PRICE_USD_PER_GPU_HOUR):
        raise PlannerError("--price-per-gpu-hour", f"got {shown(price)}, expected a positive number of USD, at "
                                                   f"most {MAX_PRICE_USD_PER_GPU_HOUR:,.0f}")
    if not is_real(pue) or not 1.0 <= pue <= 3.0:
        raise PlannerError("--pue", f"got {pue!r}, expected a power usage effectiveness between 1.0 and 3.0")


def budget_arguments(tokens=None, price_usd_per_gpu_hour=None, pue=None) -> tuple:
    """(tokens, price, PUE) checked: tokens as a number or a string with a suffix ('15T', '1e12'); the price and
    PUE only with tokens (given without them they would be ignored); PUE None: budget.DEFAULT_PUE. The command
    line and the library share it."""
    if isinstance(tokens, str):
        tokens = parse_count(tokens, "--tokens")
    if tokens is None and (price_usd_per_gpu_hour is not None or pue is not None):
        flag = "--price-per-gpu-hour" if price_usd_per_gpu_hour is not None else "--pue"
        raise PlannerError(flag, "only applies to a token budget; give --tokens (e.g. --tokens 15T)")
    pue = budget.DEFAULT_PUE if pue is None else pue
    check_budget(tokens, price_usd_per_gpu_hour, pue)
    return tokens, price_usd_per_gpu_hour, pue


def add_budget_columns(df, tokens, gpus, hw, price_usd_per_gpu_hour=None, pue=None):
    """Days, GPU-hours, cost and energy to train `tokens` at each row's throughput (in place; returns df); PUE
    None: budget.DEFAULT_PUE."""
    pue = budget.DEFAULT_PUE if pue is None else pue
    check_budget(tokens, price_usd_per_gpu_hour, pue)
    if "step_time_s" in df:                       # a budget under one optimizer step is a slip (15 for 15T)
        per_step = np.rint((df["tokens_per_s"] * df["step_time_s"]).to_numpy(dtype=float))
        per_step = per_step[np.isfinite(per_step)]
        if per_step.size and tokens < per_step.max():
            raise PlannerError("--tokens", f"got {tokens:,.0f}, fewer than one step's {per_step.max():,.0f} tokens "
                                           "(global batch x sequence length); expected a training budget, e.g. 15T")
    price, provider = price_and_provider(hw, price_usd_per_gpu_hour)
    seconds = budget.time_to_train_s(tokens, df["tokens_per_s"].to_numpy())
    hours = budget.gpu_hours(gpus, seconds)
    # The inputs travel with the results, so that a record's cost and energy can be checked alone.
    df["train_tokens"] = int(tokens) if float(tokens).is_integer() else float(tokens)     # a count: 15T, not 1.5e13
    df["time_to_train_days"] = seconds / 86400.0
    df["gpu_hours"] = hours
    df["price_usd_per_gpu_hour"] = np.nan if price is None else float(price)
    df["cost_usd"] = budget.cost_usd(hours, price)
    df["price_provider"] = provider
    df["pue"] = float(pue)
    df["energy_mwh"] = budget.energy_j(gpus, seconds, hw.tdp_w, pue) / 3.6e9           # 1 MWh = 3.6e9 J
    return df


def price_and_provider(hw, price_usd_per_gpu_hour=None) -> tuple[float | None, str | None]:
    """The price a cost uses and whose it is: the caller's ('given'), else the profile's and its provider, else
    (None, None)."""
    if price_usd_per_gpu_hour is not None:
        return price_usd_per_gpu_hour, "given"
    if hw.price_usd_per_gpu_hour is None:
        return None, None
    return hw.price_usd_per_gpu_hour, hw.price_provider


def add_budget_to_row(row: dict, tokens, gpus, hw, price_usd_per_gpu_hour=None, pue=None) -> dict:
    """add_budget_columns for one layout given as a dict (in place; returns row)."""
    import pandas as pd

    part = add_budget_columns(pd.DataFrame({k: [row[k]] for k in ("tokens_per_s", "step_time_s") if k in row}),
                              tokens, gpus, hw, price_usd_per_gpu_hour, pue)
    row.update(part.iloc[0].to_dict())
    return row


def auto_gpu_counts(m, hw, pins, search_kwargs) -> tuple[list[int], dict]:
    """The default range: AUTO_COUNTS counts doubling from the smallest one that fits, one node (allocation unit)
    times a power of two: from one node if a layout fits there, else from the count the search finds; with
    {count: search result} for the one node where it is the first count (not searched again)."""
    unit = hw.alloc_gpus
    try:
        r = run_search(m, unit, hardware=hw, pins=pins, find_min_gpus=True, **search_kwargs)
    except PlannerError as exc:
        raise PlannerError("--gpus", f"none given, and one {unit}-GPU node cannot start a range: {exc}; give the "
                                     "counts (256,512 or 256..16384)") from None
    start = unit
    if not len(r.table):
        if not r.min_gpus_that_fit:
            raise PlannerError("--gpus", f"none given, and no layout fits on {unit} GPUs nor on any count the "
                                         "search tried; give the counts (256,512 or 256..16384)")
        while start < r.min_gpus_that_fit:
            start *= 2
    counts = [start * 2**k for k in range(AUTO_COUNTS) if start * 2**k <= MAX_GPUS]
    return counts, ({unit: r} if start == unit else {})


def _best_row(m, gpus: int, hw, pins, search_kwargs, searched=None) -> tuple[dict, PlannerError | None]:
    """The best fitting layout of one job as a row: `status` ok, "nothing fits in memory" or "no valid layout",
    and `reason`, why not (the closest layout's memory, or the top rejection); with the error when no layout is
    valid (bad input for that job). `searched`: the job's search result where the caller has it."""
    try:
        r = searched or run_search(m, gpus, hardware=hw, pins=pins, find_min_gpus=False, **search_kwargs)
    except PlannerError as exc:                   # a pin or value this job cannot take (e.g. --tp not dividing it)
        return ({"gpus": gpus, "status": "no valid layout", "reason": str(exc), "fits": False,
                 "tokens_per_s": np.nan}, exc)
    if len(r.table):
        return {"gpus": gpus, "status": "ok", "reason": None, **r.table.iloc[0].to_dict()}, None
    if len(r.closest):
        best = r.closest.iloc[0]
        why = f"closest needs {best['memory_gib']:.1f} GiB of {r.capacity_bytes / 2**30:.1f} GiB"
        return {"gpus": gpus, "status": "nothing fits in memory", "reason": why, "fits": False,
                "tokens_per_s": np.nan}, None
    ranked = ranked_rejections(r)
    why = f"{ranked[0]} ({r.rejected[ranked[0]]:,} of {r.considered:,} layouts)" if ranked else "no layout to try"
    if ranked and r.batch_suggestion:
        why += f"; --global-batch {r.batch_suggestion} would do"
    return ({"gpus": gpus, "status": "no valid layout", "reason": why, "fits": False, "tokens_per_s": np.nan},
            invalid_layout_error(r))


def _frame(rows: list[dict], errors: list):
    """The rows as a DataFrame; bad input when no row has a valid layout. Integer and boolean columns stay
    integers and booleans, with None where a row has no layout (not floats, nor NaN beside True)."""
    import pandas as pd

    if all(e is not None for e in errors):
        if len({e.message for e in errors}) == 1:          # one reason for all (one count, or one on every profile)
            raise errors[0]
        what = ("GPU counts", "gpus") if "hardware" not in rows[0] else ("profiles", "hardware")
        listed = ", ".join(f"{r[what[1]]:,}" if what[1] == "gpus" else str(r[what[1]]) for r in rows)
        raise PlannerError(errors[0].field, f"none of the {len(rows)} {what[0]} ({listed}) has a valid layout; the "
                                            f"first: {errors[0].message}")
    df = pd.DataFrame(rows)
    ok = next(r for r in rows if r["status"] == "ok") if "ok" in df["status"].values else {}
    # the columns in a fitting row's order, whichever row comes first (CSV readers go by position)
    df = df[list(ok) + [c for c in df.columns if c not in ok]]
    for col, value in ok.items():
        if isinstance(value, (bool, np.bool_)) and df[col].isna().any():
            df[col] = pd.Series([None if pd.isna(v) else bool(v) for v in df[col]], dtype=object)
        elif isinstance(value, (int, np.integer)) and df[col].isna().any():
            df[col] = pd.Series([None if pd.isna(v) else int(v) for v in df[col]], dtype=object)
    return df


@library_api
def sweep(model="405b", gpus=None, hardware=DEFAULT_HARDWARE, tokens=None, price_usd_per_gpu_hour=None,
          pue=None, **search_kwargs):
    """One row per GPU count with the best fitting layout (or why none fits), as a pandas DataFrame. Layout knobs
    may be pinned as in `search` (tp=8, recompute="full", or pins=Pins(...)); `df.attrs` names the hardware, the
    token budget, and the runtime and precision the rows were priced with. A PlannerError when no count has a valid
    layout. `gpus` None: AUTO_COUNTS counts doubling from the smallest that fits (auto_gpu_counts)."""
    from planner.specs.hardware import load_hardware
    from planner.specs.model import load_model

    tokens, price_usd_per_gpu_hour, pue = budget_arguments(tokens, price_usd_per_gpu_hour, pue)   # before the searches
    pins = pop_pins(search_kwargs, "sweep", ("model", "gpus", "hardware", "find_min_gpus"))
    m, hw = load_model(model), load_hardware(hardware)
    searched = {}
    if gpus is None:
        gpus, searched = auto_gpu_counts(m, hw, pins, search_kwargs)
    elif is_int(gpus) or not isinstance(gpus, (str, list, tuple, set, range, np.ndarray)):
        gpus = [gpus]                                  # one count (checked below like any other)
    counts = parse_gpu_counts(gpus) if isinstance(gpus, str) else sorted(set(checked_int(g, "--gpus") for g in gpus))
    if not counts:
        raise PlannerError("--gpus", "got no GPU counts, expected at least one")
    rows, errors = zip(*[_best_row(m, n, hw, pins, search_kwargs, searched.get(n)) for n in counts])
    df = _frame(list(rows), list(errors))
    df["tokens_per_s_per_gpu"] = df["tokens_per_s"] / df["gpus"]
    ok = df["tokens_per_s_per_gpu"].notna()
    first = df.loc[ok, "tokens_per_s_per_gpu"].iloc[0] if ok.any() else np.nan
    df["scaling_efficiency"] = df["tokens_per_s_per_gpu"] / first
    if tokens is not None:
        add_budget_columns(df, tokens, df["gpus"].to_numpy(), hw, price_usd_per_gpu_hour, pue)
    df["hardware"] = hw.name                     # rows stand alone in CSV and JSON (a renamed profile names its network)
    df.attrs.update(hardware=hw.name, tokens=tokens, **_job_context(m, search_kwargs),
                    **_priced_with(search_kwargs, hw))
    return df


def _job_context(m, search_kwargs: dict) -> dict:
    """The model, sequence length and global batch every row was priced with (frame attributes the JSON output
    records); empty when they are not valid, which the rows then say."""
    from planner.candidates import make_job

    try:
        job = make_job(m, 1, *(search_kwargs.get(k) for k in ("seq_len", "global_batch", "global_batch_tokens")))
    except PlannerError:
        return {}
    return {"model": m.name, "seq_len": job.seq_len, "global_batch": job.global_batch}


def _priced_with(search_kwargs: dict, hw=None) -> dict:
    """The runtime (as it runs on `hw`, when one profile prices every row) and precision the rows were priced with:
    frame attributes the JSON output records."""
    runtime = search_kwargs.get("runtime") or Runtime()
    return {"runtime": runtime if hw is None else runtime.for_hardware(hw),
            "precision": search_kwargs.get("precision") or Precision()}


@library_api
def compare_hardware(model, gpus, hardware_names, tokens=None, price_usd_per_gpu_hour=None,
                     pue=None, sort="throughput", **search_kwargs):
    """The same job on several hardware profiles (a list, or names separated by commas as on the command line):
    one row per profile with its best layout, best first. Layout knobs may be pinned as in `search`. A
    PlannerError when no profile has a valid layout."""
    from planner.specs.hardware import load_hardware, parse_hardware_list
    from planner.specs.model import load_model

    check_sort(sort)
    tokens, price_usd_per_gpu_hour, pue = budget_arguments(tokens, price_usd_per_gpu_hour, pue)   # before the searches
    if not isinstance(hardware_names, (str, list, tuple)):
        raise PlannerError("--hardware", f"got {hardware_names!r}, expected profile names (a list, or one string "
                                         "separated by commas)")
    names = parse_hardware_list(hardware_names) if isinstance(hardware_names, str) else list(hardware_names)
    pins = pop_pins(search_kwargs, "compare_hardware", ("model", "gpus", "hardware", "find_min_gpus"),
                    BUDGET_KEYWORDS + ("sort",))
    m = load_model(model)
    priced = _priced_with(search_kwargs)          # as given: FlashAttention None is each profile's own
    profiles, given = [], {}                      # given: a profile name -> [(index, name or spec, label)]
    for name in names:                            # every profile checked before any search
        hw = load_hardware(name)
        label = repr(name) if isinstance(name, str) else f"a HardwareSpec named {hw.name!r}"
        namesakes = given.setdefault(hw.name, [])
        for i, source, earlier in namesakes:
            if replace(profiles[i], name=hw.name) == hw:        # two names (or aliases) of one profile
                raise PlannerError("--hardware", f"{earlier} and {label} are the same profile ({hw.name}); "
                                                 "expected each profile once")
            if not (isinstance(name, str) and isinstance(source, str)):      # a changed spec kept its name
                raise PlannerError("--hardware", f"{earlier} and {label} share the name {hw.name!r} but not their "
                                                 "numbers; expected each its own name (a changed copy: "
                                                 "dataclasses.replace(hw, name=...))")
        if namesakes:                             # different files that share a name: rows told apart by path
            for i, source, _ in namesakes:
                profiles[i] = replace(profiles[i], name=f"{hw.name} ({source})")
            hw = replace(hw, name=f"{hw.name} ({name})")
        namesakes.append((len(profiles), name, label))
        priced["runtime"].for_hardware(hw)        # a runtime feature a profile cannot run is the caller's error
        profiles.append(hw)
    # --allow-cross-node-tp with a pinned TP matters only on the profiles whose node it exceeds: the others search
    # without it (run_search refuses a flag it would ignore), unless it matters on none, and every row says so.
    redundant = [is_int(gpus) and 1 <= gpus <= MAX_GPUS and cross_node_tp_unused(pins.tp, hw.for_job(gpus))
                 for hw in profiles]
    needed = search_kwargs.get("allow_cross_node_tp") is True and not all(redundant)
    rows, errors = [], []
    for hw, same in zip(profiles, redundant):
        kwargs = {**search_kwargs, "allow_cross_node_tp": False} if needed and same else search_kwargs
        row, error = _best_row(m, gpus, hw, pins, kwargs)
        if tokens is not None:
            add_budget_to_row(row, tokens, gpus, hw, price_usd_per_gpu_hour, pue)
        row["hardware"] = hw.name                 # last, as in every CSV: sweep and comparison rows stack
        rows.append(row)
        errors.append(error)
    if not rows:
        raise PlannerError("--hardware", "got no profiles, expected at least one")
    df = _frame(rows, errors)
    key, ascending = SORT_KEYS[sort]
    if key not in df:
        raise PlannerError("--sort", f"sorting by {sort} needs --tokens")
    df = df.sort_values(key, ascending=ascending, na_position="last", kind="stable").reset_index(drop=True)
    df.attrs.update(**_job_context(m, search_kwargs), **priced)
    return df


SORT_KEYS = {"throughput": ("tokens_per_s", False), "time": ("time_to_train_days", True), "cost": ("cost_usd", True)}


def check_sort(sort: str) -> None:
    """A comparison's order: throughput, time or cost."""
    if sort not in SORT_KEYS:
        raise PlannerError("--sort", f"got {sort!r}, expected one of {', '.join(SORT_KEYS)}")
