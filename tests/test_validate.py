"""Fidelity against published measured runs (planner/data/published_runs.yaml): levels, trends, memory, CLI."""

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from cli_contract import assert_mentions
from cli_contract import bad as bad_line
from typer.testing import CliRunner

import planner
from planner.cli import app
from planner.runs_file import BUNDLED_RUNS, RunsFile, load_runs, load_runs_file
from planner.validate import predict, predict_all, predict_layer_ms, summarize

runner = CliRunner()


@pytest.fixture(scope="module")
def preds():
    return {p.run.id: p for p in predict_all(load_runs())}


def test_bundled_runs_carry_their_sources():
    runs = load_runs()
    assert len(runs) >= 70
    for r in runs:
        assert r.source and r.group and r.hardware
        assert r.measured.throughput[1] > 0


def test_korthikanti_step_times_within_target(preds):
    """Issue target (Calculon's bar: 3.65% mean, 8.9% worst): mean |error| <= 3%, max <= 8% on Table 3/5."""
    errs = np.abs([p.throughput_error for rid, p in preds.items()
                   if p.run.group.startswith("Korthikanti2022 Table 3/5")])
    assert len(errs) == 8
    assert errs.mean() <= 0.03 and errs.max() <= 0.08, errs


def test_overall_median_within_target(preds):
    stats = summarize(list(preds.values()))
    assert stats["overall"]["runs"] == len(preds)
    assert stats["overall"]["median"] <= 0.08, stats["overall"]
    # held-out runs (not used to fit any efficiency) are reported separately and stay in the same band
    assert stats["held-out runs"]["median"] <= 0.08, stats["held-out runs"]


def test_no_false_out_of_memory(preds):
    """Every run is known to have trained: the planner must not claim its layout does not fit."""
    oom = [rid for rid, p in preds.items() if not p.fits]
    assert oom == []


def test_torchtitans_published_out_of_memory_is_predicted(tmp_path, preds):
    """The other side of no false out-of-memory: torchtitan's docs/performance.md (footnote 1) reports Llama 2 70B on
    64 A100-80GB with FSDP2 and per-op checkpointing at local batch 1 because local batch 2 ran out of memory,
    while full checkpointing trained at batch 2. Against the whole HBM (no headroom) the planner agrees on all
    three: the two published runs fit, and the op-checkpointed run at batch 2 does not."""
    op_run, full_run = preds["torchtitan_a100_06"], preds["torchtitan_a100_07"]
    assert (op_run.run.layout.recompute, op_run.run.layout.micro_batch) == ("op", 1) and op_run.fits
    assert (full_run.run.layout.recompute, full_run.run.layout.micro_batch) == ("full", 2) and full_run.fits
    data = yaml.safe_load(BUNDLED_RUNS.read_text())
    run = next(r for r in data["runs"] if r["id"] == "torchtitan_a100_06")
    run = {**run, "id": "op_batch_2", "layout": {**run["layout"], "micro_batch": 2},
           "model": {**run["model"], "global_batch": 128}}
    path = tmp_path / "oom.yaml"
    path.write_text(yaml.safe_dump({"runs": [run]}))
    oom = predict(load_runs_file(path).runs[0])
    assert oom.error is None and not oom.fits


@pytest.mark.parametrize("ids", [
    ("mtnlg_530b_2240gpu", "mtnlg_530b_2800gpu", "mtnlg_530b_3360gpu"),
    ("narayanan2021_t2_ptd_175b_384gpu", "narayanan2021_t2_ptd_175b_768gpu", "narayanan2021_t2_ptd_175b_1536gpu"),
    ("narayanan2021_t2_ptd_530b_560gpu", "narayanan2021_t2_ptd_530b_1120gpu", "narayanan2021_t2_ptd_530b_2240gpu"),
    ("narayanan2021_t2_zero3_175b_384gpu", "narayanan2021_t2_zero3_175b_768gpu", "narayanan2021_t2_zero3_175b_1536gpu"),
    ("narayanan2021_t2_zero3_530b_640gpu", "narayanan2021_t2_zero3_530b_1120gpu", "narayanan2021_t2_zero3_530b_2240gpu"),
    ("llama3_405b_8192gpu", "llama3_405b_16384gpu"),
    tuple(f"megascale_megatron_175b_{n}gpu" for n in (256, 512, 768, 1024)),
    tuple(f"megascale_megatron_175b_{n}gpu" for n in (3072, 6144, 8192, 12288)),
])

