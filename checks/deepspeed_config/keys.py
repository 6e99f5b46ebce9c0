"""DS130-DS138: unknown, misspelled, deprecated, removed and mistyped keys at every level, walking the key schema
(pydantic sub-configs with ``extra="forbid"`` refuse unknown keys; the top level and ``get_scalar_param`` sections
ignore them)."""

from __future__ import annotations

from typing import Any

from dsdoctor.rules import Rule

from .result import CheckContext, CheckResult
from .rules import DS130, DS131, DS132, DS133, DS134, DS135, DS137, DS138, DS139, DS140
from .values import (EXTRA_TOP_LEVEL, MISSING, as_bool, digits_int, finite_float, get_path, is_auto, is_number, show,
                     suggest)


#: id(section) -> (section, index): a section's index is built once per run, not once per "auto" path
_INDEX_CACHE: dict[int, tuple[dict, dict[str, str]]] = {}


def _field_index(section: dict) -> dict[str, str]:
    """Every accepted spelling of a section's fields (names and aliases) -> the field name."""
    cached = _INDEX_CACHE.get(id(section))
    if cached is not None and cached[0] is section:
        return cached[1]
    index = {}
    for name, spec in section.get("fields", {}).items():
        index[name] = name
        for alias in spec.get("aliases", []):
            index[alias] = name
    _INDEX_CACHE[id(section)] = (section, index)
    return index


def _type_problem(value: Any, spec: dict) -> str | None:
    """Why pydantic (lax mode) refuses ``value`` for a field of ``spec``, or None when it accepts it."""
    if value is None:
        return None if spec.get("nullable") or spec.get("kind") == "any" else "null is not allowed"
    kind = spec.get("kind", "any")
    number = None
    if kind == "bool":
        return None if as_bool(value) is not None else f"expected a boolean, got {show(value)}"
    if kind in ("int", "float"):
        if isinstance(value, bool):
            number = int(value)
        elif is_number(value):
            number = value
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                return f"expected a number, got {show(value)}"
        else:
            return f"expected a number, got {show(value)}"
        if kind == "int" and not float(number).is_integer():
            return f"expected an integer, got {show(value)}"
        for bound, test in (("gt", lambda a, b: a > b), ("ge", lambda a, b: a >= b),
                            ("lt", lambda a, b: a < b), ("le", lambda a, b: a <= b)):
            if bound in spec and is_number(spec[bound]) and not test(float(number), float(spec[bound])):
                sign = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}[bound]
                return f"must be {sign} {spec[bound]}, got {show(value)}"
        return None
    if kind == "enum":
        values = spec.get("values", [])
        if value in values and not isinstance(value, bool):
            return None
        if digits_int(value) is not None and digits_int(value) in values:
            return None
        return f"must be one of {', '.join(show(v) for v in dict.fromkeys(values))}, got {show(value)}"
    if kind == "str":
        return None if isinstance(value, str) else f"expected a string, got {show(value)}"
    if kind in ("model", "dict"):
        return None if isinstance(value, dict) else f"expected an object, got {show(value)}"
    if kind == "list":
        return None if isinstance(value, (list, tuple)) else f"expected a list, got {show(value)}"
    return None


#: top-level scalars whose wrong type fails later (numbers) or silently flips (flags)
_TOP_NUMBERS = ("gradient_clipping", "steps_per_print", "gradient_predivide_factor")
_TOP_FLAGS = ("prescale_gradients", "wall_clock_breakdown", "memory_breakdown", "zero_allow_untested_optimizer",
              "zero_force_ds_cpu_optimizer", "dump_state", "disable_allgather", "dataloader_drop_last")


