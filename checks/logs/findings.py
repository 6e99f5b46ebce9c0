"""From a log to findings: :func:`scan` finds every signature (and every unnamed Python error) in line order,
:func:`failures` picks the first real failure (not a consequence of another, not a handled error that the rank
survived, not explained by a known failure in its own traceback) and the cascade after it, :mod:`.ends` reads how a
log with no named failure ends (a finished run, a JIT op build a stopped run hung in: ENV329, a stop at the launch or
the first step), and :func:`explain` turns them into findings; :func:`pitfall_findings` is ``smoke``'s view of its
own failed run.
"""

from __future__ import annotations

import re
from dataclasses import replace

from dsdoctor.report import Finding
from dsdoctor.rules import Rule, catalogue

from . import imports
from .context import localize, run_context
from .lines import EXCEPTION_NAME, PROGRESS, PYTHON_ERROR, WRAP_MIN, Line, continued, joined, read_lines
from .origin import (OBJECT_CLASS, catalogue_origin, describe_frame, exception_origin, failure_origin, frame_origin,
                     library_message, mentioned_origin, nccl_origin)
from .precision import overflow_line, skipped_step, stuck
from .runtime import none_from_missing_checkpoint
from .rules import LOG800, LOG805, LOG806, LOG807, LOG809, LOG810, LOG811
from .evidence import _int
from .ends import (BUILD_SIGNATURE, TRACEBACK_HEADER, _build_fix, build_in_flight, ends_at_first_step, ends_in_build,
                   ends_in_first_collective, ends_in_launch, finished)
from .launch import summary_rank
from .signatures import (CODE_SIGNATURES, NEEDLES, PYTHON_ERROR_SIGNATURE, SIGNATURES, Match, Signature, SURVIVABLE,
                         candidates)

#: the fp16 scaler's "no step applied" signature, found by :func:`precision.stuck` rather than by a needle
STUCK_SIGNATURE = next(s for s in SIGNATURES if s.name == "loss-scale-stuck")
#: Lines that look like errors, for LOG800's evidence.
ERRORISH = re.compile(r"error|exception|traceback|failed|fatal|killed|abort|timed? ?out", re.I)
#: matches kept per log (the earliest), and per signature: bounds the work on a log of a million distinct ranks
MAX_MATCHES = 400
MAX_PER_SIGNATURE = 64
#: Consequences of another rank's failure (never the first real failure when something else is found): a peer's
#: connection gone, the launcher's signals and summaries, an aborted communicator.
CASCADE = re.compile(r"Connection closed by peer|Connection reset by peer|Broken pipe|SIGTERM|Signal 15|"
                     r"ChildFailedError|exits with return code = -15|Killing subprocess|remote worker crash|"
                     r"communicator was aborted|KeyboardInterrupt|NCCL communicator|DistBackendError", re.I)
#: torch's c10d warnings ("[W socket.cpp:464] ...", "[W601 10:00:00.000 socket.cpp:697] ..."): the store's retries
#: while the master starts, an IPv6 bind that falls back to IPv4; never the failure itself.
C10D_WARNING = re.compile(r"\[W[\d :.]{0,40}\w{1,60}\.cpp:\d{1,6}\]")


