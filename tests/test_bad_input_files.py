"""Bad input files: model YAML, hardware YAML and Hugging Face config.json answer with one line naming the file
and the field, exit code 2, no traceback. Hostile YAML and JSON (python tags, alias bombs, deep nesting):
test_hostile_files.py."""

from __future__ import annotations

import json
import os

import pytest
from cli_contract import assert_mentions, bad, run, write
from helpers import gpt2_small_core, llama_31_8b_core

from planner.specs.hardware import hardware_dir
from planner.specs.model import PRESETS_DIR

H100_YAML = hardware_dir() / "h100-sxm.yaml"
PRESET_8B = PRESETS_DIR / "llama-3.1-8b.yaml"


# --- input files -----------------------------------------------------------------------------------------------------

def preset_text_without(key: str) -> str:
    return "".join(line + "\n" for line in PRESET_8B.read_text().splitlines() if not line.startswith(f"{key}:"))


def test_preset_file_is_a_valid_model_file_when_copied(capsys, tmp_path):
    """The mutations below start from a copy that works: the errors come from the one change each makes."""
    copy = write(tmp_path / "copy.yaml", PRESET_8B.read_text())
    code, out, err = run(capsys, "--model", copy, "--gpus", "8", "--format", "json", "--top", "1")
    assert code == 0, err
    assert json.loads(out)["model"]["name"] == "llama-3.1-8b"
    hw = write(tmp_path / "hw.yaml", H100_YAML.read_text())
    code, out, err = run(capsys, "--model", "8b", "--gpus", "8", "--hardware", hw, "--format", "json", "--top", "1")
    assert code == 0, err


MODEL_FILE_CASES = [
    # (id, file name, content or None for "do not create", needles)
    ("missing-file", "nope.yaml", None, ["--model", "not found", "nope.yaml"]),
    ("empty-file", "empty.yaml", "", ["--model", "empty"]),
    ("whitespace-only", "blank.yaml", "  \n\n", ["--model", "empty"]),
    ("malformed-yaml", "bad.yaml", "name: x\nlayers: [1, 2\n", ["--model", "not valid YAML"]),
    ("tab-indented-yaml", "tabs.yaml", "name: x\n\tlayers: 2\n", ["--model", "not valid YAML"]),
    ("yaml-list", "list.yaml", "- name: x\n- layers: 2\n", ["--model", "mapping", "list"]),
    ("yaml-scalar", "scalar.yaml", "just a string\n", ["--model", "mapping", "str"]),
    ("missing-required-field", "nohidden.yaml", preset_text_without("hidden"), ["hidden", "missing"]),
    ("unknown-field", "typo.yaml", PRESET_8B.read_text() + "tied_embedings: true\n", ["tied_embedings", "unknown"]),
    # a typo of an optional field is named with the field it is closest to, as a required one's is
    ("typo-of-optional-field", "kv.yaml", PRESET_8B.read_text().replace("kv_heads: 8", "kv_head: 8"),
     ["kv_head: unknown field (typo?); did you mean 'kv_heads'?"]),
    ("yaml-yes-for-a-number", "yes.yaml", PRESET_8B.read_text().replace("layers: 32", "layers: yes"),
     ["layers", "got True (YAML reads yes/no, on/off and true/false as booleans)"]),
    ("moe-field", "moe.yaml", PRESET_8B.read_text() + "num_experts: 8\n", ["num_experts", "mixture-of-experts",
                                                                           "dense"]),
    ("wrong-type-layers", "many.yaml", PRESET_8B.read_text().replace("layers: 32", "layers: many"),
     ["layers", "many"]),
    ("wrong-type-hidden-list", "hlist.yaml", PRESET_8B.read_text().replace("hidden: 4096", "hidden: [4096]"),
     ["hidden"]),
    ("negative-layers", "neg.yaml", PRESET_8B.read_text().replace("layers: 32", "layers: -32"), ["layers", "-32"]),
    ("heads-not-multiple-of-kv", "kv.yaml", PRESET_8B.read_text().replace("kv_heads: 8", "kv_heads: 5"),
     ["kv_heads", "5", "heads"]),
    ("hidden-not-divisible-by-heads", "hd.yaml", PRESET_8B.read_text().replace("hidden: 4096", "hidden: 4001"),
     ["hidden", "4001", "heads"]),
    ("bad-norm", "norm.yaml", PRESET_8B.read_text().replace("norm: rmsnorm", "norm: batchnorm"),
     ["norm", "batchnorm"]),
    ("window-layers-without-window", "wl.yaml", PRESET_8B.read_text() + "window_layers: 8\n",
     ["window_layers", "8", "sliding_window"]),
    ("window-layers-past-the-layers", "wl2.yaml", PRESET_8B.read_text() + "sliding_window: 4096\nwindow_layers: 40\n",
     ["window_layers", "40", "32 layers"]),
    ("post-norms-with-parallel-residual", "pn.yaml",
     PRESET_8B.read_text() + "post_norms: true\nparallel_residual: true\n", ["post_norms", "parallel_residual"]),
    ("not-utf8", "latin1.yaml", None, ["--model"]),
    # strict types: YAML booleans, quoted numbers, floats and words are not silently coerced
    ("bool-heads", "bh.yaml", PRESET_8B.read_text().replace("heads: 32", "heads: true"), ["heads", "integer", "True"]),
    ("float-layers", "fl.yaml", PRESET_8B.read_text().replace("layers: 32", "layers: 32.0"),
     ["layers", "integer", "32.0"]),
    ("quoted-layers", "ql.yaml", PRESET_8B.read_text().replace("layers: 32", "layers: '32'"),
     ["layers", "integer", "'32'"]),
    ("word-gated-mlp", "gm.yaml", PRESET_8B.read_text().replace("gated_mlp: true", "gated_mlp: 'yes'"),
     ["gated_mlp", "boolean", "'yes'"]),
    ("int-tied-embeddings", "te.yaml", PRESET_8B.read_text().replace("tied_embeddings: false", "tied_embeddings: 0"),
     ["tied_embeddings", "boolean", "0"]),
    # the job's bounds are the schema's: the error names the file's field, not --seq-len or --global-batch
    ("seq-len-past-the-limit", "sl.yaml", PRESET_8B.read_text().replace("seq_len: 8192", "seq_len: 100000000"),
     ["model file sl.yaml: seq_len", "16777216", "100000000"]),
    ("batch-past-the-limit", "gb.yaml",
     PRESET_8B.read_text().replace("global_batch_tokens: 16777216", "global_batch_tokens: 40000000000000"),
     ["model file gb.yaml: global_batch_tokens", "4,882,812,500 sequences", "at most 4,294,967,296"]),
    # the batch is a whole number of sequences, as --global-batch-tokens requires
    ("batch-tokens-not-whole-sequences", "bt.yaml",
     PRESET_8B.read_text().replace("global_batch_tokens: 16777216", "global_batch_tokens: 100"),
     ["global_batch_tokens", "100 tokens is not a whole number of 8192-token sequences"]),
    ("batch-given-twice-ways", "b2.yaml", PRESET_8B.read_text() + "global_batch: 20\n",
     ["global_batch", "not both"]),
    # a key given twice: YAML keeps the last silently, the planner names it
    ("duplicate-key", "dup.yaml", PRESET_8B.read_text() + "layers: 80\n", ["'layers' is given twice", "line"]),
]