def test_fixed_batch_more_gpus_lowers_per_gpu_throughput(preds, ids):
    """Strong scaling at a fixed global batch: fewer micro-batches per pipeline and more exposed DP traffic make
    per-GPU throughput fall, in the measurements and in the predictions, by a similar amount."""
    measured = np.array([preds[i].measured_step_s for i in ids]) * np.array([preds[i].run.gpus for i in ids])
    predicted = np.array([preds[i].predicted_step_s for i in ids]) * np.array([preds[i].run.gpus for i in ids])
    # GPU-seconds per step grow (per-GPU throughput falls) in both series
    assert np.all(np.diff(measured) > 0) and np.all(np.diff(predicted) > 0)
    # and the total drop agrees in size within a factor of three (unstated interleaving degrees take the planner's
    # best choice, which keeps the predicted bubble small)
    m_drop, p_drop = measured[-1] / measured[0] - 1, predicted[-1] / predicted[0] - 1
    assert m_drop / 3 <= p_drop <= 3 * m_drop, (m_drop, p_drop)


def test_batch_growing_with_the_gpus_keeps_utilisation_nearly_flat(preds):
    """MegaScale Figure 9 (530B, Megatron-LM, batch = GPU count, so every pipeline runs the same 280 micro-batches):
    measured MFU moves by 2% from 2,240 to 11,200 GPUs; the prediction must stay as flat (only the DP collectives
    grow, and they do not grow with the ring size) and not rise."""
    ids = [f"megascale_megatron_530b_{n}gpu" for n in (2240, 4480, 11200)]
    measured = np.array([preds[i].measured_value for i in ids])
    predicted = np.array([preds[i].predicted_value for i in ids])
    assert abs(measured[-1] / measured[0] - 1) <= 0.03
    assert -0.03 <= predicted[-1] / predicted[0] - 1 <= 0.0, predicted
    assert np.all(np.diff(predicted) <= 0), predicted


def test_larger_models_at_fixed_per_gpu_load_reach_higher_utilisation(preds):
    """Narayanan 2021 Table 1 (weak scaling): HFU rises from 44% (1.7B) to 52% (1T); predictions rise too."""
    small, large = preds["narayanan2021_t1_1p7b"], preds["narayanan2021_t1_1008p0b"]
    assert large.measured_value > small.measured_value
    assert large.predicted_value > small.predicted_value
    m_gain = large.measured_value / small.measured_value - 1
    p_gain = large.predicted_value / small.predicted_value - 1
    assert 0.5 * m_gain <= p_gain <= 2.0 * m_gain, (m_gain, p_gain)


@pytest.mark.parametrize("size", ["22b", "175b", "530b", "1t"])
def test_selective_recompute_and_sp_speed_up_by_the_measured_amount(preds, size):
    """Korthikanti Table 5: sequence parallelism + selective recompute is 29-32% faster than full recompute."""
    full, sel = preds[f"korthikanti2022_{size}_full_recompute"], preds[f"korthikanti2022_{size}_seq_par_selective"]
    measured = full.measured_step_s / sel.measured_step_s - 1
    predicted = full.predicted_step_s / sel.predicted_step_s - 1
    assert measured > 0.25 and abs(predicted - measured) <= 0.08, (measured, predicted)


def test_per_layer_times_match_korthikanti_table_4():
    for lt in load_runs_file().layer_times:
        fwd, bwd = predict_layer_ms(lt)
        assert fwd == pytest.approx(lt.forward_ms, rel=0.06), lt.id
        assert bwd == pytest.approx(lt.backward_ms, rel=0.06), lt.id


def test_validate_cli_table_and_json():
    res = runner.invoke(app, ["validate"])
    assert res.exit_code == 0
    assert "Korthikanti2022 Table 3/5" in res.output and "held-out runs" in res.output
    res = runner.invoke(app, ["validate", "--format", "json"])
    doc = json.loads(res.stdout)
    assert {"runs", "summary"} <= set(doc)
    assert {"overall", "fit runs", "held-out runs"} <= set(doc["summary"])
    first = doc["runs"][0]
    assert {"id", "metric", "measured", "predicted", "throughput_error", "fits", "searched_knobs"} <= set(first)
    import io

    import pandas as pd
    table = pd.read_csv(io.StringIO(runner.invoke(app, ["validate", "--format", "csv"]).stdout))
    assert list(table.id) == [r["id"] for r in doc["runs"]]                 # one row per run, same numbers
    assert np.allclose(table.throughput_error, [r["throughput_error"] for r in doc["runs"]], rtol=1e-12)
    assert list(table.tp) == [r["layout"]["tp"] for r in doc["runs"]]