def scan(text: str | list[Line], skipped: tuple[int, int] | None = None) -> tuple[list[Match], list[Line]]:
    """Every signature match in ``text`` (a log, or its lines from :func:`read_lines`/:func:`merge`), in line order
    (one per signature and rank, the earliest; at most :data:`MAX_PER_SIGNATURE` ranks per signature and
    :data:`MAX_MATCHES` in all), and the lines. A Python exception that no signature knows (the last line of a
    traceback: ``KeyError: 'input_ids'``) is a ``python-error`` match (LOG805) of its rank, when it is not a
    consequence of another rank's failure.

    A NaN gradient norm on a Trainer log line (``'grad_norm': nan``) after the fp16 loss scaler has reported an
    overflow, with a finite loss on the line, is a step the scaler skipped (:func:`precision.skipped_step`), not a
    failure: it is not a match.

    Raises nothing: any text is a log (binary data is the caller's to refuse)."""
    lines = read_lines(text, skipped) if isinstance(text, str) else text
    matches: list[Match] = []
    seen: set[tuple[str, int | None]] = set()
    per_signature: dict[str, int] = {}
    in_traceback: dict[int | None, bool] = {}  # per rank: a "Traceback" line came, its exception line not yet
    after_file_line: dict[int | None, bool] = {}  # per rank: the previous line was a traceback's "File ..." line
    ignored_next: dict[int | None, bool] = {}  # per rank: "Exception ignored in ...": the next traceback is harmless
    ignoring: dict[int | None, bool] = {}  # per rank: inside that harmless traceback, until its exception line
    overflowed = False  # the fp16 loss scaler has reported a skipped step (precision.OVERFLOW)

    def add(signature: Signature, line: Line, found: re.Match, index: int) -> None:
        # one per rank: the line's, else the one a launcher's line names ("--local_rank=1'] exits with ...")
        key = (signature.name, line.rank if line.rank is not None else _named_rank(found))
        if key not in seen and per_signature.get(signature.name, 0) < MAX_PER_SIGNATURE:
            seen.add(key)
            per_signature[signature.name] = per_signature.get(signature.name, 0) + 1
            matches.append(Match(signature, line, found, index))

    for index, line in enumerate(lines):
        text_line = line.text
        stripped = text_line.lstrip()
        quoted = (after_file_line.get(line.rank, False) and text_line[:1].isspace()) or \
            stripped.startswith(("raise ", "File \""))
        after_file_line[line.rank] = stripped.startswith("File \"")
        if after_file_line[line.rank] and not in_traceback.get(line.rank) and not ignoring.get(line.rank):
            in_traceback[line.rank] = not ignored_next.get(line.rank, False)  # a traceback pasted without its header
        elif ignoring.get(line.rank) and stripped and not quoted and not text_line[:1].isspace():
            ignoring.pop(line.rank)  # the harmless traceback's exception line
        if stripped.startswith("Exception ignored in"):  # at interpreter exit (a __del__): the run's outcome stands
            ignored_next[line.rank] = True
            continue
        if "Traceback (most recent call last)" in text_line:  # also glued to a progress bar's last state
            ignoring[line.rank] = ignored_next.pop(line.rank, False)
            in_traceback[line.rank] = not ignoring[line.rank]
            continue
        if quoted and "(" in text_line:  # a frame's source line: where it stopped (``with ...main_process_first(``)
            for signature in CODE_SIGNATURES:
                found = signature.pattern.search(text_line) if signature.needles_present(text_line) else None
                if found is not None:
                    add(signature, line, found, index)
        if len(text_line) < 6 or quoted:
            continue  # a traceback's source lines quote code (and errors); the exception line itself follows
        if not overflowed and ("OVERFLOW" in text_line or "verflow" in text_line):
            overflowed = overflow_line(text_line) is not None
        if "skipped=" in text_line and (found := stuck(text_line)):  # DeepSpeed's step print: no step applied
            add(STUCK_SIGNATURE, line, found, index)
        needle = NEEDLES.search(text_line) if not C10D_WARNING.match(text_line) or \
            "client socket has failed to connect" in text_line else None  # c10d's retries, but for an unreachable host
        exception = in_traceback.get(line.rank) and ("Error" in text_line or "Exception" in text_line or
                                                     "StopIteration" in text_line) and PYTHON_ERROR.match(stripped)
        if exception:
            in_traceback[line.rank] = False
        wrapped = _unwrapped(lines, index) if len(text_line) >= WRAP_MIN else None
        if not needle and not exception and wrapped is None:
            continue  # most lines of a log: one C-level search over every signature's needles
        known = False
        for signature in candidates(text_line) if needle else ():  # the signatures whose needles the line holds
            found = signature.pattern.search(text_line) if not signature.code else None
            if found is None:
                continue
            known = True
            if signature.name == "nan-grad-norm" and overflowed and skipped_step(line):
                continue  # the norm of a step the fp16 loss scaler skipped
            add(signature, line, found, index)
        for text in wrapped if not known and wrapped else ():  # a message wrapped over two lines: matched as one
            for signature in candidates(text):
                found = signature.pattern.search(text)
                if found is not None and found.start() < len(text_line) < found.end():  # it spans the wrap
                    known = True
                    add(signature, Line(line.number, line.rank, text, line.source), found, index)
            if known:
                break
        if exception and not known and not CASCADE.search(text_line):
            parts = continued(lines, index, most=2) if len(text_line) >= WRAP_MIN else [text_line]
            if len(parts) > 1 and re.search(r"[\w'(,]$", parts[0]):  # an exception line a terminal or an editor
                # wrapped ("...argument 'eval" / "uation_strategy'"): the describers and refiners read it whole
                line = Line(line.number, line.rank, "".join(parts), line.source)
            add(PYTHON_ERROR_SIGNATURE, line, exception, index)
        if len(matches) >= MAX_MATCHES:
            break
    return matches, lines


def _unwrapped(lines: list[Line], index: int) -> list[str] | None:
    """The texts ``lines[index]`` may have been before the terminal wrapped it (:func:`.lines.continued`,
    :func:`.lines.joined`), when they hold a signature's needle near the first line's end; the caller keeps only
    matches that start in the first line and end after it. None otherwise."""
    parts = continued(lines, index)
    if len(parts) == 1 or NEEDLES.search("".join(parts), max(0, len(parts[0]) - 200)) is None:
        return None
    return joined(parts)


#: A traceback's own lines after its exception line: its message continued (tab-indented, as state_dict's size
#: mismatches), a chained exception, and the next traceback's frames.
CONTINUES = re.compile(r"^(?:\s|$)|^The above exception was the direct cause|^During handling of the above exception|"
                       r"^Traceback \(most recent call last\)|^" + EXCEPTION_NAME + r"\b")
#: how far after an error's block :func:`survived` looks for progress of its rank
SURVIVAL_LINES = 5000


def _block_end(match: Match, lines: list[Line]) -> int:
    """The index of the last line of ``match``'s exception block (its own rank's lines; any line without ranks)."""
    end = match.line_index
    for index in range(match.line_index + 1, min(len(lines), match.line_index + 400)):
        line = lines[index]
        if match.line.rank is not None and line.rank not in (match.line.rank, None):
            continue
        if not CONTINUES.match(line.text) or PROGRESS.search(line.text):
            break
        end = index
    return end


