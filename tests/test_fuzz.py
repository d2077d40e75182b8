"""Fuzz the CLI in-process: random and mutated argv, YAML documents and HuggingFace config.json dicts.

Whatever comes in, main(argv) must return 0, 1 or 2 without a traceback (no exception may escape it); a 2 is one
"error: ..." line on stderr with nothing on stdout; a JSON answer never carries a non-finite or non-positive memory
or step time (a wrong answer printed as if right).

Seeded (random.Random) and reproducible. The default run is 1,000 cases, about a minute on a 2-core host (most
of it real searches), so that CI stays within its 10 minutes; set PLANNER_FUZZ_CASES (e.g. 20000) for a longer run
and PLANNER_FUZZ_SEED for another seed (each session runs a few thousand more under new seeds).
GPU counts stay <= 4096 except a few huge/odd values that are rejected or answered quickly; inputs a real shell
cannot produce (NUL bytes) are left out, and so are cases test_bad_flags.py covers one by one (400-digit numbers,
file names over NAME_MAX, sweep ranges of 10^12 points).
"""

from __future__ import annotations

import importlib
import json
import math
import os
import random
from pathlib import Path

import pytest
import yaml
from fuzz_inputs import (
    H100_DOC,
    HF_DOC,
    LAYOUT_PINS,
    MODEL_DOC,
    mutate_doc,
    mutate_yaml_text,
    random_argv,
    random_hf_config,
    yaml_dump,
)

from planner.cli import main

TOTAL = int(os.environ.get("PLANNER_FUZZ_CASES", "1000"))
SEED = int(os.environ.get("PLANNER_FUZZ_SEED", "20240607"))
N_ARGV, N_YAML = int(TOTAL * 0.5), int(TOTAL * 0.3)
N_HF = TOTAL - N_ARGV - N_YAML


# --- running one case ------------------------------------------------------------------------------------------------

def _finite_positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _check_json_answer(text: str, what: str) -> None:
    """A JSON answer on stdout: every layout (search, pinned layout, sweep or comparison row that found one) has a
    finite positive memory, step time and throughput, and multiplies to its GPU count."""
    doc = json.loads(text)
    configs = []
    if isinstance(doc, dict) and "configs" in doc:
        configs = list(doc["configs"]) + list(doc.get("closest") or [])
        for c in configs:
            assert c["tp"] * c["cp"] * c["pp"] * c["dp"] == doc["gpus"], f"{what}: layout does not multiply to the GPU count"
    elif isinstance(doc, dict) and "tp" in doc:
        configs = [doc]
    elif isinstance(doc, dict) and "rows" in doc:              # sweep / hardware comparison: best layout per row
        configs = [r for r in doc["rows"] if r.get("status") == "ok"]
        for c in configs:
            assert c["tp"] * c["cp"] * c["pp"] * c["dp"] == c["gpus"], f"{what}: layout does not multiply to the GPU count"
    for c in configs:
        for key in ("memory_gib", "step_time_s", "tokens_per_s"):
            assert _finite_positive(c.get(key)), f"{what}: {key} = {c.get(key)!r} in {json.dumps(c)[:400]}"


def check(capsys, argv: list[str], what: str) -> int:
    """Run main(argv) and check the contract; `what` (argv or document) goes into every failure message."""
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:            # allowed by the contract, but its code must still be one of ours
        code = exc.code
    except BaseException as exc:         # noqa: BLE001 - anything else escaping main() is the failure
        cap = capsys.readouterr()
        pytest.fail(f"{type(exc).__name__}: {exc!r} escaped main()\n{what}\nstderr: {cap.err[-500:]!r}",
                    pytrace=False)
    cap = capsys.readouterr()
    ctx = f"\n{what}\nexit {code}\nstderr: {cap.err[-800:]!r}\nstdout: {cap.out[:300]!r}"
    assert code in (0, 1, 2), "unexpected exit code" + ctx
    assert "Traceback" not in cap.err and "Traceback" not in cap.out, "traceback printed" + ctx
    if code == 2:
        assert cap.err.startswith("error: ") and cap.err.count("\n") == 1, "bad input must be one error line" + ctx
        assert cap.out == "", "bad input must print nothing on stdout" + ctx
    elif "--format" in argv and "json" in argv and cap.out.strip().startswith("{"):
        try:
            _check_json_answer(cap.out, what)
        except (ValueError, KeyError, TypeError) as exc:
            pytest.fail(f"unreadable JSON answer ({exc!r})" + ctx, pytrace=False)
    return code


# --- the three generators, run through the contract -------------------------------------------------------------------

