"""Reading the files a user points dsdoctor at: a ds_config (JSON or HJSON, as DeepSpeed accepts) and
TrainingArguments values (JSON, or YAML as LLaMA-Factory writes them). Never writes to them.

Every failure is a :class:`DsdoctorError` with one line naming the option and the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dsdoctor.report import DsdoctorError


def _read_text(path: str, option: str) -> str:
    p = Path(path)
    if not p.exists():
        raise DsdoctorError(f"{option} {path}: no such file")
    if not p.is_file():
        raise DsdoctorError(f"{option} {path}: not a file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DsdoctorError(f"{option} {path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise DsdoctorError(f"{option} {path}: cannot read it ({exc.strerror})") from None
    if not text.strip():
        raise DsdoctorError(f"{option} {path}: the file is empty")
    return text


def _pairs_recording_duplicates(duplicates: list[str]):
    """An ``object_pairs_hook`` that keeps the last value of a repeated key (as ``json.load`` does) and records
    the key. DeepSpeed's own loader refuses repeated keys (``dict_raise_error_on_duplicate_keys`` in
    deepspeed/runtime/config_utils.py); the HF Trainer's ``json.load`` keeps the last one silently."""

    def hook(pairs):
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                duplicates.append(key)
            seen[key] = value
        return seen

    return hook


def read_ds_config(path: str, option: str = "CONFIG") -> tuple[dict, list[str]]:
    """Parse a ds_config file.

    Returns ``(config, duplicate_keys)``: the top-level object and the keys that appear twice in one object.
    JSON first; when that fails, HJSON (comments, unquoted keys), which DeepSpeed's loader also accepts
    (deepspeed/runtime/config.py ``DeepSpeedConfig.__init__`` uses ``hjson.load``).

    Raises:
        DsdoctorError: missing or unreadable file, syntax that is neither JSON nor HJSON, a top level that is not
            an object, or a value JSON cannot hold (NaN, Infinity).
    """
    text = _read_text(path, option)
    duplicates: list[str] = []

    def no_constants(name: str):
        raise ValueError(f"{name} is not a JSON number")

    try:
        config = json.loads(text, object_pairs_hook=_pairs_recording_duplicates(duplicates),
                            parse_constant=no_constants)
    except ValueError as exc:
        json_error = exc
        try:
            import hjson

            duplicates.clear()
            config = hjson.loads(text, object_pairs_hook=_pairs_recording_duplicates(duplicates))
            config = json.loads(json.dumps(config, allow_nan=False))
        except Exception:
            if isinstance(json_error, json.JSONDecodeError):
                where = f"{json_error.msg} at line {json_error.lineno} column {json_error.colno}"
            else:
                where = str(json_error)
            raise DsdoctorError(f"{option} {path}: not valid JSON (nor HJSON): {where}") from None
    if not isinstance(config, dict):
        raise DsdoctorError(f"{option} {path}: the top level must be a JSON object, not {_json_type(config)}")
    return config, duplicates


def read_hf_args(path: str, option: str = "--hf-args") -> dict:
    """TrainingArguments values from a JSON object or a YAML mapping (LLaMA-Factory's ``train.yaml`` style).

    Keys that are not TrainingArguments fields (``model_name_or_path``, ``stage``, ``lora_target``) are kept;
    the checks read only the fields they know. YAML is parsed with ``yaml.safe_load`` exactly as
    ``HfArgumentParser.parse_yaml_file`` does, so ``learning_rate: 1e-4`` stays the string ``"1e-4"`` here as
    it does there (YAML 1.1 needs a dot for a float).

    Raises:
        DsdoctorError: missing file, neither JSON nor YAML, or not a mapping.
    """
    text = _read_text(path, option)
    try:
        values = json.loads(text)
    except ValueError:
        try:
            import yaml

            values = yaml.safe_load(text)
        except Exception as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise DsdoctorError(f"{option} {path}: neither JSON nor YAML{where}") from None
    if not isinstance(values, dict):
        raise DsdoctorError(f"{option} {path}: expected a mapping of TrainingArguments names to values, "
                            f"not {_json_type(values)}")
    return {str(k): v for k, v in values.items()}


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
            type(None): "null"}.get(type(value), type(value).__name__)