def explained(match: Match, matches: list[Match], lines: list[Line]) -> bool:
    """Whether ``match`` is a generic Python error whose own block (the message continued, a chained exception)
    holds a known failure of its rank: that failure says it better."""
    if match.signature is not PYTHON_ERROR_SIGNATURE:
        return False
    end = _block_end(match, lines)
    return any(k.signature is not PYTHON_ERROR_SIGNATURE and k.line.rank == match.line.rank
               and match.line_index < k.line_index <= end for k in matches)


def survived(match: Match, lines: list[Line]) -> bool:
    """Whether the rank of a generic Python error (or of an import failure, :data:`signatures.SURVIVABLE`) went on
    training after it (a handled exception, logged by a data loader that skips the sample, an optional package
    tried): two progress lines of its rank within :data:`SURVIVAL_LINES` after its block. An error with a rank
    prefix (torch's elastic error handler prefixes a rank's traceback, not its prints) needs progress lines of that
    rank: another rank's unprefixed progress says nothing of it (it trained on while this rank's thread died)."""
    if match.signature is not PYTHON_ERROR_SIGNATURE and match.signature.name not in SURVIVABLE:
        return False
    if _in_dead_thread(match, lines):  # a thread's uncaught exception: the rank trains on, waiting on what it lost
        return False
    count = 0
    end = _block_end(match, lines) + 1
    for line in lines[end:end + SURVIVAL_LINES]:
        if (match.line.rank is None or line.rank == match.line.rank) and PROGRESS.search(line.text):
            count += 1
            if count >= 2:
                return True
    return False


def _in_dead_thread(match: Match, lines: list[Line]) -> bool:
    """Whether ``match``'s traceback is a thread's uncaught exception (threading.excepthook: "Exception in thread
    NAME:" before its "Traceback"): the thread is gone (a prefetcher, a data reader), not the error handled."""
    for index in range(match.line_index - 1, max(-1, match.line_index - 200), -1):
        text = lines[index].text
        if TRACEBACK_HEADER in text:
            return index > 0 and lines[index - 1].text.lstrip().startswith("Exception in thread")
    return False


def failures(matches: list[Match], lines: list[Line]) -> tuple[Match | None, list[Match]]:
    """(the first real failure, the other failures in line order). Survived errors are no failure at all and
    explained ones are their known failure's; the first is the earliest match that is neither a consequence of
    another failure nor explained, else the earliest remaining match. A stop from outside (``stopped``) ends what
    can be a cause: what comes after it (ranks killed, errors of ranks shutting down) follows from it and is not
    reported, and the stop is the first failure when nothing came before it."""
    live = [m for m in matches if not survived(m, lines)]
    kept = [m for m in live if not explained(m, matches, lines)]
    stop = next((m for m in kept if m.signature.name == "stopped"), None)
    present = {m.signature.name for m in kept}

    def consequence(m: Match) -> bool:  # of another failure: by its kind, or of one found in this log
        return m.signature.consequence or any(name in present for name in m.signature.follows)

    if stop is None:
        primary = [m for m in kept if not consequence(m)]
        first = (primary or live or [None])[0]
    else:
        before = [m for m in kept if m.line_index < stop.line_index]
        primary = [m for m in before if not consequence(m)]
        first = (primary or before or [stop])[0]
        kept = before + [stop]  # what came after the stop is the run shutting down
    return first, [m for m in kept if m is not first]


def _named_rank(found: re.Match | None) -> int | None:
    """The rank a match's own groups name (``rank``, ``rank2``, ``rank3``: a launcher's line about a rank)."""
    g = found.groupdict() if found is not None else {}
    return _int(next((g[k] for k in ("rank", "rank2", "rank3") if g.get(k)), None), 6)


def _claims_no_error(match: Match, matches: list[Match], lines: list[Line]) -> bool:
    """Whether ``match`` says a rank failed with no error of its own (LOG806, MEM504) while that rank's own error is
    in the log (or, in a log without rank prefixes, any error is): the statement would contradict the finding that
    names that error."""
    if match.signature.name not in ("rank-exit", "host-oom-kill"):
        return False
    rank = _named_rank(match.groups)
    if rank is None:
        rank = summary_rank(match, lines)  # torchrun's summary names the rank on the line above
    ranked = any(ln.rank is not None for ln in lines)
    own = [m for m in matches if not m.signature.consequence and m.signature.name != "stopped"
           and not survived(m, lines)]
    if not ranked:
        return bool(own)
    return rank is not None and any(m.line.rank == rank for m in own)


def _quoted(evidence: str) -> str:
    """Evidence quoting the log, with a traceback's header (a spliced or glued line can carry one) shortened: what
    dsdoctor prints never looks like a traceback of its own."""
    return evidence.replace(TRACEBACK_HEADER, "Traceback (...)") if TRACEBACK_HEADER in evidence else evidence


