"""Reading input files: YAML with `safe_load` only, JSON, and pydantic errors turned into one clear line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from planner.errors import PlannerError


def read_mapping(path: Path, what: str) -> dict[str, Any]:
    """Read a YAML or JSON file that must hold a mapping; raise PlannerError naming the file otherwise."""
    if not path.exists():
        raise PlannerError(what, f"file not found: {path}")
    if path.is_dir():
        raise PlannerError(what, f"expected a file, got a directory: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlannerError(what, f"cannot read {path}: {exc}") from None
    if not text.strip():
        raise PlannerError(what, f"{path} is empty; expected a mapping of fields")
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        detail = " ".join(str(exc).split())
        raise PlannerError(what, f"{path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {detail}") from None
    if not isinstance(data, dict):
        raise PlannerError(what, f"{path} must hold a mapping of fields, got a {type(data).__name__}")
    return data


def validate(schema: type[BaseModel], data: dict[str, Any], where: str) -> BaseModel:
    """Validate `data` against a pydantic schema; the first problem becomes one PlannerError line."""
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        got = err.get("input")
        if err["type"] == "extra_forbidden":
            msg = "unknown field (typo?)"
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "value_error":           # a cross-field check: its message names the fields
            msg = str(err["msg"]).removeprefix("Value error, ")
        else:
            msg = f"{err['msg']}, got {got!r}"
        raise PlannerError(f"{where}: {loc}" if loc else where, msg) from None
