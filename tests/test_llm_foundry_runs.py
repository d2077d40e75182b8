"""MosaicML's llm-foundry benchmark tables: ~190 measured FSDP runs (125M-70B MPT, sequences 512-65,536, 8-128
A100/H100 GPUs), none used to fit anything. They check that predictions move with sequence length the way the
measurements do (issue #3, trends) and guard the held-out error level."""

import collections
import statistics
import sys
from pathlib import Path

import pytest
import yaml

from planner.cost.params import total_params
from planner.errors import PlannerError
from planner.specs.model import ModelFile
from planner.specs.strategy import Runtime
from planner.runs_file import BUNDLED_RUNS, load_runs, load_runs_file
from planner.validate import predict

DATA = Path(__file__).parent / "data"
FLAT = DATA / "llm_foundry_flat.yaml"
sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
import llm_foundry_runs


@pytest.fixture(scope="module")
def runs_file():
    return load_runs_file(FLAT)


@pytest.fixture(scope="module")
def predictions(runs_file):
    return [predict(r) for r in runs_file.runs]


def test_the_flat_file_is_the_scripts_output_of_the_verbatim_tables():
    built = llm_foundry_runs.build((DATA / "llm_foundry_benchmarks.md").read_text())
    assert yaml.safe_load(FLAT.read_text()) == built
    assert len(built["runs"]) == 201          # 52 H100 BF16 + 10 H100 FP8 + 61 A100 80GB + 78 A100 40GB rows


def _rows():
    return llm_foundry_runs.parse_tables((DATA / "llm_foundry_benchmarks.md").read_text())


def test_the_tables_rows_are_whole():
    for row in _rows():                         # tokens/s = sequences/s x length, to the table's rounding
        per_gpu = int(row["Throughput (T/s)"]) / int(row["# GPUs"])
        assert abs(per_gpu - int(row["Throughput (T/s/GPU)"])) <= 1, row


def test_parameter_count_matches_every_rows_numparams():
    """The planner's parameter count of each benchmark configuration (biases, LayerNorm biases and learned
    positions, as the numbers show) equals the table's NumParams exactly, for all nine sizes and every length."""
    for row in _rows():
        layers, hidden, heads = llm_foundry_runs.ARCH[row["Model"]]
        spec = ModelFile(name="mpt", layers=layers, hidden=hidden, ffn_hidden=4 * hidden, heads=heads,
                         vocab=llm_foundry_runs.VOCAB, seq_len=int(row["SeqLen (T)"]), gated_mlp=False,
                         tied_embeddings=True, norm="layernorm", bias=True, learned_positions=True).to_spec()
        assert total_params(spec) == int(row["NumParams"]), row


def test_the_bundled_mosaicml_runs_have_the_tables_parameter_count():
    """The twelve MosaicML runs bundled in planner/data carry the benchmark configurations (biases, learned
    positions): their parameter count is the NumParams of their table row."""
    gpu = {"h10080gb": "h100_80gb", "a10080gb": "a100_80gb", "a10040gb": "a100_40gb"}
    rows = {(r["GPU"], r["Model"], int(r["# GPUs"]), int(r["MicroBatchSize"])): int(r["NumParams"])
            for r in _rows() if r["SeqLen (T)"] == "2048" and "fp8" not in r["Precision"]}
    bundled = [r for r in load_runs() if r.id.startswith("mosaic_")]
    assert len(bundled) == 12
    for run in bundled:
        _, size, hw, _ = run.id.split("_")
        key = (gpu[hw], size.removeprefix("mpt"), run.gpus, run.layout.micro_batch)
        assert total_params(run.model.to_spec()) == rows[key], run.id


def test_small_models_at_short_sequences(predictions):
    """125M and 350M at 512-2,048 tokens, where the output layer and the fp32 loss are a large share of the work:
    within 8% (at 16 bytes per logit instead of the loss kernels' 40 they were up to 19% optimistic)."""
    small = [p for p in predictions if p.run.model.name in ("mpt-125m", "mpt-350m") and p.run.model.seq_len <= 2048]
    assert len(small) == 21 and all(abs(p.throughput_error) <= 0.08 for p in small)


def test_every_bf16_row_converts_and_fp8_rows_say_why(runs_file):
    assert len(runs_file.runs) == 191
    assert len(runs_file.skipped) == 10 and all("FP8" in why for why in runs_file.skipped.values())
    mode = {run["id"]: row["MP Mode"] for row, run in zip(_rows(), llm_foundry_runs.build(
        (DATA / "llm_foundry_benchmarks.md").read_text())["runs"])}
    for run in runs_file.runs:
        assert run.runtime.flash_attention and run.runtime.flash_attention_gen == 1, run.id
        # the table's MP Mode column: PURE reduces gradients in bf16, DEFAULT in fp32
        assert run.precision.grad_bytes == {"PURE": 2, "DEFAULT": 4}[mode[run.id]], run.id


def test_held_out_error_level(predictions):
    errors = [abs(p.throughput_error) for p in predictions]
    assert statistics.median(errors) <= 0.08 and statistics.mean(errors) <= 0.10
    assert all(p.fits for p in predictions)     # every measured run trained: no false out-of-memory


def _series(predictions):
    """(gpu, model, recompute) -> [(seq_len, measured MFU, predicted MFU)] at 8 GPUs. At a fixed model and
    sequence MFU is proportional to tokens/s, so the predicted MFU is the table's MFU scaled by the prediction."""
    mfu = {r["id"]: r["measured_mfu"] for r in yaml.safe_load(FLAT.read_text())["runs"]}
    out = collections.defaultdict(list)
    for p in predictions:
        if p.run.gpus == 8:
            key = (p.run.hardware, p.run.model.name, p.run.layout.recompute)
            out[key].append((p.run.model.seq_len, mfu[p.run.id], mfu[p.run.id] * (1 + p.throughput_error)))
    return out


def test_mfu_falls_with_sequence_length_as_measured(predictions):
    """Every 1B-13B series at 8 GPUs, from the shortest to the longest sequence: measured MFU falls by 0.3-14
    points (the attention kernel runs well below the GEMMs); the prediction falls too, by a similar amount (within
    3x where the fall exceeds 3 points, within 5 points otherwise). With first-generation kernels priced like
    FlashAttention-2 every one of these series rose instead."""
    checked = 0
    for key, points in _series(predictions).items():
        if key[1] not in ("mpt-1b", "mpt-3b", "mpt-7b", "mpt-13b") or len(points) < 3:
            continue
        (_, m0, p0), (_, m1, p1) = min(points), max(points)
        checked += 1
        assert m0 - m1 > 0 and p0 - p1 > 0, key
        if m0 - m1 >= 0.03:
            assert 1 / 3 <= (p0 - p1) / (m0 - m1) <= 3, (key, m0 - m1, p0 - p1)
        else:
            assert abs((p0 - p1) - (m0 - m1)) <= 0.05, (key, m0 - m1, p0 - p1)
    assert checked == 12


@pytest.mark.parametrize("value", [4, 0, True, 1.0, "2"])
def test_runtime_rejects_an_unknown_generation(value, tmp_path):
    with pytest.raises(PlannerError, match="flash_attention_gen"):
        Runtime(flash_attention_gen=value)
    # and in a runs file: one line naming the field
    run = yaml.safe_load(BUNDLED_RUNS.read_text())["runs"][0]
    run["runtime"]["flash_attention_gen"] = value
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [run]}))
    with pytest.raises(PlannerError, match="flash_attention_gen"):
        load_runs_file(path)
