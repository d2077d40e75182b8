"""Convert MosaicML's llm-foundry MPT benchmark tables into the shared dataset's run format.

    python scripts/llm_foundry_runs.py            # rewrites tests/data/llm_foundry_flat.yaml
    plan validate tests/data/llm_foundry_flat.yaml

The tables (tests/data/llm_foundry_benchmarks.md, copied verbatim from mosaicml/llm-foundry) hold ~200 measured
FSDP runs of nine MPT sizes (125M-70B) at sequence lengths 512-65,536 on 8-128 A100/H100 GPUs. Only 12 of them
are in the shared dataset; the rest are a held-out check of the planner's trends in model size, sequence length
and micro-batch (tests/test_llm_foundry_runs.py). Nothing here is fitted.
"""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TABLES = ROOT / "tests" / "data" / "llm_foundry_benchmarks.md"
OUT = ROOT / "tests" / "data" / "llm_foundry_flat.yaml"
SOURCE = "mosaicml/llm-foundry scripts/train/benchmarking/README.md (MPT training benchmarks)"
LOCATOR = ("read_file mosaicml/llm-foundry@061f2c7ce64e; verbatim in tests/data/llm_foundry_benchmarks.md; "
           "MPT architecture from scripts/train/yamls/pretrain/mpt-*.yaml")
# n_layers, d_model, n_heads of scripts/train/yamls/pretrain/mpt-<size>.yaml (d_ffn = 4 d_model, vocab 50368).
ARCH = {"125m": (12, 768, 12), "350m": (24, 1024, 16), "760m": (24, 1536, 12), "1b": (24, 2048, 16),
        "3b": (32, 2560, 20), "7b": (32, 4096, 32), "13b": (40, 5120, 40), "30b": (48, 7168, 56),
        "70b": (80, 8192, 64)}
VOCAB = 50368
GPU = {"h100_80gb": "H100 80GB", "a100_80gb": "A100 80GB", "a100_40gb": "A100 40GB"}
# The bf16/PURE rows match the first sweep.sh (llm-foundry v0.0.4 on the PyTorch 1.13.1 image; its
# submit_benchmarks.py defaulted to attn_impl triton). The amp_bf16/DEFAULT rows come from later sweeps (PyTorch
# 2.0.1 image) whose scripts changed over time; their attention kernel is not recorded, so none is named and the
# shared-format rules' era default applies.
FRAMEWORK = {"PURE": "Composer / llm-foundry v0.0.4 (FSDP), PyTorch 1.13.1, Triton FlashAttention (attn_impl triton)",
             "DEFAULT": "Composer / llm-foundry (FSDP), PyTorch 2.0.1"}


def parse_tables(text: str) -> list[dict]:
    """Rows of every table as {column: cell} with the table's heading under 'section'. The A100 40GB header lacks
    the 'Model TFLOP' column its rows carry; it is restored so that cells line up."""
    rows, section, header = [], None, None
    for line in text.splitlines():
        if line.startswith("## "):
            section, header = line[3:].strip(), None
            continue
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "Model":
            header = cells
        elif header and not cells[0].startswith("---"):
            cols = header if len(header) == len(cells) else header[:6] + ["Model TFLOP"] + header[6:]
            if len(cols) != len(cells):
                raise ValueError(f"row does not match its header: {line}")
            rows.append({"section": section, **dict(zip(cols, cells))})
    return rows


def to_run(row: dict, index: int) -> dict:
    layers, hidden, heads = ARCH[row["Model"]]
    gpus = int(row["# GPUs"])
    precision = row["Precision"]
    mode = row["MP Mode"]
    return {
        "id": f"llmfoundry_{row['GPU']}_{row['Model']}_s{row['SeqLen (T)']}_{gpus}gpu_mb{row['MicroBatchSize']}"
              + (f"_{index}" if index else ""),
        "group": f"llm-foundry MPT benchmarks ({row['section']})",
        "source": f"{SOURCE} - table '{row['section']}'",
        "source_locator": LOCATOR,
        "model": f"MPT-{row['Model']}",
        "params_b": round(int(row["NumParams"]) / 1e9, 3),
        "layers": layers, "hidden": hidden, "ffn_hidden": 4 * hidden, "heads": heads, "kv_heads": None,
        "vocab": VOCAB, "seq_len": int(row["SeqLen (T)"]),
        "gpu": GPU[row["GPU"]], "num_gpus": gpus, "tp": 1, "pp": 1, "dp": gpus, "cp": 1,
        "recompute": "full" if row["Activation Checkpointing"] == "True" else "none",
        "zero_stage": f"FSDP {row['Sharding Strategy']}",
        "micro_batch": int(row["MicroBatchSize"]), "global_batch": int(row["GlobalBatchSize"]),
        # Composer's FSDP mixed precision: PURE reduces gradients in bf16; DEFAULT in fp32 in most Composer
        # releases (a mid-2023 stretch reduced in bf16: under half a point here).
        "precision": f"{precision} (FSDP mixed precision {mode})" if mode == "PURE" else precision,
        "framework": FRAMEWORK[mode],
        "tokens_per_s": int(row["Throughput (T/s)"]),
        "measured_mfu": round(float(row["MFU"]) / 100, 4),
        "flops_accounting": "MFU = (6N + 12*L*h*s per token) x tokens/s / (gpus x peak), README formulas",
        "inferred": {"architecture": "MPT yamls (n_layers, d_model, n_heads; expansion_ratio 4)"},
        "notes": [f"GradAccum {row['GradAccum']}; activation CPU offload {row['Activation CPUOffload']}"],
    }


def build(text: str) -> dict:
    rows, runs, seen = parse_tables(text), [], {}
    for row in rows:
        key = (row["GPU"], row["Model"], row["SeqLen (T)"], row["# GPUs"], row["MicroBatchSize"], row["Precision"])
        seen[key] = seen.get(key, -1) + 1
        run = to_run(row, seen[key])
        if "fp8" in row["Precision"]:
            run["id"] += "_fp8"                 # FP8 rows share their shape with a BF16 twin
        runs.append(run)
    return {"meta": {"title": "llm-foundry MPT benchmark tables in the shared dataset's run format",
                     "generated_by": "scripts/llm_foundry_runs.py", "num_runs": len(runs)},
            "runs": runs}


def main() -> None:
    data = build(TABLES.read_text())
    OUT.write_text("# Generated by scripts/llm_foundry_runs.py from tests/data/llm_foundry_benchmarks.md: do not edit.\n"
                   + yaml.safe_dump(data, sort_keys=False, width=120))
    print(f"wrote {len(data['runs'])} runs to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
