"""Failed-run logs (``dsdoctor explain``, and ``smoke`` on its own failed runs): the first real failure in a log of
interleaved ranks, named with the rule ID of the preflight check that would have caught it (``LOG8xx`` where no
preflight check can).

A log is read line by line: ANSI colours are removed, and a rank prefix is recognised and set aside (torchrun's
``[rank3]:`` and ``[default3]:``, srun's ``3:``, pdsh's ``host:`` from the deepspeed multi-node launcher). Each
:class:`Signature` is a pattern of one failure, with a cheap substring test in front of its regular expression (a
10,000-line log is read in well under a second). The *first real failure* is the earliest line that matches a
signature which is not a consequence of another failure: a rank killed by a signal, a connection reset by a peer that
died, a launcher's "exits with return code" summary and torchrun's ``ChildFailedError`` come after the cause; they are
the cause only when nothing else was found. A run stopped from outside (a signal: Ctrl-C, a timeout, the scheduler)
says so, with what its ranks were doing when the signal came (an op build that never finished: ENV329).

Every pattern is bounded (no unbounded repetition that can backtrack over a long run of digits, dots or letters: a
lookbehind anchors a leading number, gaps are ``.{0,N}``), and each line is matched on at most :data:`LINE_CHARS`
characters, so that a hostile or broken log is read in linear time. Numbers from a log are never trusted with memory:
ranks have at most 6 digits, a world size is used only up to :data:`MAX_WORLD`, a longer number is shown as text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable

from dsdoctor.report import Finding
from dsdoctor.rules import Rule, catalogue, rule

LOG800 = rule(
    "LOG800", "info", "no known failure found",
    what="The log holds no failure that dsdoctor recognises.",
    why="The run may have ended for a reason not in the catalogue, or the log is cut before the failure.",
    fix="Read the last error-looking lines (in the evidence); `dsdoctor rules` lists what explain recognises.",
    source="dsdoctor explain")
LOG801 = rule(
    "LOG801", "error", "a collective timed out (NCCL watchdog, gloo)",
    what="A collective waited longer than the process group's timeout (NCCL's watchdog, 30 minutes by default; 10 "
         "in some torch versions; gloo's own timeout on CPU groups) and the job was aborted.",
    why="One rank stopped calling collectives while the others waited in one: it was busy elsewhere (rank 0 "
        "tokenising a large dataset, saving, evaluating), crashed earlier, or the network between the ranks hangs.",
    fix="The ranks that did not time out are the suspects. For long preprocessing: preprocess before launching, or "
        "raise the timeout (TrainingArguments ddp_timeout=7200; deepspeed.init_distributed(timeout=timedelta("
        "hours=2))). For a network hang: `dsdoctor nccl` names the stage and the rank.",
    source="torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (the watchdog's message); "
           "https://github.com/hiyouga/LlamaFactory/issues/2424")
LOG802 = rule(
    "LOG802", "error", "the model needs trust_remote_code, in a run that cannot answer",
    what="transformers asked whether to run the model repository's own code (ChatGLM, Qwen v1, Baichuan, InternLM), "
         "and the run has no terminal to answer on.",
    why="Every rank waits for the prompt or fails with EOFError / 'trust_remote_code=True' ValueError.",
    fix="Read the repository's modeling code, then pass trust_remote_code=True to from_pretrained (LLaMA-Factory and "
        "most scripts: --trust_remote_code), or use a transformers-native checkpoint of the model.",
    source="transformers/dynamic_module_utils.py resolve_trust_remote_code")
LOG803 = rule(
    "LOG803", "error", "LoRA target modules not in the model",
    what="peft found none of the LoRA target module names in the model.",
    why="Target names are per architecture: q_proj/v_proj (Llama, Qwen2, Mistral) do not exist in ChatGLM "
        "(query_key_value), Baichuan (W_pack), InternLM2 (wqkv) or Qwen v1 (c_attn).",
    fix="Set the targets to the model's own linear names (`dsdoctor estimate --model M --method lora` lists them; "
        "or peft's target_modules='all-linear').",
    source="peft/tuners/tuners_utils.py inject_adapter; https://github.com/hiyouga/LlamaFactory/issues/590")
LOG804 = rule(
    "LOG804", "error", "the fine-tuning script refuses ZeRO-3 with LoRA on a base model",
    what="Qwen's finetune.py stops: with LoRA on a base (not chat) model it also trains the embeddings and output "
         "layer (modules_to_save), which ZeRO-3 cannot combine with LoRA there.",
    why="The script's own guard, before any training.",
    fix="Use a ZeRO-2 config for LoRA on a base model, or fine-tune the chat model (no modules_to_save).",
    source="https://github.com/QwenLM/Qwen/issues/1161 (finetune.py)")

LOG805 = rule(
    "LOG805", "error", "a Python error dsdoctor has no rule for",
    what="The first failure in the log is a Python exception that none of explain's signatures names.",
    why="The lines after it (other ranks' connection errors, watchdog timeouts, the launcher's exit codes) follow "
        "from it: they are not the cause.",
    fix="Read the traceback that ends at the line in the evidence, on that rank: its last frames name the code that "
        "raised it (the data pipeline, the model's code, the training script).",
    source="dsdoctor explain (the last line of a traceback)")
LOG806 = rule(
    "LOG806", "error", "a rank failed, and its error is not in this log",
    what="The launcher reports a rank that exited with an error code, and the log holds no error of that rank.",
    why="The rank's own output went elsewhere (DeepSpeed's launcher with each rank's log in a file; torchrun without "
        "--tee, or a traceback torchrun could not record).",
    fix="Keep every rank's output: `deepspeed --enable_each_rank_log DIR ...` then `dsdoctor explain DIR/*.log` "
        "(each file's rank from its name); `torchrun --tee 3 ...` (rank prefixes) or `torchrun --log-dir DIR "
        "--redirects 3 ...` then `dsdoctor explain DIR/*/attempt_*/*/std*.log`; or decorate main with "
        "torch.distributed.elastic.multiprocessing.errors.record so the traceback lands in torchrun's summary.",
    source="deepspeed/launcher/launch.py (sigkill_handler); torch/distributed/elastic/multiprocessing/errors")

LOG807 = rule(
    "LOG807", "error", "the run was stopped from outside (a signal), not by an error of its own",
    what="The launcher or the ranks got a stop signal (SIGTERM, SIGINT: a Ctrl-C, a `timeout`, dsdoctor smoke's "
         "--timeout, the job scheduler's time limit or a preemption) and no failure of the run itself came before it.",
    why="The signal is not the cause: the question is why the run had not finished when it came. The ranks' last lines "
        "before it say where they were (a hang at start-up, in an op build, in a collective; or only slow).",
    fix="Look at what the ranks were doing when the signal came (in the evidence). Silent ranks at start-up: an op "
        "build waiting on a stale lock (`dsdoctor env`), a rendezvous that never completes (`dsdoctor nccl`). Ranks "
        "still training: the run was only slow, give it more time.",
    source="torch/distributed/elastic/multiprocessing/api.py (SignalException, _terminate_process_handler); "
           "deepspeed/launcher/launch.py (sigkill_handler)")

#: Lines that look like errors, for LOG800's evidence.
ERRORISH = re.compile(r"error|exception|traceback|failed|fatal|killed|abort|timed? ?out", re.I)
#: colours and cursor moves (CSI) and terminal titles (OSC, ended by BEL or ST); bounded, so an unterminated
#: sequence costs its own length only
ANSI = re.compile(r"\x1b\[[0-9;?]{0,32}[A-Za-z]|\x1b\][^\x07\x1b\n]{0,256}(?:\x07|\x1b\\)")
#: rank prefixes: torchrun --tee / accelerate ("[rank3]:", "[default3]:"), srun --label ("3: "), pdsh ("host: ");
#: a rank has at most 6 digits (a longer number is text, not a rank)
PREFIX = re.compile(r"^(?:\[(?:rank|default)(?P<r1>\d{1,6})\]:\s?|(?P<r2>\d{1,4}):\s|"
                    r"(?P<host>[A-Za-z][\w.-]{0,62}):\s)")
#: what a line is matched on: at most this many characters (the head and the tail of a longer line)
LINE_CHARS = 8192
#: the largest world size a log's number is taken as (a larger one is not used to list ranks)
MAX_WORLD = 1 << 20
#: matches kept per log (the earliest), and per signature: bounds the work on a log of a million distinct ranks
MAX_MATCHES = 400
MAX_PER_SIGNATURE = 64


@dataclass
class Line:
    """One log line: its number (1-based, in its file), the rank it came from (None when unknown), its text without
    the prefix and colours (at most :data:`LINE_CHARS` characters), and the file it came from when several files are
    read (``source``: the name shown in evidence; None for one log)."""

    __slots__ = ("number", "rank", "text", "source")  # a million of them for a huge log: no __dict__ each
    number: int
    rank: int | None
    text: str
    source: str | None

    @property
    def at(self) -> str:
        """'line N' or 'FILE line N': where the line is, for evidence."""
        return f"{self.source} line {self.number}" if self.source else f"line {self.number}"


@dataclass
class Match:
    """A signature found at ``line``, which is ``lines[line_index]`` of the log."""

    signature: "Signature"
    line: Line
    groups: re.Match | None
    line_index: int
    info: dict | None = None  # what a derived match (ENV329's build in flight) found


@dataclass(frozen=True)
class Signature:
    """One failure's pattern. ``needles``: substrings one of which every matching line contains (tested first);
    ``rule_id``: the rule it is reported under; ``describe(match, lines)`` returns (evidence, fix or "") from the
    match and the whole log; ``consequence``: True for what follows another failure (a killed rank, a reset
    connection), reported only when nothing else is found; ``caught_by``: the command that finds it before launch."""

    name: str
    rule_id: str
    needles: tuple[str, ...]
    pattern: re.Pattern
    describe: Callable[["Match", list[Line]], tuple[str, str]]
    caught_by: str = ""
    consequence: bool = False
    spoils: bool = False  # the run's result is unusable even when the run finishes (NaN loss, empty weights)

    def needles_present(self, text: str) -> bool:
        return any(needle in text for needle in self.needles)


def read_lines(text: str, skipped: tuple[int, int] | None = None, rank: int | None = None,
               source: str | None = None) -> list[Line]:
    """``text`` split into :class:`Line` objects at newlines only (as ``grep -n`` numbers them; a ``\\r`` progress
    bar is one line, kept as its last state), colours and rank prefixes removed (a host prefix before a rank prefix,
    ``node0: [rank3]:``, too). ``skipped`` = (after line, count): that many lines were left out after that line (the
    middle of a huge log), and the numbers after it count them. ``rank``: the rank of lines without a rank prefix
    (a per-rank file's rank, from its name); ``source``: set on every line (several files). A line longer than
    :data:`LINE_CHARS` keeps its head and tail."""
    lines = []
    after, count = skipped or (0, 0)
    hosts: set[str] = set()  # pdsh host prefixes seen on lines that proved them (a timestamp after them)
    half = LINE_CHARS // 2
    for number, raw in enumerate(text.split("\n"), 1):
        if "\r" in raw:
            raw = raw.rstrip("\r")
            raw = raw.rsplit("\r", 1)[-1] or raw.replace("\r", "")
        if len(raw) > LINE_CHARS:
            raw = raw[:half] + " \u2026 " + raw[-half:]
        if "\x1b" in raw:
            raw = ANSI.sub("", raw)
        line_rank = rank
        for _ in range(2):
            found = PREFIX.match(raw)
            host = found.group("host") if found else None
            if host and (host in hosts or _host_prefix(found, raw)):
                hosts.add(host)
            elif not (found and (found.group("r1") or found.group("r2"))):
                break
            if found.group("r1") or found.group("r2"):
                line_rank = int(found.group("r1") or found.group("r2"))
            raw = raw[found.end():]
        lines.append(Line(number + (count if skipped and number > after else 0), line_rank, raw, source))
    if lines and not lines[-1].text:
        lines.pop()  # the final newline
    return lines


def _host_prefix(found: re.Match, raw: str) -> bool:
    """A pdsh ``host: `` prefix, not a Python ``ValueError: ...`` line or a ``key: value`` log line: hosts have no
    upper-case letters at the start and are followed by a timestamp or a bracketed tag, as DeepSpeed's launcher
    prints them."""
    host = found.group("host") or ""
    rest = raw[found.end():]
    return bool(host) and host[0].islower() and not host.endswith(("Error", "Exception")) and \
        bool(HOST_FOLLOWER.match(rest))


#: what follows a pdsh host prefix: a timestamp, a rank prefix, a traceback or an exception line
HOST_FOLLOWER = re.compile(r"\[\d{4}-\d\d-\d\d|\[(?:rank|default)\d{1,6}\]|\d{4}-\d\d-\d\d|Traceback|"
                           r"\w{1,80}?(?:Error|Exception):")


# --- what each signature says ---------------------------------------------------------------------------------------

#: a size as torch prints it ("2.00 GiB", "512 MiB"); the number is bounded and starts at a number's start
SIZE = r"(?<![\d.])\d{1,9}(?:\.\d{1,6})? [KMGT]i?B"
OOM_TRIED = re.compile(rf"Tried to allocate ({SIZE})")
OOM_TOTAL = re.compile(rf"total capacity of ({SIZE})")
OOM_FREE = re.compile(rf"({SIZE}) (?:is )?free")
OOM_ALLOCATED = re.compile(rf"({SIZE}) is allocated by PyTorch|({SIZE}) already allocated")
OOM_RESERVED = re.compile(rf"({SIZE}) is reserved by PyTorch but unallocated|({SIZE}) reserved in total by PyTorch")
OOM_GPU = re.compile(r"\bGPU (\d{1,4})(?!\d)")
GIB = re.compile(r"(\d{1,9}(?:\.\d{1,6})?)\s{0,4}([KMGT])i?B")
#: DeepSpeed's start-up print of its config ('  zero_optimization_stage ...... 2') and its config as JSON lines
DS_SETTING = re.compile(r"(?<!\w)(\w{1,64})\s{0,8}\.{3,}\s{0,8}(\S{1,64})|\"(\w{1,64})\":\s{0,4}(\d{1,12}|true|false)")


def _gib(text: str) -> float | None:
    """``text``'s leading size ('2.00 GiB') in GiB (2^30 bytes), or None."""
    number = GIB.match(text)
    if not number:
        return None
    scale = {"K": 2 ** -20, "M": 2 ** -10, "G": 1, "T": 2 ** 10}[number.group(2)]
    return float(number.group(1)) * scale


def _int(text: str | None, digits: int = 18) -> int | None:
    """The number ``text`` when it has at most ``digits`` digits, else None: a number from a log is shown as text
    beyond that (Python refuses int() of 4,300+ digits, and no batch size or rank has 19)."""
    return int(text) if text and len(text) <= digits and text.isdecimal() else None


def _shown_number(text: str) -> str:
    """A number from the log for evidence: as is, or its first digits and its length when it is very long."""
    return text if len(text) <= 24 else f"{text[:12]}...({len(text):,} digits)"


def _ds_settings(lines: list[Line]) -> dict[str, str]:
    """Values DeepSpeed prints at start-up ('  zero_optimization_stage ...... 2'; its config as JSON lines) and
    the Trainer's arguments, when the log has them: what ``dsdoctor estimate`` should be run with."""
    wanted = {"train_micro_batch_size_per_gpu": "micro_batch", "zero_optimization_stage": "zero",
              "bfloat16_enabled": "bf16", "bf16_enabled": "bf16", "fp16_enabled": "fp16",
              "gradient_accumulation_steps": "grad_acc", "world_size": "world_size"}
    found = {}
    for line in lines:
        if "...." not in line.text and '": ' not in line.text:
            continue
        m = DS_SETTING.search(line.text)
        if not m:
            continue
        key, value = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        if key in wanted and wanted[key] not in found:
            found[wanted[key]] = value
        elif key == "stage" and "zero" not in found:
            found["zero"] = value
    return found


def _oom(match: Match, lines: list[Line]) -> tuple[str, str]:
    text = match.line.text
    parts = []
    tried = OOM_TRIED.search(text)
    total = OOM_TOTAL.search(text)
    free = OOM_FREE.search(text)
    allocated = OOM_ALLOCATED.search(text)
    reserved = OOM_RESERVED.search(text)
    gpu = OOM_GPU.search(text)
    if tried:
        parts.append(f"tried to allocate {tried.group(1)}")
    if total:
        parts.append(f"GPU {gpu.group(1) if gpu else '?'} total {total.group(1)}")
    if free:
        parts.append(f"free {free.group(1)}")
    if allocated:
        parts.append(f"allocated by PyTorch {allocated.group(1) or allocated.group(2)}")
    if reserved:
        parts.append(f"reserved {'but unallocated' if reserved.group(1) else 'in total'} "
                     f"{reserved.group(1) or reserved.group(2)}")
    where = _where(match)
    settings = _ds_settings(lines)
    args = ["dsdoctor estimate --model MODEL"]
    if "zero" in settings:
        args.append(f"--zero {settings['zero']}")
    if "micro_batch" in settings:
        args.append(f"--micro-batch {settings['micro_batch']}")
    if settings.get("bf16", "").lower() == "true":
        args.append("--precision bf16")
    elif settings.get("fp16", "").lower() == "true":
        args.append("--precision fp16")
    args.append("--seq-len SEQ_LEN")
    if total and _gib(total.group(1)):
        args.append(f"--gpu-mem {_gib(total.group(1)):.0f}")
    fragmented = ""
    if reserved and reserved.group(1) and _gib(reserved.group(1)) and tried and _gib(tried.group(1)) and \
            _gib(reserved.group(1)) >= _gib(tried.group(1)):
        fragmented = " The reserved-but-unallocated memory exceeds the request: fragmentation; " \
                     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True may be enough."
    return (where + "CUDA out of memory: " + (", ".join(parts) or text.strip()[:200]),
            f"Run `{' '.join(args)}` (values from this log where it printed them) to see the peak and what to "
            f"change: gradient checkpointing, a higher ZeRO stage, offload, a smaller micro batch with more "
            f"gradient accumulation, shorter sequences.{fragmented}")


def _batch(match: Match, lines: list[Line]) -> tuple[str, str]:
    """DeepSpeed's batch assertion (deepspeed/runtime/config.py _batch_assertion): the triple recomputed for the world
    size it ran on. Numbers too long to be a batch size are shown as text, with the rule's own fix."""
    texts = [match.groups.group(i) for i in (1, 2, 3, 4)]
    total, micro, acc, world = (_int(t) for t in texts)
    if None in (total, micro, acc, world):
        shown = [_shown_number(t) for t in texts]
        return (_where(match) + f"train_batch_size {shown[0]} != {shown[1]} x {shown[2]} x {shown[3]} (micro batch "
                f"x gradient accumulation x world size; numbers too long to be batch sizes)", "")
    note = ""
    if micro * acc and total % (micro * acc) == 0 and total // (micro * acc) not in (0, world):
        note = f"; the config assumes world size {total // (micro * acc)}"
    fixed = micro * acc * world
    return (_where(match) + f"train_batch_size {total} != {micro} x {acc} x {world} (micro batch x gradient "
            f"accumulation x world size){note}",
            f"Give two of the three and let DeepSpeed derive the third: drop train_batch_size (DeepSpeed then uses "
            f"{fixed} on {world} rank(s)), or set it to {fixed}. `dsdoctor check ds_config.json --world-size "
            f"{world}` checks it before launch.")


def _mismatch(match: Match, lines: list[Line]) -> tuple[str, str]:
    start = match.line_index + 1
    items = []
    for line in lines[start:start + 60]:
        text = line.text.strip()
        if text.startswith("- ds "):
            items.append(text[2:])
        elif items and not text.startswith("-"):
            break
    return (f"{len(items)} mismatch(es): " + "; ".join(items[:8]) if items else match.line.text.strip()[:300],
            "Set each to \"auto\" (the Trainer fills it) or make TrainingArguments agree; `dsdoctor check "
            "ds_config.json --launch trainer --hf-args args.json` lists them all before launch.")


def _watchdog(match: Match, lines: list[Line]) -> tuple[str, str]:
    pattern = match.signature.pattern
    timed_out = {}
    for line in lines:
        if match.signature.needles[0] in line.text:
            found = pattern.search(line.text)
            if found:
                rank = line.rank if line.rank is not None else _int(found.group("rank"), 6)
                timed_out.setdefault(rank, found)
    ranks = sorted(r for r in timed_out if r is not None)
    first = timed_out[ranks[0]] if ranks else match.groups
    op = first.group("op") or "?"
    timeout_ms = _int(first.group("timeout"), 15)
    after = f"{timeout_ms / 60000:g} min" if timeout_ms is not None else f"{_shown_number(first.group('timeout'))} ms"
    return (f"{op} (SeqNum={_shown_number(first.group('seq') or '?')}, NumelIn="
            f"{_shown_number(first.group('numel') or '?')}) timed out after {after} on rank(s) "
            f"{_ranks(ranks) if ranks else '?'}" + _suspects(ranks, lines), "")


def _gloo_timeout(match: Match, lines: list[Line]) -> tuple[str, str]:
    """gloo's timeout: the ranks whose collective timed out, and the ones that did not (the suspects)."""
    ranks = sorted({ln.rank for ln in lines if ln.rank is not None and match.signature.needles[0] in ln.text
                    and match.signature.pattern.search(ln.text)})
    timeout_ms = _int(match.groups.group("timeout"), 15)
    after = f"{timeout_ms / 1000:g} s" if timeout_ms is not None else \
        f"{_shown_number(match.groups.group('timeout'))} ms"
    return (f"gloo {match.groups.group('op')} timed out after {after} on rank(s) {_ranks(ranks) if ranks else '?'}"
            + _suspects(ranks, lines), "")


def _ranks(ranks: list[int], most: int = 32) -> str:
    """'[0, 1, 2]', or the first ``most`` of a long list and how many more."""
    return str(ranks) if len(ranks) <= most else f"{str(ranks[:most])[:-1]}, ... ({len(ranks) - most:,} more)]"


def _suspects(timed_out: list[int], lines: list[Line]) -> str:
    """'; rank(s) [..] did not time out ...' for the ranks of the world size that are not among ``timed_out`` (at
    most 32 listed, counted up to :data:`MAX_WORLD`)."""
    world = _world_size(lines)
    if not world or not timed_out:
        return ""
    seen = set(timed_out)
    missing, count = [], 0
    for rank in range(world):
        if rank not in seen:
            count += 1
            if len(missing) < 32:
                missing.append(rank)
    if not count:
        return ""
    shown = str(missing) if count == len(missing) else f"{str(missing)[:-1]}, ... ({count - len(missing):,} more)]"
    return f"; rank(s) {shown} did not time out: they were not in the collective (the suspects)"


#: a world size as launchers and DeepSpeed print it
WORLD_SIZE = re.compile(r"(?<!\w)(?:dist_)?world_size[=:\s]{1,4}(\d{1,8})(?!\d)|WORLD_SIZE=(\d{1,8})(?!\d)|"
                        r"world size[=:\s]{1,4}(\d{1,8})(?!\d)")


def _world_size(lines: list[Line]) -> int | None:
    """The world size the log prints (up to :data:`MAX_WORLD`; a larger number is not taken), else one more than
    the highest rank seen."""
    for line in lines[:4000]:
        found = WORLD_SIZE.search(line.text)
        if found:
            world = int(next(g for g in found.groups() if g))
            return world if 0 < world <= MAX_WORLD else None
    ranks = {line.rank for line in lines if line.rank is not None}
    return max(ranks) + 1 if ranks else None


#: NCCL's INFO lines naming the interface it uses ('Bootstrap : Using eth0:10.0.0.5<0>')
NCCL_USING = re.compile(r"(?:Bootstrap : Using|NET/Socket : Using \[0\])\s{0,4}([\w.-]{1,64}):"
                        r"(\d{1,3}(?:\.\d{1,3}){3})")


def _nccl_connect(match: Match, lines: list[Line]) -> tuple[str, str]:
    """NCCL could not connect to a peer: the address it tried and the interface NCCL chose (its INFO lines
    'Bootstrap : Using eth0:10.0.0.5<0>' or 'NET/Socket : Using [0]docker0:172.17.0.1<0>', when logged)."""
    using = None
    for line in lines:
        if "Using" in line.text:
            found = NCCL_USING.search(line.text)
            if found:
                using = found
                break
    evidence = f"NCCL could not connect to {match.groups.group('addr')}: {match.line.text.strip()[:200]}"
    if using:
        evidence += f"; NCCL used interface {using.group(1)} ({using.group(2)})"
    name = using.group(1) if using else "the interface"
    cause = f"NCCL chose {name}, which the other nodes may not reach" if using else \
        "NCCL's interface cannot reach the peer"
    fix = (f"{cause}: set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the interface of the network the nodes "
           f"share, on every node (`ip -br addr`); open the ports between nodes in the firewall.")
    return evidence, fix


def _signal(match: Match, lines: list[Line]) -> tuple[str, str]:
    g = match.groups
    rank = next((g.group(k) for k in ("rank", "rank2", "rank3") if g.groupdict().get(k)), None)
    pid = next((g.group(k) for k in ("pid", "pid2", "pid3") if g.groupdict().get(k)), None)
    offload = any("offload" in line.text and ("cpu" in line.text or "nvme" in line.text) for line in lines[:20000])
    evidence = (f"{'rank ' + rank if rank else 'a rank'}{' (pid ' + pid + ')' if pid else ''} killed by signal 9 "
                f"(SIGKILL) with no Python error: the host's out-of-memory killer"
                + ("; the config offloads to the CPU" if offload else ""))
    return evidence, ("Check `dmesg | grep -i oom`. Host RAM must hold what loading the model and offload need on "
                      "every rank: `dsdoctor env --deepspeed ds_config.json --model MODEL` compares it with this "
                      "host's; load with low_cpu_mem_usage, use fewer ranks per node, or offload less.")


#: the store client's retries ('failed to connect to [node0]:29500 (errno: 111 - Connection refused)')
STORE_RETRY = re.compile(r"failed to connect to (\S{1,300}) \((errno: \d{1,5} - [^)]{1,200})\)")


def _rendezvous(match: Match, lines: list[Line]) -> tuple[str, str]:
    """The error that ended the rendezvous, and the last address the store client tried before it."""
    where = _where(match)
    tried = None
    for line in lines[:match.line_index]:
        found = STORE_RETRY.search(line.text) if "failed to connect to" in line.text else None
        if found:
            tried = found
    evidence = where + match.line.text.strip()[:240]
    if tried:
        evidence += f" (last attempt: {tried.group(1)}, {tried.group(2)})"
    return evidence, ""


def _where(match: Match) -> str:
    """'rank R: ' for a line whose rank is known, else ''."""
    return f"rank {match.line.rank}: " if match.line.rank is not None else ""


def _first_line(match: Match, lines: list[Line]) -> tuple[str, str]:
    return _where(match) + match.line.text.strip()[:300], ""


#: a compiler's or ninja's error line
COMPILER_ERROR = re.compile(r"nvcc fatal|fatal error|\berror\b:|: not found|command not found|"
                            r"unsupported gpu architecture", re.I)


def _build(match: Match, lines: list[Line]) -> tuple[str, str]:
    """The op that failed to build and the compiler's first error line after it."""
    op = match.groups.group("op")
    error = ""
    compiler = COMPILER_ERROR
    for line in lines[match.line_index + 1:match.line_index + 200]:  # ninja's output follows the RuntimeError
        text = line.text.strip()
        if compiler.search(text) and not text.startswith(("Traceback", "subprocess.", "RuntimeError")):
            error = text
            break
    return (f"building op '{op}' failed" + (f": {error[:240]}" if error else ""),
            "`dsdoctor env --build-ops ds_config.json` builds the ops the config needs before launch and shows the "
            "compiler's error; install the CUDA toolkit matching torch's CUDA (nvcc), gcc, ninja, or pre-build "
            "(DS_BUILD_OPS=1 pip install deepspeed).")


ARCH_LIST = re.compile(r"TORCH_CUDA_ARCH_LIST[=:\s\"']{1,8}([\w.;+ ]{1,100})")


def _arch(match: Match, lines: list[Line]) -> tuple[str, str]:
    listed = next((ARCH_LIST.search(line.text) for line in lines
                   if "TORCH_CUDA_ARCH_LIST" in line.text), None)
    value = listed.group(1).strip() if listed else None
    return (f"{match.line.text.strip()[:200]}" + (f" (TORCH_CUDA_ARCH_LIST={value})" if value else ""),
            "DeepSpeed's op builder cannot parse an arch suffix such as 9.0a: export TORCH_CUDA_ARCH_LIST=9.0 (the "
            "GPUs' compute capabilities, digits only). `dsdoctor env` finds it before launch.")


def _validation(match: Match, lines: list[Line]) -> tuple[str, str]:
    """pydantic's message and the next two lines of the same rank: the key and what is wrong with it."""
    after = [ln.text.strip() for ln in lines[match.line_index + 1:match.line_index + 20]
             if ln.rank == match.line.rank][:2]
    where = _where(match)
    text = match.line.text[match.groups.start():].strip()
    return where + text[:300] + ": " + " ".join(after)[:240], ""


NO_MODULE = re.compile(r"No module named '([\w.]{1,200})'")


def _import(match: Match, lines: list[Line]) -> tuple[str, str]:
    text = match.line.text.strip()
    missing = NO_MODULE.search(text)
    if missing and missing.group(1).split(".")[0] in ("deepspeed", "torch"):
        package = missing.group(1).split(".")[0]
        return text[:300], (f"Install {package} in the environment the launcher uses (the same python: `which "
                            f"python` on every node); `dsdoctor env` shows what is installed.")
    return text[:300], ("A package is older or newer than the code that imports it expects: `dsdoctor env` lists the "
                        "versions and those known to break each other; pin the versions the training repository "
                        "names (its requirements.txt).")


def _rank_exit(match: Match, lines: list[Line]) -> tuple[str, str]:
    g = match.groups.groupdict()
    rank = g.get("rank") or g.get("rank2")
    code = g.get("code") or g.get("code2")
    return f"rank {rank} exited with code {code}; no error of that rank is in this log", ""


# --- the catalogue of signatures ------------------------------------------------------------------------------------

def _sig(name, rule_id, needles, pattern, describe=_first_line, caught_by="", consequence=False,
         spoils=False) -> Signature:
    needles = (needles,) if isinstance(needles, str) else tuple(needles)
    return Signature(name, rule_id, needles, re.compile(pattern), describe, caught_by, consequence, spoils)


SIGNATURES: tuple[Signature, ...] = (
    _sig("nccl-watchdog", "LOG801", "Watchdog caught collective operation timeout",
         r"(?:\[[^\[\]]{0,80}?Rank (?P<rank>\d+)\]\s{0,4})?Watchdog caught collective operation timeout: "
         r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w{1,40})(?:, NumelIn=(?P<numel>\d+))?"
         r"[^\n]{0,300}?Timeout\(ms\)=(?P<timeout>\d+)", _watchdog, "dsdoctor nccl"),
    _sig("gloo-timeout", "LOG801", "Timed out waiting",
         r"gloo[^\n]{0,400}?Timed out waiting (?P<timeout>\d+)ms for (?P<op>\w{1,40}) operation", _gloo_timeout,
         "dsdoctor nccl"),
    _sig("port-in-use", "NET401", ("Address already in use", "address already in use", "EADDRINUSE"),
         r"(?:Error|error|failed to listen)\b[^\n]{0,500}?(?:errno: 98|EADDRINUSE|[Aa]ddress already in use)",
         _first_line, "dsdoctor env (or nccl, smoke): MASTER_PORT busy, before any rank starts"),
    _sig("port-privileged", "NET406", ("Permission denied", "EACCES"),
         r"(?:Error|error|failed to listen)\b[^\n]{0,500}?(?:failed to bind to \[?[^\]\n]{0,200}\]?:(?P<port>\d{1,5}) "
         r"\(errno: 13|port: (?P<port2>\d{1,5}),[^\n]{0,300}?name: EACCES)",
         _first_line, "dsdoctor env"),
    _sig("name-unresolved", "NET405", ("Name or service not known", "failure in name resolution"),
         r"(?:DistNetworkError|gaierror|c10d|TCPStore|rendezvous|MASTER_ADDR|init_process_group)[^\n]{0,500}?"
         r"(?:Name or service not known|failure in name resolution)", _first_line, "dsdoctor env"),
    # the store's "[W socket.cpp] ... failed to connect" retries are normal while the master starts: only the error
    # that ends them is a failure
    _sig("rendezvous-unreachable", "NET410", ("failed to connect", "waiting for clients"),
         r"(?:DistNetworkError|DistStoreError|RuntimeError|TimeoutError|ConnectionError)\b[^\n]{0,600}?"
         r"(?:failed to connect|waiting for clients|Connection refused|No route to host|timed out)", _rendezvous,
         "dsdoctor env on each node (MASTER_ADDR reachable)"),
    _sig("nccl-no-interface", "NET402", "no socket interface found",
         r"no socket interface found", _first_line, "dsdoctor env"),
    _sig("nccl-connect", "NET411", ("NCCL WARN",),
         r"NCCL WARN (?:socketStartConnect|socketPollConnect|Net : Connect to|Call to connect|NET/Socket : Connect to)"
         r"[^\n]{0,200}?(?<![\d.])(?P<addr>\d{1,3}(?:\.\d{1,3}){3})(?![\d.])[^\n]{0,200}?(?:failed|returned|timed out)",
         _nccl_connect, "dsdoctor env on each node (NET411: the interface NCCL would use)"),
    _sig("batch-assertion", "DS102", "train_batch_size is not equal to",
         r"train_batch_size is not equal to micro_batch_per_gpu \* gradient_acc_step \* world_size\s{1,8}(\d+)\s{0,8}"
         r"!=\s{0,8}(\d+)\s{0,8}\*\s{0,8}(\d+)\s{0,8}\*\s{0,8}(\d+)", _batch, "dsdoctor check"),
    _sig("auto-compare", "DS101", "not supported between instances of 'str'",
         r"TypeError: '[<>=]{1,2}' not supported between instances of 'str' and '(?:int|float)'", _first_line,
         "dsdoctor check --launch engine"),
    _sig("auto-multiply", "DS101", "non-int of type 'str'",
         r"can't multiply sequence by non-int of type 'str'", _first_line, "dsdoctor check --launch engine"),
    _sig("auto-convert", "DS101", ("'auto'", "got auto"),
         r"(?:could not convert string to float|invalid literal for int\(\) with base 10): 'auto'|"
         r"must be (?:a|an) [\w ]{1,80}, got auto\b", _first_line,
         "dsdoctor check --launch engine"),
    _sig("hf-mismatch", "HF201", "mismatch TrainingArguments values",
         r"Please correct the following DeepSpeed config values that mismatch TrainingArguments values", _mismatch,
         "dsdoctor check --launch trainer --hf-args"),
    _sig("cuda-oom", "MEM501", "out of memory",
         r"(?:OutOfMemoryError|RuntimeError): CUDA out of memory|CUDA error: out of memory", _oom, "dsdoctor estimate"),
    _sig("host-oom-kill", "MEM504", ("-9", "Signal 9"),
         r"--local_rank=(?P<rank2>\d{1,6})'\] exits with return code = -9|exits with return code = -9|"
         r"failed \(exitcode: -9\) local_rank: (?P<rank3>\d{1,6}) \(pid: (?P<pid3>\d{1,10})\)|"
         r"Signal 9 \(SIGKILL\) received by PID (?P<pid>\d{1,10})|"
         r"exitcode\s{0,4}:\s{0,4}-9 \(pid: (?P<pid2>\d{1,10})\)|"
         r"rank (?P<rank>\d{1,6}) [^\n]{0,200}?exit code -9", _signal,
         "dsdoctor env --deepspeed ds_config.json --model MODEL", consequence=True),
    _sig("shm-bus-error", "ENV312", ("Bus error", "bus error"),
         r"Bus error|ERROR: Unexpected bus error encountered in worker|No space left on device[^\n]{0,300}?shm",
         _first_line, "dsdoctor env (the /dev/shm size)"),
    _sig("cuda-home", "ENV305", "CUDA_HOME",
         r"CUDA_HOME does not exist|CUDA_HOME environment variable is not set", _first_line,
         "dsdoctor env (toolchain) / env --build-ops"),
    _sig("arch-suffix", "ENV307", "invalid literal for int() with base 10: '",
         r"invalid literal for int\(\) with base 10: '\d{1,4}[a-z]'", _arch, "dsdoctor env"),
    _sig("no-kernel-image", "ENV308", "no kernel image is available",
         r"no kernel image is available for execution on the device", _first_line, "dsdoctor env"),
    _sig("op-build", "ENV324", "Error building extension",
         r"Error building extension '(?P<op>\w{1,100})'", _build, "dsdoctor env --build-ops ds_config.json"),
    _sig("bf16-unsupported", "DS111", "bf16",
         r"doesn't support bf16/gpu|bf16 is not supported on your device|Type bf16 is not supported", _first_line,
         "dsdoctor check --gpu auto"),
    _sig("dtype-mismatch", "DS113", ("expected scalar type", "same dtype", "should be the same"),
         r"expected scalar type \w{1,40} but found \w{1,40}|mat1 and mat2 must have the same dtype|"
         r"Input type \([^()\n]{1,200}\) and weight type \([^()\n]{1,200}\) should be the same|"
         r"expected (?:mat1 and mat2|both) to have the same dtype", _first_line,
         "dsdoctor check --model MODEL"),
    _sig("loss-scale-floor", "DS114", ("Current loss scale already at minimum", "reducing to 1"),
         r"Current loss scale already at minimum|Attempted loss scale: 1(?:\.0)?, reducing to 1\b", _first_line,
         "dsdoctor check --model MODEL"),
    _sig("nan-loss", "TRN602", ("nan", "NaN"),
         r"['\"]loss['\"]: '?nan|\bloss[=:]\s{0,4}nan\b|Loss is NaN|loss is nan|['\"]grad_norm['\"]: '?nan",
         _first_line, "dsdoctor smoke --steps 100", spoils=True),
    _sig("zero3-empty-weights", "DS142", "torch.Size([0])",
         r"copying a param with shape torch\.Size\(\[0\]\)|size mismatch for [^\n]{0,400}?torch\.Size\(\[0\]\)",
         _first_line, "dsdoctor check (stage3_gather_16bit_weights_on_model_save)", spoils=True),
    _sig("adapter-keys-missing", "DS142", "missing adapter keys",
         r"Found missing adapter keys while loading the checkpoint", _first_line,
         "dsdoctor check (ZeRO-3 saves; smoke --steps 100 reloads the adapter)", spoils=True),
    _sig("lora-targets", "LOG803", "not found in the base model",
         r"Target modules? [^\n]{0,2000}? not found in the base model", _first_line, "dsdoctor estimate --method lora"),
    _sig("zero3-lora-base", "LOG804", "ZeRO3 is incompatible with LoRA",
         r"ZeRO3 is incompatible with LoRA", _first_line),
    _sig("remote-code", "LOG802", ("custom code", "trust_remote_code"),
         r"contains custom code which must be executed|Do you wish to run the custom code|"
         r"requires you to execute [^\n]{0,300}?custom code|"
         r"(?:pass the argument|set the option) `trust_remote_code=True`",
         _first_line,
         "dsdoctor check --model PATH (reads config.json only)"),
    _sig("import-error", "ENV310", ("ImportError", "ModuleNotFoundError", "deepspeed_init()", "AttributeError"),
         r"^\s{0,40}(?:\w{1,80}\.){0,8}(?:ImportError: cannot import name .+ from|ModuleNotFoundError: No module named|"
         r"TypeError: deepspeed_init\(\) got an unexpected keyword argument|AttributeError: module '\w{1,200}' has no "
         r"attribute)", _import, "dsdoctor env"),
    _sig("no-optimizer", "DS120", "requires an optimizer",
         r"zero stage \d requires an optimizer", _first_line, "dsdoctor check --launch engine"),
    _sig("ds-config-invalid", "DS199", "validation error for DeepSpeed",
         r"(?<!\d)\d{1,6} validation errors? for DeepSpeed\w{0,60}Config", _validation, "dsdoctor check"),
    _sig("rank-exit", "LOG806", ("exits with return code", "failed (exitcode"),
         r"--local_rank=(?P<rank2>\d{1,6})'?\] exits with return code = (?P<code2>[1-9]\d{0,3})(?!\d)|"
         r"failed \(exitcode: (?P<code>[1-9]\d{0,3})\) local_rank: (?P<rank>\d{1,6})(?!\d)", _rank_exit,
         consequence=True),
    _sig("nccl-error", "NET408", "NCCL error",
         r"NCCL error in: [^\n]{0,400}?(?:unhandled system error|unhandled cuda error|internal error|"
         r"remote process exited)", _first_line, "dsdoctor nccl", consequence=True),
    # the run stopped from outside: torchrun's agent (SignalException, "Received 15 death signal"), DeepSpeed's
    # launcher, slurm's cancel (a time limit, a preemption), a Ctrl-C's KeyboardInterrupt; never the cause of a failure
    # before it
    _sig("stopped", "LOG807", ("got signal:", "death signal", "Main process received SIG", "CANCELLED AT",
                               "KeyboardInterrupt"),
         r"SignalException: Process (?P<pid>\d{1,10}) got signal: (?:Signals\.)?(?P<sig>SIG[A-Z]{2,8}|\d{1,3})\b|"
         r"Received (?:Signals\.)?(?P<sig2>SIG[A-Z]{2,8}|\d{1,3}) death signal|"
         r"Main process received (?P<sig3>SIG[A-Z]{2,8}), exiting|"
         r"\*\*\* (?:JOB|STEP) [\w.]{1,40} ON \S{1,100} CANCELLED AT \S{1,40}(?: DUE TO (?P<why>[A-Z][A-Z ]{0,40}?))? "
         r"\*\*\*|^\s{0,40}KeyboardInterrupt(?::[^\n]{0,200})?$", lambda m, lines: _stopped(m, lines),
         consequence=True),
)

