"""Reading the files a user points dsdoctor at: a ds_config (JSON or HJSON, as DeepSpeed accepts) and
TrainingArguments values (JSON, or YAML as LLaMA-Factory writes them). Never writes to them.

Every failure is a :class:`DsdoctorError` with one line naming the option and the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from dsdoctor.report import DsdoctorError


#: the largest config file read: DeepSpeed configs and TrainingArguments files are kilobytes; a 200 MB one took minutes
#: and 14 GB of memory to check before this cap
MAX_CONFIG_BYTES = 1 << 20


def _read_text(path: str, option: str) -> str:
    from dsdoctor.files import read_input, shown

    data = read_input(path, option, MAX_CONFIG_BYTES, what="config file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise DsdoctorError(f"{option} {shown(path)}: not a UTF-8 text file") from None
    if not text.strip():
        raise DsdoctorError(f"{option} {shown(path)}: the file is empty")
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


@dataclass
class ConfigFile:
    """A parsed ds_config file.

    Attributes:
        config: the top-level object.
        duplicates: keys that appear twice in one object (DeepSpeed's loader refuses them; ``json.load`` keeps the
            last value).
        json_error: None when the file is plain JSON; else where ``json.load`` stops on it (the file is HJSON
            only, which DeepSpeed reads but the HF Trainer and accelerate do not): ``(message, line, column)``.
        hjson_feature: what at that place is HJSON and not JSON (a trailing comma, a comment, ...), or "".
    """

    config: dict
    duplicates: list[str] = field(default_factory=list)
    json_error: tuple[str, int, int] | None = None
    hjson_feature: str = ""


def read_ds_config(path: str, option: str = "CONFIG") -> tuple[dict, list[str]]:
    """Parse a ds_config file: ``(config, duplicate_keys)``; see :func:`read_ds_config_file` (same errors)."""
    parsed = read_ds_config_file(path, option)
    return parsed.config, parsed.duplicates


def read_ds_config_file(path: str, option: str = "CONFIG") -> ConfigFile:
    """Parse a ds_config file as the two readers of a config path do.

    DeepSpeed reads a path with ``hjson.load`` (deepspeed/runtime/config.py ``DeepSpeedConfig.__init__``), so
    comments, trailing commas, unquoted keys and strings, single quotes, a file without its root braces and a UTF-8
    byte-order mark all pass there. The HF Trainer and accelerate read it with ``json.load``
    (accelerate/utils/deepspeed.py ``HfDeepSpeedConfig.__init__``: ``open(path, encoding="utf-8")`` then
    ``json.load``; transformers/integrations/deepspeed.py ``HfDeepSpeedConfig`` inherits it, and both
    ``TrainingArguments(deepspeed=path)`` and accelerate's ``DeepSpeedPlugin(hf_ds_config=path)``,
    accelerate/utils/dataclasses.py, build one), which refuses all of those. So: JSON first; when that fails, HJSON,
    and ``json_error`` records where json.load stopped (a finding for the check, DS139).

    Raises:
        DsdoctorError: missing or unreadable file, syntax that is neither JSON nor an HJSON object (with where JSON
            parsing failed), a JSON top level that is not an object, or a value JSON cannot hold (NaN, Infinity).
    """
    from dsdoctor.files import shown

    text = _read_text(path, option)
    name = shown(path)
    duplicates: list[str] = []

    def no_constants(constant: str):
        raise ValueError(f"{constant} is not a JSON number")

    json_error = None
    try:
        config = json.loads(text, object_pairs_hook=_pairs_recording_duplicates(duplicates),
                            parse_constant=no_constants)
    except RecursionError:
        raise DsdoctorError(f"{option} {name}: nested too deeply to parse") from None
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            json_error = (exc.msg, exc.lineno, exc.colno)
            where = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
        else:
            where = str(exc)
        try:
            import hjson

            duplicates.clear()
            config = hjson.loads(text, object_pairs_hook=_pairs_recording_duplicates(duplicates))
            config = json.loads(json.dumps(config, allow_nan=False))
        except RecursionError:
            raise DsdoctorError(f"{option} {name}: nested too deeply to parse") from None
        except Exception:
            raise DsdoctorError(f"{option} {name}: not valid JSON (nor HJSON): {where}") from None
        if json_error is None:  # NaN / Infinity: JSON syntax DeepSpeed's hjson refuses, and no number JSON holds
            raise DsdoctorError(f"{option} {name}: not valid JSON: {where}")
        if not isinstance(config, dict):
            # hjson reads text that is no JSON at all ("this is not json {") as one quoteless string
            raise DsdoctorError(f"{option} {name}: not valid JSON (nor HJSON): {where}; HJSON reads the text as "
                                f"{_json_type(config)}, not an object")
    if not isinstance(config, dict):
        raise DsdoctorError(f"{option} {name}: the top level must be a JSON object, not {_json_type(config)}")
    validate_values(config, option, path)
    feature = _hjson_feature(text, json_error) if json_error else ""
    return ConfigFile(config, duplicates, json_error, feature)


def _hjson_feature(text: str, error: tuple[str, int, int]) -> str:
    """What at the place ``json.load`` stopped is HJSON syntax: looked up from the character there (a cheap guess
    for the evidence; the position itself is exact)."""
    msg, line, col = error
    if text.startswith("\ufeff") or "BOM" in msg:
        return "a UTF-8 byte-order mark at the start of the file: save it as UTF-8 without BOM"
    lines = text.split("\n")
    rest = lines[line - 1][col - 1:] if 0 < line <= len(lines) else ""
    before = "".join(lines[:line - 1]) + (lines[line - 1][:col - 1] if 0 < line <= len(lines) else "")
    ahead = (rest + "".join(lines[line:line + 50])).lstrip()
    if rest.lstrip().startswith(("#", "//", "/*")):
        return "a comment, which JSON does not allow"
    if rest.startswith("'"):
        return "a single-quoted string: JSON needs double quotes"
    if ahead[:1] in ("}", "]") and before.rstrip().endswith(","):
        return "a trailing comma before a closing bracket"
    if "property name" in msg:
        return "an unquoted key: JSON needs double quotes"
    if not before.strip() and ahead[:1] not in ("{", "["):
        return "no root braces: HJSON reads key: value lines as an object, JSON needs {...}"
    if ahead[:1] and (ahead[0].isalpha() or ahead[0] == "_"):
        return "an unquoted string or key: JSON needs double quotes"
    if "delimiter" in msg:
        return "a missing comma: HJSON accepts a line break instead, JSON does not"
    return "HJSON syntax"


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
    except RecursionError:
        raise DsdoctorError(f"{option} {path}: nested too deeply to parse") from None
    except ValueError:
        try:
            import yaml

            values = yaml.safe_load(text)
        except RecursionError:
            raise DsdoctorError(f"{option} {path}: nested too deeply to parse") from None
        except ValueError as exc:  # e.g. an integer beyond Python's digit limit
            raise DsdoctorError(f"{option} {path}: cannot read a value: {' '.join(str(exc).split())[:200]}") from None
        except Exception as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise DsdoctorError(f"{option} {path}: neither JSON nor YAML{where}") from None
    if not isinstance(values, dict):
        raise DsdoctorError(f"{option} {path}: expected a mapping of TrainingArguments names to values, "
                            f"not {_json_type(values)}")
    expanded = expanded_size(values, MAX_ARGS_VALUES)
    if expanded is None or expanded > MAX_ARGS_VALUES:
        raise DsdoctorError(f"{option} {path}: " + (
            "a YAML alias refers to a value that holds it (*name inside &name)" if expanded is None else
            f"expands to more than {MAX_ARGS_VALUES:,} values (YAML aliases: each *name repeats its whole &name "
            "value); a TrainingArguments file holds tens"))
    validate_values(values, option, path)
    return {str(k): v for k, v in values.items()}


#: values an --hf-args file may expand to: YAML aliases repeat whole values, so 300 bytes with 7 levels of aliases
#: held 10^7 values and took 82 s to check; a real TrainingArguments file holds tens
MAX_ARGS_VALUES = 100_000


def expanded_size(value: Any, cap: int) -> int | None:
    """How many values ``value`` holds once every shared part (a YAML alias) is counted each time it appears,
    computed once per distinct container (an alias bomb costs its size in the file, not its expansion).
    Returns a number above ``cap`` as soon as it is reached, or None when a container holds itself (a recursive
    alias, ``&a [*a]``)."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        node, done = stack.pop()
        ident = id(node)
        children = list(node.values()) if isinstance(node, dict) else node
        if done:
            size = 1 + sum(sizes.get(id(c), 1) if isinstance(c, (dict, list)) else 1 for c in children)
            sizes[ident] = size
            open_.discard(ident)
            if size > cap:
                return size
            continue
        if ident in sizes:
            continue
        if ident in open_:
            return None
        open_.add(ident)
        stack.append((node, True))
        stack.extend((c, False) for c in children if isinstance(c, (dict, list)) and id(c) not in sizes)
    return sizes.get(id(value), 1)


