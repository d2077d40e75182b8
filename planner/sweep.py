"""The best layout at each GPU count: where scaling stops paying."""

from __future__ import annotations

import re

import numpy as np

from planner.cost import budget
from planner.errors import PlannerError
from planner.search import DEFAULT_HARDWARE, run_search
from planner.specs.strategy import MAX_GPUS

MAX_SWEEP_POINTS = 64


def parse_gpu_counts(text: str) -> list[int]:
    """'256,512,1024' or '256..16384' (doubling) or '64..512:64' (steps of 64)."""
    counts: list[int] = []
    for part in str(text).replace(" ", "").split(","):
        m = re.fullmatch(r"(\d+)\.\.(\d+)(?::(\d+))?", part)
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
        elif part.isdigit() and int(part) > MAX_GPUS:
            raise PlannerError("--gpus", f"got {part!r}, expected at most {MAX_GPUS:,}")
        elif part.isdigit() and int(part) >= 1:
            counts.append(int(part))
        else:
            raise PlannerError("--gpus", f"got {part!r}; expected counts like 256,512 or a range 256..16384 "
                                         "(doubling) or 64..512:64")
    counts = sorted(set(counts))
    if not counts or len(counts) > MAX_SWEEP_POINTS:
        raise PlannerError("--gpus", f"expected 1 to {MAX_SWEEP_POINTS} GPU counts, got {len(counts)}")
    return counts


def add_budget_columns(df, tokens, gpus, hw, price_usd_per_gpu_hour=None, pue=budget.DEFAULT_PUE):
    """Days, GPU-hours, cost and energy to train `tokens` at each row's throughput (in place; returns df)."""
    price = hw.price_usd_per_gpu_hour if price_usd_per_gpu_hour is None else price_usd_per_gpu_hour
    seconds = budget.time_to_train_s(tokens, df["tokens_per_s"].to_numpy())
    hours = budget.gpu_hours(gpus, seconds)
    df["time_to_train_days"] = seconds / 86400.0
    df["gpu_hours"] = hours
    df["cost_usd"] = budget.cost_usd(hours, price)
    df["energy_mwh"] = budget.energy_mwh(gpus, seconds, hw.tdp_w, pue)
    return df


def add_budget_to_row(row: dict, tokens, gpus, hw, price_usd_per_gpu_hour=None, pue=budget.DEFAULT_PUE) -> dict:
    """add_budget_columns for one layout given as a dict (in place; returns row)."""
    import pandas as pd

    part = add_budget_columns(pd.DataFrame({"tokens_per_s": [row["tokens_per_s"]]}), tokens, gpus, hw,
                              price_usd_per_gpu_hour, pue)
    row.update(part.iloc[0].to_dict())
    return row


def sweep(model="405b", gpus="256..16384", hardware=DEFAULT_HARDWARE, tokens=None, price_usd_per_gpu_hour=None,
          pue=budget.DEFAULT_PUE, **search_kwargs):
    """One row per GPU count with the best fitting layout (or why none fits), as a pandas DataFrame."""
    import pandas as pd

    counts = parse_gpu_counts(gpus) if isinstance(gpus, str) else sorted(set(int(g) for g in gpus))
    rows, hw = [], None
    for n in counts:
        r = run_search(model, n, hardware=hardware, find_min_gpus=False, **search_kwargs)
        hw = r.hardware
        if len(r.table):
            best = r.table.iloc[0].to_dict()
            rows.append({"gpus": n, "status": "ok", **best})
        else:
            why = "nothing fits in memory" if len(r.closest) else "no valid layout"
            rows.append({"gpus": n, "status": why, "fits": False})
    df = pd.DataFrame(rows)
    if "tokens_per_s" not in df:
        df["tokens_per_s"] = np.nan
    df["tokens_per_s_per_gpu"] = df["tokens_per_s"] / df["gpus"]
    ok = df["tokens_per_s_per_gpu"].notna()
    first = df.loc[ok, "tokens_per_s_per_gpu"].iloc[0] if ok.any() else np.nan
    df["scaling_efficiency"] = df["tokens_per_s_per_gpu"] / first
    if tokens is not None and hw is not None:
        add_budget_columns(df, tokens, df["gpus"].to_numpy(), hw, price_usd_per_gpu_hour, pue)
    df.attrs.update(hardware=hw.name if hw else hardware, tokens=tokens)
    return df


def compare_hardware(model, gpus, hardware_names, tokens=None, price_usd_per_gpu_hour=None,
                     pue=budget.DEFAULT_PUE, sort="throughput", **search_kwargs):
    """The same job on several hardware profiles: one row per profile with its best layout, best first."""
    import pandas as pd

    from planner.specs.hardware import load_hardware

    if sort not in SORT_KEYS:
        raise PlannerError("--sort", f"got {sort!r}, expected one of {', '.join(SORT_KEYS)}")
    rows, given = [], {}
    for name in hardware_names:
        hw = load_hardware(name)
        if hw.name in given:                      # two names (or aliases) of one profile would be a duplicate row
            raise PlannerError("--hardware", f"{given[hw.name]!r} and {name!r} are the same profile ({hw.name}); "
                                             "expected each profile once")
        given[hw.name] = name
        r = run_search(model, gpus, hardware=hw, find_min_gpus=False, **search_kwargs)
        row = {"hardware": hw.name, "gpus": gpus}
        if len(r.table):
            row.update(status="ok", **r.table.iloc[0].to_dict())
        else:
            row.update(status="nothing fits in memory" if len(r.closest) else "no valid layout", fits=False,
                       tokens_per_s=np.nan)
        if tokens is not None:
            add_budget_to_row(row, tokens, gpus, hw, price_usd_per_gpu_hour, pue)
        rows.append(row)
    df = pd.DataFrame(rows)
    key, ascending = SORT_KEYS[sort]
    if key not in df:
        raise PlannerError("--sort", f"sorting by {sort} needs --tokens")
    return df.sort_values(key, ascending=ascending, na_position="last", kind="stable").reset_index(drop=True)


SORT_KEYS = {"throughput": ("tokens_per_s", False), "time": ("time_to_train_days", True), "cost": ("cost_usd", True)}