#: Every signature's needles in one pattern: one search rules out most lines, ``findall`` names the needles a line
#: has. No needle may contain another (``findall`` would hide the shorter one; tests/test_explain.py checks it).
NEEDLES = re.compile("|".join(re.escape(n) for n in sorted({n for s in SIGNATURES for n in s.needles}, key=len,
                                                              reverse=True)))

#: Consequences of another rank's failure (never the first real failure when something else is found): a peer's
#: connection gone, the launcher's signals and summaries, an aborted communicator.
CASCADE = re.compile(r"Connection closed by peer|Connection reset by peer|Broken pipe|SIGTERM|Signal 15|"
                     r"ChildFailedError|exits with return code = -15|Killing subprocess|remote worker crash|"
                     r"communicator was aborted|KeyboardInterrupt|NCCL communicator|DistBackendError", re.I)
#: torch's c10d warnings ("[W socket.cpp:464] ...", "[W601 10:00:00.000 socket.cpp:697] ..."): the store's retries
#: while the master starts, an IPv6 bind that falls back to IPv4; never the failure itself.
C10D_WARNING = re.compile(r"\[W[\d :.]{0,40}\w{1,60}\.cpp:\d{1,6}\]")
#: An exception's (dotted) name, as a traceback's last line starts
EXCEPTION_NAME = (r"(?:[A-Za-z_]\w{0,80}\.){0,12}"
                  r"(?P<exc>(?:[A-Z]\w{0,80}?)?(?:Error|Exception)|StopIteration|SystemExit)")