def check_syntax(ctx: CheckContext, out: CheckResult) -> None:
    """DS139: the file is HJSON only (``ctx.json_error``): DeepSpeed reads it, ``json.load`` (the HF Trainer,
    accelerate, a loop that reads the file itself) raises JSONDecodeError. An error under the Trainer, a warning
    under the engine (DeepSpeed given the path reads it; a loop that json.load()s it first does not)."""
    if ctx.json_error is None:
        return
    msg, line, col = ctx.json_error
    where = f"json.load stops at line {line} column {col}: {msg}" + (f"; there: {ctx.hjson_feature}"
                                                                      if ctx.hjson_feature else "")
    if ctx.launch == "trainer":
        out.add(DS139.finding(f"{where}; the file is HJSON, which DeepSpeed reads but the HF Trainer's json.load "
                              "(accelerate HfDeepSpeedConfig) refuses: JSONDecodeError at TrainingArguments"))
    else:
        out.add(DS139.finding(f"{where}; the file is HJSON: DeepSpeed given the path reads it (hjson.load), a "
                              "loop that json.load()s it first, or the HF Trainer, raises JSONDecodeError",
                              severity="warning"))


def check_keys(config: dict, ctx: CheckContext, out: CheckResult) -> None:
    """DS130-DS138: unknown, deprecated, removed and mistyped keys at every level."""
    schema = ctx.schema
    top = list(schema["top_level"]) + list(EXTRA_TOP_LEVEL)
    removed = schema.get("removed_top_level", {})
    sections = schema["sections"]

    for key in sorted(set(ctx.duplicates)):
        if ctx.launch == "engine":
            out.add(DS138.finding(f'"{key}" appears twice in one object: DeepSpeed refuses the file when given its '
                                  "path (ValueError: Duplicate keys in DeepSpeed config); json.load keeps the last "
                                  "value", severity="error"))
        else:
            out.add(DS138.finding(f'"{key}" appears twice in one object; the Trainer\'s json.load keeps the last '
                                  "value silently", severity="warning"))

    unknown_shown = 0
    for key, value in config.items():
        if key not in top and key not in removed and unknown_shown >= MAX_UNKNOWN_SHOWN:
            unknown_shown += 1
            out.change(key, value, MISSING, "DS130", "DeepSpeed ignores it")
            continue
        if key in removed:
            out.add(DS135.finding(f'"{key}": {removed[key]}'))
            out.change(key, value, MISSING, "DS135", f'"{key}" is a removed feature DeepSpeed refuses')
            continue
        if key not in top and "." in key and key.split(".")[0] in top:
            out.add(DS130.finding(f'"{key}" is not a DeepSpeed key and is ignored: DeepSpeed does not read dotted '
                                  "paths", fix=f"Nest it: {_nested_text(key, value)}."))
            out.change(key, value, MISSING, "DS130", "a dotted path DeepSpeed does not read")
            if get_path(config, key) is MISSING:
                out.change(key, MISSING, value, "DS130", f'nested under "{key.split(".")[0]}"')
            continue
        if key not in top:
            unknown_shown += 1
            guess = suggest(key, [k for k in top if k not in removed])
            hint = f'; did you mean "{guess}"?' if guess else ""
            out.add(DS130.finding(f'"{key}" is not a DeepSpeed key and is ignored{hint}',
                                  fix=f'Rename it to "{guess}".' if guess else DS130.fix))
            if guess and guess not in config:
                out.change(key, value, MISSING, "DS130", f'misspelled; its value moves to "{guess}"')
                out.change(guess, MISSING, value, "DS130", f'the value of misspelled "{key}"')
            else:
                out.change(key, value, MISSING, "DS130", "DeepSpeed ignores it")
            continue
        if key == "bfloat16":
            if "bf16" in config:
                out.add(DS133.finding('"bfloat16" and "bf16" are both set: DeepSpeed reads "bf16" and ignores '
                                      '"bfloat16"', fix='Remove "bfloat16".'))
                out.change("bfloat16", value, MISSING, "DS133", 'ignored beside "bf16"')
            else:
                out.add(DS133.finding('"bfloat16" is the old name of "bf16"', fix='Rename it to "bf16".'))
                out.change("bfloat16", value, MISSING, "DS133", 'old name of "bf16"')
                out.change("bf16", MISSING, value, "DS133", 'the value of "bfloat16"')
        if key in sections:
            if key == "zero_optimization" and isinstance(value, bool):
                out.add(DS133.finding(f'"zero_optimization": {show(value)} is the old boolean form (stage '
                                      f'{1 if value else 0})', fix='Write "zero_optimization": {"stage": 1}.'))
                continue
            if not isinstance(value, dict):
                if value is None and key == "bf16":
                    continue  # deepspeed/runtime/precision_config.py: a null "bf16" falls back to "bfloat16"
                if not sections[key].get("fields") and key not in ("optimizer", "scheduler"):
                    continue  # a section DeepSpeed passes through whole
                out.add(DS137.finding(f'"{key}" must be an object, got {show(value)}'))
                if value is None:
                    out.change(key, value, MISSING, "DS137", "a null section crashes DeepSpeed's parser")
                continue
            _check_section(key, value, ctx, out)
        elif key in _TOP_NUMBERS:
            if value is None and key == "steps_per_print" or is_auto(value):
                continue
            if not is_number(value):
                out.add(DS137.finding(f'"{key}" must be a number, got {show(value)}'))
                if isinstance(value, str):
                    number = finite_float(value)
                    if number is not None:
                        out.change(key, value, number, "DS137", "a number, not a string")
            elif key == "steps_per_print" and value < 1:
                out.add(DS137.finding(f'"steps_per_print" is {show(value)}: DeepSpeed computes step % '
                                      "steps_per_print (ZeroDivisionError for 0)"))
                out.change(key, value, 10, "DS137", "a positive print interval")
            elif key == "gradient_clipping" and value < 0:
                out.add(DS137.finding(f'"gradient_clipping" is {show(value)}: negative means no clipping at all',
                                      severity="warning"))
        elif key in _TOP_FLAGS and not isinstance(value, bool) and not is_auto(value):
            flag = as_bool(value)
            crashes = key == "wall_clock_breakdown"  # config.py ORs it with a bool: TypeError for a string
            out.add(DS137.finding(f'"{key}" must be true or false, got {show(value)}'
                                  + (" (TypeError: DeepSpeed ORs it with a boolean)" if crashes else
                                     " (Python reads any non-empty string as true)" if isinstance(value, str)
                                     else ""),
                                  severity="error" if crashes else "warning"))
            if flag is not None:
                out.change(key, value, flag, "DS137", "a boolean, not a string")
    _report_more_unknown("at the top level", unknown_shown, DS130, out)