def explain(text: str | list[Line], skipped: tuple[int, int] | None = None) -> tuple[list[Finding], dict]:
    """Findings for the log ``text`` (or its lines, from :func:`read_lines` or :func:`merge`): the first real
    failure (its rule's ID, severity and title; the evidence from the log with its line number and rank; the fix,
    and the preflight command that would have caught it), then any other distinct failure as ``info``; or LOG800
    with the last error-looking lines. A run stopped from outside while a JIT op build had not finished is ENV329
    (inconclusive between a stale lock and a running build), then LOG807. Also a result dict (``lines``,
    ``ranks``, ``first_failure``, ``matches``, ``skipped_lines``). ``skipped``: see :func:`read_lines`."""
    rules = catalogue()
    matches, lines = scan(text, skipped)
    ranks = sorted({ln.rank for ln in lines if ln.rank is not None})
    result = {"lines": len(lines) + (skipped[1] if skipped else 0),
              "ranks": ranks if len(ranks) <= 64 else ranks[:64] + [f"... {len(ranks) - 64} more"],
              "skipped_lines": [skipped[0] + 1, skipped[0] + skipped[1]] if skipped else None}
    first, others = failures(matches, lines)
    if first is None:
        build = ends_in_build(lines)
        if build is not None:
            line = lines[build["index"]]
            result.update(first_failure={"rule": "ENV329", "signature": "ends-in-build", "line": line.number,
                                         "rank": line.rank}, matches=[], origin=None, finished=False)
            return [rules["ENV329"].finding(
                _quoted(f"{line.at}: the log ends in a JIT op build{' of ' + build['op'] if build['op'] else ''}: "
                        f"{line.text.strip()[:200]}, and nothing after it (no 'Loading extension module'): the ranks "
                        f"hang there, waiting on a build lock, or are still compiling; lock: {build['lock']}"),
                severity="error", fix=_build_fix(build["lock"]),
                title="the run hangs in a JIT op build: a stale build lock or a build still running "
                      "(inconclusive)")], result
        header = ends_in_first_collective(lines)
        if header is not None:
            origin = {"package": "nccl", "file": None, "function": None, "line": None, "code": "", "from": "hang"}
            result.update(first_failure={"rule": "LOG810", "signature": "ends-in-first-collective",
                                         "line": header.number, "rank": header.rank}, matches=[], origin=origin,
                          finished=False)
            return [LOG810.finding(
                _quoted(f"{header.at}: the log ends in nccl-tests' table header and no result row: its first "
                        f"collective never completed (a row is printed as each size finishes), so NCCL hangs "
                        f"between these GPUs; the log does not say why"),
                title="NCCL's first collective hangs (inconclusive)",
                fix="Run it again with NCCL_DEBUG=INFO (the transports it picks: P2P, SHM, NET). A hang that "
                    "NCCL_P2P_DISABLE=1 removes is peer-to-peer between the GPUs: PCIe ACS on the bridges (`sudo "
                    "lspci -vvv | grep -i acsctl`: every 'SrcValid+' blocks it; disable ACS in the BIOS or with "
                    "setpci) or the IOMMU (boot with iommu=pt or off); on GeForce cards P2P is unsupported. One that "
                    "NCCL_SHM_DISABLE=1 removes is /dev/shm. `dsdoctor nccl` runs the same collectives with a "
                    "timeout and names the stage that hangs.")], result
        finding, origin = _unnamed(lines)
        launch = ends_in_launch(lines) if finding.id in ("LOG800", "LOG811") else None
        if launch is not None:  # a launcher's warning before it (LOG811) keeps its origin
            result.update(first_failure={"rule": "LOG810", "signature": "ends-in-launch", "line": launch.number,
                                         "rank": launch.rank}, matches=[], origin=origin, finished=False)
            return [LOG810.finding(
                _quoted(f"{launch.at}: the log ends with the launcher's own start-up line ({launch.text.strip()[:160]})"
                        f" and not one line of the ranks after it: they hang before their first print (a node the "
                        f"launcher cannot reach or start, an import or rendezvous that never returns), or the paste "
                        f"stops there"),
                title="the run stops at its launch (inconclusive)",
                fix="Give the log of each rank (`deepspeed --enable_each_rank_log DIR`, torchrun's --log-dir) and "
                    "what `dsdoctor hang` says of the stuck processes (py-spy stacks); `dsdoctor nccl` with the same "
                    "hosts and MASTER_ADDR checks the rendezvous and the collectives on their own.")], result
        step = ends_at_first_step(lines) if finding.id in ("LOG800", "LOG811") else None
        if step is not None:
            result.update(first_failure={"rule": "LOG810", "signature": "ends-at-first-step", "line": step.number,
                                         "rank": step.rank}, matches=[], origin=origin, finished=False)
            return [LOG810.finding(
                _quoted(f"{step.at}: the log ends in a progress bar at 0% ({step.text.strip()[:80]}) with no error "
                        f"after it: the first step (or evaluation batch) never finished: a hang in the first forward, "
                        f"backward or collective, a data loader that waits for data, or the paste stops there"),
                title="the run stops at its first step (inconclusive)",
                fix="While it hangs, `dsdoctor hang` names the stuck call of every rank (py-spy stacks: a collective, "
                    "a data loader worker, a lock); NCCL_DEBUG=INFO shows whether the first collective started. "
                    "Give the whole log of every rank if it died instead.")], result
        result.update(first_failure=None, matches=[], origin=origin)
        return [finding], result
    if first.signature.name == "stopped":
        build = build_in_flight(lines, first.line_index)
        if build:
            first, others = Match(BUILD_SIGNATURE, lines[build["index"]], None, build["index"],
                                  {**build, "stop": first}), [first] + others
    findings = []
    reported: set[str] = set()
    ctx = run_context(lines)
    for match in [first] + others:
        if match is not first and _claims_no_error(match, matches, lines):
            continue
        if match is not first and match.signature.name == "stopped" and first.signature is not BUILD_SIGNATURE:
            match = replace(match, info={"after": first})  # stopped after a failure of its own: say so
        match.context = ctx
        evidence, fix, extra = _described(match, lines)
        target: Rule = rules[extra.get("rule") or match.signature.rule_id]  # a describer may name a narrower rule
        crossed = None  # an unnamed Python error that a rule names after all, read with the lines around it
        for refine, rule_id in PYTHON_ERROR_REFINERS if match.signature is PYTHON_ERROR_SIGNATURE else ():
            crossed = refine(match, lines)
            if crossed is not None:
                evidence, fix, extra = crossed[0], crossed[1], {**extra, "title": crossed[2]}
                target = rules[rule_id]
                break
        raiser = frame_origin(lines, match.line_index, match.line.rank) \
            if match.signature is PYTHON_ERROR_SIGNATURE and crossed is None else None
        found = _catalogued(match.line.text, (raiser or {}).get("package")) \
            if match.signature is PYTHON_ERROR_SIGNATURE and crossed is None else None
        origin = None
        if found is not None:  # no signature names it, but the catalogue knows whose message it is, and a rule may
            quoted = _template_rule(found)  # quote it (coverage.rule_of)
            target = quoted or LOG809
            evidence = f"{evidence}; {found.entry.origin()}" + (f" (the message of {target.id})" if quoted else "")
            fix = ""
            origin = _frame_or_catalogue(_raising_frame(lines, match.line_index), found, match.line.text)
        elif match.signature is PYTHON_ERROR_SIGNATURE:  # nor the catalogue: the code that raised it (in evidence)
            origin = failure_origin(lines, match.line_index, match.line.rank)
        elif match is first:  # a rule names it; where the library says it, when the catalogue knows the line
            named = _catalogued(match.line.text)
            origin = _frame_or_catalogue(_raising_frame(lines, match.line_index), named, match.line.text) \
                if named is not None else None
            if origin is None and target.id in ("LOG805", "LOG809", "LOG810"):  # no rule after all: whose code it is
                origin = extra.get("origin") or failure_origin(lines, match.line_index, match.line.rank) or \
                    frame_origin(lines) or cpp_origin(match.line.text)
            elif origin is None:  # a rule names it: whose code it is, as its describer knows it (NCCL's result
                origin = extra.get("origin") or _raised_at(match, lines)  # code in torch's error), or as the log says
        if match is first and origin is not None:
            result["origin"] = origin
        if target.id in reported:
            continue
        reported.add(target.id)
        where = f"{match.line.at}: "
        fix = fix or target.fix
        if match.signature.caught_by and "`dsdoctor" not in fix:
            note = f" {match.signature.caught_note}" if match.signature.caught_note else ""
            fix += f" Before launch: `{match.signature.caught_by}`{note}."
        fix = localize(fix, ctx)
        if match is first:  # what ended the run (whatever the rule's preflight severity), unless the run finished
            ended = not finished(lines, matches) or first.signature.spoils
            result["finished"] = not ended
            title = extra.get("title") or target.title
            if match.signature is BUILD_SIGNATURE:
                title = "the run hung in a JIT op build: a stale build lock or a build still running (inconclusive)"
            findings.append(target.finding(_quoted(where + evidence), severity="error" if ended else "warning", fix=fix,
                                           title=title if ended else f"the run finished, but: {target.title}"))
        else:
            title = "the run was stopped from outside (a signal)" if target.id == LOG807.id else \
                extra.get("title") or target.title
            findings.append(target.finding(_quoted(where + evidence), severity="info", title=f"later: {title}",
                                           fix=fix))
        if len(findings) >= 6:
            break
    result["first_failure"] = {"rule": findings[0].id if findings else first.signature.rule_id,
                               "signature": first.signature.name,
                               "line": first.line.number, "rank": first.line.rank}
    if first.line.source:
        result["first_failure"]["file"] = first.line.source
    result["matches"] = [{"rule": m.signature.rule_id, "signature": m.signature.name, "line": m.line.number,
                          "rank": m.line.rank, **({"file": m.line.source} if m.line.source else {})}
                         for m in matches[:50]]
    return findings, result