#: The last line of a Python traceback: an exception's (dotted) name and its message.
PYTHON_ERROR = re.compile(EXCEPTION_NAME + r"(?::\s*(?P<message>.*))?$")


def _python_error(match: Match, lines: list[Line]) -> tuple[str, str]:
    where = _where(match)
    frame = next((ln.text.strip() for ln in reversed(lines[max(0, match.line_index - 40):match.line_index])
                  if ln.rank == match.line.rank and ln.text.lstrip().startswith("File \"")), None)
    return where + match.line.text.strip()[:240] + (f" (raised at {frame[:160]})" if frame else ""), ""


PYTHON_ERROR_SIGNATURE = Signature("python-error", "LOG805", (), PYTHON_ERROR, _python_error)


def scan(text: str | list[Line], skipped: tuple[int, int] | None = None) -> tuple[list[Match], list[Line]]:
    """Every signature match in ``text`` (a log, or its lines from :func:`read_lines`/:func:`merge`), in line order
    (one per signature and rank, the earliest; at most :data:`MAX_PER_SIGNATURE` ranks per signature and
    :data:`MAX_MATCHES` in all), and the lines. A Python exception that no signature knows (the last line of a
    traceback: ``KeyError: 'input_ids'``) is a ``python-error`` match (LOG805) of its rank, when it is not a
    consequence of another rank's failure.

    Raises nothing: any text is a log (binary data is the caller's to refuse)."""
    lines = read_lines(text, skipped) if isinstance(text, str) else text
    matches: list[Match] = []
    seen: set[tuple[str, int | None]] = set()
    per_signature: dict[str, int] = {}
    in_traceback: dict[int | None, bool] = {}  # per rank: a "Traceback" line came, its exception line not yet
    after_file_line: dict[int | None, bool] = {}  # per rank: the previous line was a traceback's "File ..." line
    ignored_next: dict[int | None, bool] = {}  # per rank: "Exception ignored in ...": the next traceback is harmless

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
        if stripped.startswith("Exception ignored in"):  # at interpreter exit (a __del__): the run's outcome stands
            ignored_next[line.rank] = True
            continue
        if "Traceback (most recent call last)" in text_line:  # also glued to a progress bar's last state
            in_traceback[line.rank] = not ignored_next.pop(line.rank, False)
            continue
        if len(text_line) < 6 or quoted:
            continue  # a traceback's source lines quote code (and errors); the exception line itself follows
        needle = NEEDLES.search(text_line) if not C10D_WARNING.match(text_line) else None
        exception = in_traceback.get(line.rank) and ("Error" in text_line or "Exception" in text_line or
                                                     "StopIteration" in text_line) and PYTHON_ERROR.match(stripped)
        if exception:
            in_traceback[line.rank] = False
        if not needle and not exception:
            continue  # most lines of a log: one C-level search over every signature's needles
        known = False
        for signature in SIGNATURES if needle else ():
            if signature.needles_present(text_line):
                found = signature.pattern.search(text_line)
                if found is None:
                    continue
                known = True
                add(signature, line, found, index)
        if exception and not known and not CASCADE.search(text_line):
            add(PYTHON_ERROR_SIGNATURE, line, exception, index)
        if len(matches) >= MAX_MATCHES:
            break
    return matches, lines