#: unknown keys reported one by one per object; the rest are counted in one finding (a generated file with
#: 20,000 stray keys must not give 20,000 rows)
MAX_UNKNOWN_SHOWN = 20


def _report_more_unknown(where: str, count: int, rule_: Rule, out: CheckResult) -> None:
    if count > MAX_UNKNOWN_SHOWN:
        out.add(rule_.finding(f"... and {count - MAX_UNKNOWN_SHOWN:,} more unknown keys {where}"))


def _nested_text(dotted: str, value: Any) -> str:
    text = show(value)
    for part in reversed(dotted.split(".")):
        text = f'{{"{part}": {text}}}'
    return text


def _check_section(path: str, body: dict, ctx: CheckContext, out: CheckResult) -> None:
    schema = ctx.schema
    section = schema["sections"][path]
    fields = section.get("fields", {})
    if not fields:  # a section DeepSpeed passes through as a whole (pipeline, ...): nothing to check
        return
    index = _field_index(section)
    strict = section.get("strict", False)
    removed_zero = schema.get("removed_zero", {}) if path == "zero_optimization" else {}
    unknown = 0
    for key, value in body.items():
        where = f"{path}.{key}"
        if key not in index and key not in removed_zero:
            unknown += 1
            if unknown > MAX_UNKNOWN_SHOWN:
                out.change(where, value, MISSING, (DS131 if strict else DS132).id, "not a field DeepSpeed knows")
                continue
        if key in removed_zero:
            out.add(DS135.finding(f'"{where}": {removed_zero[key]}'))
            out.change(where, value, MISSING, "DS135", "a removed feature DeepSpeed refuses")
            continue
        if key not in index:
            guess = suggest(key, list(index))
            hint = f'; did you mean "{guess}"?' if guess else ""
            rule_ = DS131 if strict else DS132
            verb = "is refused (Extra inputs are not permitted)" if strict else "is ignored"
            out.add(rule_.finding(f'"{where}" {verb}{hint}',
                                  fix=f'Rename it to "{guess}".' if guess else rule_.fix))
            if guess and guess not in body:
                out.change(where, value, MISSING, rule_.id, f'misspelled; its value moves to "{path}.{guess}"')
                out.change(f"{path}.{guess}", MISSING, value, rule_.id, f'the value of misspelled "{key}"')
            else:
                out.change(where, value, MISSING, rule_.id, "not a field DeepSpeed knows")
            continue
        name = index[key]
        spec = fields[name]
        if spec.get("deprecated"):
            new = spec.get("new_param", "")
            replacements = [n.strip() for n in new.split(" or ") if n.strip()]
            present = [r for r in replacements if any(index.get(k) == r for k in body)]
            if present:
                out.add(DS134.finding(f'"{where}" is deprecated and "{path}.{present[0]}" is also set: '
                                      f"Cannot provide deprecated parameter '{key}' and replacing parameter "
                                      f"'{new}' together"))
                out.change(where, value, MISSING, "DS134", f'deprecated; "{present[0]}" is set')
            else:
                out.add(DS133.finding(f'"{where}" is deprecated' + (f'; use "{new}"' if new else ""),
                                      fix=_deprecated_fix(key, value, new)))
                _deprecated_change(path, key, value, new, out)
        if is_auto(value):
            continue  # the "auto" pass reports it
        if strict:
            problem = _type_problem(value, spec)
            if problem:
                if path == "zero_optimization" and name == "stage":
                    out.add(DS140.finding(f'"{where}": {problem}'))
                else:
                    out.add(DS137.finding(f'"{where}": {problem}'))
                continue
        sub = f"{path}.{name}"
        if sub in schema["sections"] and isinstance(value, dict):
            _check_section(sub, value, ctx, out)
    _report_more_unknown(f'in "{path}"', unknown, DS131 if strict else DS132, out)