#: What says a run failed, when no signature matched (LOG810 rather than LOG800): a traceback, an exception's line,
#: NCCL's WARN, a fatal or FAILED line, a non-zero exit code.
FAILED_LINE = re.compile(r"Traceback \(most recent call last\)|\b\w{0,60}(?:Error|Exception)\b:|\bNCCL WARN\b|"
                         # NCCL before 2.4: "include/socket.h:344 WARN Socket creation failed : ..."
                         r"\b[\w/.-]{1,200}\.(?:h|cc|cu|cpp):\d{1,6} WARN\b|"
                         r"\b(?:[Ff]atal|FATAL)\b|\bFAILED\b|\bERROR\b|[Ee]xit(?:ed|s)? (?:with )?(?:status|code|"
                         r"return code)\s{0,3}=?\s{0,3}-?[1-9]|"
                         # a traceback's tail pasted alone: a frame, or the raise or assert it quotes
                         r"^\s*File \"[^\"\n]{1,500}\", line \d{1,7}, in |(?:^|\s)raise [A-Z]\w{0,80}\(|^\s*assert\s|"
                         # argparse's refusal (its exit code 2): "train.py: error: the following arguments are ..."
                         r"^[\w./-]{1,200}\.py: error: |"
                         # ssh, which pdsh and launch scripts run on every node of a hostfile
                         r"\bssh: connect to host \S{1,200} port \d{1,5}: |\bHost key verification failed\b|"
                         r"Permission denied \(publickey|"
                         # libtorch's C++ exceptions (c10/util/Exception.cpp): "Exception raised from recvBytes at
                         # ../torch/csrc/distributed/c10d/Utils.hpp:604 (most recent call first)"
                         r"\bException raised from \w{1,100} at \S{1,300}:\d{1,6}|"
                         # the C++ runtime aborting the process (std::terminate: a thread still running at exit, an
                         # exception thrown through a destructor): SIGABRT follows
                         r"\bterminate called (?:after throwing|without an active exception|recursively)")
