"""How a log ends, where no error says what happened: a run that finished (its last lines say so), a run stopped
while a JIT op build was under way (ENV329: a stale build lock or a build still running), and a log that stops at the
launcher's start, at the first step (a progress bar at 0%), or in nccl-tests' header (its first collective)."""

from __future__ import annotations

import re

from .evidence import _where
from .launch import _signal_of, _silence
from .lines import PROGRESS, Line
from .signatures import Match, Signature

#: a traceback's first line
TRACEBACK_HEADER = "Traceback (most recent call last)"

#: A run that ended well says so in its last lines: DeepSpeed's launcher per rank, the Trainer's summary.
FINISHED = re.compile(r"exits successfully|'train_runtime':|\bTraining completed\b")


def finished(lines: list[Line], matches: list[Match]) -> bool:
    """Whether the run ended well: a success line among the last 30, and no rank failing after it, and no traceback
    after it (the Trainer prints 'train_runtime' before save_model, which can still fail: nothing saved)."""
    tail = [i for i in range(max(0, len(lines) - 30), len(lines)) if FINISHED.search(lines[i].text)]
    if not tail:
        return False
    if any(TRACEBACK_HEADER in lines[i].text and not lines[i - 1].text.lstrip().startswith("Exception ignored in")
           for i in range(tail[0] + 1, len(lines))):
        return False  # a traceback after the summary (not one Python ignores at exit)
    return not any(m.signature.name in ("rank-exit", "host-oom-kill") and m.line_index > tail[0] for m in matches)


# --- a stopped run that hung in a JIT op build (ENV329) ------------------------------------------------------------

#: torch's JIT builder (torch/utils/cpp_extension.py _get_build_directory, _jit_compile, _write_ninja_file_and_build_
#: library) and DeepSpeed's op builder (deepspeed/ops/op_builder/builder.py jit_load; comm/torch.py build_shm_op)
BUILD_ROOT = re.compile(r"Using\s{1,3}(\S{1,500}) as PyTorch extensions root\.\.\.")
BUILD_STEP = re.compile(r"Creating extension directory (?P<dir>\S{1,500})\.\.\.|Emitting ninja build file "
                        r"(?P<file>\S{1,500})\.\.\.|Building extension module (?P<op>\w{1,100})\.\.\.")
BUILD_DONE = re.compile(r"Loading extension module \w{1,100}\.\.\.|Time to load \w{1,100} op:|"
                        r"DeepSpeed deepspeed\.ops\.[\w.]{1,100} built successfully")
PYTHON_VERSION = re.compile(r"/python3\.(\d{1,2})/")


def build_in_flight(lines: list[Line], stop_index: int) -> dict | None:
    """The JIT op build that had started and not finished when the run was stopped at ``lines[stop_index]``, or None.

    torch prints 'Using ROOT as PyTorch extensions root...' when a build (or the wait for another process's build
    lock) starts, 'Creating extension directory', 'Emitting ninja build file' and 'Building extension module OP' while
    building, and 'Loading extension module OP...' when done (verbose builds); DeepSpeed prints 'Time to load OP op'
    and, for the CPU accelerator's shm comm op, 'DeepSpeed deepspeed.ops.comm.deepspeed_shm_comm_op built
    successfully'. More starts than ends before the stop: a build in flight. Without verbose build lines (DeepSpeed
    0.19 loads its ops with verbose=False): a run on DeepSpeed's CPU accelerator that never printed its shm op's
    line, nor anything of init_distributed or training after it, was in that build or before it (``inferred``).

    Returns {'index': the index in ``lines`` where it started, 'op': name or None, 'root': the extensions root or
    None, 'lock': the lock path, as a shell word where the log does not name it (torch's root is TORCH_EXTENSIONS_DIR
    itself when set, else ~/.cache/torch_extensions/py3X_<device>: cpp_extension.py _get_build_directory; ``*`` for
    an op it does not name), 'inferred': bool}."""
    pending, start, op, root = 0, None, None, None
    cpu, shm_done, later = None, False, False
    for index, line in enumerate(lines[:stop_index]):
        text = line.text
        if "PyTorch extensions root" in text and BUILD_ROOT.search(text):
            pending += 1
            start, op, root = index, None, BUILD_ROOT.search(text).group(1)
        elif pending and ("extension" in text or "ninja" in text) and BUILD_STEP.search(text):
            step = BUILD_STEP.search(text)
            folder = step.group("dir") or (step.group("file").rsplit("/", 1)[0] if step.group("file") else None)
            if folder:
                root, op = folder.rsplit("/", 1) if "/" in folder else (root, folder)
            op = step.group("op") or op
        elif ("Loading extension" in text or "Time to load" in text or "built successfully" in text) and \
                BUILD_DONE.search(text):
            pending = max(0, pending - 1)
            shm_done = shm_done or "shm_comm" in text
        if "Setting accelerator to CPU" in text or "Setting ds_accelerator to cpu" in text:
            cpu = index  # the last rank's
        elif "Initializing TorchBackend" in text or PROGRESS.search(text):
            later = True
    version = next((m.group(1) for m in (PYTHON_VERSION.search(ln.text) for ln in lines[:4000] if "/python3." in
                                          ln.text) if m), None)
    default_root = f"${{TORCH_EXTENSIONS_DIR:-$HOME/.cache/torch_extensions/py3{version or 'X'}_" \
                   f"{'cpu' if cpu is not None else '<device>'}}}"
    if pending and start is not None:
        return {"index": start, "op": op, "root": root, "inferred": False,
                "lock": f"{root or default_root}/{op or '*'}/lock"}
    if cpu is not None and not shm_done and not later:
        return {"index": cpu, "op": "deepspeed_shm_comm", "root": None, "inferred": True,
                "lock": f"{default_root}/deepspeed_shm_comm/lock"}
    return None