def _deprecated_fix(key: str, value: Any, new: str) -> str:
    if key == "cpu_offload":
        return 'Replace it with "offload_optimizer": {"device": "cpu"}.'
    if key == "cpu_offload_param":
        return 'Replace it with "offload_param": {"device": "cpu"} (stage 3).'
    if key == "cpu_offload_use_pin_memory":
        return 'Replace it with "pin_memory": true inside offload_optimizer / offload_param.'
    return f'Rename it to "{new}".' if new else "Remove it."


def _deprecated_change(path: str, key: str, value: Any, new: str, out: CheckResult) -> None:
    where = f"{path}.{key}"
    if key in ("cpu_offload", "cpu_offload_param"):
        target = "offload_optimizer" if key == "cpu_offload" else "offload_param"
        out.change(where, value, MISSING, "DS133", f'deprecated; replaced by "{target}"')
        if as_bool(value):
            out.change(f"{path}.{target}", MISSING, {"device": "cpu"}, "DS133", f'replaces "{key}": true')
    elif key == "cpu_offload_use_pin_memory":
        out.change(where, value, MISSING, "DS133", "deprecated; pin_memory lives in the offload blocks")
    elif new and " " not in new:
        out.change(where, value, MISSING, "DS133", f'deprecated; renamed to "{new}"')
        out.change(f"{path}.{new}", MISSING, value, "DS133", f'the value of deprecated "{key}"')
