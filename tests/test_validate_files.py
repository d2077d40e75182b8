"""`plan validate FILE`: a team's own measured runs in the bundled format, and one clear line for what is wrong in
such a file (a field, a run the planner cannot express, a rate above the peak, a network)."""

import json
from pathlib import Path

import pytest
import yaml
from cli_contract import assert_mentions
from cli_contract import bad as bad_line
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import PlannerError
from planner.runs_file import BUNDLED_RUNS, load_runs, load_runs_file
from planner.validate import predict

runner = CliRunner()

def test_validate_users_own_file(tmp_path):
    """A team checks the planner against its own cluster with a file in the same format."""
    data = yaml.safe_load(BUNDLED_RUNS.read_text())
    mine = {"runs": [r for r in data["runs"] if r["id"] == "korthikanti2022_175b_full_recompute"]}
    mine["runs"][0]["id"] = "my_cluster_175b"
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(mine))
    res = runner.invoke(app, ["validate", str(path), "--format", "json"])
    assert res.exit_code == 0
    doc = json.loads(res.stdout, parse_constant=_no_json_constants)     # strict JSON: no NaN / Infinity
    assert [r["id"] for r in doc["runs"]] == ["my_cluster_175b"]
    assert abs(doc["runs"][0]["throughput_error"]) < 0.1
    # a copy of a fit run under the user's own id was not fitted on: it is held out
    assert doc["summary"]["fit runs"] == {"runs": 0, "mean": None, "median": None, "max": None}
    assert doc["summary"]["held-out runs"]["runs"] == 1 and doc["runs"][0]["used_for_fit"] is False
    table = runner.invoke(app, ["validate", str(path)], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "nan" not in table.stdout.lower()


def test_a_users_run_may_name_a_preset_for_its_model(tmp_path, capsys):
    """`model: {preset: 8b, global_batch: 64}` is the preset's architecture under the run's own fields: torchtitan's
    Llama 3 8B run written that way predicts exactly what its spelled-out model does; an unknown preset is one line."""
    data = yaml.safe_load(BUNDLED_RUNS.read_text())
    run = next(r for r in data["runs"] if r["id"] == "torchtitan_a100_00")
    spelled = predict(load_runs_file(BUNDLED_RUNS).runs[[r["id"] for r in data["runs"]].index(run["id"])])
    run["model"] = {"preset": "8b", "name": run["model"]["name"], "seq_len": 8192, "global_batch": 64}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"runs": [run]}))
    by_preset = predict(load_runs_file(path).runs[0])
    assert by_preset.predicted_step_s == spelled.predicted_step_s and by_preset.error is None
    run["model"]["preset"] = "9b"
    path.write_text(yaml.safe_dump({"runs": [run]}))
    assert_mentions(bad_line(capsys, "validate", str(path)), "model.preset", "'9b'", "plan models")


def test_a_runs_hardware_alias_shows_as_the_profiles_name(tmp_path):
    """`hardware: a100` is the a100-80gb profile: the table, JSON and CSV name it a100-80gb, as every other output
    does; a path to a profile file stays as given."""
    data = yaml.safe_load(BUNDLED_RUNS.read_text())
    run = next(r for r in data["runs"] if r["id"] == "korthikanti2022_175b_full_recompute")
    assert run["hardware"] == "a100-80gb"
    copy = tmp_path / "mine-a100.yaml"
    copy.write_text((Path(__file__).resolve().parents[1] / "hardware_specs" / "a100-80gb.yaml").read_text())
    runs = [{**run, "id": "alias", "hardware": "A100"}, {**run, "id": "path", "hardware": str(copy)}]
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"runs": runs}))
    assert [r.hardware for r in load_runs_file(path).runs] == ["a100-80gb", str(copy)]
    doc = json.loads(runner.invoke(app, ["validate", str(path), "--format", "json"]).stdout)
    assert [r["hardware"] for r in doc["runs"]] == ["a100-80gb", str(copy)]
    assert doc["runs"][0]["throughput_error"] == doc["runs"][1]["throughput_error"]


def _no_json_constants(name):
    raise ValueError(f"non-standard JSON constant {name}")


def test_validate_run_the_planner_cannot_express_is_one_line(tmp_path, capsys):
    data = yaml.safe_load(BUNDLED_RUNS.read_text())
    run = next(r for r in data["runs"] if r["id"] == "korthikanti2022_175b_full_recompute")
    run["id"], run["gpus"] = "my_run", 32                    # TP8 x PP8 x DP1 cannot make 32 GPUs
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"runs": [run]}))
    assert_mentions(bad_line(capsys, "validate", path), "run my_run", "layout", "gpus(32)")