def _describe_build(match: Match, lines: list[Line]) -> tuple[str, str]:
    build, stop = match.info, match.info["stop"]
    _, name = _signal_of(stop)
    when = (f"{_silence(match.line, lines, stop.line_index)[2:-1] or 'before the stop'} ({stop.line.at}, "
            f"{name or 'a stop'})")
    if build["inferred"]:
        evidence = (f"the ranks' last output is DeepSpeed's start-up on its CPU accelerator, {when}; on that "
                    f"accelerator deepspeed.init_distributed() first JIT-builds the shm comm op deepspeed_shm_comm, "
                    f"and its 'deepspeed_shm_comm_op built successfully' line never came: the ranks were in that "
                    f"build or waiting on its lock (or stuck before it); lock: {build['lock']}")
    else:
        evidence = (f"a JIT op build{' of ' + build['op'] if build['op'] else ''} started "
                    f"({match.line.text.strip()[:200]}) and had not finished (no 'Loading extension module' after "
                    f"it) {when}; lock: {build['lock']}")
    return _where(match) + evidence, _build_fix(build["lock"])


def _build_fix(lock: str) -> str:
    return (f"Inconclusive between a stale build lock and a build still running: a log alone cannot tell them apart. "
            f"Check: `ls -l {lock}` and `dsdoctor env`. A lock that no running build holds (no ninja, c++ or nvcc in "
            f"`ps -ef`) is stale: `rm {lock}`, then run again (the op is rebuilt once). A build still running "
            f"finishes on its own: give the run more time.")


def ends_in_build(lines: list[Line]) -> dict | None:
    """The JIT op build a log ends in (:func:`build_in_flight` at its end, with nothing after the build's start but
    more of its own lines, such as the other ranks' 'Using ROOT as PyTorch extensions root...'), or None: a run
    pasted while it hung there, waiting on torch's FileBaton lock or still compiling."""
    build = build_in_flight(lines, len(lines))
    if build is None or build["inferred"]:
        return None
    after = [ln for ln in lines[build["index"] + 1:] if ln.text.strip()]
    if any(not (BUILD_ROOT.search(ln.text) or BUILD_STEP.search(ln.text)) for ln in after):
        return None
    return build


BUILD_SIGNATURE = Signature("build-in-flight", "ENV329", (), BUILD_ROOT, _describe_build)

#: nccl-tests' table header (src/common.cu: '#  out-of-place  in-place', then the columns 'size count type redop
#: root time algbw busbw #wrong', older releases 'bytes N type op time algbw busbw res') and its units line
NCCL_TESTS_HEADER = re.compile(r"\b(?:bytes|size)\s{1,40}(?:N|count)\s{1,40}type\b[^\n]{0,200}\balgbw\s{1,20}busbw\b")
NCCL_TESTS_UNITS = re.compile(r"\(B\)\s{1,40}\(elements\)|out-of-place\s{1,80}in-place")


#: the launcher's own lines (DeepSpeed's runner.py, launch.py, multinode_runner.py and accelerator detection; torchrun's
#: OMP_NUM_THREADS banner): what a run prints before any rank does
LAUNCHER_LINE = re.compile(r"\[(?:runner|launch|multinode_runner|real_accelerator|constants)\.py:\d{1,6}:"
                           r"(?!sigkill_handler)\w{1,60}\]|"  # (its kills follow a failure: no start-up line)
                           r"Setting OMP_NUM_THREADS environment variable|^\s*\*{20,}\s*$")


def ends_in_launch(lines: list[Line]) -> Line | None:
    """The launcher line a log ends with, when no line of a rank follows the launch (its last non-blank line is the
    launcher's), or None."""
    tail = [ln for ln in lines[-12:] if ln.text.strip() and not ln.text.strip().startswith("```")]
    if not tail or not LAUNCHER_LINE.search(tail[-1].text) or finished(lines, []) or \
            any(FINISHED.search(ln.text) for ln in tail):
        return None  # the launcher's last word is that every rank ended well
    return tail[-1]


#: tqdm's bar at its start (``  0%|          | 0/12884 [00:00<?, ?it/s]``, a paste cut inside it: ``  0%|▍``): no step
#: (or evaluation batch) has finished
PROGRESS_START = re.compile(r"(?:^|\r)\s{0,8}0%\|")


def ends_at_first_step(lines: list[Line]) -> Line | None:
    """The progress bar at 0% a log ends with (its last non-blank line), when the log shows no finish, or None: the
    run (or its evaluation) never finished its first step there."""
    tail = [ln for ln in lines[-12:] if ln.text.strip() and not ln.text.strip().startswith("```")]
    if not tail or not PROGRESS_START.search(tail[-1].text) or finished(lines, []) or \
            any(FINISHED.search(ln.text) for ln in tail):
        return None
    return tail[-1]


def ends_in_first_collective(lines: list[Line]) -> Line | None:
    """The nccl-tests table header a log ends in, with no result row after it (only its units line or blank ones),
    or None: the benchmark's first collective never completed (nccl-tests prints a row per size as each finishes)."""
    for index in range(len(lines) - 1, max(-1, len(lines) - 6), -1):
        text = lines[index].text
        if NCCL_TESTS_HEADER.search(text):
            after = [ln for ln in lines[index + 1:] if ln.text.strip(" >#\t")]
            return lines[index] if all(NCCL_TESTS_UNITS.search(ln.text) for ln in after) else None
        if text.strip(" >#\t") and not NCCL_TESTS_UNITS.search(text):
            return None
    return None