#: A traceback's own lines after its exception line: its message continued (tab-indented, as state_dict's size
#: mismatches), a chained exception, and the next traceback's frames.
CONTINUES = re.compile(r"^(?:\s|$)|^The above exception was the direct cause|^During handling of the above exception|"
                       r"^Traceback \(most recent call last\)|^" + EXCEPTION_NAME + r"\b")
#: Lines that show a rank still training after an error (a handled exception): progress bars, step logs, losses.
PROGRESS = re.compile(r"(?<!\d)\d{1,3}%\||'loss': \d|\bstep[= ]\d|(?<![\d.])\d{1,8}(?:\.\d{1,4})?(?:it/s|s/it)\]")
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
    """Whether the rank of a generic Python error went on training after it (a handled exception, logged by a data
    loader that skips the sample): two progress lines of its rank within :data:`SURVIVAL_LINES` after its block."""
    if match.signature is not PYTHON_ERROR_SIGNATURE:
        return False
    count = 0
    end = _block_end(match, lines) + 1
    for line in lines[end:end + SURVIVAL_LINES]:
        if (match.line.rank is None or line.rank in (match.line.rank, None)) and PROGRESS.search(line.text):
            count += 1
            if count >= 2:
                return True
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
    if stop is None:
        primary = [m for m in kept if not m.signature.consequence]
        first = (primary or live or [None])[0]
    else:
        before = [m for m in kept if m.line_index < stop.line_index]
        primary = [m for m in before if not m.signature.consequence]
        first = (primary or before or [stop])[0]
        kept = before + [stop]  # what came after the stop is the run shutting down
    return first, [m for m in kept if m is not first]


