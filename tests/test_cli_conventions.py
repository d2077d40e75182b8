"""What the CLI prints around its numbers: the MFU convention's halved figure, --version and an 80-column help,
and the budget's token count."""

import json
import re

from typer.testing import CliRunner

import planner
from planner.cli import app

runner = CliRunner()


def test_the_ranked_footer_gives_the_halved_mfu_where_it_moves_a_point():
    """PaLM's MFU counts causal attention in full; FlashAttention computes half of it. The factor is the job's (model
    FLOPs counted at half over counted in full: 8B at 128K tokens, x0.59), and #1's MFU times it is printed; where
    it moves #1 less than a point (8B at 512 tokens), nothing is added."""
    from planner.cost.flops import model_flops_per_step
    m = planner.load_model("8b")
    long = ["--model", "8b", "--gpus", "64", "--seq-len", "131072", "--global-batch", "64", "--format", "json"]
    doc = json.loads(runner.invoke(app, long).stdout)
    best = doc["configs"][0]["mfu"]
    share = model_flops_per_step(m, 131072, 64, True) / model_flops_per_step(m, 131072, 64, False)
    assert round(share, 2) == 0.59 and doc["conventions"]["mfu_causal_half_share"] == round(share, 4)
    # a runtime that halves causal attention already: the factor is 1, not applied twice
    from planner.report import result_document
    from planner.specs.strategy import Runtime
    halved = planner.run_search("8b", 64, seq_len=131072, global_batch=64, find_min_gpus=False,
                                runtime=Runtime(causal_flops_halved=True))
    halved_doc = result_document(halved, 1)["conventions"]
    assert halved_doc["mfu_causal_half_share"] == 1.0 and "attention halved for causality" in halved_doc["mfu"]
    assert "attention not halved for causality" in doc["conventions"]["mfu"]
    text = runner.invoke(app, long[:-2]).stdout
    assert f"every MFU is x{share:.2f} (#1: {best * share:.1%})" in text.replace("\n", " ")
    short = runner.invoke(app, ["--model", "8b", "--gpus", "8", "--seq-len", "512", "--global-batch", "64"]).stdout
    assert "not halved" in short and "Counting causal attention at half" not in short


def test_version_and_an_80_column_help_that_names_every_flag_whole():
    """`plan --version` prints the installed version (before any other check); help at 80 columns wraps the
    descriptions at spaces and spells every flag of every command in full (rich's table cut them to
    '--recompute-laye…'; click's wrapper broke them after a hyphen)."""
    import typer
    from importlib.metadata import version
    out = runner.invoke(app, ["--gpus", "x", "--version"])
    assert out.exit_code == 0 and out.stdout.strip() == f"planner {version('planner')}"
    group = typer.main.get_command(app)
    for name, command in [(None, group), *group.commands.items()]:
        text = runner.invoke(app, ([name] if name else []) + ["--help"], terminal_width=80).stdout
        assert "…" not in text and max(map(len, text.splitlines())) <= 80, name
        # descriptions wrap at spaces: only a word longer than the 46-column description is cut (was: any word
        # after a hyphen, '--nic-gbit-' / 'per-s')
        for head, tail in re.findall(r"(\S*\w-)\n *(\S+)", text):
            assert len(head + tail) > 46, (name, head + tail)
        assert "\u2011" not in text
        # each flag says what it takes (--gpus N, not typer's <str>: the flags are read as text)
        assert not [line for line in text.splitlines() if line.lstrip().startswith("-") and "<str>" in line]
        for param in command.params:
            for flag in param.opts + param.secondary_opts:
                assert flag in text, (name, flag)


def test_train_tokens_is_a_count_and_a_negative_budget_is_named_as_such(capsys):
    """--tokens 15T is 15,000,000,000,000 tokens, an integer in JSON (not 1.5e13); '-5T' is refused as not
    positive (it is a number, so 'expected a number' would not say what is wrong)."""
    doc = json.loads(runner.invoke(app, ["--model", "8b", "--gpus", "8", "--tokens", "15T", "--format",
                                         "json"]).stdout)
    assert {type(c["train_tokens"]) for c in doc["configs"]} == {int}
    assert doc["configs"][0]["train_tokens"] == 15 * 10**12
    out = runner.invoke(app, ["--model", "8b", "--gpus", "8", "--tokens", "-5T"])
    assert out.exit_code == 2 and "--tokens: got '-5T', expected a positive number" in out.output


def test_nothing_fits_in_json_points_at_closest(capsys):
    """70B on 16 H100s fits nowhere: JSON has no configs, the nearest layouts under `closest` with how far over the
    limit each is, and the smallest count that fits; stderr names the key and the exit code is 1."""
    from planner.cli import main
    code = main(["--model", "70b", "--gpus", "16", "--format", "json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert code == 1 and doc["configs"] == [] and doc["min_gpus_that_fit"] == 24
    assert doc["closest"] and all(c["overflow_gib"] > 0 for c in doc["closest"])
    assert "closest layouts are listed under closest" in captured.err


def test_a_narrow_terminal_keeps_every_digit_of_the_table():
    """On an 80-column terminal rich squeezed the ranked table and cut its numbers ('4…', 'activa…'); the table
    keeps its width now (the terminal wraps its lines) and #1's step time is printed whole."""
    import os
    import subprocess
    import sys
    env = {**os.environ, "COLUMNS": "80", "FORCE_COLOR": "1"}          # a terminal, as rich sees it
    out = subprocess.run([sys.executable, "-m", "planner", "--model", "8b", "--gpus", "8", "--top", "3"],
                         capture_output=True, text=True, env=env, check=False).stdout
    assert "\x1b[" in out and "…" not in out
    best = json.loads(runner.invoke(app, ["--model", "8b", "--gpus", "8", "--top", "1", "--format",
                                          "json"]).stdout)["configs"][0]
    assert f"{best['step_time_s']:.2f}" in out