@pytest.mark.parametrize("model, heads, hidden, expected", [
    # Korthikanti et al. 2022 Figure 7 (activation memory relative to plain TP; values as encoded in Calculon's
    # calculon/llm/validation.py): sequence parallel, selective recompute, both, full recompute. s = 2048, t = 8.
    ("gpt-22b", 64, 6144, (66.84, 49.42, 16.18, 7.64)),
    ("gpt3-175b", 96, 12288, (62.04, 56.53, 18.49, 8.71)),
    ("gpt-530b", 128, 20480, (58.31, 62.04, 20.27, 9.42)),
])
def test_published_activation_memory_ratios(model, heads, hidden, expected):
    """Memory where a source publishes it: the per-layer activation memory of each technique relative to TP alone."""
    from planner.cost.memory import activation_bytes_per_layer
    from planner.specs.model import load_model

    m = load_model(model)
    base = float(activation_bytes_per_layer(m, 2048, 1, 8, False, 0, flash_attention=False))
    variants = [(True, 0), (False, 1), (True, 1), (False, 2)]
    got = [100 * float(activation_bytes_per_layer(m, 2048, 1, 8, sp, rc, flash_attention=False)) / base
           for sp, rc in variants]
    assert got == pytest.approx(list(expected), abs=0.6)


def test_llama3_long_context_run_uses_context_parallelism(preds):
    """Llama 3's 128K stage (TP8 CP16 PP16 DP8): its all-gather CP is on the critical path (§3.3.2), and the
    prediction stays within the issue's 20%."""
    p = preds["llama3_405b_16384gpu_cp16"]
    assert p.evaluation.row["cp"] == 16 and p.evaluation.row["cp_comm_s"] > 0 and p.fits
    assert abs(p.throughput_error) <= 0.2


