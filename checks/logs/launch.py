"""The describers of :mod:`.signatures` for the launch and the end of a run: argparse refusing the command line (the
launcher's --local_rank, a value), the shell running an option as a command, a rank's exit code or signal, torchrun's
failure summary, and a stop from outside (SIGTERM, a scheduler's cancel, Ctrl-C) with what the ranks were doing."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .evidence import _int, _where
from .lines import PROGRESS, Line, clock

if TYPE_CHECKING:
    from .signatures import Match

#: the deepspeed launcher's echo of each rank's command (deepspeed/launcher/launch.py main)
SPAWNED_LOCAL_RANK = re.compile(r"spawned with command: \[[^\]\n]{0,600}?'--local_rank=\d{1,6}'")


def _argparse(match: Match, lines: list[Line]) -> tuple[str, str, dict]:
    """argparse's ``prog: error: ...`` (its exit code 2): ENV331 when the deepspeed launcher started the script (it
    inserts --local_rank=N before the user's arguments), else the parser's refusal as it is (LOG810)."""
    msg = match.groups.group("msg")
    usage = next((ln.text for ln in reversed(lines[max(0, match.line_index - 40):match.line_index])
                  if ln.text.lstrip().startswith("usage:")), "")
    # the launcher's --local_rank=N refused: named in the message, or an argument unrecognized (or one missing: the
    # launcher's flag came before a config file the script reads as its first argument) under a launcher that passes
    # it to a parser whose usage does not list it; a value refused is the line's own (PRE021)
    launched = re.search(r"--local[_-]rank", msg) or (
        msg.startswith(("unrecognized arguments", "the following arguments are required")) and
        "local_rank" not in usage and
        any("--local_rank=" in ln.text and SPAWNED_LOCAL_RANK.search(ln.text) for ln in lines[:20000]))
    evidence = _where(match) + match.line.text.strip()[:300]
    if launched:
        return (evidence + " (the deepspeed launcher started it with '--local_rank=N' before the script's own "
                "arguments)", "", {})
    refused = ARGPARSE_VALUE.search(match.line.text)
    if refused and refused.group("type") in ("dict", "Dict"):  # only HfArgumentParser gives argparse type=dict
        # (typing.Dict's name in a transformers whose annotation was Dict: "--deepspeed: invalid Dict value")
        return (evidence + f" (transformers' HfArgumentParser reads {refused.group('opt')} as a dict in the installed "
                           f"version: it takes the field's type from the TrainingArguments annotation, dict | str, "
                           f"and a path is no dict)",
                f"Use a transformers version whose parser reads {refused.group('opt')} as a path (`pip install -U "
                f"transformers`, or the version the training repository pins), or give the config inline as JSON "
                f"({refused.group('opt')} '{{\"zero_optimization\": ...}}').",
                {"rule": "HF205", "title": "the installed transformers parses a TrainingArguments field differently",
                 "origin": {"package": "transformers", "file": "hf_argparser.py", "function": "_parse_dataclass_field",
                            "line": None, "code": "", "from": "mention"}})
    if refused:  # the line gives an option a value its add_argument (type=, choices=) cannot take
        return (evidence + f" (the script's parser refuses the value of {refused.group('opt')}: argparse exits with "
                           f"status 2 before anything runs)",
                f"Give {refused.group('opt')} a value its parser takes (the choices or type in the message, or in the "
                f"script's add_argument); a value the installed version does not take may need another version of "
                f"the script (a comma-separated list where it takes one choice).",
                {"rule": "PRE021", "title": "the script's argparse refuses a value of the command line"})
    return evidence, "Give the arguments the script's parser asks for (its usage line is above the error).", \
        {"rule": "LOG810", "title": "the script's argument parser refused its command line"}


#: argparse's refusal of a value (argparse.py _check_value, _get_value): "argument --x: invalid choice: 'a' (choose
#: from ...)", "argument --n: invalid int value: 'abc'"; a paste may keep only its tail, from the option on
ARGPARSE_VALUE = re.compile(r"(?:argument |^\s{0,8})(?P<opt>-{1,2}[\w-]{1,100}(?:/-{1,2}[\w-]{1,100})?): invalid "
                            r"(?:choice: |(?P<type>\w{1,40}) value(?:: |\s*$))")


def _option_as_command(match: Match, lines: list[Line]) -> tuple[str, str]:
    """PRE017 from the shell's complaint about an option it ran as a command."""
    g = match.groups.groupdict()
    option = g.get("opt") or g.get("opt2") or "an option"
    return (_where(match) + match.line.text.strip()[:300] + f" (the shell ran {option} as a command of its own: the "
            "launch command above it had ended, so it and the options after it never reached the script)", "")


