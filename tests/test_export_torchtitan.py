"""The torchtitan export: its job config, and the layouts it refuses or notes because torchtitan (torch.distributed.pipelining,
FSDP2) runs them otherwise than the plan prices."""

import math
import tomllib

import pytest

import planner
from planner.export import best_supported, blockers, export


def _best(model="405b", gpus=512, **pins):
    return planner.evaluate(model, gpus, **pins)


def test_torchtitan_toml_has_the_job_config_keys():
    ev = _best("70b", 64, tp=4, pp=2, dp=8, zero_stage=1, sequence_parallel=True)
    text, _ = export("torchtitan", ev.row, ev.result.model, ev.result.job)
    doc = tomllib.loads(text)
    par, ac, tr = doc["parallelism"], doc["activation_checkpoint"], doc["training"]
    assert par["tensor_parallel_degree"] == 4 and par["pipeline_parallel_degree"] == 2
    assert par["data_parallel_shard_degree"] == 8 and par["data_parallel_replicate_degree"] == 1
    assert par["pipeline_parallel_schedule"] in ("1F1B", "Interleaved1F1B")
    assert par["pipeline_parallel_microbatch_size"] == ev.row["micro_batch"]
    assert ac["mode"] in ("none", "selective", "full")
    assert tr["global_batch_size"] == ev.result.job.global_batch and tr["seq_len"] == 8192
    # with PP, local_batch_size is a DP rank's share, split into pipeline micro-batches
    assert tr["local_batch_size"] * 8 == tr["global_batch_size"]
    # ZeRO-1 under PP is torchtitan's default FSDP there: weights kept gathered, gradients reduced once
    assert "fsdp_reshard_after_forward" not in par and not blockers("torchtitan", ev.row)


@pytest.mark.parametrize("model, gpus, pp, vpp", [("405b", 2048, 16, 8), ("405b", 2048, 16, 4), ("70b", 256, 4, 5),
                                                  ("70b", 256, 4, 1), ("405b", 2048, 16, 1), ("70b", 96, 6, 2),
                                                  ("70b", 96, 6, 1)])
