"""pydantic's validation blocks (``N validation errors for DeepSpeedZeroConfig``): every field, its value and
message, each with the DS rule ``dsdoctor check`` gives for it (DS199 and the rules of its fields). A describer of
:mod:`.signatures`."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .lines import Line, where

if TYPE_CHECKING:
    from .signatures import Match


#: pydantic's error types (v2 ``[type=...]``, v1 ``(type=...)``) and the DS rule ``dsdoctor check`` gives for them
#: (checks/deepspeed_config: keys.py, values.py, zero.py)
PYDANTIC_RULES = (("extra_forbidden", "DS131"), ("extra", "DS131"), ("literal_error", "DS137"), ("_parsing", "DS137"),
                  ("_from_float", "DS137"), ("_type", "DS137"), ("type_error", "DS137"), ("value_error", "DS137"),
                  ("greater_than", "DS137"), ("less_than", "DS137"), ("missing", "DS137"))
PYDANTIC_TYPE = re.compile(r"[\[(]type=(?P<type>[\w.]{1,60})(?:, input_value=(?P<value>.{0,200}?))?"
                           r"(?:, input_type=(?P<itype>\w{1,40}))?[\])]")
PYDANTIC_MORE = re.compile(r"^\s*For further information visit")
#: fields listed at most
MAX_FIELDS = 12
#: a block pasted on one line (an issue title, a wrapped paste): ``1 validation error for DeepSpeedZeroConfig aio extra
#: fields not permitted (type=value_error.extra)``: the model, then each field, its message and its type marker
INLINE_HEADER = re.compile(r"validation errors? for (?P<model>\w{1,80})\s+(?P<rest>.+)$")
INLINE_FIELD = re.compile(r"(?P<field>[\w.\[\]-]{1,80})\s+(?P<message>[^\[\]()]{1,200}?)\s*"
                          r"(?P<marker>[\[(]type=[^\])]{1,300}[\])])")


def _pydantic_rule(kind: str, field: str, value: str | None) -> str:
    if value is not None and value.strip("'\"") == "auto":
        return "DS136"
    if field.split(".")[-1] == "stage" and kind != "extra_forbidden":
        return "DS140"
    return next((rule for key, rule in PYDANTIC_RULES if key in kind), "DS199")


def inline_errors(header: str) -> list[dict]:
    """The fields of a pydantic block pasted on its header's line (:data:`INLINE_HEADER`), as
    :func:`validation_errors` gives them; [] when the header line holds no field."""
    m = INLINE_HEADER.search(header)
    out: list[dict] = []
    for f in INLINE_FIELD.finditer(m.group("rest") if m else ""):
        t = PYDANTIC_TYPE.search(f.group("marker"))
        kind, value, itype = (t.group("type"), t.group("value"), t.group("itype")) if t else ("", None, None)
        out.append({"field": f.group("field"), "message": f.group("message").strip()[:200], "type": kind,
                    "value": value, "input_type": itype, "rule": _pydantic_rule(kind, f.group("field"), value)})
        if len(out) == MAX_FIELDS:
            break
    return out


def validation_errors(lines: list[Line], start: int) -> list[dict]:
    """The fields of the pydantic block whose header is ``lines[start]`` (``N validation errors for X``): each
    field's dotted name, its message, pydantic's error type, the value and its type where pydantic v2 prints them,
    and the DS rule ``dsdoctor check`` gives for it. A field line is unindented (or its rank's text is); its message
    is the next, indented line; pydantic v2's 'For further information' lines are skipped."""
    rank = lines[start].rank
    after = lines[start + 1:start + 1 + 4 * MAX_FIELDS]
    if rank is None and after and after[0].rank is not None:  # the header pasted without its rank prefix
        rank = after[0].rank
    body = [ln.text for ln in after if ln.rank == rank]
    as_printed = _fields(body)
    unwrapped = _fields(_unwrapped(lines[start].text, body))  # or as a terminal wrapped it: the reading that finds
    typed = [sum(bool(f["type"]) for f in fields) for fields in (as_printed, unwrapped)]  # more of pydantic's types
    return unwrapped if (typed[1], len(unwrapped)) > (typed[0], len(as_printed)) else as_printed


def _fields(body: list[str]) -> list[dict]:
    """The fields of a pydantic block's lines after its header (see :func:`validation_errors`)."""
    out: list[dict] = []
    i = 0
    while i < len(body) and len(out) < MAX_FIELDS:
        text = body[i]
        if PYDANTIC_MORE.match(text) or not text.strip():
            i += 1
            continue
        if text[:1].isspace() or i + 1 >= len(body) or not body[i + 1][:1].isspace():
            break  # not a field line followed by its message: the block ended
        field, message = text.strip(), body[i + 1].strip()
        m = PYDANTIC_TYPE.search(message)
        kind, value, itype = (m.group("type"), m.group("value"), m.group("itype")) if m else ("", None, None)
        out.append({"field": field[:120], "message": (message[:m.start()].strip() if m else message)[:200],
                    "type": kind, "value": value, "input_type": itype, "rule": _pydantic_rule(kind, field, value)})
        i += 2
    return out


#: a terminal or an issue's code block wraps at this many columns or more (80, 100, 120): a block whose longest lines
#: all have one length of at least this was wrapped there
MIN_WRAP_WIDTH = 60


def _unwrapped(header: str, body: list[str]) -> list[str]:
    """The lines of a pydantic block as pydantic printed them, where a terminal wrapped them at a width (the header's
    ``... for DeepSpeedZe`` / ``roConfig``, a message's ``[type=int_`` / ``from_float, input_value=...]``): the width
    is the length of the block's longest lines when two or more lines have it (at least :data:`MIN_WRAP_WIDTH`), and
    each line that long has the next joined to it. The header's own continuation is dropped (the model's name)."""
    texts = [header.rstrip("\n")] + body
    width = max((len(t) for t in texts), default=0)
    if width < MIN_WRAP_WIDTH or sum(len(t) >= width - 1 for t in texts) < 2:
        return body
    out: list[str] = []
    full = False
    for i, text in enumerate(texts):
        if full and text and not text[:1].isspace():
            if i > 1:
                out[-1] += text
            full = len(text) >= width - 1
            continue
        if i > 0:
            out.append(text)
        full = len(text) >= width - 1
    return out


def describe(match: Match, lines: list[Line]) -> tuple[str, str] | tuple[str, str, dict]:
    """pydantic's header and every field of its block (:func:`validation_errors`), each with the rule ``check``
    gives for it; when every field has the same rule (not DS199), the finding is reported under it."""
    where_ = where(match.line)
    text = match.line.text[match.groups.start():].strip()
    fields = inline_errors(text) or validation_errors(lines, match.line_index)
    if not fields:
        after = [ln.text.strip() for ln in lines[match.line_index + 1:match.line_index + 20]
                 if ln.rank == match.line.rank][:2]
        return (where_ + text[:300] + ": " + " ".join(after)[:240], "",
                {"title": "DeepSpeed's config models refused the config"})
    shown = "; ".join(f"{f['field']}" + (f" = {f['value']}" if f["value"] is not None else "")
                      + (f" ({f['input_type']})" if f["input_type"] else "") + f": {f['message']} [{f['rule']}]"
                      for f in fields)
    fixes = {"DS131": "remove or correct the misspelled keys (check's 'did you mean')",
             "DS137": "give each value the type DeepSpeed's model declares (an integer, not a float such as the HF "
                      "Trainer's filled-in 0.9 x hidden_size^2 for stage3_prefetch_bucket_size)",
             "DS140": "a ZeRO stage of 0 to 3", "DS136": 'a value instead of "auto" outside the Trainer\'s fill-in',
             "DS199": "correct each field as pydantic's message says"}
    fix = "; ".join(dict.fromkeys(fixes[f["rule"]] for f in fields)) + ". `dsdoctor check ds_config.json` names " \
        "every one before launch."
    top = _misplaced_top_level(fields)
    if top:
        sections = "is a top-level section" if len(top) == 1 else "are top-level sections"
        fix = (f"{', '.join(repr(k) for k in top)} {sections} of the DeepSpeed config, not a key of the section "
               f"that refused it: move it out to the top level. " + fix[0].upper() + fix[1:])
    since = _float_refused_since() if any(f["type"] == "int_from_float" for f in fields) else ""
    rules = {f["rule"] for f in fields}
    # every field for one rule of check's: the finding is that rule's (a float for an int field is DS137)
    extra = {"rule": rules.pop()} if len(rules) == 1 and "DS199" not in rules else \
        {"title": "DeepSpeed's config models refused the config (each field's rule in the evidence)"}
    return where_ + text[:200] + ": " + shown[:900] + since, fix[0].upper() + fix[1:], extra


def _misplaced_top_level(fields: list[dict]) -> list[str]:
    """The extra fields (DS131) that are top-level keys of the DeepSpeed config (the shipped schema, generated from
    DeepSpeed's ``runtime/config.py``): a section put inside another one, such as ``aio`` inside
    ``zero_optimization``."""
    from dsdoctor.checks.deepspeed_config.schema import load_schema

    try:
        top = set(load_schema()[0]["top_level"])
    except (OSError, ValueError, KeyError):
        return []
    return [f["field"] for f in fields if f["rule"] == "DS131" and f["field"] in top]


def pydantic_versions() -> tuple[list[str], list[str]]:
    """(the mined DeepSpeed versions whose config models use pydantic 1's API, those that use pydantic 2), from the
    message catalogue's ``stats.<version>.config_pydantic`` (:func:`dsdoctor.messages.generate.config_pydantic`)."""
    from dsdoctor.messages.catalogue import catalogues

    stats = catalogues().get("deepspeed", {}).get("stats", {})
    return ([v for v, s in stats.items() if s.get("config_pydantic") == 1],
            [v for v, s in stats.items() if s.get("config_pydantic") == 2])


def _float_refused_since() -> str:
    """Where DeepSpeed's config models began refusing a float for an int field (:func:`pydantic_versions`):
    pydantic 1's API truncated the float, pydantic 2 refuses it ("int_from_float")."""
    one, two = pydantic_versions()
    if not one or not two:
        return ""
    return (f" (DeepSpeed's config models take pydantic 2 in the versions mined {', '.join(two)}, which refuses a "
            f"float for an int; {one[0]}-{one[-1]} used pydantic 1's API, which truncated it: the config worked "
            f"with the older DeepSpeed)")
