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
    """Dotted paths of every value equal to "auto" in a ds_config (nested dicts and lists), in document order.

    One walk that builds a path only for an "auto" it finds (a 1 MiB file of nested arrays has 500,000 values and
    a handful of "auto")."""
    found: list[str] = []

    def path_of(crumb: tuple) -> str:
        steps = []
        while crumb is not None:
            crumb, step = crumb
            steps.append(step)
        text = prefix
        for step in reversed(steps):
            text = f"{text}[{step}]" if isinstance(step, int) else (f"{text}.{step}" if text else step)
        return text

    def walk(node: Any, crumb: tuple | None) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            if isinstance(value, (dict, list)):
                walk(value, (crumb, key if isinstance(key, int) and not isinstance(node, dict) else str(key)))
            elif value == "auto":
                found.append(path_of((crumb, key if not isinstance(node, dict) else str(key))))

    if isinstance(config, (dict, list)):
        walk(config, None)
    elif config == "auto":
        found.append(prefix)
    return iter(found)


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


#: the longest value quoted in a finding: a 1 MiB string is cut, its length said, and the sentence around it kept
MAX_SHOWN_CHARS = 200


def show(value: Any, limit: int = MAX_SHOWN_CHARS) -> str:
    """A value as JSON would write it (``true``, ``"auto"``, ``5e-05``), cut at ``limit`` characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


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


def digits_int(value: Any) -> int | None:
    """A string of ASCII digits (spaces around allowed, at most 19 digits: below 2^63) as an int, else None.
    ``str.isdigit`` alone takes "²" (int() refuses it) and 5,000 digits (int() refuses past 4,300)."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 19 else None


def finite_float(value: Any) -> float | None:
    """A string (or number) as a finite float, else None: "1e999", "inf" and "nan" are strings float() takes
    but no JSON number holds (a --fix writing them would write invalid JSON)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def is_number(value: Any) -> bool:
    """An int or a finite float, not a bool (ints are exact: no float conversion, which overflows)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def listing(items: list[str], most: int = 20) -> str:
    """``items`` joined with ", ", at most ``most`` of them, then how many there are in all (a file with 80,000
    "auto" values must not make an 80,000-name line)."""
    shown = ", ".join(items[:most])
    return shown if len(items) <= most else f"{shown}, ... ({len(items):,} in all)"