#: A run that ended well says so in its last lines: DeepSpeed's launcher per rank, the Trainer's summary.
FINISHED = re.compile(r"exits successfully|'train_runtime':|\bTraining completed\b")


def finished(lines: list[Line], matches: list[Match]) -> bool:
    """Whether the run ended well: a success line among the last 30, and no rank failing after it."""
    tail = [i for i in range(max(0, len(lines) - 30), len(lines)) if FINISHED.search(lines[i].text)]
    if not tail:
        return False
    return not any(m.signature.name in ("rank-exit", "host-oom-kill") and m.line_index > tail[0] for m in matches)


# --- a run stopped from outside, and where it hung --------------------------------------------------------------------

SIGNAL_NAMES = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 6: "SIGABRT", 9: "SIGKILL", 10: "SIGUSR1", 12: "SIGUSR2",
                15: "SIGTERM"}
SIGNAL_HOW = {"SIGINT": "a Ctrl-C", "SIGTERM": "a timeout (`timeout`, dsdoctor smoke's --timeout), a `kill` or the "
              "job scheduler", "SIGHUP": "the terminal closing", "SIGKILL": "a `kill -9` or the out-of-memory killer"}
#: the launcher's own lines (torchrun's agent, DeepSpeed's launcher): not what the ranks were doing
LAUNCHER = re.compile(r"torch[/.]distributed[/.](?:elastic|run\b|launch)|\[(?:launch|runner)\.py:\d{1,6}:|"
                      r"^\*{10,}|OMP_NUM_THREADS|^\s*Traceback \(most recent call last\)")