@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A scratch cwd with input files; the minimum-GPU scan of a failed search is capped at 512 GPUs to keep the
    run short (the scan's code still runs on every such case, over a smaller range)."""
    search_module = importlib.import_module("planner.search")
    original = search_module.smallest_fitting_gpus

    def capped(*args, max_gpus=2**20, **kwargs):
        return original(*args, max_gpus=min(max_gpus, 512), **kwargs)

    monkeypatch.setattr(search_module, "smallest_fitting_gpus", capped)
    return _scratch(tmp_path, monkeypatch)


def _scratch(tmp_path, monkeypatch):
    """cwd five levels deep inside tmp_path (so any '../..' a generator can build stays inside it) with inputs."""
    work = tmp_path / "a" / "b" / "c" / "d" / "e"
    (work / "sub").mkdir(parents=True)
    monkeypatch.chdir(work)
    files = {
        "model": "model.yaml", "hardware": "hw.yaml", "runs": "runs.yaml", "hf": "hf", "hf_json": "hf/config.json",
    }
    Path("model.yaml").write_text(yaml.safe_dump(MODEL_DOC))
    Path("hw.yaml").write_text(yaml.safe_dump(H100_DOC))
    Path("runs.yaml").write_text("runs:\n  - name: x\n    model: 8b\n")
    Path("hf").mkdir()
    Path("hf/config.json").write_text(json.dumps(HF_DOC))
    return work, files


def tmp_path_of(work: Path) -> Path:
    return work.parents[4]


def test_fuzz_argv(capsys, scratch):
    rng = random.Random(SEED)
    work, files = scratch
    budget = {"validate": 1}
    codes = {0: 0, 1: 0, 2: 0}
    for n in range(N_ARGV):
        argv = random_argv(rng, files, budget)
        codes[check(capsys, argv, f"argv case {n} (seed {SEED}): {argv!r}")] += 1
    # the generator is not degenerate: it reaches successes, nothing-fits and bad input
    assert codes[0] > N_ARGV // 20 and codes[2] > N_ARGV // 5 and (N_ARGV < 400 or codes[1] > 0), codes
    # every file written stays in the scratch directory
    assert not (tmp_path_of(work) / "out.json").exists() and not (tmp_path_of(work).parent / "out.json").exists()


def test_fuzz_yaml_documents(capsys, scratch):
    rng = random.Random(SEED + 1)
    codes = {0: 0, 1: 0, 2: 0}
    for n in range(N_YAML):
        kind = "hardware" if rng.random() < 0.5 else "model"
        base = H100_DOC if kind == "hardware" else MODEL_DOC
        doc = mutate_doc(rng, base) if rng.random() < 0.9 else base
        text = mutate_yaml_text(rng, yaml_dump(doc)) if rng.random() < 0.35 else yaml_dump(doc)
        path = Path(f"doc{n}.{rng.choice(['yaml', 'yml'])}")
        path.write_text(text, encoding="utf-8")
        # Mostly a pinned layout (evaluate: no minimum-GPU scan when nothing fits), sometimes the full search.
        pins = rng.choice(LAYOUT_PINS) if rng.random() < 0.75 else []
        argv = (["--model", str(path)] if kind == "model" else ["--model", "8b", "--hardware", str(path)])
        argv += ["--gpus", "8", "--format", rng.choice(["json"] * 8 + ["csv", "table"]), "--top", "2"] + pins
        codes[check(capsys, argv, f"yaml case {n} (seed {SEED + 1}), argv {argv!r}, document:\n{text[:3000]}")] += 1
    assert codes[2] > 0 and (N_YAML < 200 or codes[0] > 0), codes


def test_fuzz_hf_configs(capsys, scratch):
    rng = random.Random(SEED + 2)
    codes = {0: 0, 1: 0, 2: 0}
    for n in range(N_HF):
        cfg = random_hf_config(rng)
        try:
            text = json.dumps(cfg)                       # NaN/Infinity are written as JSON's non-standard tokens
        except (TypeError, ValueError):
            text = str(cfg)
        if rng.random() < 0.1:
            text = mutate_yaml_text(rng, text)
        folder = Path(f"m{n % 5}")
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(text, encoding="utf-8")
        target = str(folder) if rng.random() < 0.5 else str(folder / "config.json")
        pins = rng.choice(LAYOUT_PINS) if rng.random() < 0.75 else []
        argv = ["--model", target, "--gpus", "8", "--format", rng.choice(["json"] * 8 + ["csv", "table"]), "--top", "2"]
        codes[check(capsys, argv + pins, f"hf case {n} (seed {SEED + 2}), argv {argv + pins!r}, config.json:\n"
                                         f"{text[:3000]}")] += 1
    assert codes[2] > 0 and (N_HF < 200 or codes[0] + codes[1] > 0), codes
