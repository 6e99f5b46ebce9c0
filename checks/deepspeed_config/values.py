"""Small helpers on ds_config values: dotted paths, "auto", pydantic's lax booleans, DeepSpeed's batch
integers, JSON display and "did you mean"."""

from __future__ import annotations

import difflib
import json
import math
from typing import Any, Iterator

MISSING = object()
BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
#: read by deepspeed/__init__.py ``initialize`` (mesh device), not by DeepSpeedConfig's getters
EXTRA_TOP_LEVEL = ("sequence_parallel_size", "data_parallel_size")


def auto_paths(config: Any, prefix: str = "") -> Iterator[str]:
    """Dotted paths of every value equal to "auto" in a ds_config (nested dicts and lists)."""
    if isinstance(config, dict):
        for key, value in config.items():
            yield from auto_paths(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(config, list):
        for i, value in enumerate(config):
            yield from auto_paths(value, f"{prefix}[{i}]")
    elif config == "auto":
        yield prefix


def is_auto(value: Any) -> bool:
    """Exactly the string "auto", as transformers (``config.get(key) == "auto"``) and DeepSpeedConfigModel
    (``v != "auto"``) compare: "AUTO" or " auto" is just a string to both."""
    return isinstance(value, str) and value == "auto"


def get_path(config: Any, path: str, default: Any = MISSING) -> Any:
    """``config["a"]["b"]`` for ``"a.b"``; ``default`` when a step is missing or not an object."""
    node = config
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def set_path(config: dict, path: str, value: Any) -> None:
    node = config
    parts = path.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def delete_path(config: dict, path: str) -> None:
    parts = path.split(".")
    node = get_path(config, ".".join(parts[:-1])) if len(parts) > 1 else config
    if isinstance(node, dict):
        node.pop(parts[-1], None)


def show(value: Any) -> str:
    """A value as JSON would write it (``true``, ``"auto"``, ``5e-05``)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def suggest(name: str, known: list[str]) -> str | None:
    """The closest known key to a misspelled one (difflib ratio >= 0.75), or None."""
    matches = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    if not matches:
        lowered = {k.lower().replace("-", "_"): k for k in known}
        return lowered.get(name.lower().replace("-", "_"))
    return matches[0]


_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}


def as_bool(value: Any) -> bool | None:
    """What pydantic's lax bool makes of ``value`` (None when it refuses it)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, float) and value in (0.0, 1.0):
        return bool(value)
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    return None


def positive_int(value: Any) -> int | None:
    """``value`` as DeepSpeed's batch math can use it: an int (or an integral float) above 0; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and value > 0:
        return int(value)
    return None


def is_number(value: Any) -> bool:
    """An int or a finite float, not a bool (ints are exact: no float conversion, which overflows)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
