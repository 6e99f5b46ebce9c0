"""The instruction data formats the reference trainer reads, as plain Python (no torch).

One JSON object per line, or one JSON array of them (LLaMA-Factory's dataset files), in three shapes, the ones
LLaMA-Factory's dataset_info.json and the tutorials use:

- Alpaca: ``{"instruction": ..., "input": ... (optional), "output": ...}`` (the tutorials' ``train.json``);
- prompt/response: ``{"prompt": ..., "response": ...}`` (ChatGLM's and many SFT sets; ``query`` is taken for
  ``prompt`` as ChatGLM-6B's ptuning scripts do, and an optional ``history`` of ``[question, answer]`` pairs);
- conversations: ``{"messages": [{"role": "system"|"user"|"assistant", "content": ...}, ...]}`` (OpenAI / the HF chat
  template format), or ShareGPT's ``{"conversations": [{"from": "human"|"gpt"|"system", "value": ...}, ...]}``.

Every shape becomes a :class:`Record`: the conversation up to the last assistant turn (the prompt, as chat messages)
and that turn's text (the answer; only it is trained on, prompt labels are -100). :func:`read_records` collects every
problem with its line number, so that a user fixes the file once, not one error per launch. ``dsdoctor smoke`` runs it
before any rank starts; the trainer runs it again (it can be launched on its own).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

#: the ChatGLM-6B prompt style the tutorials use (train.py's default template; dsdoctor's data audit reads it here,
#: without torch)
CHATGLM_TEMPLATE = "问：{instruction}\n答："
#: ShareGPT's speaker names -> chat roles
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system",
                  "chatgpt": "assistant", "bing": "assistant", "bard": "assistant",
                  # a tool's or function's output (OpenAI's "tool"/"function", LLaMA-Factory's sharegpt "observation"):
                  # context the model reads, never an answer it learns
                  "tool": "user", "function": "user", "observation": "user", "function_call": "assistant"}


def _content_text(turn: dict):
    """A turn's text: a string; OpenAI's list of content parts (the "text" parts joined; images and other parts
    carry no text here); or, for an assistant turn that only calls tools (content null), the calls as JSON, which
    is about what a chat template renders. Anything else is returned as it is, for the caller to refuse."""
    content = turn.get("content", turn.get("value"))
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return "".join(str(p.get("text", "")) for p in content if p.get("type", "text") == "text")
    if content is None and turn.get("tool_calls"):
        return json.dumps(turn["tool_calls"], ensure_ascii=False)
    return content
#: at most this many problems are listed (the count says how many there are)
SHOWN_PROBLEMS = 5


@dataclass(frozen=True)
class Record:
    """One training sample: ``prompt`` as chat messages (role, content), ending with a user turn; ``answer`` the
    assistant text to learn; ``line`` the 1-based line of the file."""

    prompt: tuple[tuple[str, str], ...]
    answer: str
    line: int

    def flat_prompt(self) -> str:
        """The prompt as one instruction text, for a tokenizer without a chat template: earlier turns first."""
        return "\n".join(content for _, content in self.prompt)


class _Malformed:
    """A line that is not JSON, with why."""

    def __init__(self, why: str):
        self.why = why


class DataProblems(Exception):
    """``rule`` (DATA701 a sample with no answer, DATA702 malformed) and the message naming the lines."""

    def __init__(self, rule: str, message: str):
        super().__init__(message)
        self.rule = rule


def _text(row: dict, key: str, where: list[str], required: bool = True) -> str | None:
    value = row.get(key)
    if value is None:
        if required:
            where.append(f"no {key!r} key" if key not in row else f"{key!r} is a JSON null, not a string")
        return None
    if not isinstance(value, str):
        where.append(f"{key!r} is a JSON {_kind(value)}, not a string")
        return None
    return value


def _kind(value) -> str:
    return {dict: "object", list: "array", bool: "boolean", int: "number", float: "number"}.get(type(value), "null")


def parse_row(row, line: int) -> tuple[Record | None, list[str]]:
    """One parsed JSON value -> (Record or None, problems). Never raises."""
    problems: list[str] = []
    if not isinstance(row, dict):
        return None, [f"a JSON {_kind(row)}, not an object"]
    if "messages" in row or "conversations" in row:
        key = "messages" if "messages" in row else "conversations"
        turns = row[key]
        if not isinstance(turns, list) or not turns:
            return None, [f"{key!r} must be a non-empty array of turns"]
        parsed = []
        for i, turn in enumerate(turns):
            if not isinstance(turn, dict):
                return None, [f"{key}[{i}] is a JSON {_kind(turn)}, not an object"]
            role = turn.get("role", turn.get("from"))
            content = _content_text(turn)
            role = SHAREGPT_ROLES.get(role, role) if isinstance(role, str) else role
            if role not in ("system", "user", "assistant"):
                return None, [f"{key}[{i}] has role {role!r}; expected system, user or assistant (or ShareGPT's "
                              f"human, gpt)"]
            if not isinstance(content, str):
                return None, [f"{key}[{i}] content is a JSON {_kind(content)}, not a string"]
            parsed.append((role, content))
        last = max((i for i, (role, _) in enumerate(parsed) if role == "assistant"), default=None)
        if last is None:
            return None, [f"{key!r} has no assistant turn to learn"]
        if not any(role == "user" for role, _ in parsed[:last]):
            return None, [f"{key!r} has no user turn before the last assistant turn"]
        return Record(tuple(parsed[:last]), parsed[last][1], line), []
    if "instruction" in row or "output" in row:
        instruction = _text(row, "instruction", problems)
        extra = _text(row, "input", problems, required=False)
        answer = _text(row, "output", problems)
        if problems:
            return None, problems
        user = instruction + ("\n" + extra if extra else "")
        return Record((("user", user),), answer, line), []
    if "prompt" in row or "query" in row:
        key = "prompt" if "prompt" in row else "query"
        prompt = _text(row, key, problems)
        answer = _text(row, "response", problems)
        history = row.get("history") or []
        turns: list[tuple[str, str]] = []
        if not isinstance(history, list) or not all(
                isinstance(h, (list, tuple)) and len(h) == 2 and all(isinstance(x, str) for x in h) for h in history):
            problems.append("'history' must be an array of [question, answer] string pairs")
        else:
            for question, reply in history:
                turns += [("user", question), ("assistant", reply)]
        if problems:
            return None, problems
        return Record(tuple(turns) + (("user", prompt),), answer, line), []
    keys = ", ".join(sorted(map(str, row))[:6]) or "none"
    return None, [f"no known fields (keys: {keys}); expected instruction/output, prompt/response, or messages"]


def read_records(text: str, name: str) -> list[Record]:
    """Every record of the JSON-lines ``text`` (the file ``name``), or DataProblems listing every bad line at once:
    DATA702 for malformed lines, DATA701 for samples whose answer is empty (nothing to learn: an all -100 label row
    gives a NaN loss)."""
    text = text.removeprefix("\ufeff")  # a UTF-8 byte-order mark (Windows editors write one)
    if text.lstrip().startswith("["):  # one JSON array of records, as LLaMA-Factory's dataset files are
        try:
            rows = json.loads(text)
        except (ValueError, RecursionError) as exc:
            where = f" ({exc.msg} at line {exc.lineno} column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
            raise DataProblems("DATA702", f"{name}: starts like a JSON array but is not valid JSON{where}") from None
        items = [(f"record {i}", i, row) for i, row in enumerate(rows, start=1)] if isinstance(rows, list) else []
        if not isinstance(rows, list):
            raise DataProblems("DATA702", f"{name}: not a JSON array of records")
    else:
        items = []
        for line_no, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append((f"line {line_no}", line_no, json.loads(line)))
            except json.JSONDecodeError as exc:
                items.append((f"line {line_no}", line_no, _Malformed(f"not JSON ({exc.msg} at column {exc.colno})")))
            except (ValueError, RecursionError):
                items.append((f"line {line_no}", line_no, _Malformed("not JSON")))
    records, malformed, empty = [], [], []
    for where, line_no, row in items:
        if isinstance(row, _Malformed):
            malformed.append(f"{where}: {row.why}")
            continue
        record, problems = parse_row(row, line_no)
        if problems:
            malformed.append(f"{where}: " + "; ".join(problems))
        elif not record.answer.strip():
            empty.append(where)
        else:
            records.append(record)
    if malformed:
        unit = "record(s)" if malformed[0].startswith("record") else "line(s)"
        raise DataProblems("DATA702", f"{name}: {len(malformed)} malformed {unit}: "
                                      + "; ".join(malformed[:SHOWN_PROBLEMS])
                                      + (" ..." if len(malformed) > SHOWN_PROBLEMS else ""))
    if empty:
        kind = "record(s)" if empty[0].startswith("record") else "line(s)"
        lines = ", ".join(w.split()[1] for w in empty[:10]) + (" ..." if len(empty) > 10 else "")
        raise DataProblems("DATA701", f"{name}: {len(empty)} sample(s) have no answer token (an empty answer): "
                                      f"{kind} {lines}")
    if not records:
        raise DataProblems("DATA702", f"{name}: no samples")
    return records
