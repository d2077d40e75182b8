"""The fuzz suite's inputs: vocabularies of real flags and values, and generators of random or mutated argv,
YAML documents and HuggingFace config.json dicts (tests/test_fuzz.py runs them through the CLI contract)."""

from __future__ import annotations

import copy
import random
import string

import yaml
from helpers import gpt2_small_core, llama_31_8b_core

from planner.specs.hardware import hardware_dir
from planner.specs.model import PRESETS_DIR, list_models

PRESET_NAMES = sorted({n for mf in list_models() for n in (mf.name, *mf.aliases)})
SMALL_PRESETS = ["8b", "7b", "13b", "gpt-1.7b", "gpt-3.6b", "gpt-7.5b", "22b", "llama-3.1-8b"]
HARDWARE_NAMES = ["h100-sxm", "h100", "a100-40gb", "a100", "a100-80gb", "h200-sxm", "b200", "gb200", "mi300x", "v100-sxm",
                  "dgx-h100", "H100"]
H100_DOC = yaml.safe_load((hardware_dir() / "h100-sxm.yaml").read_text())
MODEL_DOC = yaml.safe_load((PRESETS_DIR / "llama-3.1-8b.yaml").read_text())
HF_DOC = dict(llama_31_8b_core(), tie_word_embeddings=False, head_dim=128)
GPT2_DOC = gpt2_small_core()
NEOX_DOC = {"model_type": "gpt_neox", "num_hidden_layers": 16, "hidden_size": 2048, "intermediate_size": 8192,
            "num_attention_heads": 16, "vocab_size": 50304, "max_position_embeddings": 2048}

# No lone surrogates ('\udcff', what an undecodable argv byte becomes): pytest's capture encodes strictly and would
# fail where the real streams do not (they use backslashreplace); test_bad_flags.py covers them in a subprocess.
UNICODE = ["٨", "８", "∞", "½", "ǅ", "—", "é", "🚀", "\u200b", "\u202e", "ı", "İ", "ß"]
# GPU counts beyond 4096 that are rejected or answered quickly (a count in (4096, 2^20] with no valid layout would
# trigger the slow minimum-GPU scan pinned by test_bad_flags.py::test_no_valid_layout_..._answers_promptly).
HUGE_GPUS = ["16777216", "16777217", "1000000000", "99999999999999999999", "2097152", "1048573", "-1", "0"]


# --- (a) argv from a vocabulary of real flags ------------------------------------------------------------------------

def rand_text(rng: random.Random) -> str:
    alphabet = string.ascii_letters + string.digits + "-_.,:/ " + "".join(UNICODE)
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))


def mutate_text(rng: random.Random, s: str) -> str:
    if not s:
        return rng.choice(["", " ", "0", "-", rng.choice(UNICODE)])
    i = rng.randrange(len(s))
    op = rng.randrange(5)
    if op == 0:
        return s[:i] + s[i + 1:]                                     # delete
    if op == 1:
        return s[:i] + rng.choice(string.printable.strip() + "".join(UNICODE)) + s[i:]   # insert
    if op == 2:
        return s[:i] + s[i].swapcase() + s[i + 1:]
    if op == 3:
        return s + s[i:]                                             # duplicate a tail
    return s[:i]                                                     # truncate


def int_value(rng: random.Random, good: list[int]) -> str:
    r = rng.random()
    if r < 0.7:
        return str(rng.choice(good))
    return rng.choice(["0", "-1", "-8", "2.5", "1e3", "nan", "inf", "-inf", "", " ", "abc", "0x10", "1_000", "-0",
                       "+4", " 8 ", "8.0", "3", "5", "7", "1000000000", "18446744073709551617",
                       "99999999999999999999", "１６", "٨", "8b", "--gpus", "None", "True"])