def test_validate_bad_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("runs:\n  - id: x\n    typo_field: 1\n")
    assert_mentions(bad_line(capsys, "validate", bad), "bad.yaml", "typo_field")


def test_a_problem_in_one_of_many_runs_names_that_run_once(tmp_path, capsys):
    """The error line speaks of the first bad run only, not of every run's missing fields."""
    data = yaml.safe_load(BUNDLED_RUNS.read_text())
    for r in data["runs"][:40]:
        r["hardwre"] = r.pop("hardware")
    path = tmp_path / "many.yaml"
    path.write_text(yaml.safe_dump(data))
    line = bad_line(capsys, "validate", path)
    assert_mentions(line, "runs.0.hardwre", "did you mean 'hardware'")
    assert len(line) < 200 and "runs.1." not in line


def _one_run_file(tmp_path, **change):
    """The bundled A100 run measured in TFLOP/s (Narayanan 2021 Table 1, 1.7B), with `measured` etc. changed."""
    data = yaml.safe_load(BUNDLED_RUNS.read_text())
    run = next(r for r in data["runs"] if r["id"] == "narayanan2021_t1_1p7b")
    assert run["hardware"] == "a100-80gb" and "tflops_per_gpu" in run["measured"]
    run.update(change)
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"runs": [run]}))
    return path


@pytest.mark.parametrize("change, needles", [
    pytest.param({"measured": {"tflops_per_gpu": 5000}}, ["runs.0.measured.tflops_per_gpu", "5,000", "a100-80gb",
                                                          "312"], id="tflops-above-peak"),
    pytest.param({"measured": {"mfu": 0.9}, "peak_tflops": 1000}, ["runs.0.measured.mfu", "900", "312"],
                 id="mfu-times-stated-peak-above-hardware-peak"),
    pytest.param({"measured": {"mfu": 1.5}, "peak_tflops": 312}, ["runs.0.measured.mfu", "1.5"], id="mfu-above-one"),
    pytest.param({"measured": {"tflops_per_gpu": 137, "memory_gib": 500}},
                 ["runs.0.measured.memory_gib", "500 GiB", "80 GiB of HBM"], id="memory-above-hbm"),
])
def test_validate_rejects_a_measured_rate_above_the_peak(tmp_path, capsys, change, needles):
    line = bad_line(capsys, "validate", _one_run_file(tmp_path, **change))
    assert_mentions(line, "mine.yaml", "run narayanan2021_t1_1p7b", *needles)


def test_validate_accepts_a_measured_rate_below_the_peak(tmp_path):
    res = runner.invoke(app, ["validate", str(_one_run_file(tmp_path, measured={"tflops_per_gpu": 300})),
                              "--format", "json"])
    assert res.exit_code == 0, res.output


def _run_file_with(tmp_path, **changes):
    """The bundled Korthikanti 175B run as my_run, with dotted fields changed ("layout.recompute_layers": 200)."""
    data = yaml.safe_load(BUNDLED_RUNS.read_text())
    run = next(r for r in data["runs"] if r["id"] == "korthikanti2022_175b_full_recompute")
    run["id"] = "my_run"
    for dotted, value in changes.items():
        *path, last = dotted.split(".")
        target = run
        for part in path:
            target = target.setdefault(part, {})
        target[last] = value
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"runs": [run]}))
    return path


def test_a_run_without_micro_batch_groups_needs_a_multiple_of_pp(tmp_path):
    """The bundled Megatron-LM runs of 2021-24 say runtime.microbatch_groups: false (their interleaved schedule took
    only a micro-batch count PP divides): Korthikanti's 175B (PP 8, VPP 3) with 60 micro-batches is refused, and
    predicted once the run says its stack has the groups."""
    refused = predict(load_runs_file(_run_file_with(tmp_path, **{"model.global_batch": 60})).runs[0])
    assert "micro-batches to be a multiple of PP" in refused.error
    ok = predict(load_runs_file(_run_file_with(tmp_path, **{"model.global_batch": 60,
                                                          "runtime.microbatch_groups": True})).runs[0])
    assert ok.error is None and int(ok.evaluation.row["num_microbatches"]) == 60