#: a timestamp: DeepSpeed's and Python logging's '2024-01-01 10:00:00,000', glog's (torch's C++ and torchrun's)
#: 'W1201 08:39:16.920000'
CLOCK = re.compile(r"(?<!\d)(?:\d{4}-(?P<mo>\d\d)-(?P<d>\d\d)[ T]|[IWEF](?P<gmo>\d\d)(?P<gd>\d\d) )"
                   r"(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<f>\d{1,9}))?")
#: torch's JIT builder (torch/utils/cpp_extension.py _get_build_directory, _jit_compile, _write_ninja_file_and_build_
#: library) and DeepSpeed's op builder (deepspeed/ops/op_builder/builder.py jit_load; comm/torch.py build_shm_op)
BUILD_ROOT = re.compile(r"Using (\S{1,500}) as PyTorch extensions root\.\.\.")
BUILD_STEP = re.compile(r"Creating extension directory (?P<dir>\S{1,500})\.\.\.|Emitting ninja build file "
                        r"(?P<file>\S{1,500})\.\.\.|Building extension module (?P<op>\w{1,100})\.\.\.")
BUILD_DONE = re.compile(r"Loading extension module \w{1,100}\.\.\.|Time to load \w{1,100} op:|"
                        r"DeepSpeed deepspeed\.ops\.[\w.]{1,100} built successfully")