def count_value(rng: random.Random) -> str:
    """--tokens / --global-batch-tokens style counts."""
    return rng.choice(["15T", "1T", "16M", "16Mi", "4M", "1M", "2048", "1.5B", "0", "-5", "lots", "1e3", "1.5",
                       "16m", "8ki", "0.5M", "99999999999999999999999T", "3", "1k", "", "M", "1 T", "١٥T", "15t",
                       "10000000000000000000000000000000000000"])      # < 10^308: must not overflow


def float_value(rng: random.Random, good: list[float]) -> str:
    if rng.random() < 0.6:
        return str(rng.choice(good))
    return rng.choice(["-1", "0", "nan", "inf", "-inf", "1e308", "1e-308", "abc", "", "9", "3.0000001", "1,5",
                       "0x1p3", "1e400"])


def model_value(rng: random.Random, files: dict) -> str:
    r = rng.random()
    if r < 0.55:
        return rng.choice(SMALL_PRESETS) if rng.random() < 0.7 else rng.choice(PRESET_NAMES)
    if r < 0.7:
        return mutate_text(rng, rng.choice(PRESET_NAMES))
    if r < 0.85:
        return rng.choice(list(files.values()))
    return rng.choice(["", " ", ".", "..", "../..", "../../etc/passwd", "405b/../..", "405b/", "nope.yaml",
                       "config.json", "x.json", "sub/", "./8b", rand_text(rng), rng.choice(UNICODE)])


def hardware_value(rng: random.Random, files: dict) -> str:
    r = rng.random()
    if r < 0.5:
        return rng.choice(HARDWARE_NAMES)
    if r < 0.65:
        return mutate_text(rng, rng.choice(HARDWARE_NAMES))
    if r < 0.8:
        return ",".join(rng.choice(HARDWARE_NAMES + ["nope", "", " "]) for _ in range(rng.randint(1, 4)))
    if r < 0.9:
        return rng.choice([files["hardware"], files["model"], "nope.yaml", "sub/hw.yaml"])
    return rng.choice(["", ",", ",,", " ", "../../etc/passwd", rand_text(rng)])


def gpus_value(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.5:
        return str(rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]))
    if r < 0.65:
        return str(8 * rng.randint(1, 512))
    if r < 0.8:
        return str(rng.randint(1, 256))
    if r < 0.85:
        return str(rng.randint(1, 4096))
    if r < 0.93:
        return rng.choice(HUGE_GPUS)
    return int_value(rng, [8, 16, 64])


def sweep_gpus_value(rng: random.Random) -> str:
    a = rng.choice([1, 2, 8, 16, 64, 128, 512])
    b = a * rng.choice([1, 2, 4, 8])
    return rng.choice([f"{a}..{b}", f"{a},{b}", str(a), f"{b}..{a}", f"{a}..{b}:{a}", f"{a}..{b}:0", "0", "",
                       ",", "..", f"{a}..", f"..{b}", "1..4096:1", "1..100:1", f"{a}..{b}:{rng.choice(UNICODE)}",
                       "64..512:64", "8,16,x", gpus_value(rng), f"{a};{b}",
                       "1..99999999" if rng.random() < 0.1 else "1..16"])     # 27 doublings, the last too big