#: deeper than any real config; Python's parsers and copy.deepcopy hit the recursion limit near 1000
MAX_DEPTH = 64
#: DeepSpeed and torch read integers as 64-bit; anything larger is a typo or an attack on the parser
MAX_INT = 2 ** 63


def validate_values(value: Any, option: str, path: str) -> None:
    """Refuse what no real config holds and what would crash the checks: nesting deeper than
    :data:`MAX_DEPTH`, integers beyond 2^63, NaN or infinite floats (YAML ``.inf``, JSON ``1e999``), and strings
    that are not valid Unicode (lone surrogates from ``\\ud800`` escapes).

    One pass over the values; the dotted place of a value is built only for the error (a 1 MiB file of 500,000
    values is walked in about a quarter of a second).

    Raises:
        DsdoctorError: one line naming the option, the file and the dotted place of the value.
    """
    from dsdoctor.files import shown

    name = shown(path)
    if not isinstance(value, (dict, list)):
        _check_leaf(value, None, option, name)
        return
    stack: list[tuple[Any, tuple | None, int]] = [(value, None, 0)]
    while stack:
        node, crumb, depth = stack.pop()
        if depth >= MAX_DEPTH:
            child_crumb = (crumb, next(iter(node), "")) if isinstance(node, dict) else (crumb, 0)
            if node:
                where = _where(child_crumb)
                raise DsdoctorError(f"{option} {name}: nested more than {MAX_DEPTH} levels deep at "
                                    f"{where if len(where) <= 60 else where[:60] + '...'}")
            continue
        if isinstance(node, dict):
            for key, child in node.items():
                if isinstance(key, str) and not key.isascii():
                    _valid_text(key, option, name, _where(crumb))
                if isinstance(child, (dict, list)):
                    stack.append((child, (crumb, str(key)), depth + 1))
                elif not (child is None or type(child) is bool or type(child) is str and child.isascii()
                          or type(child) is int and -MAX_INT < child < MAX_INT):
                    _check_leaf(child, (crumb, str(key)), option, name)
        else:
            for i, child in enumerate(node):
                if isinstance(child, (dict, list)):
                    stack.append((child, (crumb, i), depth + 1))
                elif not (child is None or type(child) is bool or type(child) is str and child.isascii()
                          or type(child) is int and -MAX_INT < child < MAX_INT):
                    _check_leaf(child, (crumb, i), option, name)


