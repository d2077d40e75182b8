"""Runs in the shared dataset's flat format (planner.shared_runs): the whole shared file checked against the bundled
runs, which were converted from it by hand, what cannot be expressed, and odd files. How each free-text field is
read is test_shared_words.py."""

import json
from pathlib import Path

import pytest
import yaml
from cli_contract import assert_mentions
from cli_contract import bad as bad_line
from cli_contract import run as run_cli
from helpers import flat_run as _run
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.shared_runs import convert_run, is_shared_format
from planner.specs.strategy import DEFAULT_FLASH_GENERATION
from planner.runs_file import BUNDLED_RUNS, load_runs_file, measured_step_time_s
from planner.validate import predict, summarize

SHARED = Path(__file__).parent / "data" / "shared_published_runs.yaml"


@pytest.fixture(scope="module")
def shared():
    return load_runs_file(SHARED)


@pytest.fixture(scope="module")
def bundled():
    return {r.id: r for r in load_runs_file(BUNDLED_RUNS).runs}


def test_the_shared_file_converts_exactly_the_runs_the_bundle_holds(shared, bundled):
    """Two independent conversions of the same file agree on which runs are expressible."""
    assert shared.shared_format and len(shared.runs) + len(shared.skipped) == 92
    added = {i for i, r in bundled.items() if r.source_locator.startswith("Not in shared")}   # from own sources
    assert {r.id for r in shared.runs} == set(bundled) - added
    assert all(reason for reason in shared.skipped.values())


def test_converted_runs_match_the_hand_conversion(shared, bundled):
    for run in shared.runs:
        ref = bundled[run.id]
        assert (run.hardware, run.gpus) == (ref.hardware, ref.gpus), run.id
        # the same measured step time (torchtitan: the stated MFU, where the bundle took the interpreted WPS column)
        assert measured_step_time_s(run) == pytest.approx(measured_step_time_s(ref), rel=0.02), run.id
        for knob in ("tp", "dp", "micro_batch", "recompute", "recompute_layers", "sequence_parallel"):
            if getattr(ref.layout, knob) is not None:
                assert getattr(run.layout, knob) == getattr(ref.layout, knob), (run.id, knob)
        for flag in ("flash_attention", "tp_bwd_overlap", "tp_comm_overlap", "overlap_grad_reduce", "eager_elementwise",
                     "fused_cross_entropy"):
            assert getattr(run.runtime, flag) == getattr(ref.runtime, flag), (run.id, flag)
        gen = DEFAULT_FLASH_GENERATION                                  # absent: the default generation
        assert (run.runtime.flash_attention_gen or gen) == (ref.runtime.flash_attention_gen or gen), run.id
        for knob in ("pp", "vpp", "zero_stage"):                   # where both pin it
            mine, theirs = getattr(run.layout, knob), getattr(ref.layout, knob)
            assert mine is None or theirs is None or mine == theirs, (run.id, knob)
        if next(iter(run.measured.throughput)) == next(iter(ref.measured.throughput)):
            assert (run.flops_convention, run.peak_tflops) == (ref.flops_convention, ref.peak_tflops), run.id
        assert run.measured.memory_gib == ref.measured.memory_gib, run.id
        assert run.precision.param_bytes == ref.precision.param_bytes, run.id
        assert run.precision.grad_bytes == ref.precision.grad_bytes, run.id
        assert run.precision.params_are_master == ref.precision.params_are_master, run.id


@pytest.mark.parametrize("run_id", ["torchtitan_a100_00", "torchtitan_a100_04"])
def test_torchtitan_mfu_counts_every_parameter(bundled, run_id):
    """torchtitan's MFU of the time counts 6 x all parameters (embeddings included) + 12·L·h·s per token: read that
    way, the stated MFU and the table's tokens/s per GPU give the same step (with model FLOPs, 5% apart for 8B)."""
    run = bundled[run_id]
    wps = run.other_reported["tokens_per_s_per_gpu"]
    assert measured_step_time_s(run) == pytest.approx(run.model.global_batch * run.model.seq_len / (wps * run.gpus),
                                                      rel=0.005)


def test_the_shared_file_meets_the_median_target(shared):
    preds = [predict(r) for r in shared.runs]
    assert all(p.error is None and p.fits for p in preds)
    assert summarize(preds)["overall"]["median"] <= 0.08