def test_readme_accuracy_table_is_what_validate_prints(preds):
    """README's accuracy table is a claim about this code: each bundled-run row must be what `plan validate`
    computes now, to the printed precision (a re-fit or a model change that moves them must update README)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    table = {m.group(1).strip(): tuple(float(x) for x in m.group(3, 4, 5)) + (int(m.group(2)),)
             for m in re.finditer(r"^\| ([^|]+) \| (\d+) \| ([\d.]+)% \| ([\d.]+)% \| ([\d.]+)% \|$", readme, re.M)}
    added = {rid for rid, p in preds.items() if p.run.source_locator.startswith("Not in shared")}

    def row(ps):
        e = np.abs([p.throughput_error for p in ps])
        return tuple(round(100 * float(x), 1) for x in (e.mean(), np.median(e), e.max())) + (len(e),)

    every = list(preds.values())
    expected = {
        "Korthikanti et al. 2022, Table 3/5 (A100, step time)": [p for p in every
                                                                 if p.run.group.startswith("Korthikanti2022 Table 3/5")],
        "Llama 3 405B pre-training, Table 4 (H100, held out)": [p for p in every if p.run.id.startswith("llama3")],
        "the shared dataset's expressible dense runs": [p for p in every if p.run.id not in added],
        "runs added from their sources (all held out)": [p for p in every if p.run.id in added],
        "all bundled runs": every,
        "runs used to fit any efficiency": [p for p in every if p.used_for_fit],
        "held-out runs": [p for p in every if not p.used_for_fit],
    }
    for name, ps in expected.items():
        assert table[name] == row(ps), name


def test_a_run_is_priced_in_its_stated_rank_order():
    """Runs were launched in one rank order, the frameworks' default (DP next to TP) unless a run says Megatron's
    --use-tp-pp-dp-mapping; on NVIDIA's GB200 runs (72-GPU NVLink domains) the order decides which collectives
    share a domain and which pipelines straddle one."""
    data = yaml.safe_load(BUNDLED_RUNS.read_text())
    run = next(r for r in data["runs"] if r["id"] == "nvidia_dgxc_nemotron4_340b_gb200_128gpu_gbs512")
    default = load_runs_file(BUNDLED_RUNS).runs
    default = next(r for r in default if r.id == run["id"])
    assert default.runtime.rank_order == "dp-pp"
    swapped = {**run, "runtime": {**run["runtime"], "rank_order": "pp-dp"}}
    mine = RunsFile.model_validate({"runs": [swapped]}).runs[0]
    a, b = predict(default), predict(mine)
    assert a.evaluation.row["placement"].endswith("dp-pp") and b.evaluation.row["placement"].endswith("pp-dp")
    assert a.predicted_step_s != b.predicted_step_s
    with pytest.raises(Exception, match="rank_order"):
        RunsFile.model_validate({"runs": [{**run, "runtime": {**run["runtime"], "rank_order": "pp-tp"}}]})


def test_validate_selects_runs_by_hardware_and_group(capsys, preds):
    """`plan validate --hardware h100 --group megatron` re-predicts only those runs (an alias names its profile),
    with the same numbers as the whole file; a filter that selects nothing is one line naming it and what is there."""
    def ids(*flags):
        res = runner.invoke(app, ["validate", *flags, "--format", "json"])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        assert doc["summary"]["overall"]["runs"] == len(doc["runs"])
        return {r["id"]: r["throughput_error"] for r in doc["runs"]}

    h100 = ids("--hardware", "h100")
    assert set(h100) == {i for i, p in preds.items() if p.run.hardware == "h100-sxm"} and len(h100) >= 20
    both = ids("--hardware", "H100-SXM", "--group", "MEGATRON-CORE")
    assert set(both) == {i for i, p in preds.items()
                         if p.run.hardware == "h100-sxm" and "megatron-core" in p.run.group.lower()} and both
    assert all(both[i] == pytest.approx(preds[i].throughput_error, rel=1e-12) for i in both)
    assert_mentions(bad_line(capsys, "validate", "--group", "nope"), "--group", "'nope'", "Korthikanti2022")
    assert_mentions(bad_line(capsys, "validate", "--hardware", "b200", "--group", "korthikanti"), "--group",
                    "no run on b200", "'korthikanti'")
    assert_mentions(bad_line(capsys, "validate", "--hardware", "tpu"), "--hardware", "unknown hardware 'tpu'")


def test_readme_strong_scaling_figures(tmp_path):
    """README Trends: Megatron-Core's GPT-3 175B strong-scaled on H100 at 1,152 sequences of 4,096 tokens (131,072-token
    vocabulary, untied, no dropout; TP communication overlapped): the planner's best layouts give 46.9% MFU on 96
    GPUs and 45.9% on 4,608, where the source measured 47% and 42%."""
    preset = yaml.safe_load((Path(planner.__file__).parent / "presets" / "gpt3-175b.yaml").read_text())
    model = {**preset, "name": "mcore-gpt3-175b", "aliases": [], "vocab": 131072, "seq_len": 4096,
             "global_batch": 1152, "tied_embeddings": False, "dropout": False}
    path = tmp_path / "mcore-gpt3-175b.yaml"
    path.write_text(yaml.safe_dump(model))
    df = planner.sweep(str(path), [96, 4608], hardware="h100-sxm", runtime=planner.Runtime(tp_comm_overlap=True))
    assert [round(100 * x, 1) for x in df["mfu"]] == [46.9, 45.9]      # README's figures, kept true
    # and against the measurement: MFU falls as the same batch spreads over 48x the GPUs, each point within the
    # issue's 20% of what the source measured
    assert df["mfu"].iloc[1] < df["mfu"].iloc[0]
    assert all(abs(x / y - 1) <= 0.20 for x, y in zip(df["mfu"], (0.47, 0.42)))


def test_flat_rings_would_explain_the_mpt_70b_40gb_row_alone(preds):
    """README "Where it is off": priced with topology-unaware rings, MPT-70B on 64 A100-40GB drops from +35% to about
    -10%, the A100-40GB table's other rows barely move, and the communication-bound rows of the A100-80GB and H100
    tables (same 1600 Gbps RoCE header for the 80GB one) go far too slow: nothing supports that network for one
    cluster only, so the bundled runs keep hierarchical collectives."""
    def flat(run_id):
        run = preds[run_id].run
        return predict(run.model_copy(update={"runtime": run.runtime.model_copy(
            update={"hierarchical_collectives": False})})).throughput_error

    assert preds["mosaic_mpt70b_a10040gb_64gpu"].throughput_error > 0.3
    assert -0.12 < flat("mosaic_mpt70b_a10040gb_64gpu") < -0.09
    others = [rid for rid, p in preds.items() if p.run.hardware == "a100-40gb" and rid.startswith("mosaic_")
              and rid != "mosaic_mpt70b_a10040gb_64gpu"]
    assert len(others) == 4
    assert all(abs(flat(rid) - preds[rid].throughput_error) < 0.005 for rid in others)
    assert flat("mosaic_mpt70b_a10080gb_32gpu") < -0.25 and flat("mosaic_mpt13b_h10080gb_64gpu") < -0.5