@pytest.mark.parametrize("changes, needles", [
    pytest.param({"hardware": "nope"}, ["run my_run: hardware:", "'nope'"], id="unknown-hardware"),
    pytest.param({"layout.recompute_layers": 200}, ["run my_run: layout.recompute_layers:"], id="recompute-layers"),
    pytest.param({"layout.recompute": "selective", "layout.recompute_layers": 2},
                 ["run my_run: layout.recompute_layers:", "selective"], id="recompute-layers-not-full"),
    pytest.param({"gpus": 100_000_000}, ["runs.0.gpus", "16777216", "run my_run"], id="gpus-past-the-limit"),
    pytest.param({"model.seq_len": 20_000_000}, ["runs.0.model.seq_len", "16777216", "run my_run"],
                 id="seq-len-past-the-job-limit"),
    pytest.param({"model.global_batch": 10**11}, ["runs.0.model.global_batch", "4294967296"], id="batch-too-big"),
    # strict types, as model and hardware files: no coercion of booleans, strings or floats
    pytest.param({"layout.micro_batch": True}, ["runs.0.layout.micro_batch", "integer", "True"], id="bool-mb"),
    pytest.param({"gpus": True}, ["runs.0.gpus", "integer", "True"], id="bool-gpus"),
    pytest.param({"layout.tp": "8"}, ["runs.0.layout.tp", "integer", "'8'"], id="quoted-tp"),
    pytest.param({"layout.tp": 8.0}, ["runs.0.layout.tp", "integer", "8.0"], id="float-tp"),
    pytest.param({"layout.sequence_parallel": "no"}, ["runs.0.layout.sequence_parallel", "boolean", "'no'"],
                 id="word-sp"),
    pytest.param({"runtime.flash_attention": "on"}, ["runs.0.runtime.flash_attention", "boolean", "'on'"],
                 id="word-flash"),
    pytest.param({"runtime.microbatch_groups": "no"}, ["runs.0.runtime.microbatch_groups", "boolean", "'no'"],
                 id="word-groups"),
    pytest.param({"measured": {"iteration_time_s": "1.3"}}, ["runs.0.measured.iteration_time_s", "number", "'1.3'"],
                 id="quoted-time"),
    pytest.param({"layout": [1, 2] * 40}, ["runs.0.layout", "a list ([1, 2, 1, 2"], id="long-input-is-cut"),
])
def test_run_file_errors_name_the_run_files_field_not_a_flag(tmp_path, capsys, changes, needles):
    line = bad_line(capsys, "validate", _run_file_with(tmp_path, **changes))
    assert_mentions(line, *needles)
    assert " --" not in line.split(":", 3)[-2], f"a CLI flag names the field: {line}"


def test_a_run_missing_several_runtime_fields_lists_them_all(tmp_path, capsys):
    """The five runtime features a run must state are named in one error, not one per attempt."""
    path = _run_file_with(tmp_path, runtime={"flash_attention": False})
    assert_mentions(bad_line(capsys, "validate", path), "runs.0.runtime:", "required fields are missing:",
                    "tp_comm_overlap, tp_bwd_overlap, overlap_grad_reduce, overlap_param_gather")
    one = _run_file_with(tmp_path, runtime={"flash_attention": False, "tp_comm_overlap": False, "tp_bwd_overlap": True,
                                           "overlap_grad_reduce": False})
    assert_mentions(bad_line(capsys, "validate", one), "runs.0.runtime.overlap_param_gather", "required field")


def test_a_changed_copy_of_a_run_is_checked_like_a_file(tmp_path):
    """README's way to change a run, run.model_copy(update=...), skips pydantic's checks: predict checks the copy, so
    a bad value is the one-line error naming the run's field, not a TypeError deep in the cost model."""
    run = load_runs_file(_run_file_with(tmp_path)).runs[0]
    with pytest.raises(PlannerError, match=r"^run my_run: gpus: .*integer.*'abc'"):
        predict(run.model_copy(update={"gpus": "abc"}))
    assert predict(run.model_copy(update={"gpus": run.gpus})).error is None


def test_a_run_id_given_twice_is_an_error(tmp_path, capsys):
    data = yaml.safe_load(BUNDLED_RUNS.read_text())
    run = next(r for r in data["runs"] if r["id"] == "korthikanti2022_175b_full_recompute")
    path = tmp_path / "twice.yaml"
    path.write_text(yaml.safe_dump({"runs": [run, run]}))
    assert_mentions(bad_line(capsys, "validate", path), "korthikanti2022_175b_full_recompute", "twice")