PYTHON_VERSION = re.compile(r"/python3\.(\d{1,2})/")


def clock(text: str) -> float | None:
    """Seconds since the start of the month of a timestamp at the start of ``text`` (its first 80 characters), or
    None: enough to order lines and to measure a silence (no year in glog's format)."""
    found = CLOCK.search(text[:80])
    if not found:
        return None
    g = found.groupdict()
    day = int(g["d"] or g["gd"]) + 31 * int(g["mo"] or g["gmo"])
    return day * 86400 + int(g["h"]) * 3600 + int(g["mi"]) * 60 + int(g["s"]) + float("0." + (g["f"] or "0"))


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
    lock = build["lock"]
    fix = (f"Inconclusive between a stale build lock and a build still running: a log alone cannot tell them apart. "
           f"Check: `ls -l {lock}` and `dsdoctor env`. A lock that no running build holds (no ninja, c++ or nvcc in "
           f"`ps -ef`) is stale: `rm {lock}`, then run again (the op is rebuilt once). A build still running finishes "
           f"on its own: give the run more time.")
    return _where(match) + evidence, fix


BUILD_SIGNATURE = Signature("build-in-flight", "ENV329", (), BUILD_ROOT, _describe_build)


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
    ranked = any(ln.rank is not None for ln in lines)
    own = [m for m in matches if not m.signature.consequence and m.signature.name != "stopped"
           and not survived(m, lines)]
    if not ranked:
        return bool(own)
    return rank is not None and any(m.line.rank == rank for m in own)