FLAGS = {
    "--tp": lambda rng, f: int_value(rng, [1, 2, 4, 8, 16]),
    "--cp": lambda rng, f: int_value(rng, [1, 2, 3, 4, 16]),
    "--cp-comm": lambda rng, f: rng.choice(["ring", "allgather", "RING", "p2p", ""]),
    "--flash-attention-gen": lambda rng, f: rng.choice(["1", "2", "3", "0", "two", "", "1.0"]),
    "--pp": lambda rng, f: int_value(rng, [1, 2, 4, 8, 16, 32]),
    "--dp": lambda rng, f: int_value(rng, [1, 2, 4, 8, 16, 64]),
    "--micro-batch": lambda rng, f: int_value(rng, [1, 2, 4]),
    "--vpp": lambda rng, f: int_value(rng, [1, 2, 4]),
    "--recompute-layers": lambda rng, f: int_value(rng, [0, 1, 2, 4]),
    "--recompute": lambda rng, f: rng.choice(["none", "selective", "full", "FULL", "sometimes", "", "1", "2"]),
    "--zero": lambda rng, f: rng.choice(["0", "1", "2", "3", "zero-3", "zero3", "ZeRO-1", "7", "-1", "1.0", "", "x"]),
    "--dp-replicate": lambda rng, f: int_value(rng, [1, 2, 3, 4, 8, 64]),
    "--seq-len": lambda rng, f: int_value(rng, [256, 1024, 2048, 4096, 8192]),
    "--global-batch": lambda rng, f: int_value(rng, [1, 8, 64, 256, 512, 2048]),
    "--global-batch-tokens": lambda rng, f: count_value(rng),
    "--top": lambda rng, f: int_value(rng, [1, 3, 10]),
    "--format": lambda rng, f: rng.choice(["table", "json", "csv", "json", "xml", "JSON", ""]),
    "--tokens": lambda rng, f: count_value(rng),
    "--headroom-gib": lambda rng, f: float_value(rng, [0, 1, 3, 3.5, 10]),
    "--price-per-gpu-hour": lambda rng, f: float_value(rng, [1, 2.5, 3.99]),
    "--pue": lambda rng, f: float_value(rng, [1.0, 1.1, 1.2, 1.5, 3.0]),
    "--sort": lambda rng, f: rng.choice(["throughput", "time", "cost", "speed", ""]),
    "--hardware": lambda rng, f: hardware_value(rng, f),
    "--nics-per-node": lambda rng, f: int_value(rng, [1, 2, 4, 8, 16]),
    "--nic-gbit-per-s": lambda rng, f: float_value(rng, [0.1, 25, 100, 200, 400, 800, 1e6]),
    "--output": lambda rng, f: rng.choice(["out.json", "out.csv", "out.txt", "nodir/out.json", "sub", "",
                                           "sub/o.csv", ".json", "-"]),
}
SWITCHES = ["--sequence-parallel", "--no-sequence-parallel", "--allow-cross-node-tp", "--tp-comm-overlap",
            "--no-flash-attention", "--flash-attention", "--no-tp-comm-overlap", "--eager-elementwise",
            "--pp-scatter-gather", "--no-microbatch-groups", "--microbatch-groups",
            "--no-grad-accumulation-fusion", "--grad-accumulation-fusion", "--zero1-all-reduce", "--fp32-params"]
SWEEP_FLAGS = ["--hardware", "--seq-len", "--global-batch", "--global-batch-tokens", "--tokens",
               "--price-per-gpu-hour", "--pue", "--headroom-gib", "--format", "--output", "--nics-per-node",
               "--nic-gbit-per-s", "--tp", "--cp", "--pp", "--micro-batch", "--vpp", "--recompute",
               "--recompute-layers", "--zero", "--dp-replicate", "--cp-comm", "--flash-attention-gen"]