#: substrings one of which every line FAILED_LINE matches holds: the regex runs only on those (a log of free text
#: is mostly lines without any, and the regex's character classes cost at every position)
FAILED_NEEDLES = re.compile(r"Traceback|Error|Exception|WARN|[Ff]atal|FATAL|FAILED|ERROR|[Ee]xit|File \"|raise |assert|"
                            r": error: |ssh: |Host key|Permission denied|terminate called")


def failed_line(text: str) -> bool:
    """Whether ``text`` says a run failed (:data:`FAILED_LINE`)."""
    return FAILED_NEEDLES.search(text) is not None and FAILED_LINE.search(text) is not None


#: catalogue lookups per log (each is a scan of the whole catalogue, about 15 ms)
MAX_LOOKUPS = 40


def cpp_origin(text: str) -> dict | None:
    """torch's C++ message in ``text`` (:func:`dsdoctor.messages.catalogue.cpp_origin`): the last resort of an origin,
    after the traceback's frames, which say whose code called the op."""
    from dsdoctor.messages.catalogue import cpp_origin as lookup_cpp

    return lookup_cpp(text[:2000])


#: (refiner, rule) tried in turn on an unnamed Python error: another package's object lacking what the raising
#: package expects is a version mismatch (ENV310); None from a load_checkpoint that found no checkpoint is the missing
#: path (PRE014). A refiner returns (evidence, fix, title) or None.
PYTHON_ERROR_REFINERS = ((imports.mpi_fallback, "PRE023"), (imports.object_attribute, "ENV310"),
                         (imports.training_arguments_field, "HF205"), (imports.misspelled_keyword, "LOG805"),
                         (imports.keyword_of_another_version, "ENV310"),
                         (none_from_missing_checkpoint, "PRE014"))


def _raised_at(match: Match, lines: list[Line]) -> dict | None:
    """Where a failure a rule names was raised, when its own line says: an exception line's traceback (its
    qualified name, the class its message names, the innermost frame just above it), a library file the line
    names (a compiler's ``.../deepspeed/ops/csrc/includes/x.h:12:10: fatal error``), or NCCL's ``file:line WARN``;
    else None (a launcher's or a summary's line says nothing of where)."""
    text = match.line.text.strip()
    if PYTHON_ERROR.match(text) or OBJECT_CLASS.search(text):
        above = lines[match.line_index - 1].text if match.line_index else ""
        if exception_origin(text) or above[:1].isspace() or "File \"" in above:  # the traceback ends right here
            return failure_origin(lines, match.line_index, match.line.rank)
    if match.signature.name.startswith("op-build"):  # the build's first compiler error names the source it failed on
        for line in lines[max(0, match.line_index - 300):match.line_index]:
            if COMPILER_ERROR.search(line.text):
                found = mentioned_origin(line.text)
                if found:
                    return found
    return mentioned_origin(text) or nccl_origin([match.line])


#: a compiler's error line: ``path/x.h:12:10: fatal error: ...``, nvcc's ``path/x.cu(40): error: ...``
COMPILER_ERROR = re.compile(r"\.(?:h|hpp|cuh|cu|cpp|cc)(?::\d{1,6}:\d{1,4}:|\(\d{1,6}\):) (?:fatal )?error\b")


def _catalogued(text: str, prefer: str | None = None):
    """The catalogue's template (:func:`dsdoctor.messages.catalogue.lookup`) of a failure's line, when it matched as
    a whole, else None; of equal matches, one of package ``prefer``."""
    from dsdoctor.messages.catalogue import lookup

    found = lookup(text[:2000], prefer)
    return found if found is not None and found.whole else None


