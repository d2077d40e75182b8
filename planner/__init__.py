"""planner: a capacity planner for distributed LLM training. The public API; nothing is defined here."""

from planner.errors import PlannerError
from planner.evaluate import Evaluation, evaluate
from planner.search import Pins, SearchResult, run_search, search
from planner.specs.hardware import HardwareSpec, list_hardware, load_hardware
from planner.specs.model import ModelSpec, list_models, load_model
from planner.specs.strategy import Job, Layout, Precision, Runtime

__all__ = [
    "Evaluation", "HardwareSpec", "Job", "Layout", "ModelSpec", "Pins", "PlannerError", "Precision", "Runtime",
    "SearchResult", "evaluate", "list_hardware", "list_models", "load_hardware", "load_model", "run_search", "search",
]