TRACEBACK_HEADER = "Traceback (most recent call last)"


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
        tail = [ln for ln in lines if ERRORISH.search(ln.text) and not CASCADE.search(ln.text)
                and TRACEBACK_HEADER not in ln.text][-5:]  # a traceback's header says nothing its last line does not
        shown = " | ".join(f"{ln.at}: {ln.text.strip()[:160]}" for ln in tail) or "(no error-looking lines)"
        result.update(first_failure=None, matches=[])
        return [LOG800.finding(_quoted(f"no known failure found in {len(lines):,} lines; last error-looking lines: "
                                       f"{shown}"))], result
    if first.signature.name == "stopped":
        build = build_in_flight(lines, first.line_index)
        if build:
            first, others = Match(BUILD_SIGNATURE, lines[build["index"]], None, build["index"],
                                  {**build, "stop": first}), [first] + others
    findings = []
    reported: set[str] = set()
    for match in [first] + others:
        if match is not first and _claims_no_error(match, matches, lines):
            continue
        if match is not first and match.signature.name == "stopped" and first.signature is not BUILD_SIGNATURE:
            match = replace(match, info={"after": first})  # stopped after a failure of its own: say so
        evidence, fix = match.signature.describe(match, lines)
        target: Rule = rules[match.signature.rule_id]
        if target.id in reported:
            continue
        reported.add(target.id)
        where = f"{match.line.at}: "
        fix = fix or target.fix
        if match.signature.caught_by and "`dsdoctor" not in fix:
            fix += f" Before launch: `{match.signature.caught_by}`."
        if match is first:  # what ended the run (whatever the rule's preflight severity), unless the run finished
            ended = not finished(lines, matches) or first.signature.spoils
            result["finished"] = not ended
            title = target.title
            if match.signature is BUILD_SIGNATURE:
                title = "the run hung in a JIT op build: a stale build lock or a build still running (inconclusive)"
            findings.append(target.finding(_quoted(where + evidence), severity="error" if ended else "warning", fix=fix,
                                           title=title if ended else f"the run finished, but: {target.title}"))
        else:
            title = "the run was stopped from outside (a signal)" if target.id == LOG807.id else target.title
            findings.append(target.finding(_quoted(where + evidence), severity="info", title=f"later: {title}",
                                           fix=fix))
        if len(findings) >= 6:
            break
    result["first_failure"] = {"rule": first.signature.rule_id, "signature": first.signature.name,
                               "line": first.line.number, "rank": first.line.rank}
    if first.line.source:
        result["first_failure"]["file"] = first.line.source
    result["matches"] = [{"rule": m.signature.rule_id, "signature": m.signature.name, "line": m.line.number,
                          "rank": m.line.rank, **({"file": m.line.source} if m.line.source else {})}
                         for m in matches[:50]]
    return findings, result


def pitfall_findings(text: str, already: set[str] = frozenset()) -> list[Finding]:
    """The named pitfall of a failed run's output (``smoke`` on its own runs): :func:`explain`'s first finding, as
    an error, unless nothing was recognised (LOG800), it is an unnamed Python error (LOG805: smoke's TRN607 already
    gives it), the run being stopped (LOG807: smoke stopped it, and says why), or its rule is among ``already``
    reported."""
    findings, _ = explain(text)
    first = findings[0]
    if first.id in (LOG800.id, LOG805.id, LOG807.id) or first.id in already:  # nothing named: smoke's own TRN6xx say it
        return []
    return [first]