@pytest.mark.parametrize("fields, reason", [
    (dict(gpu="TPU v4"), "TPU"), (dict(gpu="H800"), "H800"), (dict(gpu="H100 PCIe"), "PCIe"),
    (dict(gpu="Gaudi 2"), "no hardware profile"), (dict(moe={"experts": 8}), "mixture-of-experts"),
    (dict(ep=8), "expert parallelism"), (dict(num_gpus=None), "GPU count"),
    (dict(tp=None, pp=None), "parallel layout not stated"), (dict(vocab=None), "architecture not stated (vocab)"),
    (dict(recompute="custom selective (manual backward)"), "custom selective"), (dict(precision="fp8 hybrid"), "FP8"),
    (dict(zero_stage="FSDP HYBRID_SHARD"), "unstated degree"), (dict(global_batch=None), "global batch"),
    (dict(iteration_time_s=None, tokens_per_s_per_gpu=900.0, inferred={"tokens_per_s_per_gpu": "from GPU-hours"}),
     "only derived"),
    (dict(layers="many"), "malformed"), (dict(tp=2.5), "whole number"), (dict(layers=True), "layers = True"),
    (dict(gpu="H200 NVL"), "PCIe"), (dict(zero_stage="HSDP"), "unstated degree"),
    (dict(precision="float8 (torchao)"), "FP8"), (dict(precision="TF32"), "16-bit"),
    (dict(model="Acme 8B", ffn_hidden=None), "ffn_hidden"),
    (dict(recompute="selective, layers 1-4"), "only none"), (dict(recompute="every 0 layers"), "only none"),
    (dict(recompute="selective layer + micro-batches kept"), "only none"),
    (dict(recompute="partial (every 2nd layer)"), "only none"), (dict(recompute="full, 8 of 10 layers"), "only none"),
    (dict(recompute="full AC on 50% of layers"), "only none"), (dict(recompute="block method"), "only none"),
    (dict(recompute="every 2nd layer", pp=None), "pp stated"),
    (dict(num_gpus="lots"), "num_gpus = 'lots'"), (dict(hidden="big"), "hidden = 'big'"),
    (dict(tp=[1, 2]), "tp = [1, 2]"), (dict(global_batch=0), "global_batch = 0"),
    (dict(zero_stage="9"), "zero_stage '9'"),
    (dict(iteration_time_s=None, measured_tflops_per_gpu=99999), "above the a100-80gb peak"),
    (dict(iteration_time_s=None, measured_mfu=1.5), "above the"),
])
def test_runs_it_cannot_express_are_skipped_with_the_reason(fields, reason):
    converted, why = convert_run(_run(**fields))
    assert converted is None and reason in why


def test_the_stated_parameter_count_decides_unknown_architectures():
    """No family name: the gated-MLP / tied-embedding choice nearest to params_b wins (Llama 2 7B shapes)."""
    llama = dict(model="Acme 7B", layers=32, hidden=4096, ffn_hidden=11008, heads=32, vocab=32000, seq_len=4096,
                 tp=1, pp=1, dp=1024, global_batch=1024)
    gated = convert_run(_run(**llama, params_b=6.74))[0]["model"]
    assert gated["gated_mlp"] is True and gated["tied_embeddings"] is False
    plain = convert_run(_run(**llama, params_b=4.47))[0]["model"]        # 2 MLP matrices, tied: 4.47B
    assert plain["gated_mlp"] is False and plain["tied_embeddings"] is True


def test_megatron_pads_the_vocabulary_and_splits_the_model_parallel_size():
    converted = convert_run(_run(vocab=50257, tp=None, pp=None, model_parallel_size=96, framework="Megatron-LM"))[0]
    assert (converted["layout"]["tp"], converted["layout"]["pp"], converted["layout"]["dp"]) == (8, 12, 10)
    assert converted["model"]["vocab"] == 51200                          # a multiple of 128 x TP 8


def test_odd_files_are_one_line_or_skipped(tmp_path, capsys):
    empty = tmp_path / "empty.yaml"
    empty.write_text("runs: []\n")
    assert_mentions(bad_line(capsys, "validate", empty), "runs")
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(yaml.safe_dump({"runs": ["not a run", _run(id="a"), _run(id="a"),
                                               _run(id="inf", iteration_time_s=float("inf"))]}))
    code, out, err = run_cli(capsys, "validate", mixed, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert [r["id"] for r in doc["runs"]] == ["a", "a (runs.2)"]
    reasons = {s["id"]: s["reason"] for s in doc["skipped"]}
    assert "not a mapping" in reasons["runs.0"] and "finite" in reasons["inf"]


def test_mfu_divides_by_the_stated_peak_or_the_profiles():
    mfu = convert_run(_run(iteration_time_s=None, measured_mfu=0.4, gpu="H100"))[0]
    assert mfu["peak_tflops"] == pytest.approx(989, rel=0.01)            # the profile's dense BF16 peak
    stated = convert_run(_run(iteration_time_s=None, measured_mfu=0.4, gpu="H100", peak_tflops_assumed=1000))[0]
    assert stated["peak_tflops"] == 1000


def test_is_shared_format():
    assert is_shared_format(yaml.safe_load(SHARED.read_text()))
    assert not is_shared_format(yaml.safe_load(BUNDLED_RUNS.read_text()))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(_run())), st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True), st.text(max_size=12),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))))