def summary_rank(match: Match, lines: list[Line]) -> int | None:
    """The rank of an ``exitcode : N (pid: P)`` line of torchrun's failure summary: its ``rank : R (local_rank: L)``
    line just above; None for another line."""
    if not match.line_index or not re.match(r"\s{0,8}exitcode\s{0,8}:", match.line.text):
        return None
    above = re.search(r"^\s{0,8}rank\s{0,8}:\s{0,4}(\d{1,6})\b", lines[match.line_index - 1].text)
    return int(above.group(1)) if above else None


def _rank_exit(match: Match, lines: list[Line]) -> tuple[str, str]:
    """A rank that ended with no error of its own in the log: its exit code, or the signal that killed it (a
    negative code: -11 is SIGSEGV, a crash in native code)."""
    g = match.groups.groupdict()
    rank = g.get("rank") or g.get("rank2")
    code = g.get("code") or g.get("code2") or g.get("code4") or g.get("code5")
    if g.get("code5") and not rank:
        summary = summary_rank(match, lines)
        rank = str(summary) if summary is not None else None
    sig = g.get("sig") or g.get("sig2") or (code[1:] if code and code.startswith("-") else None)
    name = g.get("signame") or g.get("signame2") or SIGNAL_NAMES.get(_int(sig, 3) or 0, "")
    who = f"rank {rank}" if rank else "a rank"
    if name == "SIGBUS":  # shared memory exhausted: /dev/shm (Docker's 64 MB) under NCCL or DataLoader workers
        return (f"{who} was killed by signal {sig} (SIGBUS): a shared-memory segment could not be backed; no error of "
                f"that rank is in this log", "", {"rule": "ENV312"})
    if sig:
        how = f"{who} was killed by signal {sig}{' (' + name + ')' if name else ''}"
        terminate = next((ln for ln in lines[:match.line_index] if "terminate called" in ln.text), None)
        cpu = any(CPU_RUN.search(ln.text) for ln in lines[:20000])
        if terminate is not None:  # std::terminate: SIGABRT by the C++ runtime itself
            how += f", after the C++ runtime's '{terminate.text.strip()[:80]}' ({terminate.at})"
        fix = ("No Python error: a signal ended the process. " + (
            "SIGABRT after 'terminate called' is the C++ runtime aborting: a thread still running at exit, or an "
            "exception thrown where none may be (often a rank that left while a collective or a background thread of "
            "its peers still waited on it: see what the other ranks were doing). " if terminate is not None else
            "SIGSEGV/SIGABRT is a crash in native code " + (
                "(a compiled op built for another torch: rebuild the ops, match the versions). " if cpu else
                "(a CUDA kernel, NCCL, a compiled op built for another torch or CUDA: rebuild the ops, match the "
                "versions, and run with CUDA_LAUNCH_BLOCKING=1 and NCCL_DEBUG=INFO to see where). "))
            + "SIGTERM came from outside (the launcher after another rank failed, a scheduler).")
        return f"{how}; no error of that rank is in this log", fix
    return f"{who} exited with code {code}; no error of that rank is in this log", ""