def _unnamed(lines: list[Line]) -> tuple[Finding, dict | None]:
    """No signature matched: the first failure-looking line whose message the catalogue knows (LOG809, its origin), or
    the failure-looking lines (LOG810, inconclusive, with the traceback's innermost frame where the log has one), or
    a library's own warning in a log that shows no failure (LOG811), or LOG800 for a log that shows no failure or a
    run that finished (:func:`finished`: a handled exception, one ignored at exit, a retried NCCL connection are no
    failure). Also the origin (:mod:`.origin`) or None."""
    done = finished(lines, [])
    failing = [] if done else [ln for ln in lines if failed_line(ln.text) and not CASCADE.search(ln.text)]
    where = {id(ln): i for i, ln in enumerate(lines)}
    for ln in [ln for ln in failing if TRACEBACK_HEADER not in ln.text][:MAX_LOOKUPS]:
        shown = ln.text.strip()
        raiser = _raising_frame(lines, where[id(ln)])
        prefer = (raiser or {}).get("package")
        found = _catalogued(ln.text, prefer)
        literal = _raised_literal(lines, ln) if found is None else ""
        if literal:
            found = _catalogued(literal, prefer)
            shown = f"{shown} \"{literal}\"" if found is not None else shown
        if found is not None and found.entry.kind not in ("nccl-info",):
            return (_template_finding(ln, found, f"{ln.at}: {shown[:240]}; {found.entry.origin()}"),
                    _frame_or_catalogue(raiser, found, ln.text))
    tail = [ln for ln in lines if ERRORISH.search(ln.text) and not CASCADE.search(ln.text)
            and TRACEBACK_HEADER not in ln.text][-5:]  # a traceback's header says nothing its last line does not
    shown = " | ".join(f"{ln.at}: {ln.text.strip()[:160]}" for ln in tail) or "(no error-looking lines)"
    near = _approximately(failing or lines) if not done else None  # a message retyped or reworded at a few places
    if near is not None:  # (a typo, quotes for backticks, another version's spacing: "batch size.Please set")
        ln, found = near
        return (_template_finding(ln, found, f"{ln.at}: {ln.text.strip()[:240]}; approximately (the wording "
                                             f"differs at a few places): {found.entry.origin()}"),
                _frame_or_catalogue(_raising_frame(lines, where[id(ln)]), found, ln.text))
    lost = None if failing or done else next((ln for ln in lines if CASCADE.search(ln.text) and failed_line(ln.text)
                                              and PYTHON_ERROR.match(ln.text.strip())), None)
    if lost is not None:  # only errors of ranks whose peer went away: the rank that failed first is not in the paste
        return (LOG806.finding(_quoted(f"{lost.at}: {lost.text.strip()[:240]} (this rank lost a peer: another rank "
                                       f"failed or exited before it, and that rank's own error is not in this log)")),
                None)
    if failing:
        shown = " | ".join(f"{ln.at}: {ln.text.strip()[:160]}" for ln in (tail or failing[-5:]))
        first = next((i for i, ln in enumerate(lines) if ("Error" in ln.text or "Exception" in ln.text) and
                      (PYTHON_ERROR.match(ln.text.strip()) or OBJECT_CLASS.search(ln.text))), None)
        origin = (failure_origin(lines, first, lines[first].rank) if first is not None else None) or \
            frame_origin(lines) or next((o for o in (mentioned_origin(ln.text) for ln in failing[:MAX_LOOKUPS]
                                                    if ".py" in ln.text) if o), None) or nccl_origin(failing) or \
            next((o for o in (cpp_origin(ln.text) for ln in failing[:MAX_LOOKUPS]) if o), None)
        return (LOG810.finding(_quoted(f"{len(failing)} failure-looking line(s) in {len(lines):,} lines, none that "
                                       f"dsdoctor can name; the last: {shown}"
                                       + (f"; {describe_frame(origin)}" if origin else ""))), origin)
    said = library_message(lines, raised=not done)
    if said is not None and done and said[1].entry.kind not in ("raise", "assert"):
        said = None  # a run that ended well: its routine warnings are no headline
    if said is not None:
        ln, found = said
        if found.entry.kind in ("raise", "assert"):  # a library's error message pasted without its exception's name
            return (LOG809.finding(_quoted(f"{ln.at}: {ln.text.strip()[:240]}; {found.entry.origin()}")),
                    catalogue_origin(found.entry, ln.text))
        return (LOG811.finding(_quoted(f"{ln.at}: {ln.text.strip()[:240]}; {found.entry.origin()}; no failure in "
                                       f"{len(lines):,} lines")), catalogue_origin(found.entry, ln.text))
    if not tail:  # nothing error-looking at all: perhaps no log of a run (prose, data, another program's output)
        return LOG800.finding(_quoted(f"no known failure found in {len(lines):,} lines, and no error-looking line"),
                              fix="Give the output of the run that failed: every rank's, from its start (`deepspeed "
                                  "--enable_each_rank_log DIR`, torchrun's --log-dir) to its last line."), None
    return LOG800.finding(_quoted(f"no known failure found in {len(lines):,} lines; last error-looking lines: "
                                  f"{shown}")), None