@pytest.mark.parametrize("name, content, needles", [pytest.param(n, c, k, id=i) for i, n, c, k in MODEL_FILE_CASES])
def test_bad_model_file(capsys, tmp_path, name, content, needles):
    path = tmp_path / name
    if content is not None:
        write(path, content)
    if name == "latin1.yaml":
        path.write_bytes("name: caf\xe9\n".encode("latin-1") + PRESET_8B.read_bytes())
    line = bad(capsys, "--model", path, "--gpus", "8")
    assert_mentions(line, *needles)


def test_model_directory_without_config_json(capsys, tmp_path):
    line = bad(capsys, "--model", tmp_path, "--gpus", "8")
    assert_mentions(line, "--model", "directory")


def test_typo_of_a_required_model_field_names_the_typo(capsys, tmp_path):
    path = write(tmp_path / "typo.yaml", PRESET_8B.read_text().replace("layers: 32", "layrs: 32"))
    line = bad(capsys, "--model", path, "--gpus", "8")
    assert_mentions(line, "layrs")


HW_CASES = [
    # (id, old text in h100-sxm.yaml, replacement, needles)
    ("negative-bandwidth", "bandwidth_gb_per_s_per_direction: 450", "bandwidth_gb_per_s_per_direction: -450",
     ["node.intra_node.bandwidth_gb_per_s_per_direction", "-450"]),
    ("zero-hbm", "hbm_capacity_gib: 79.65", "hbm_capacity_gib: 0", ["gpu.hbm_capacity_gib", "0"]),
    ("negative-hbm", "hbm_capacity_gib: 79.65", "hbm_capacity_gib: -80", ["gpu.hbm_capacity_gib", "-80"]),
    ("zero-peak", "bf16: 989.4", "bf16: 0", ["gpu.peak_tflops_dense.bf16", "0"]),
    # YAML 1.1 reads 1e3 (no dot, no sign) as text: the message says so and how to write it
    ("exponent-read-as-text", "bf16: 989.4", "bf16: 1e3", ["gpu.peak_tflops_dense.bf16", "'1e3'", "1.0e+03"]),
    ("quoted-number", "bf16: 989.4", 'bf16: "989.4"', ["gpu.peak_tflops_dense.bf16", "write it without quotes, 989.4"]),
    ("quoted-integer", "tdp_w: 700", "tdp_w: '700'", ["gpu.tdp_w", "without quotes, 700"]),
    ("memory-in-bytes", "hbm_capacity_gib: 79.65", "hbm_capacity_gib: 85899345920",
     ["gpu.hbm_capacity_gib", "85899345920"]),
    ("peak-in-flops", "bf16: 989.4", "bf16: 9.894e14", ["gpu.peak_tflops_dense.bf16", "9.894e14"]),
    ("peak-in-flops-yaml-float", "bf16: 989.4", "bf16: 9.894e+14", ["gpu.peak_tflops_dense.bf16"]),
    ("unknown-field", "  tdp_w: 700", "  tdp_w: 700\n  tdp_watts: 700", ["gpu.tdp_watts", "unknown"]),
    ("negative-latency", "step_latency_us: 1.9", "step_latency_us: -1.9", ["step_latency_us", "-1.9"]),
    ("zero-gpus-per-node", "gpus_per_node: 8", "gpus_per_node: 0", ["node.gpus_per_node", "0"]),
    ("fractional-gpus-per-node", "gpus_per_node: 8", "gpus_per_node: 7.5", ["node.gpus_per_node", "7.5"]),
    ("efficiency-above-one", "gemm_fraction_of_peak: 0.56", "gemm_fraction_of_peak: 57",
     ["efficiency.gemm_fraction_of_peak", "57"]),
    # fractions of a physical peak are in (0, 1]; more than the link or the GPU can do would shorten predicted time
    ("inter-busbw-above-one", "inter_node_busbw_fraction: 0.94", "inter_node_busbw_fraction: 1.5",
     ["efficiency.inter_node_busbw_fraction", "1.5", "less than or equal to 1"]),
    ("intra-busbw-above-one", "intra_node_busbw_fraction: 0.82", "intra_node_busbw_fraction: 1.01",
     ["efficiency.intra_node_busbw_fraction", "1.01", "less than or equal to 1"]),
    ("hbm-fraction-above-one", "hbm_fraction_of_peak: 0.89", "hbm_fraction_of_peak: 1.2",
     ["efficiency.hbm_fraction_of_peak", "1.2"]),
    ("attention-fraction-above-one", "attention_fraction_of_peak: 0.35", "attention_fraction_of_peak: 1.1",
     ["efficiency.attention_fraction_of_peak", "1.1"]),
    ("busbw-zero", "inter_node_busbw_fraction: 0.94", "inter_node_busbw_fraction: 0",
     ["efficiency.inter_node_busbw_fraction", "greater than 0"]),
    ("overlap-slowdown-above-one", "overlap_slowdown_intra_node: 0.1", "overlap_slowdown_intra_node: 1.5",
     ["efficiency.overlap_slowdown_intra_node", "1.5"]),
    ("overlap-slowdown-negative", "overlap_slowdown_inter_node: 0.0", "overlap_slowdown_inter_node: -0.1",
     ["efficiency.overlap_slowdown_inter_node", "-0.1"]),
    ("nan-bandwidth", "hbm_bandwidth_tb_per_s: 3.35", "hbm_bandwidth_tb_per_s: .nan",
     ["gpu.hbm_bandwidth_tb_per_s: got nan, expected a finite number"]),
    ("inf-tdp", "tdp_w: 700", "tdp_w: .inf", ["gpu.tdp_w: got inf, expected a finite number"]),
    ("typo-of-nested-optional-field", "bandwidth_gb_per_s_per_direction:", "bandwith_gb_per_s_per_direction:",
     ["node.intra_node.bandwith_gb_per_s_per_direction: unknown field (typo?); did you mean "
      "'bandwidth_gb_per_s_per_direction'?"]),
    ("string-hbm", "hbm_capacity_gib: 79.65", "hbm_capacity_gib: eighty", ["gpu.hbm_capacity_gib", "eighty"]),
    ("missing-name", "name: h100-sxm\n", "", ["name", "missing"]),
    # strict types, as in model files: YAML booleans, quoted numbers and floats are not coerced
    ("bool-gpus-per-node", "gpus_per_node: 8", "gpus_per_node: true", ["node.gpus_per_node", "integer", "True"]),
    ("float-gpus-per-node", "gpus_per_node: 8", "gpus_per_node: 8.0", ["node.gpus_per_node", "integer", "8.0"]),
    ("quoted-gpus-per-node", "gpus_per_node: 8", "gpus_per_node: '8'", ["node.gpus_per_node", "integer", "'8'"]),
    ("quoted-tdp", "tdp_w: 700", "tdp_w: '700'", ["gpu.tdp_w", "number", "'700'"]),
    ("bool-tdp", "tdp_w: 700", "tdp_w: true", ["gpu.tdp_w", "number", "True"]),
    ("quoted-latency", "step_latency_us: 1.9", "step_latency_us: '1.9'",
     ["node.intra_node.step_latency_us", "number", "'1.9'"]),
    ("numeric-name", "name: h100-sxm", "name: 100", ["name", "string", "100"]),
    ("numeric-alias", "aliases: [", "aliases: [5, ", ["aliases.0", "string", "5"]),
    ("unknown-topology", "step_latency_us: 1.9", "topology: ring\n    step_latency_us: 1.9",
     ["node.intra_node.topology", "'switch' or 'mesh'", "ring"]),
    ("mesh-network", "step_latency_us: 4.0", "topology: mesh\n    step_latency_us: 4.0",
     ["inter_node.topology", "expected switch"]),
    ("provider-without-price", "price_usd_per_gpu_hour: 3.99", "", ["price_provider names who charges",
                                                                     "not given"]),
]