def test_torchtitan_interleaved_split_matches_the_plan(model, gpus, pp, vpp):
    """torchtitan makes ceil((L + first_less + last_less) / layers_per_stage) virtual stages (its pipeline split):
    the export must give exactly PP x VPP of them, with the plan's layers per chunk (Llama 405B: 126 layers on
    16 stages is Megatron's uneven (L + 2)/p split; 70B: 80/4 is even)."""
    ev = _best(model, gpus, pp=pp, vpp=vpp)
    text, _ = export("torchtitan", ev.row, ev.result.model, ev.result.job)
    par = tomllib.loads(text)["parallelism"]
    slots = ev.result.model.layers + par["pipeline_parallel_first_stage_less_layers"] \
        + par["pipeline_parallel_last_stage_less_layers"]
    # without interleaving torchtitan splits the slots over PP stages itself: even exactly when PP divides them
    per_stage = par.get("pipeline_parallel_layers_per_stage", slots // pp)
    assert math.ceil(slots / per_stage) == pp * vpp and slots % (pp * vpp) == 0
    assert per_stage == {(16, 8): 1, (16, 4): 2, (4, 5): 4, (4, 1): 20, (16, 1): 8, (6, 2): 7, (6, 1): 14}[(pp, vpp)]


def test_the_torchtitan_export_names_the_release_its_keys_belong_to():
    """torchtitan 0.3 dropped TOML job files; the fragment says it is 0.2.x's and that [model] stays the user's."""
    ev = _best("8b", 8, tp=1, pp=1, dp=8, zero_stage=3)
    text, _ = export("torchtitan", ev.row, ev.result.model, ev.result.job)
    assert text.startswith("# torchtitan 0.2.x job config") and "[model]" in text.splitlines()[0]


def test_torchtitan_zero_2_says_fsdp2_gathers_the_weights_every_micro_batch():
    """The plan's ZeRO-2 gathers the weights once per step; FSDP2's post-backward hook frees them (torch
    fully_shard docs), so under gradient accumulation each micro-batch gathers them again: the export says so,
    and not when there is one micro-batch."""
    ev = planner.evaluate("8b", 64, tp=1, pp=1, dp=64, zero_stage=2, dp_replicate=1, micro_batch=1,
                          recompute="none", sequence_parallel=False, vpp=1)
    text, _ = export("torchtitan", ev.row, ev.result.model, ev.result.job)
    m = int(ev.row["num_microbatches"])
    assert m > 1 and f"each of the {m} micro-batches all-gathers them again" in text
    one = planner.evaluate("8b", 64, tp=1, pp=1, dp=64, zero_stage=2, dp_replicate=1, micro_batch=1,
                           recompute="none", sequence_parallel=False, vpp=1, global_batch=64)
    assert "all-gathers them again" not in export("torchtitan", one.row, one.result.model, one.result.job)[0]


def test_torchtitan_under_pp_says_its_fsdp_gradients_stay_unsharded():
    """torch.distributed.pipelining's PipelineStage turns FSDP's gradient sync off for every micro-batch and reduces
    once after the last (backward_maybe_with_nosync), so a torchtitan stage holds its whole gradients: the export
    says so with the amount, the plan's sharded gradients times (shards - 1); without PP it does not (a reviewer
    found the ZeRO-2/3 PP exports priced sharded with no word)."""
    ev = planner.evaluate("70b", 512, tp=2, cp=2, pp=8, vpp=2, zero_stage=2)
    text, _ = export("torchtitan", ev.row, ev.result.model, ev.result.job)
    shards = int(ev.row["dp"]) * 2
    assert f"about {float(ev.row['gradients_gib']) * (shards - 1):,.1f} GiB more per GPU" in text
    flat = planner.evaluate("70b", 512, tp=2, cp=2, pp=1, zero_stage=3)
    assert "unsharded" not in export("torchtitan", flat.row, flat.result.model, flat.result.job)[0]
    # against a memory limit, a layout the whole gradients push over it is one torchtitan cannot run
    need = float(ev.row["memory_gib"]) + float(ev.row["gradients_gib"]) * (shards - 1)
    assert not blockers("torchtitan", ev.row, capacity_gib=need + 0.1)
    assert any("until the last micro-batch, which takes the layout over the memory limit" in w
               for w in blockers("torchtitan", ev.row, capacity_gib=need - 0.1))
    assert not blockers("torchtitan", flat.row, capacity_gib=float(flat.row["memory_gib"]))


def test_zero_3_under_pp_is_no_layout_and_torchtitan_runs_zero_1_there():
    """No framework keeps the weights sharded across a pipeline's micro-batches (DeepSpeed's pipeline engine asserts
    ZeRO < 2; torch's pipelining keeps FSDP's weights gathered and gradients whole until the last micro-batch), so
    the search plans no ZeRO-3 under PP, and a pinned one is refused naming --zero; torchtitan's FSDP under PP holds
    what the plan's ZeRO-1 holds: nothing more than planned, no blocker, no reshard key. ZeRO-2 under PP still
    holds its gradients whole: (shards - 1) x the planned shard more."""
    from planner.errors import PlannerError
    from planner.export.torchtitan import pp_unsharded_gib
    with pytest.raises(PlannerError) as err:
        planner.evaluate("70b", 512, tp=2, cp=2, pp=8, vpp=2, zero_stage=3)
    assert err.value.field == "zero_stage" and "ZeRO-3 with PP > 1" in str(err.value)
    assert (planner.run_search("70b", 96, find_min_gpus=False).table.query("pp > 1")["zero_stage"] < 3).all()
    one = planner.evaluate("70b", 512, tp=2, cp=2, pp=8, vpp=2, zero_stage=1)
    assert pp_unsharded_gib(one.row) == 0 and not blockers("torchtitan", one.row,
                                                           capacity_gib=float(one.row["memory_gib"]))
    two = planner.evaluate("70b", 512, tp=2, cp=2, pp=8, vpp=2, zero_stage=2)
    shards = int(two.row["dp"]) * 2
    assert pp_unsharded_gib(two.row) == pytest.approx(float(two.row["gradients_gib"]) * (shards - 1))
    assert pp_unsharded_gib(two.row) > 0
    # a ZeRO-3 row given by hand also holds its weights gathered
    three = {**two.row, "zero_stage": 3}
    assert pp_unsharded_gib(three) == pytest.approx((float(two.row["weights_gib"]) + float(two.row["gradients_gib"]))
                                                    * (shards - 1))


def test_torchtitan_refuses_edge_stages_heavier_than_one_chunk():
    """torchtitan takes an edge stage's fewer layers off its first (or last) virtual stage only, so each weight must
    fit in one chunk. 70B on PP 11: 80 + 2 = 82 layers do not split into 11, so the edges are explicit
    (Megatron-Core first/last-pipeline-num-layers): nine middle stages of 8, edges of 4 each (weights 4 and 4); VPP 4
    gives chunks of (80 + 8) / 44 = 2 layers, less than the weight 4: a blocker given the model, and the TOML
    says so; VPP 2 (chunks of 4) is fine."""
    ev = planner.evaluate("70b", 176, tp=1, pp=11, vpp=4, zero_stage=2, global_batch=1408)
    assert blockers("torchtitan", ev.row) == blockers("torchtitan", ev.row, model=ev.result.model)[:-1]
    assert "edge stage's fewer layers to fit in its one chunk" in blockers("torchtitan", ev.row,
                                                                           model=ev.result.model)[-1]
    assert "torchtitan refuses this split" in export("torchtitan", ev.row, ev.result.model, ev.result.job)[0]
    ok = planner.evaluate("70b", 176, tp=1, pp=11, vpp=2, zero_stage=2, global_batch=1408)
    assert not any("edge stage" in w for w in blockers("torchtitan", ok.row, model=ok.result.model))


def test_torchtitan_export_picks_a_layout_whose_whole_gradients_fit():
    """405B on 12,288 H100s: the export's layout, with its gradients unsharded under PP, stays within the search's
    memory limit (before, it picked one needing about 64 GiB more than planned: 132 GiB on an 80 GB GPU); the
    ZeRO-2 layouts under PP that the whole gradients take over it are passed over."""
    from planner.export.torchtitan import pp_unsharded_gib
    res = planner.run_search("405b", 12288)
    text, _ = best_supported("torchtitan", res)
    limit = res.capacity_bytes / 2**30
    best = next(r for _, r in res.table.iterrows() if not blockers("torchtitan", r, capacity_gib=limit))
    assert float(best["memory_gib"]) + pp_unsharded_gib(best) <= limit
    assert int(best["pp"]) > 1
    # the fastest ZeRO-2 layout under PP holds more than the limit with its gradients whole: refused for that
    z2 = res.table[(res.table["zero_stage"] == 2) & (res.table["pp"] > 1)].iloc[0]
    assert float(z2["memory_gib"]) + pp_unsharded_gib(z2) > limit
    assert any("over the memory limit" in w for w in blockers("torchtitan", z2, capacity_gib=limit))
    assert f"step {float(best['step_time_s']):.3g} s" in text
    assert tomllib.loads(text)["parallelism"]["pipeline_parallel_degree"] == int(best["pp"])


def test_torchtitan_needs_as_many_micro_batches_as_stages():
    """torch.distributed.pipelining's single-stage schedules (1F1B, GPipe) raise on fewer micro-batches than stages;
    Megatron's 1F1B runs them (its warm-up is min(m, p - r - 1) forwards). 405B on PP 16 with 8 micro-batches: the
    Megatron export writes it, torchtitan refuses it; with 16 it is fine."""
    few = _best("405b", 2048, tp=8, pp=16, dp=16, vpp=1, micro_batch=1, global_batch=128)
    assert int(few.row["num_microbatches"]) == 8
    assert "--pipeline-model-parallel-size 16" in export("megatron", few.row, few.result.model, few.result.job)[0]
    assert any("at least as many micro-batches as pipeline stages" in w for w in blockers("torchtitan", few.row))
    enough = _best("405b", 2048, tp=8, pp=16, dp=16, vpp=1, micro_batch=1, global_batch=256)
    assert not any("micro-batches as pipeline stages" in w for w in blockers("torchtitan", enough.row))


def test_torchtitan_without_dp_needs_no_ddp():
    """torchtitan refuses DDP beside TP or PP (parallelize.py: DDP has not supported > 1D parallelism), but with
    DP 1 there is no DDP to apply: TP 2 x PP 4 on 8 GPUs exports, with both DP degrees 1; DP 2 beside TP is
    refused."""
    ev = planner.evaluate("8b", 8, tp=2, pp=4, dp=1, zero_stage=0, sequence_parallel=True)
    assert not blockers("torchtitan", ev.row)
    par = tomllib.loads(export("torchtitan", ev.row, ev.result.model, ev.result.job)[0])["parallelism"]
    assert par["data_parallel_replicate_degree"] == par["data_parallel_shard_degree"] == 1
    two = planner.evaluate("8b", 8, tp=2, pp=2, dp=2, zero_stage=0, sequence_parallel=True)
    assert any("one-dimensional mesh" in w for w in blockers("torchtitan", two.row))