def _frame_or_catalogue(raiser: dict | None, found, text: str) -> dict:
    """The origin of a catalogued message (``found``, on the line ``text``): ``raiser``, the frame right above it that
    raised it (:func:`_raising_frame`: the line that ran, with the template's versions where it is the template's
    file; its own where it is another package's or file's than the template found, another version of the package
    or a copy of the message: torch's cuda/amp/grad_scaler.py and its FSDP copy both say "Attempting to unscale FP16
    gradients."), else the template's (:func:`catalogue_origin`)."""
    if raiser is None:
        return catalogue_origin(found.entry, text)
    if (raiser["package"], raiser["file"]) == (found.entry.package, found.entry.file):  # the line that ran, and the
        return {**raiser, "versions": found.entry.version_span()}  # versions whose source says it
    return raiser


def _raising_frame(lines: list[Line], index: int) -> dict | None:
    """The innermost frame of the traceback that ``lines[index]`` ends (its exception line, or the quoted source
    line of that frame: ``raise RuntimeError('Unsloth currently does not support multi GPU setups ...')`` under
    ``File ".../unsloth/models/llama.py", line 1878``), when that frame is right above it and is a package's; None
    otherwise (a line far from any traceback, a user's script)."""
    above = [ln.text for ln in lines[max(0, index - 3):index]]
    if not any("File \"" in text for text in above[-2:]) and not (above and above[-1][:1].isspace()):
        return None
    frame = frame_origin(lines, index, lines[index].rank)
    return frame if frame is not None and frame.get("package") else None


#: a quoted statement that opens a raise whose message is on the lines after it (rich's and IPython's tracebacks show
#: the whole statement): ``raise ValueError(``
RAISE_OPEN = re.compile(r"(?:^|\s)raise [A-Z]\w{0,80}\(\s*$")
#: a string literal's text on a source line: ``"DeepSpeed Zero-3 is not compatible with ...`` (f-prefix allowed)
LITERAL = re.compile(r"^\s*[frbFRB]{0,2}[\"'](?P<text>[^\"'\n]{8,})")


def _raised_literal(lines: list[Line], ln: Line) -> str:
    """The message a quoted ``raise X(`` statement holds on the source lines after it (the string literals, joined,
    at most 4 lines), or "" when ``ln`` opens no raise or none follows."""
    if not RAISE_OPEN.search(ln.text):
        return ""
    index = next((i for i, other in enumerate(lines) if other is ln), None)
    parts = []
    for other in lines[index + 1:index + 5] if index is not None else []:
        found = LITERAL.match(other.text)
        if not found:
            break
        parts.append(found.group("text").rstrip().rstrip("\"'"))
    return " ".join(parts)


def _template_finding(ln: Line, found, evidence: str) -> Finding:
    """The finding for a line that holds a catalogue template no signature matched on the line itself (the paste lost
    the backticks a signature needs, or reworded the message): the rule whose signature matches the template's own
    text (:func:`dsdoctor.messages.coverage.rule_of`, the same mapping the coverage report counts), else LOG809."""
    rule = _template_rule(found)
    if rule is None:
        return LOG809.finding(_quoted(evidence))
    return rule.finding(_quoted(f"{evidence} (the message of {rule.id})"))


def _template_rule(found) -> Rule | None:
    """The rule of a catalogue template (:func:`dsdoctor.messages.coverage.rule_of`: the signature that matches its
    own text, or the one rule whose documentation quotes it), or None."""
    from dsdoctor.messages.coverage import FILL, rule_of

    rule_id = rule_of("".join(FILL if p is None else p for p in found.entry.parts))
    return catalogue().get(rule_id) if rule_id else None


def _approximately(lines: list[Line]):
    """(line, :class:`dsdoctor.messages.catalogue.Found`) of the last error-looking lines' first message that the
    catalogue holds approximately (:func:`dsdoctor.messages.catalogue.approximate`), or None."""
    from dsdoctor.messages.catalogue import approximate

    for ln in [ln for ln in lines if ERRORISH.search(ln.text)][-MAX_LOOKUPS:]:
        found = approximate(ln.text)
        if found is not None:
            return ln, found
    return None


def _described(match: Match, lines: list[Line]) -> tuple[str, str, dict]:
    """(evidence, fix, extra) from a signature's describer, which returns (evidence, fix) or (evidence, fix, extra):
    ``extra`` may hold a ``title`` for what the log shows, where the rule's own title is the preflight check's."""
    described = match.signature.describe(match, lines)
    return (described[0], described[1], described[2] or {}) if len(described) > 2 else (*described, {})


def pitfall_findings(text: str, already: set[str] = frozenset()) -> list[Finding]:
    """The named pitfall of a failed run's output (``smoke`` on its own runs): :func:`explain`'s first finding, as
    an error, unless nothing was recognised (LOG800, LOG810), it is an unnamed Python error (LOG805: smoke's TRN607
    already gives it), the run being stopped (LOG807: smoke stopped it, and says why), or its rule is among ``already``
    reported."""
    findings, _ = explain(text)
    first = findings[0]
    if first.id in (LOG800.id, LOG805.id, LOG807.id, LOG810.id) or first.id in already:  # nothing named: smoke's own TRN6xx say it
        return []
    return [first]