@pytest.mark.parametrize("old, new, needles", [pytest.param(o, n, k, id=i) for i, o, n, k in HW_CASES])
def test_bad_hardware_file(capsys, tmp_path, old, new, needles):
    text = H100_YAML.read_text()
    assert old in text
    path = write(tmp_path / "mutated.yaml", text.replace(old, new, 1))
    line = bad(capsys, "--model", "8b", "--gpus", "8", "--hardware", path)
    assert_mentions(line, "hardware file mutated.yaml", *needles)


@pytest.mark.parametrize("kind", ["missing", "directory", "empty", "list", "malformed"])
def test_bad_hardware_path(capsys, tmp_path, kind):
    path = tmp_path / "hw.yaml"
    if kind == "directory":
        path.mkdir()
    elif kind == "empty":
        write(path, "")
    elif kind == "list":
        write(path, "- h100\n")
    elif kind == "malformed":
        write(path, "gpu: {peak: [1,\n")
    line = bad(capsys, "--model", "8b", "--gpus", "8", "--hardware", path)
    assert_mentions(line, "--hardware", "hw.yaml")


# --- file size: at most MAX_FILE_BYTES are read, so a device or a huge file is rejected at once -----------------

@pytest.mark.parametrize("where", ["--model", "--hardware", "validate"])
def test_oversized_file_is_rejected_naming_the_limit(capsys, tmp_path, where):
    from planner.specs._files import MAX_FILE_BYTES

    path = tmp_path / "huge.yaml"
    path.write_bytes(b"name: x\n" + b"# padding\n" * (MAX_FILE_BYTES // 10))   # valid YAML, one limit + 8 bytes
    assert path.stat().st_size > MAX_FILE_BYTES
    argv = {"--model": ["--model", path, "--gpus", "8"], "--hardware": ["--model", "8b", "--gpus", "8", "--hardware",
                                                                        path], "validate": ["validate", path]}[where]
    line = bad(capsys, *argv)
    assert_mentions(line, "huge.yaml", "larger than 4 MiB", f"{MAX_FILE_BYTES:,}",
                    where if where != "validate" else "runs file")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
@pytest.mark.parametrize("device, flag", [("/dev/zero", "--model"), ("/dev/urandom", "--hardware")])
def test_character_device_is_read_only_up_to_the_limit(capsys, device, flag):
    """A device's stat size is 0: the cap must come from the read itself, not from stat (this used to hang)."""
    argv = ["--model", device, "--gpus", "8"] if flag == "--model" else ["--model", "8b", "--gpus", "8", flag, device]
    assert_mentions(bad(capsys, *argv), flag, device, "larger than 4 MiB")


def changed(cfg, **change):
    """cfg with each keyword set, or removed when its value is ... (Ellipsis)."""
    for k, v in change.items():
        if v is ...:
            cfg.pop(k)
        else:
            cfg[k] = v
    return cfg


def hf(**change):
    """The short Llama 3.1 8B config.json (tests/helpers.py), changed."""
    return changed(llama_31_8b_core(), **change)


def gpt2(**change):
    """The short GPT-2 small config.json (tests/helpers.py), changed."""
    return changed(gpt2_small_core(), **change)


HF_CASES = [
    ("unsupported-model-type", hf(model_type="bert"), ["model_type", "bert", "not supported", "llama"]),
    ("no-model-type", hf(model_type=...), ["missing field 'model_type'"]),
    ("missing-heads", hf(num_attention_heads=...), ["num_attention_heads", "missing"]),
    ("null-heads", hf(num_attention_heads=None), ["num_attention_heads"]),
    ("hidden-not-divisible-by-heads", hf(hidden_size=4000, num_attention_heads=48, num_key_value_heads=...),
     ["hidden", "4000", "48"]),
    ("kv-not-dividing-heads", hf(num_key_value_heads=5), ["kv_heads", "5", "32"]),
    ("vocab-zero", hf(vocab_size=0), ["vocab_size", "0"]),
    ("vocab-string", hf(vocab_size="128256"), ["vocab_size", "128256"]),
    ("layers-float", hf(num_hidden_layers=32.5), ["num_hidden_layers", "32.5"]),
    ("layers-bool", hf(num_hidden_layers=True), ["num_hidden_layers", "True"]),
    ("gpt2-missing-n-head", gpt2(n_head=..., n_positions=...), ["n_head"]),
    ("neox-missing-vocab", {"model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 64,
                            "intermediate_size": 256, "num_attention_heads": 4}, ["vocab_size"]),
    # what a dense bf16 full-attention model cannot express is refused, never planned as a different model
    ("quantized", hf(quantization_config={"quant_method": "gptq", "bits": 4}), ["quantization_config", "quantized"]),
    ("experts-on-llama", hf(num_local_experts=8), ["num_local_experts", "mixture-of-experts"]),
    ("qwen2-moe-fields", hf(model_type="qwen2", num_experts=60, moe_intermediate_size=1408), ["num_experts"]),
    ("not-a-real-type", hf(model_type="mixtral_dense"), ["mixtral_dense", "not supported"]),
    ("tie-as-string", hf(tie_word_embeddings="false"), ["tie_word_embeddings", "true or false", "'false'"]),
    ("bias-as-string", hf(attention_bias="false"), ["attention_bias", "true or false"]),
]


@pytest.mark.parametrize("cfg, needles", [pytest.param(c, k, id=i) for i, c, k in HF_CASES])
def test_bad_hf_config(capsys, tmp_path, cfg, needles):
    path = write(tmp_path / "m" / "config.json", json.dumps(cfg))
    line = bad(capsys, "--model", path, "--gpus", "8")
    assert_mentions(line, "config.json", *needles)
    # The directory holding config.json is accepted as --model too, with the same verdict.
    assert bad(capsys, "--model", path.parent, "--gpus", "8") == line


@pytest.mark.parametrize("cfg, field", [
    pytest.param(hf(max_position_embeddings="1e3"), "max_position_embeddings", id="llama-positions-string"),
    pytest.param(hf(max_position_embeddings=[4096]), "max_position_embeddings", id="llama-positions-list"),
    pytest.param(hf(max_position_embeddings=float("nan")), "max_position_embeddings", id="llama-positions-nan"),
    pytest.param(hf(max_position_embeddings=float("inf")), "max_position_embeddings", id="llama-positions-inf"),
    pytest.param(gpt2(n_positions="x"), "n_positions", id="gpt2-positions-string"),
])
def test_hf_non_integer_position_count_is_bad_input(capsys, tmp_path, cfg, field):
    path = write(tmp_path / "config.json", json.dumps(cfg))
    assert_mentions(bad(capsys, "--model", path, "--gpus", "8"), field)


@pytest.mark.parametrize("text, needles", [
    pytest.param("[1, 2, 3]", ["mapping", "list"], id="json-list"),
    pytest.param("{\"model_type\": \"llama\",", ["not valid JSON"], id="truncated-json"),
    pytest.param("", ["empty"], id="empty-json"),
    pytest.param("null", ["mapping", "NoneType"], id="json-null"),
])
def test_bad_hf_json_document(capsys, tmp_path, text, needles):
    path = write(tmp_path / "config.json", text)
    line = bad(capsys, "--model", path, "--gpus", "8")
    assert_mentions(line, "--model", *needles)


def test_valid_hf_config_still_plans(capsys, tmp_path):
    path = write(tmp_path / "my-llama" / "config.json", json.dumps(hf()))
    code, out, err = run(capsys, "--model", path.parent, "--gpus", "8", "--format", "json", "--top", "1")
    assert code == 0, err
    assert json.loads(out)["model"]["name"] == "my-llama"
