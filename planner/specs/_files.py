"""Reading input files: YAML with `safe_load` only, JSON, and pydantic errors turned into one clear line."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from planner.errors import PlannerError

# Input files are a few hundred KB at most (the bundled runs file is ~0.3 MB); anything larger is a wrong path
# (a device, a log, a data set), and pure-Python YAML parses ~1 MB/s. Read at most one byte more than the limit:
# stat sizes are 0 for /dev/zero and other character devices.
MAX_FILE_BYTES = 4 * 2**20


# Real input files nest a few levels (a runs file: list, run, model, field) and hold at most one value per two bytes;
# beyond these a file is hostile or broken: YAML aliases that expand without end, or brackets nested thousands deep.
MAX_DEPTH = 64
MAX_VALUES = MAX_FILE_BYTES


class _BadStructure(ValueError):
    pass


# Parses and composes only (no constructor runs on its nodes): the C parser, else the pure-Python one.
_COMPOSER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _children(node) -> list:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _check_yaml_nodes(text: str) -> None:
    """Before anything is constructed: a key given twice in one mapping (yaml.safe_load keeps the last one
    silently), an alias that contains itself, aliases that expand to more values than a file this size can hold
    ("billion laughs"), nesting deeper than MAX_DEPTH. Walks the node tree yaml.compose builds, which constructs no
    Python objects (the data itself is read with safe_load only), each node once: shared (aliased) nodes count their
    expanded size without being expanded. The tree comes from libyaml's parser when PyYAML has it (a few times
    faster; startup reads every preset)."""
    root = yaml.compose(text, Loader=_COMPOSER)
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    started: set[int] = set()
    stack = [(root, False)] if root is not None else []
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            kids = _children(node)
            size[key] = 1 + sum(size[id(c)] for c in kids)
            depth[key] = 1 + max((depth[id(c)] for c in kids), default=0)
            if size[key] > MAX_VALUES:
                raise _BadStructure(f"its aliases expand to more than {MAX_VALUES:,} values; expected plain data")
            if depth[key] > MAX_DEPTH:
                raise _BadStructure(f"it is nested more than {MAX_DEPTH} levels deep; expected plain data")
            continue
        if key in size:
            continue
        if key in started:                        # reached again inside itself
            raise _BadStructure(f"an alias contains itself (line {node.start_mark.line + 1}); expected plain data")
        started.add(key)
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                name = key_node.value if isinstance(key_node, yaml.ScalarNode) else id(key_node)
                if name in seen:
                    raise _BadStructure(f"{name!r} is given twice (line {key_node.start_mark.line + 1}); "
                                        "expected each field once")
                seen.add(name)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)


def _check_depth(data) -> None:
    """JSON has no aliases; only its nesting needs a bound (json.loads itself stops near Python's recursion limit)."""
    stack = [(data, 1)]
    while stack:
        value, level = stack.pop()
        if level > MAX_DEPTH:
            raise _BadStructure(f"it is nested more than {MAX_DEPTH} levels deep; expected plain data")
        if isinstance(value, dict):
            stack.extend((v, level + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, level + 1) for v in value)


def _unique_json_object(pairs):
    keys = [k for k, _ in pairs]
    repeated = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
    if repeated is not None:
        raise _BadStructure(f"{repeated!r} is given twice; expected each field once")
    return dict(pairs)


def read_mapping(path: Path, what: str) -> dict[str, Any]:
    """Read a YAML or JSON file that must hold a mapping; raise PlannerError naming the file otherwise."""
    try:
        exists, is_dir = path.exists(), path.is_dir()
    except (OSError, ValueError) as exc:          # e.g. a name longer than the file system allows
        raise PlannerError(what, f"cannot use {str(path)[:80]!r} as a file path: {exc.__class__.__name__}") from None
    if not exists:
        raise PlannerError(what, f"file not found: {path}")
    if is_dir:
        raise PlannerError(what, f"expected a file, got a directory: {path}")
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise PlannerError(what, f"{path} is larger than {MAX_FILE_BYTES // 2**20} MiB; expected a file of at "
                                     f"most {MAX_FILE_BYTES:,} bytes")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlannerError(what, f"cannot read {path}: {exc}") from None
    if not text.strip():
        raise PlannerError(what, f"{path} is empty; expected a mapping of fields")
    try:
        if path.suffix == ".json":
            data = json.loads(text, object_pairs_hook=_unique_json_object)
            _check_depth(data)
        else:
            _check_yaml_nodes(text)
            data = yaml.safe_load(text)
    except _BadStructure as exc:
        raise PlannerError(what, f"{path}: {exc}") from None
    except RecursionError:
        raise PlannerError(what, f"{path}: it is nested too deeply to read; expected plain data") from None
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
        errors = exc.errors()
        err = errors[0]
        # Only the first failing record counts (a list of 90 runs must not list 90 runs' problems).
        scope = err["loc"][:-1]
        same = [e for e in errors if e["loc"][:-1] == scope]
        missing = list(dict.fromkeys(e["loc"][-1] for e in same if e["type"] == "missing"))
        extra = [e for e in same if e["type"] == "extra_forbidden"]
        if missing and extra:                     # most likely a typo of a required field: name both
            import difflib

            typo = extra[0]
            close = difflib.get_close_matches(str(typo["loc"][-1]), [str(m) for m in missing], n=1, cutoff=0.5)
            loc = ".".join(str(p) for p in typo["loc"])
            hint = f"did you mean {close[0]!r}?" if close else f"required {', '.join(map(str, missing))} missing"
            raise PlannerError(f"{where}: {loc}", f"unknown field (typo?); {hint}") from None
        loc = ".".join(str(p) for p in err["loc"])
        got = err.get("input")
        if err["type"] == "extra_forbidden":
            msg = "unknown field (typo?)" + _close_field(schema, err["loc"])
        elif err["type"] == "missing" and len(missing) > 1:      # all of them at once, not one per attempt
            loc = ".".join(str(p) for p in scope)
            msg = f"required fields are missing: {', '.join(map(str, missing))}"
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "value_error":           # a cross-field check: its message names the fields
            msg = str(err["msg"]).removeprefix("Value error, ")
        elif isinstance(got, float) and not math.isfinite(got):
            msg = f"got {got!r}, expected a finite number"
        elif isinstance(got, bool) and not err["type"].startswith("bool"):
            msg = f"{err['msg']}, got {got!r} (YAML reads yes/no, on/off and true/false as booleans)"
        else:
            shown = repr(got)
            if len(shown) > 80:                      # a whole record given where a value belongs: its type is enough
                shown = f"a {type(got).__name__} ({shown[:60]}...)"
            msg = f"{err['msg']}, got {shown}"
            if err["type"].startswith("float") and isinstance(got, str) and _reads_as_number(got):
                unquoted = yaml.safe_load(got)
                if isinstance(unquoted, (int, float)) and not isinstance(unquoted, bool):   # so it was quoted
                    msg += f" (text: write it without quotes, {got.strip()})"
                else:                    # YAML 1.1 takes 1e9 (no dot, no sign) for text; a float field reads 1.0e+09
                    msg += (f" (text in YAML: write {got!r} as a plain number, e.g. {float(got):.1e} with a dot and "
                            "a sign)")
        raise PlannerError(f"{where}: {loc}" if loc else where, msg) from None


def _close_field(schema: type[BaseModel], loc: tuple) -> str:
    """'; did you mean ...?' naming the field of the record at `loc` closest to the unknown key, or ''."""
    import difflib
    import typing

    model = schema
    for part in loc[:-1]:                         # walk the nested records; list indices stay on the item type
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return ""
        kinds = [field.annotation, *typing.get_args(field.annotation)]
        kinds += [a for k in kinds for a in typing.get_args(k)]
        model = next((k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)), None)
        if model is None:
            return ""
    names = list(getattr(model, "model_fields", {}))
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _reads_as_number(text: str) -> bool:
    """A finite number written in ASCII (so not 'nan', 'inf' or full-width digits)."""
    try:
        value = float(text)
    except ValueError:
        return False
    return text.strip().isascii() and math.isfinite(value)