#: a run on the CPU (DeepSpeed's accelerator choice, gloo): no CUDA or NCCL advice for it
CPU_RUN = re.compile(r"Setting accelerator to CPU|accelerator to cpu|ProcessGroupGloo|\bgloo\b")


# --- a run stopped from outside: what stopped it, what the ranks were doing ------------------------------------

SIGNAL_NAMES = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
                9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 15: "SIGTERM"}
SIGNAL_HOW = {"SIGINT": "a Ctrl-C", "SIGTERM": "a timeout (`timeout`, dsdoctor smoke's --timeout), a `kill` or the "
              "job scheduler", "SIGHUP": "the terminal closing", "SIGKILL": "a `kill -9` or the out-of-memory killer"}
#: the launcher's own lines (torchrun's agent, DeepSpeed's launcher): not what the ranks were doing
LAUNCHER = re.compile(r"torch[/.]distributed[/.](?:elastic|run\b|launch)|\[(?:launch|runner)\.py:\d{1,6}:|"
                      r"^\*{10,}|OMP_NUM_THREADS|^\s*Traceback \(most recent call last\)")


def _signal_of(match: Match) -> tuple[str, str]:
    """(what stopped the run, in words; the signal's name or '') for a ``stopped`` match."""
    g = match.groups.groupdict()
    if "CANCELLED AT" in match.line.text:
        why = (g.get("why") or "").strip().lower()
        return f"the job scheduler cancelled the job{' (' + why + ')' if why else ''}", "SIGTERM"
    if "KeyboardInterrupt" in match.line.text:
        return "signal 2 (SIGINT: a Ctrl-C)", "SIGINT"
    raw = g.get("sig") or g.get("sig2") or g.get("sig3") or "?"
    number = _int(raw, 3)
    name = SIGNAL_NAMES.get(number, "") if number is not None else raw
    number = number if number is not None else next((n for n, v in SIGNAL_NAMES.items() if v == raw), None)
    how = SIGNAL_HOW.get(name)
    return (f"signal {number if number is not None else raw}"
            + (f" ({name}: {how})" if how else f" ({name})" if name and number is not None else "")), name


def _silence(line: Line, lines: list[Line], stop_index: int) -> str:
    """' (N s before the stop)' from the two lines' timestamps, when both have one."""
    then = clock(line.text)
    now = next((c for c in (clock(ln.text) for ln in lines[stop_index:stop_index + 5]) if c is not None), None)
    if then is None or now is None or now < then:
        return ""
    return f" ({now - then:.0f} s before the stop)"


def _activity(lines: list[Line], stop_index: int) -> str:
    """What the ranks were doing when the stop came: the last training progress before it, and each rank's last
    line (the launcher's own lines left out), with how long before the stop it came."""
    last: dict[int | None, Line] = {}
    progress = None
    for line in lines[max(0, stop_index - 20000):stop_index]:
        text = line.text.strip()
        if not text or LAUNCHER.search(text):
            continue
        last[line.rank] = line
        if PROGRESS.search(line.text):
            progress = line
    parts = [f"the last training progress before it: {progress.at}: {progress.text.strip()[:120]}" if progress else
             "no training step was logged before it"]
    ranks = sorted(last, key=lambda r: (r is None, r or 0))
    for rank in ranks[:4]:
        line = last[rank]
        who = f"rank {rank}'s last line" if rank is not None else "the last line of the ranks"
        parts.append(f"{who}: {line.at}{_silence(line, lines, stop_index)}: {line.text.strip()[:160]}")
    if len(ranks) > 4:
        parts.append(f"({len(ranks) - 4} more ranks)")
    return "; ".join(parts)


def _stopped(match: Match, lines: list[Line]) -> tuple[str, str]:
    what, _ = _signal_of(match)
    after = (match.info or {}).get("after")  # the failure that came before the stop, when there is one
    cause = f"after the failure at {after.line.at}" if after is not None else "not by an error of its own"
    return (_where(match) + f"the run was stopped from outside by {what}, {cause}; "
            + _activity(lines, match.line_index), "")
