"""planner: a capacity planner for distributed LLM training. The public API; nothing is defined here."""

from planner.candidates import Pins
from planner.errors import PlannerError
from planner.evaluate import Evaluation, evaluate
from planner.notebook import style
from planner.search import SearchResult, run_search, search
from planner.specs.hardware import HardwareSpec, list_hardware, load_hardware
from planner.specs.model import ModelSpec, list_models, load_model
from planner.specs.strategy import Job, Layout, Precision, Runtime
from planner.sweep import compare_hardware, sweep
from planner.runs_file import load_runs
from planner.validate import predict

__all__ = [
    "Evaluation", "HardwareSpec", "Job", "Layout", "ModelSpec", "Pins", "PlannerError", "Precision", "Runtime",
    "SearchResult", "compare_hardware", "evaluate", "list_hardware", "list_models", "load_hardware", "load_model",
    "load_runs", "predict", "run_search", "search", "style", "sweep",
]
