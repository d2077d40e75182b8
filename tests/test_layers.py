"""The package's layers (README "How it works"): each module imports only its own layer and those below it, and the
cost functions do no I/O. Every import counts, the lazy ones inside functions too."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "planner"

# Lowest first. A module not listed here fails the test, so a new module must be given its place.
LAYERS = [
    {"errors", "checks", "output", "shared_fields", "specs._files"},                  # plumbing, no planner concepts
    {"specs", "specs.hf_config", "specs.model", "specs.hardware_file", "specs.hardware",
     "specs.strategy"},                                                                # validated, immutable inputs
    {"cost", "cost.params", "cost.pipeline", "cost.flops", "cost.memory", "cost.compute", "cost.comm", "cost.layer",
     "cost.placement", "cost.step", "cost.budget"},                                 # pure closed-form functions
    {"candidates", "constraints", "explain", "notebook", "search", "evaluate", "sweep", "whatif", "shared_runs",
     "runs_file", "validate"},
    {"report", "validation_report", "export", "export.common", "export.megatron", "export.torchtitan",
     "export.deepspeed", "plot"},                                                       # what a user reads
    {"flags", "options", "cli", "__main__", ""},                                                  # the edge ("" = planner/__init__)
]
LEVEL = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The planner modules a file imports (`from planner import report` names the submodule report)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "planner"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "planner":
            if node.module == "planner":
                found |= {f"planner.{a.name}" for a in node.names if f"{a.name}" in LEVEL}
            else:
                found.add(node.module)
    return {name.removeprefix("planner").removeprefix(".") for name in found}


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_import_points_down_or_across(path):
    name = _module_name(path)
    assert name in LEVEL, f"{name}: give the new module a layer in tests/test_layers.py"
    upward = {dep for dep in _imports(path) if LEVEL.get(dep, len(LAYERS)) > LEVEL[name]}
    assert not upward, f"{name} (layer {LEVEL[name]}) imports from a higher layer: {sorted(upward)}"


@pytest.mark.parametrize("path", sorted((PACKAGE / "cost").glob("*.py")), ids=lambda p: p.name)
def test_cost_functions_do_no_io(path):
    tree = ast.parse(path.read_text())
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not modules & {"os", "sys", "pathlib", "io", "yaml", "json", "rich", "typer", "pandas", "shutil"}
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not calls & {"open", "print", "input"}


def test_the_checker_sees_an_upward_import(tmp_path):
    """The test above can fail: a cost module importing the search is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from planner.search import run_search\n    from planner import report\n")
    assert _imports(bad) == {"search", "report"}
    assert max(LEVEL[d] for d in _imports(bad)) > LEVEL["cost.step"]