def test_any_field_values_convert_or_skip_without_raising(fields):
    converted, why = convert_run(_run(**fields))
    assert (converted is None) != (why is None)


def test_validate_cli_reads_the_shared_format(capsys):
    code, out, err = run_cli(capsys, "validate", SHARED, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert len(doc["runs"]) == 78 and len(doc["skipped"]) == 14
    assert {"id", "reason"} == set(doc["skipped"][0])
    assert all("hardware" in r["assumptions"] and "runtime" in r["assumptions"] for r in doc["runs"])   # said which
    code, out, err = run_cli(capsys, "validate", SHARED)
    assert code == 0 and "Not predicted: 14 runs" in out


def test_a_shared_file_with_nothing_expressible_is_one_line(tmp_path, capsys):
    path = tmp_path / "tpu.yaml"
    path.write_text(yaml.safe_dump({"runs": [_run(gpu="TPU v4")]}))
    assert_mentions(bad_line(capsys, "validate", path), "tpu.yaml", "none of its 1 runs", "TPU")


def test_context_parallel_runs_convert():
    """Llama 3's long-context row in the flat format: CP is a layout degree like the others."""
    run = _run(model="Llama 3 405B", layers=126, hidden=16384, ffn_hidden=53248, heads=128, kv_heads=8, vocab=128256,
               seq_len=131072, gpu="H100 80GB", num_gpus=16384, tp=8, cp=16, pp=16, dp=None, global_batch=128,
               source="Llama Team 2024")
    converted, why = convert_run(run)
    assert why is None and converted["layout"]["cp"] == 16 and converted["layout"]["dp"] == 8


def test_an_independent_transcription_of_modern_runs_predicts_like_the_bundle(bundled):
    """The 12 runs the bundle added (Llama 3, NeMo on H100/B200/GB200, Nemotron-4), transcribed into the flat format
    from their sources without the importer's rules in mind: every one converts, and its prediction lands near the
    hand-converted run's (knobs the transcription leaves open are searched, so not exactly)."""
    flat = load_runs_file(Path(__file__).parent / "data" / "added_runs_flat.yaml")
    assert not flat.skipped and len(flat.runs) == 12
    preds = [predict(r) for r in flat.runs]
    for p in preds:
        ref = predict(bundled[p.run.id])
        assert abs(p.throughput_error - ref.throughput_error) < 0.08, (p.run.id, p.throughput_error,
                                                                        ref.throughput_error)
    assert summarize(preds)["overall"]["median"] <= 0.08


def test_a_flat_run_may_state_its_node_network(tmp_path):
    """A flat run can carry the bundled format's `network` (the format has no field of its own): GPT-NeoX-20B's
    cluster, 4 HDR NICs per 8 GPUs, prices its DP traffic on half the profile's NIC bandwidth; a malformed one skips
    the run naming the field."""
    neox = dict(model="GPT-NeoX-20B", layers=44, hidden=6144, ffn_hidden=24576, heads=64, vocab=50432, gpu="A100 40GB",
                num_gpus=96, tp=2, pp=4, dp=12, micro_batch=4, global_batch=1536, framework="GPT-NeoX (DeepSpeed)",
                zero_stage="1", iteration_time_s=43.8, source="Black et al. 2022")
    four = {"nics_per_node": 4, "nic_gbit_per_s": 200, "name": "4x ConnectX-6 HDR"}
    path = tmp_path / "flat.yaml"
    path.write_text(yaml.safe_dump({"runs": [_run(id="profile", **neox), _run(id="four", network=four, **neox),
                                             _run(id="bad", network={**four, "nics_per_node": 0}, **neox)]}))
    loaded = load_runs_file(path)
    runs = {r.id: r for r in loaded.runs}
    assert runs["four"].network.nics_per_node == 4 and runs["profile"].network is None
    assert "network" in runs["four"].assumptions
    slow, fast = predict(runs["four"]), predict(runs["profile"])
    assert slow.evaluation.row["dp_comm_s"] > fast.evaluation.row["dp_comm_s"]
    assert slow.predicted_step_s > fast.predicted_step_s
    assert "network.nics_per_node" in loaded.skipped["bad"]