def random_argv(rng: random.Random, files: dict, budget: dict) -> list[str]:
    r = rng.random()
    if r < 0.72:
        argv = []
        if rng.random() < 0.93:
            argv += [rng.choice(["--model", "-m"]), model_value(rng, files)]
        if rng.random() < 0.93:
            argv += [rng.choice(["--gpus", "-g"]), gpus_value(rng)]
        for _ in range(rng.choice([0, 0, 1, 1, 2, 2, 3, 5])):
            if rng.random() < 0.25:
                argv.append(rng.choice(SWITCHES))
            else:
                flag = rng.choice(list(FLAGS))
                argv += [flag, FLAGS[flag](rng, files)]
        if rng.random() < 0.3 and "--format" not in argv and "--output" not in argv:
            argv += ["--format", "json"]
    elif r < 0.87:
        argv = ["sweep", "--model", model_value(rng, files) if rng.random() < 0.3 else rng.choice(SMALL_PRESETS),
                "--gpus", sweep_gpus_value(rng)]
        for _ in range(rng.randint(0, 3)):
            flag = rng.choice(SWEEP_FLAGS)
            argv += [flag, FLAGS[flag](rng, files)]
        if rng.random() < 0.3:
            argv.append(rng.choice(SWITCHES))
        if rng.random() < 0.2:
            argv.remove("--model") if rng.random() < 0.5 else argv.remove("--gpus")
    elif r < 0.91:
        argv = [rng.choice(["models", "hardware"])] + ([rng.choice(["--format", "x", "-h"])] if rng.random() < 0.3
                                                        else [])
    elif r < 0.97:
        runs = rng.choice([files["model"], files["hardware"], files["runs"], "missing.yaml", "sub", "", ".", None])
        argv = ["validate"] + ([runs] if runs is not None else [])
        if rng.random() < 0.4:
            argv += ["--format", rng.choice(["json", "csv", "table", "xml"])]
        if rng.random() < 0.2:
            argv += ["--output", rng.choice(["v.json", "v.csv", "nodir/v.json"])]
        if rng.random() < 0.2:
            argv += ["--hardware", rng.choice(["h100", "A100-80GB", "v100-sxm", "tpu", "", "b200,h100"])]
        if rng.random() < 0.2:
            argv += ["--group", rng.choice(["korthikanti", "MegaScale", "nope", "", " ", "(A100"])]
    else:
        argv = [rng.choice(["--help", "-h", "sweep", "validate", "nope", "--model", "", "--", "-"])]
        if rng.random() < 0.5:
            argv.append(rng.choice(["--help", "--gpus", "8", "--bogus", "x"]))
    # token-level mutations: drop, duplicate, swap, mutate one token, or append a dangling flag
    for _ in range(rng.choice([0, 0, 0, 1, 1, 2])):
        if not argv:
            break
        i = rng.randrange(len(argv))
        op = rng.randrange(5)
        if op == 0:
            del argv[i]
        elif op == 1:
            argv.insert(i, argv[i])
        elif op == 2:
            j = rng.randrange(len(argv))
            argv[i], argv[j] = argv[j], argv[i]
        elif op == 3:
            argv[i] = mutate_text(rng, argv[i])
        else:
            argv.append(rng.choice(list(FLAGS) + SWITCHES + ["--gpus", "--model", "--bogus"]))
    # A real command line cannot carry NUL bytes. Paths stay relative to the scratch cwd (no '/...', no '~...'),
    # since a shuffled token can become the value of --output.
    argv = [a.replace("\x00", "") for a in argv if not a.startswith(("/", "~"))]
    # A bare `validate` re-predicts the bundled runs (~0.5 s), so only budget["validate"] of them run.
    if argv and argv[0] == "validate" and (len(argv) == 1 or argv[1].startswith("-")):
        if budget["validate"] > 0:
            budget["validate"] -= 1
        else:
            argv.insert(1, "missing.yaml")
    return argv


# --- (b) YAML documents: mutated hardware and model files -------------------------------------------------------------

def random_scalar(rng: random.Random):
    return rng.choice([0, -1, 1, 2, 7, 0.5, -0.5, 1e308, float("nan"), float("inf"), 10**20, 2**63, "", "x",
                       "many", "1e3", "79.65", True, False, None, [], [1, 2], {}, {"a": 1}, rng.choice(UNICODE),
                       rng.randint(-10, 10**6), rng.uniform(-10, 1e4)])


def paths_of(doc, prefix=()):
    """Every (path, value) in a nested mapping."""
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.append((prefix + (k,), v))
            out.extend(paths_of(v, prefix + (k,)))
    return out


