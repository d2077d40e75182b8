"""Time, money and energy to train a token budget from a layout's throughput (all pure, vectorised)."""

from __future__ import annotations

import numpy as np

DEFAULT_PUE = 1.2   # data-centre power usage effectiveness (typical of modern GPU halls; overridable)


def time_to_train_s(tokens, tokens_per_s):
    """Wall time: tokens / (tokens per second)."""
    return np.asarray(tokens, dtype=float) / np.asarray(tokens_per_s, dtype=float)


def gpu_hours(gpus, seconds):
    """GPU-hours: GPUs × wall seconds / 3600."""
    return np.asarray(gpus, dtype=float) * np.asarray(seconds, dtype=float) / 3600.0


def cost_usd(gpu_hours_, price_usd_per_gpu_hour):
    """GPU-hours × price per GPU-hour (NaN when no price is known)."""
    price = np.nan if price_usd_per_gpu_hour is None else price_usd_per_gpu_hour
    return np.asarray(gpu_hours_, dtype=float) * price


def energy_j(gpus, seconds, tdp_w, pue=DEFAULT_PUE):
    """Energy in joules: the GPUs at their TDP for the whole run, times the facility PUE. An estimate, not a bound:
    GPUs draw less than TDP between kernels, while the hosts, NICs and switches around them are not counted."""
    return np.asarray(gpus, dtype=float) * tdp_w * np.asarray(seconds, dtype=float) * pue