def _where(crumb: tuple | None) -> str:
    """The dotted place (``zero_optimization.offload_param.device``, ``a[3].b``) of a value from its crumbs."""
    parts = []
    while crumb is not None:
        crumb, step = crumb
        parts.append(f"[{step}]" if isinstance(step, int) else step)
    text = ""
    for part in reversed(parts):
        text += part if part.startswith("[") or not text else f".{part}"
    return text


def _check_leaf(node: Any, crumb: tuple | None, option: str, name: str) -> None:
    import math

    if isinstance(node, bool) or node is None:
        return
    if isinstance(node, int):
        if abs(node) >= MAX_INT:
            raise DsdoctorError(f"{option} {name}: the integer at {_where(crumb) or 'the top'} has "
                                f"{len(str(abs(node))) if abs(node) < 10 ** 4000 else 'more than 4,000'} digits "
                                "(larger than 2^63)")
    elif isinstance(node, float):
        if not math.isfinite(node):
            raise DsdoctorError(f"{option} {name}: {node} at {_where(crumb) or 'the top'} is not a finite number")
    elif isinstance(node, str):
        _valid_text(node, option, name, _where(crumb))


def _valid_text(text: str, option: str, path: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise DsdoctorError(f"{option} {path}: a string at {where or 'the top'} is not valid Unicode "
                            "(a lone surrogate escape such as \\ud800)") from None


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
            type(None): "null"}.get(type(value), type(value).__name__)