def mutate_doc(rng: random.Random, doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        entries = paths_of(doc)
        if not entries:
            break
        path, value = rng.choice(entries)
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        op = rng.randrange(7)
        if op == 0:
            del parent[key]                                          # delete a key
        elif op == 1:
            parent[key] = random_scalar(rng)                         # change the type / value
        elif op == 2 and isinstance(value, (int, float)) and not isinstance(value, bool):
            parent[key] = value * rng.choice([-1, 0, 0.5, 2, 1000, 1e9, 1e-9])   # scale a number
        elif op == 3:
            parent[mutate_text(rng, str(key))] = parent.pop(key)     # typo in the key
        elif op == 4:
            parent[rand_text(rng) or "extra"] = random_scalar(rng)   # unknown key
        elif op == 5 and isinstance(value, dict):
            parent[key] = rng.choice([[value], str(value), None])    # structure replaced
        else:
            parent[key] = [value] if rng.random() < 0.5 else str(value)
    return doc


def mutate_yaml_text(rng: random.Random, text: str) -> str:
    op = rng.randrange(6)
    if op == 0 or not text:
        return text
    i = rng.randrange(len(text))
    if op == 1:
        return text[:i]                                              # truncated
    if op == 2:
        return text[:i] + rng.choice(["\t", ": :", "[", "{", "- ", "&a", "*a", "!!binary", "%", "@", "\x07",
                                      "\ufeff", "'", '"', "\n  - ", "\r", "\\"]) + text[i:]   # garbage
    lines = text.splitlines(keepends=True)
    if op == 3 and len(lines) > 1:
        j = rng.randrange(len(lines))
        lines.insert(j, lines[rng.randrange(len(lines))])            # duplicated line (duplicate key)
        return "".join(lines)
    if op == 4 and len(lines) > 1:
        j, k = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[j], lines[k] = lines[k], lines[j]                      # swapped lines
        return "".join(lines)
    return text.replace(": ", ":", 1) if rng.random() < 0.5 else "  " + text      # bad separators / indentation


def yaml_dump(doc) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


LAYOUT_PINS = [["--tp", "1", "--pp", "1", "--dp", "8"], ["--tp", "8", "--pp", "1", "--dp", "1"],
               ["--tp", "2", "--pp", "2", "--dp", "2"], ["--tp", "4", "--pp", "2", "--dp", "1", "--recompute", "full"],
               ["--tp", "2", "--cp", "2", "--pp", "1", "--dp", "2"]]


# --- (c) HuggingFace config.json -------------------------------------------------------------------------------------

def random_hf_config(rng: random.Random):
    r = rng.random()
    if r < 0.05:
        return rng.choice([[], [HF_DOC], "llama", 3, None, True])                   # not a mapping
    base = copy.deepcopy(rng.choice([HF_DOC, HF_DOC, GPT2_DOC, NEOX_DOC]))
    if r < 0.15:
        return base                                                                 # a valid one
    base["model_type"] = rng.choice([base["model_type"]] * 6 + ["bert", "t5", "LLAMA", "mistral", "qwen2", "qwen3",
                                                                "gemma", "gemma2", "gemma3_text", "gemma3",
                                                                "mixtral_dense", "", None, 7, ["llama"]])
    for _ in range(rng.randint(1, 4)):
        key = rng.choice(list(base) + ["num_key_value_heads", "head_dim", "n_inner", "tie_word_embeddings",
                                       "attention_bias", "max_position_embeddings", "n_ctx", "unknown_field",
                                       "sliding_window", "use_sliding_window", "max_window_layers", "layer_types",
                                       "sliding_window_pattern", "mlp_bias", "final_logit_softcapping",
                                       "text_config"])
        op = rng.randrange(4)
        if op == 0:
            base.pop(key, None)
        elif op == 1:
            base[key] = random_scalar(rng)
        elif op == 2:
            base[key] = rng.choice([0, 1, 3, 5, 7, 48, 64, 100, 4000, 4095, 2**31, 10**12])
        else:
            base[key] = rng.randint(-4, 70_000)
    return base