def test_a_run_on_a_cluster_with_fewer_nics_is_priced_on_its_network(tmp_path):
    """A run states its cluster's node network where it is not the profile's (BLOOM on Jean Zay: 4 Omni-Path links
    per 8 GPUs; GPT-NeoX-20B: 4 HDR HCAs): the pipeline's cross-node traffic of Korthikanti's 175B run (PP 8 over
    8 nodes) slows on one 100 Gb/s NIC per node, and the table, JSON and CSV say which network was used."""
    plain = _run_file_with(tmp_path)
    base = json.loads(runner.invoke(app, ["validate", str(plain), "--format", "json"]).stdout)["runs"][0]
    assert "network" not in base
    path = _run_file_with(tmp_path, **{"network.nics_per_node": 1, "network.nic_gbit_per_s": 100,
                                       "network.name": "one HDR100 port"})
    mine = json.loads(runner.invoke(app, ["validate", str(path), "--format", "json"]).stdout)["runs"][0]
    assert mine["network"] == {"nics_per_node": 1, "nic_gbit_per_s": 100, "name": "one HDR100 port"}
    assert mine["predicted_step_time_s"] > base["predicted_step_time_s"] * 1.001
    assert mine["layout"] == base["layout"]
    table = runner.invoke(app, ["validate", str(path)], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "a100-80gb (1x100G NICs)" in table.stdout
    import io

    import pandas as pd
    csv = pd.read_csv(io.StringIO(runner.invoke(app, ["validate", str(path), "--format", "csv"]).stdout))
    assert csv.network_nics_per_node.tolist() == [1] and csv.network_nic_gbit_per_s.tolist() == [100]
    bundled = {r.id: r for r in load_runs()}
    assert bundled["bloom_176b_384gpu"].network.label == "4x100G NICs"
    assert bundled["gpt_neox_20b_96gpu"].network.label == "4x200G NICs"


@pytest.mark.parametrize("changes, needles", [
    pytest.param({"network.nics_per_node": 0, "network.nic_gbit_per_s": 100}, ["runs.0.network.nics_per_node", "1"],
                 id="no-nics"),
    pytest.param({"network.nics_per_node": 4, "network.nic_gbit_per_s": "100G"},
                 ["runs.0.network.nic_gbit_per_s", "number", "'100G'"], id="rate-as-text"),
    pytest.param({"network.nics_per_node": 4}, ["runs.0.network.nic_gbit_per_s", "required"], id="rate-missing"),
    pytest.param({"network.nics_per_node": 1, "network.nic_gbit_per_s": 2},
                 ["run my_run: network:", "0.25 Gb/s per GPU"], id="too-little-per-gpu"),
    pytest.param({"network.nics_per_node": 4, "network.nic_gbit_per_s": 100, "network.gbps": 1},
                 ["runs.0.network.gbps"], id="unknown-field"),
])
def test_a_bad_run_network_names_the_field(tmp_path, capsys, changes, needles):
    assert_mentions(bad_line(capsys, "validate", _run_file_with(tmp_path, **changes)), *needles)


def test_a_runs_json_record_names_the_runtime_and_precision_it_was_priced_with(tmp_path):
    """Each predicted run's JSON carries the runtime and precision it was priced with: the run file's own fields as
    given (GPT-NeoX-20B: no FlashAttention, no gradient-accumulation fusion, 16-bit gradients), the rest at their
    defaults; the CSV stays flat without them."""
    data = yaml.safe_load(BUNDLED_RUNS.read_text())
    run = next(r for r in data["runs"] if r["id"] == "gpt_neox_20b_96gpu")
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"runs": [run]}))
    rec = json.loads(runner.invoke(app, ["validate", str(path), "--format", "json"]).stdout)["runs"][0]
    assert {k: rec["runtime"][k] for k in run["runtime"]} == run["runtime"]
    assert rec["runtime"]["flash_attention_gen"] is None and rec["runtime"]["rank_order"] == "dp-pp"
    assert rec["precision"] == {"param_bytes": 2, "grad_bytes": 2, "optimizer_bytes": 12, "activation_bytes": 2,
                                "params_are_master": False}
    header = runner.invoke(app, ["validate", str(path), "--format", "csv"]).stdout.splitlines()[0].split(",")
    assert "runtime" not in header and "grad_accumulation_fusion" not in header
