"""The known failures: each :class:`Signature` is the pattern of one failure (a cheap substring test in front of its
regular expression), the rule it is reported under, and its describer, which turns the match and the whole log into
(evidence, fix): the values seen (sizes of a CUDA out-of-memory, the batch triple, the ranks that timed out and the
suspects, the interface NCCL chose, the signal that stopped the run and what the ranks were doing). Also the generic
Python error (LOG805). The describers live by concern: :mod:`.memory`, :mod:`.launch`, :mod:`.network`,
:mod:`.runtime`, :mod:`.imports`, :mod:`.precision`, :mod:`.toolchain`, :mod:`.validation`.

Every pattern is bounded (no unbounded repetition that can backtrack over a long run of digits, dots or letters: a
lookbehind anchors a leading number, gaps are ``.{0,N}``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from dsdoctor.checks.network import BRIDGE_PREFIXES

from . import imports, precision
from .toolchain import arch as _arch, build as _build
from .validation import describe as _validation
from .context import RunContext
from .evidence import _first_line, _int, _shown_number, _where
from .lines import PYTHON_ERROR, Line
from .launch import _argparse, _option_as_command, _rank_exit, _stopped
from .memory import _oom, _signal
from .network import (BRIDGE_IF, _bridges, _empty_master_addr, _gloo_timeout, _nccl_connect, _nccl_error,
                      _no_interface, _rendezvous, _store_unreachable, _two_gpus, _unique_id_timeout, _watchdog)
from .runtime import (_checkpoint_no_grad, _config_not_found, _device_assert, _dtype_mismatch, _eval_nan,
                      _into_placeholders, _kernel_oom, _main_process_first, _missing_shard, _native_assert,
                      _nothing_to_train, _one_rank_save, _optimizer_param)


@dataclass
class Match:
    """A signature found at ``line``, which is ``lines[line_index]`` of the log."""

    signature: "Signature"
    line: Line
    groups: re.Match | None
    line_index: int
    info: dict | None = None  # what a derived match (ENV329's build in flight) found
    context: "RunContext | None" = None  # what the log says about its run (set by findings.explain)


@dataclass(frozen=True)
class Signature:
    """One failure's pattern. ``needles``: substrings one of which every matching line contains (tested first);
    ``rule_id``: the rule it is reported under; ``describe(match, lines)`` returns (evidence, fix or "") from the
    match and the whole log, or (evidence, fix, {"title": ...}) where the rule's title does not say what the log
    shows; ``consequence``: True for what follows another failure (a killed rank, a reset connection), reported only
    when nothing else is found; ``follows``: the names of the signatures whose presence in the log makes this one
    their consequence (a NaN after the fp16 loss scale fell to its floor); ``caught_by``: the command that finds it
    before launch (a command that runs: placeholders ``ds_config.json``, ``MODEL``, ``PATH``), ``caught_note``: what
    that command checks, in words after it."""

    name: str
    rule_id: str
    needles: tuple[str, ...]
    pattern: re.Pattern
    describe: Callable[["Match", list[Line]], tuple]
    caught_by: str = ""
    consequence: bool = False
    spoils: bool = False  # the run's result is unusable even when the run finishes (NaN loss, empty weights)
    follows: tuple[str, ...] = ()
    caught_note: str = ""
    code: bool = False  # matched on a traceback's quoted source lines only (where a frame stopped), not on output

    def needles_present(self, text: str) -> bool:
        return any(needle in text for needle in self.needles)


# --- what each signature says ---------------------------------------------------------------------------------------


#: the HF Trainer's DeepSpeed set-up in a traceback: it fills the config's "auto" values before DeepSpeed reads them
TRAINER_FILLS = re.compile(r"transformers/(?:integrations/deepspeed|deepspeed|trainer)\.py\", line \d{1,6}, in "
                           r"(?:deepspeed_init|trainer_config_finalize|_inner_training_loop|train)\b")


#: DeepSpeed 0.9.0 named in a log: its start-up line ("DeepSpeed info: version=0.9.0"), a pip line, an env report
DS_090 = re.compile(r"(?:DeepSpeed info: version=|deepspeed[= ]=?=?\s?|deepspeed version\W{0,6})0\.9\.0(?![\d.])",
                    re.I)


def _batch(match: Match, lines: list[Line]) -> tuple:
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
    trainer = any(TRAINER_FILLS.search(ln.text) for ln in lines[max(0, match.line_index - 80):match.line_index]
                  if ln.rank == match.line.rank)
    if trainer and micro * acc and total == micro * acc and world > 1:  # the Trainer filled "auto" for one process
        return (_where(match) + f"train_batch_size {total} != {micro} x {acc} x {world} (micro batch x gradient "
                f"accumulation x world size): the HF Trainer filled the config's batch values for world size 1 "
                f"while the launcher started {world} ranks",
                "The Trainer computed the batch for one process: its TrainingArguments did not see the distributed "
                "launch (on a machine without GPUs, use_cpu=True / --use_cpu; TrainingArguments built before the "
                "launcher's environment is read, or with a local_rank of -1). Fix that side, not the config: a "
                "train_batch_size written into the config is then refused as a mismatch with the Trainer's "
                "(HF201). `dsdoctor check ds_config.json --launch trainer --world-size "
                f"{world}` checks the config as the Trainer fills it.")
    assumed = total // (micro * acc) if micro * acc and total % (micro * acc) == 0 else 0
    if world == 1 and assumed > 1:  # the config is right for N processes; DeepSpeed counted one
        v090 = any(DS_090.search(ln.text) for ln in lines[:20000])
        evidence = (_where(match) + f"train_batch_size {total} != {micro} x {acc} x 1 (micro batch x gradient "
                    f"accumulation x world size): the config is right for world size {assumed}, and DeepSpeed "
                    f"counted one process" + ("; the log shows DeepSpeed 0.9.0, which under accelerate checks the "
                                              "batch with world size 1" if v090 else ""))
        fix = ("If several processes were launched, DeepSpeed did not see them: DeepSpeed 0.9.0 under accelerate "
               "counts world size 1 (DeepSpeed issue 3228: upgrade, or 0.8.3), and plain `python` starts one "
               f"process (launch with `deepspeed --num_gpus {assumed}` or `torchrun --nproc_per_node {assumed}`). "
               f"For one process, set train_batch_size to {micro * acc}, or give only "
               f"train_micro_batch_size_per_gpu.")
        if v090:
            return evidence, fix, {"rule": "ENV310", "title": "DeepSpeed 0.9.0 under accelerate counts world size 1"}
        return evidence, fix
    fixed = micro * acc * world
    return (_where(match) + f"train_batch_size {total} != {micro} x {acc} x {world} (micro batch x gradient "
            f"accumulation x world size){note}",
            f"Set train_batch_size to {fixed} ({micro} x {acc} x {world}); or let DeepSpeed derive it for any world "
            f"size: replace train_batch_size by \"train_micro_batch_size_per_gpu\": {micro} (or, where the config "
            f"already gives train_micro_batch_size_per_gpu, drop train_batch_size; dropping it alone, with only "
            f"gradient_accumulation_steps left, DeepSpeed refuses). `dsdoctor check ds_config.json --world-size "
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



def _never_built(match: Match, lines: list[Line]) -> tuple:
    op = match.groups.group("op").lower()
    loaded = next((ln for ln in lines if "undefined symbol" in ln.text and f"cpu_{op}" in ln.text), None)
    if loaded is not None:  # it was built: its shared object failed to load (named at that line)
        return (_where(match) + match.line.text.strip()[:200] + f": the cpu_{op} op was built, but its shared object "
                f"did not load ({loaded.at})", "See the finding for the op's load failure.",
                {"title": f"the cpu_{op} op did not load (the consequence of its load failure)"})
    return (_where(match) + match.line.text.strip()[:200] + f": the cpu_{op} op was never built (its JIT build "
            f"failed before; the compiler's error is earlier in the full log)",
            f"`dsdoctor env --build-ops ds_config.json` builds cpu_{op} now and shows why it fails (a CUDA toolkit "
            f"of torch's CUDA version, gcc, the Python headers: python3-dev); or pre-build it: "
            f"DS_BUILD_CPU_{op.upper()}=1 pip install deepspeed --no-cache-dir.")


def _required(match: Match, lines: list[Line]) -> tuple[str, str, dict]:
    g = match.groups
    found = g.group("found").rstrip(".")
    return (_where(match) + f"{g.group('req')} is required, {found} is installed",
            f"pip install '{g.group('req')}' (the range the training code pins), or a release of that code made for "
            f"{found}.", {"title": "an installed version outside the range the training code requires"})



def _pydantic_api(match: Match, lines: list[Line]) -> tuple[str, str]:
    from .validation import pydantic_versions

    one, two = pydantic_versions()
    mined = (f" (its config models use pydantic 2 in the versions dsdoctor mined {', '.join(two)}; "
             f"{', '.join(one)} use pydantic 1's API)" if one and two else "")
    return (_where(match) + match.line.text.strip()[:200] + ": DeepSpeed's config code of pydantic 1's API "
            "(runtime/config_utils.py) runs under pydantic 2",
            f"pip install 'pydantic<2' for this DeepSpeed, or upgrade DeepSpeed{mined}.")


#: what turns gradient checkpointing on, in a command, a config or a log
CHECKPOINTING = re.compile(r"gradient[_-]checkpointing|grad[_-]ckpt|checkpoint[_-]activations|"
                           r"activation[_-]checkpointing", re.I)
#: a launch command in the log (the launchers, or python running a script)
LAUNCH_LINE = re.compile(r"^\s*(?:[$#>]\s{0,3})?(?:deepspeed|torchrun|accelerate launch|python3?)\b[^\n]{0,400}?\.py\b")


def _no_grad_fn(match: Match, lines: list[Line]) -> tuple[str, str] | tuple[str, str, dict]:
    """The loss has no grad_fn: nothing in the graph requires grad. Under gradient checkpointing over a frozen base
    that is TRN613 (the checkpointed blocks' inputs require no grad). When the log shows the launch command and
    nothing anywhere turns checkpointing on, while the command trains LoRA, no parameter trains at all: the LoRA
    targets matched no module (LOG803; DeepSpeed-Chat's --lora_module_name, peft's target_modules)."""
    command = next((ln for ln in lines if LAUNCH_LINE.search(ln.text)), None)
    if command is None or any(CHECKPOINTING.search(ln.text) for ln in lines):
        return _first_line(match, lines)
    lora = next((ln for ln in lines if "lora" in ln.text.lower()), None)
    if lora is None:
        return _first_line(match, lines)
    return (_where(match) + match.line.text.strip()[:200] + f"; the command ({command.at}) trains LoRA "
            f"({lora.text.strip()[:120]}) and turns no gradient checkpointing on: no parameter requires grad, so the "
            "LoRA layers were never inserted (their target names match no module of this model)",
            "Name modules the model has as LoRA targets (print(model) lists them: q_proj/v_proj in Llama and Qwen2, "
            "query_key_value in ChatGLM, W_pack in Baichuan; DeepSpeed-Chat's --lora_module_name is a name prefix), "
            "and check that the trainable parameters are not 0 before training.",
            {"rule": "LOG803", "title": "nothing trains: the LoRA targets match no module of the model"})


# --- the catalogue of signatures ------------------------------------------------------------------------------------

def _sig(name, rule_id, needles, pattern, describe=_first_line, caught_by="", consequence=False,
         spoils=False, follows=(), caught_note="", code=False) -> Signature:
    needles = (needles,) if isinstance(needles, str) else tuple(needles)
    return Signature(name, rule_id, needles, re.compile(pattern), describe, caught_by, consequence, spoils,
                     tuple(follows), caught_note, code)


#: the signatures of an fp16 loss scale at its floor: a NaN in the same log is their consequence
FP16_FLOOR = ("loss-scale-floor", "loss-scale-stuck")
#: import failures a caller may catch (an optional package tried, its traceback logged, the run going on): like an
#: unnamed Python error, no failure when their rank trains on after them (findings.survived)
SURVIVABLE = frozenset({"no-deepspeed", "no-torch", "no-package", "op-abi", "import-error"})


SIGNATURES: tuple[Signature, ...] = (
    _sig("nccl-watchdog", "LOG801", "Watchdog caught collective operation timeout",
         r"(?:\[[^\[\]]{0,80}?Rank (?P<rank>\d+)\]\s{0,4})?Watchdog caught collective operation timeout: "
         r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w{1,40})(?:, NumelIn=(?P<numel>\d+))?"
         r"[^\n]{0,300}?Timeout\(ms\)=(?P<timeout>\d+)", _watchdog, "dsdoctor nccl"),
    _sig("gloo-timeout", "LOG801", "Timed out waiting",
         r"gloo[^\n]{0,400}?Timed out waiting (?P<timeout>\d+)ms for (?P<op>\w{1,40}) operation", _gloo_timeout,
         "dsdoctor nccl"),
    # ProcessGroupNCCL's broadcastUniqueNCCLID: a rank's first NCCL collective waits in the c10d store for rank 0's
    # ncclUniqueId ("retreiving" in torch 1.x-2.0's spelling); the store answered, the key never came
    _sig("unique-id-timeout", "DATA707", ("ncclUniqueId",),
         r"(?:\[(?P<rank>\d{1,6})\] )?is setting up NCCL communicator and retr[ei]{2}ving ncclUniqueId from "
         r"\[(?P<root>\d{1,6})\][^\n]{0,300}?(?:got error|failed)[:,]? (?P<error>[^\n]{0,200})", _unique_id_timeout,
         "dsdoctor data FILE --model MODEL", caught_note="(DATA707: rank 0's tokenizing time against the timeout)"),
    _sig("port-in-use", "NET401", ("Address already in use", "address already in use", "EADDRINUSE"),
         r"(?:Error|error|failed to listen)\b[^\n]{0,500}?(?:errno: 98|EADDRINUSE|[Aa]ddress already in use)",
         _first_line, "dsdoctor env", caught_note="finds MASTER_PORT busy before any rank starts (so do "
         "`dsdoctor nccl` and `dsdoctor smoke`)"),
    _sig("port-privileged", "NET406", ("Permission denied", "EACCES"),
         r"(?:Error|error|failed to listen)\b[^\n]{0,500}?(?:failed to bind to \[?[^\]\n]{0,200}\]?:(?P<port>\d{1,5}) "
         r"\(errno: 13|port: (?P<port2>\d{1,5}),[^\n]{0,300}?name: EACCES)",
         _first_line, "dsdoctor env"),
    # DeepSpeed's launcher with an empty address for the first node (runner.py "Using IP address of {} for node {}";
    # the command it then runs on every node: "--master_addr= ")
    _sig("empty-master-addr", "NET405", ("Using IP address of ", "--master_addr= "),
         r"Using IP address of\s{2,}for node (?P<node>\S{1,200})|--master_addr=\s", _empty_master_addr),
    _sig("name-unresolved", "NET405", ("Name or service not known", "failure in name resolution"),
         r"(?:DistNetworkError|gaierror|c10d|TCPStore|rendezvous|MASTER_ADDR|init_process_group)[^\n]{0,500}?"
         r"(?:Name or service not known|failure in name resolution)", _first_line, "dsdoctor env"),
    # the store's "[W socket.cpp] ... failed to connect" retries are normal while the master starts: only the error
    # that ends them is a failure
    _sig("rendezvous-unreachable", "NET410", ("failed to connect", "waiting for clients", "trying to connect to"),
         r"(?:DistNetworkError|DistStoreError|RuntimeError|TimeoutError|ConnectionError)\b[^\n]{0,600}?"
         r"(?:failed to connect|waiting for clients|Connection refused|No route to host|timed out)|"
         # libtorch's TCPStore client (socket.cpp): "The client socket has timed out after 900s while trying to
         # connect to (node-a, 29500)"
         r"client socket has timed out after \d{1,9}s while trying to connect to", _rendezvous,
         "dsdoctor env", caught_note="on each node (MASTER_ADDR reachable)"),
    _sig("nccl-no-interface", "NET402", ("no socket interface found", "neither AF_INET"),
         r"no socket interface found|"
         # NCCL_SOCKET_IFNAME naming no interface: NCCL finds none without a warning, then connects to an address it
         # never set (misc/socket.cc ncclSocketInit)
         r"with family \d{1,6} is neither AF_INET\(2\) nor AF_INET6\(10\)", _no_interface, "dsdoctor env"),
    _sig("nccl-connect", "NET411", ("NCCL WARN",),
         r"NCCL WARN (?:socketStartConnect|socketPollConnect|Net : Connect to|Call to connect|NET/Socket : Connect to)"
         r"[^\n]{0,200}?(?<![\d.])(?P<addr>\d{1,3}(?:\.\d{1,3}){3})(?![\d.])[^\n]{0,200}?(?:failed|returned|timed out)",
         _nccl_connect, "dsdoctor env", caught_note="on each node (NET411: the interface NCCL would use)"),
    _sig("batch-assertion", "DS102", "train_batch_size is not equal to",
         r"train_batch_size is not equal to micro_batch_per_gpu \* gradient_acc_step \* world_size\s{1,8}(\d+)\s{0,8}"
         r"!=\s{0,8}(\d+)\s{0,8}\*\s{0,8}(\d+)\s{0,8}\*\s{0,8}(\d+)", _batch, "dsdoctor check ds_config.json"),
    # a string where DeepSpeed computes with a number: "auto" (or a quoted number) outside the Trainer's fill-in
    _sig("auto-compare", "DS101", ("not supported between instances of", "unsupported operand type"),
         r"TypeError: '[<>=]{1,2}' not supported between instances of (?:'str' and '(?:int|float)'|'(?:int|float)' "
         r"and 'str')|TypeError: unsupported operand type\(s\) for [-+*/]{1,2}: (?:'str' and '(?:str|int|float)'|"
         r"'(?:int|float)' and 'str')", _first_line, "dsdoctor check ds_config.json --launch engine"),
    _sig("auto-multiply", "DS101", "non-int of type 'str'",
         r"can't multiply sequence by non-int of type 'str'", _first_line, "dsdoctor check ds_config.json --launch engine"),
    _sig("auto-convert", "DS101", ("'auto'", "got auto"),
         r"(?:could not convert string to float|invalid literal for int\(\) with base 10): 'auto'|"
         r"must be (?:a|an) [\w ]{1,80}, got auto\b", _first_line,
         "dsdoctor check ds_config.json --launch engine"),
    # DeepSpeed's own schedulers built from the config's "scheduler" block without a parameter they require
    # (runtime/lr_schedules.py: WarmupDecayLR/WarmupCosineLR total_num_steps, OneCycle cycle_min_lr/cycle_max_lr)
    _sig("scheduler-param", "DS125", "required positional argument",
         r"(?:WarmupDecayLR|WarmupCosineLR|OneCycle|WarmupLR|LRRangeTest)\.__init__\(\) missing \d{1,2} required "
         r"positional arguments?: (?P<args>'[\w']{1,40}'(?:,? (?:and )?'\w{1,40}'){0,4})|"
         r"__init__\(\) missing \d{1,2} required positional arguments?: '(?:total_num_steps|cycle_min_lr|cycle_max_lr)'",
         _first_line, "dsdoctor check ds_config.json"),
    _sig("hf-mismatch", "HF201", "mismatch TrainingArguments values",
         r"Please correct the following DeepSpeed config values that mismatch TrainingArguments values", _mismatch,
         "dsdoctor check ds_config.json --launch trainer --hf-args args.json"),
    _sig("cuda-oom", "MEM501", "out of memory",
         r"(?:OutOfMemoryError|RuntimeError): CUDA out of memory|CUDA error: out of memory", _oom, "dsdoctor estimate"),
    _sig("host-oom-kill", "MEM504", ("-9", "Signal 9", "SIGKILL: 9", "Killed"),
         r"--local_rank=(?P<rank2>\d{1,6})'(?:, [^\]\n]{0,400})?\] exits with return code = -9|"
         r"exits with return code = -9|died with <Signals\.SIGKILL: 9>|^Killed\s{0,3}$|"
         r"failed \(exitcode: -9\) local_rank: (?P<rank3>\d{1,6}) \(pid: (?P<pid3>\d{1,10})\)|"
         r"Signal 9 \(SIGKILL\) received by PID (?P<pid>\d{1,10})|"
         r"exitcode\s{0,4}:\s{0,4}-9 \(pid: (?P<pid2>\d{1,10})\)|"
         r"rank (?P<rank>\d{1,6}) [^\n]{0,200}?exit code -9", _signal,
         "dsdoctor env --deepspeed ds_config.json --model MODEL", consequence=True),
    # the kernel's own line (dmesg, journalctl -k: mm/oom_kill.c __oom_kill_process): the OOM killer named the process
    _sig("kernel-oom-kill", "MEM504", "Out of memory: Kill",
         r"Out of memory: Killed process (?P<pid>\d{1,10}) \((?P<comm>[^)\n]{1,64})\)(?:[^\n]{0,200}?anon-rss:"
         r"(?P<rss>\d{1,14})kB)?", _kernel_oom, "dsdoctor env --deepspeed ds_config.json --model MODEL"),
    _sig("host-alloc", "MEM504", ("DefaultCPUAllocator", "can't allocate memory"),
         r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory): you tried to allocate (?P<bytes>\d{1,16}) "
         r"bytes", _first_line, "dsdoctor env --deepspeed ds_config.json --model MODEL",
         caught_note="(the host RAM that loading the model and offload need)"),
    _sig("shm-bus-error", "ENV312", ("Bus error", "bus error"),
         r"Bus error|ERROR: Unexpected bus error encountered in worker|No space left on device[^\n]{0,300}?shm",
         _first_line, "dsdoctor env", caught_note="(the /dev/shm size)"),
    _sig("nccl-shm", "ENV312", ("posix_fallocate failed", "/dev/shm", "shared memory"),
         r"NCCL WARN[^\n]{0,200}?(?:posix_fallocate failed|failed to extend /dev/shm|/dev/shm[^\n]{0,200}?(?:No space|"
         r"failed)|[Uu]nable to allocate shared memory|shm_open[^\n]{0,100}?failed)|Error while creating shared "
         r"memory segment /dev/shm", _first_line, "dsdoctor env", caught_note="(the /dev/shm size)"),
    _sig("nccl-socket-bridges", "NET416", ("NET/Socket", *BRIDGE_PREFIXES),
         r"NET/Socket : Using[^\n]{0,2000}?\[\d{1,2}\]" + BRIDGE_IF + r"|^\s{0,8}\[\d{1,2}\]" + BRIDGE_IF +
         r"[\w.-]{0,40}:[0-9a-fA-F.:%\w-]{1,60}<\d{1,6}>", _bridges, "dsdoctor env",
         caught_note="(on each node, with MASTER_ADDR set: the interfaces NCCL would use)"),
    # torch's device check (aten/src/ATen/TensorIterator.cpp, native/...: "Expected all tensors to be on the same
    # device, but found at least two devices, cuda:0 and cuda:1!"), between two GPUs: one process holds tensors on
    # several GPUs. (A CPU and a GPU tensor are another story: offload, a tensor left on the CPU.)
    _sig("two-gpus-one-process", "PRE016", "Expected all tensors to be on the same device",
         r"Expected all tensors to be on the same device, but found at least two devices, (?P<a>cuda:\d{1,3}) and "
         r"(?P<b>cuda:\d{1,3})", _two_gpus),
    # torch's TCPStore client (c10d/socket.cpp) retrying MASTER_ADDR:MASTER_PORT: timed out or no route is an address
    # this node cannot reach (a refused connection is only the master not listening yet); the failure itself when
    # nothing else is found
    _sig("store-unreachable", "NET410", "The client socket has failed",
         r"The client socket has failed to connect to (?:\[(?P<addr>[^\]\n]{1,200})\]|(?P<addr2>\S{1,200})):"
         r"(?P<port>\d{1,5}) \(errno: (?P<errno>110|113|101)\b", _store_unreachable, "dsdoctor nccl",
         consequence=True),
    # a CUDA kernel's device-side assertion in torch (aten/src/ATen/native/cuda/*.cu): the kernel, the condition
    _sig("cuda-device-assert", "LOG810", ("Assertion `", "Assertion '"),
         r"(?P<file>[\w./-]{0,200}aten/src/ATen/native/cuda/[\w/]{1,100}\.cuh?):(?P<line>\d{1,6}): (?P<kernel>\w{1,100}):"
         r" block: \[[\d,]{1,40}\], thread: \[[\d,]{1,40}\] Assertion [`'](?P<cond>[^`'\n]{1,200})[`'] failed",
         _device_assert),
    # assert() in native code (glibc: "python: FILE:LINE: FUNCTION: Assertion `COND' failed.", then SIGABRT): a
    # compiled op's own check, DeepSpeed's aio or a CUDA extension
    _sig("native-assert", "LOG810", "Assertion `",
         r"(?:^|(?<=[\s:]))(?P<path>[\w./~-]{1,300}\.(?:cpp|cc|cu|cuh|c|h|hpp)):(?P<line>\d{1,6}): (?P<func>[^`\n]{1,600}?): "
         r"Assertion `(?P<cond>[^`'\n]{1,200})' failed|"
         r"^\s{0,8}(?P<func2>[^`/\n]{1,300}?): Assertion `(?P<cond2>[^`'\n]{1,200})' failed", _native_assert),
    # torch's reentrant checkpoint warning: the checkpointed block's inputs need no grad, so nothing inside it gets
    # one (LoRA over a frozen base without enable_input_require_grads)
    _sig("checkpoint-no-input-grad", "TRN613", "None of the inputs have requires_grad=True",
         r"None of the inputs have requires_grad=True\. Gradients will be None", _checkpoint_no_grad),
    # an evaluation's loss NaN while training's is not: an eval batch whose labels are all -100 (0/0 in the mean)
    _sig("eval-nan-loss", "DATA701", "eval_loss",
         r"['\"]eval_loss['\"]: '?nan\b", _eval_nan, "dsdoctor data --model MODEL --seq-len N"),
    # nothing to train: torch's optimizer given no parameter (torch/optim/optimizer.py), or a script's own count of
    # trainable parameters at 0 (peft's print_trainable_parameters, a script's print) before a failure it explains;
    # not the Trainer's "Number of trainable parameters = 0", which ZeRO-3's partitioned parameters make 0 anyway
    _sig("empty-optimizer", "TRN609", "empty parameter list", r"optimizer got an empty parameter list",
         _nothing_to_train),
    _sig("no-trainable-parameters", "TRN609", ("rainable params", "rainable Params", "rainable parameters:"),
         r"(?<!Number of )\b[Tt]rainable [Pp]ar(?:ams|ameters)\s{0,4}[:=]\s{0,4}0(?![\d.,])", _nothing_to_train,
         consequence=True),
    # the config's optimizer and scheduler blocks, refused at initialize (engine.py _configure_basic_optimizer,
    # _scheduler_from_config): the rules `check` gives the same blocks
    _sig("optimizer-unknown", "DS122", "is not a supported DeepSpeed Optimizer",
         r"(?P<type>[\w.-]{1,80}) is not a supported DeepSpeed Optimizer", _first_line, "dsdoctor check ds_config.json"),
    _sig("optimizer-param", "DS118", "got an unexpected keyword argument",
         r"(?P<cls>\w{0,40}(?:Adam\w{0,10}|Lamb|Lion|SGD|Adagrad|RMSprop|Adafactor|Muon|Optimizer))\.__init__\(\) got an "
         r"unexpected keyword argument '(?P<arg>\w{1,80})'", _optimizer_param, "dsdoctor check ds_config.json"),
    _sig("scheduler-wrapped-optimizer", "DS124", "is not an Optimizer",
         r"TypeError: (?P<cls>\w{0,60}(?:Zero\w{0,40}|FP16\w{0,30}|BF16\w{0,30})Optimizer\w{0,20}) is not an "
         r"Optimizer", _first_line, "dsdoctor check ds_config.json"),
    _sig("nccl-duplicate-gpu", "NET415", "Duplicate GPU detected",
         r"Duplicate GPU detected : rank (?P<a>\d{1,6}) and rank (?P<b>\d{1,6}) both on CUDA device (?P<dev>\w{1,20})",
         _first_line, "dsdoctor env", caught_note="(CUDA_VISIBLE_DEVICES); call torch.cuda.set_device(LOCAL_RANK)"),
    _sig("cuda-mismatch", "ENV304", "does not match the version torch was compiled with",
         r"Installed CUDA version (?P<nvcc>\d{1,3}(?:\.\d{1,3})?) does not match the version torch was compiled with "
         # DeepSpeed accepts a minor difference (op_builder/builder.py assert_no_cuda_mismatch): a warning, not this
         r"(?P<torch>\d{1,3}(?:\.\d{1,3})?)(?![\d.]| but since the APIs are compatible)", _first_line, "dsdoctor env",
         caught_note="(nvcc's CUDA against torch's)"),
    _sig("nvcc-arch", "ENV330", ("Unsupported gpu architecture", "unsupported gpu architecture"),
         r"[Uu]nsupported gpu architecture '(?P<arch>compute_\w{1,10}|sm_\w{1,10})'", _first_line, "dsdoctor env",
         caught_note="(nvcc --list-gpu-arch against the GPUs and TORCH_CUDA_ARCH_LIST)"),
    _sig("no-ninja", "ENV306", ("Ninja is required", "ninja is required", "requires ninja"),
         r"[Nn]inja is required to load C\+\+ extensions|JIT compiled ops requires ninja", _first_line, "dsdoctor env"),
    _sig("cuda-home", "ENV305", "CUDA_HOME",
         r"CUDA_HOME does not exist|CUDA_HOME environment variable is not set", _first_line,
         "dsdoctor env --build-ops ds_config.json", caught_note="(the toolchain, then the ops the config needs)"),
    _sig("arch-suffix", "ENV307", "invalid literal for int() with base 10: '",
         r"invalid literal for int\(\) with base 10: '\d{1,4}[a-z]'", _arch, "dsdoctor env"),
    _sig("no-kernel-image", "ENV308", "no kernel image is available",
         r"no kernel image is available for execution on the device", _first_line, "dsdoctor env"),
    _sig("op-build", "ENV324", "Error building extension",
         r"Error building extension '(?P<op>\w{1,100})'", _build, "dsdoctor env --build-ops ds_config.json"),
    # the same build failure pasted without torch's RuntimeError: ninja's own lines, or its CalledProcessError
    # CPUAdam's __del__ after its op failed to build: the object never got its ds_opt_adam (ops/adam/cpu_adam.py)
    _sig("op-never-built", "ENV324", ("has no attribute 'ds_opt_adam'", "has no attribute 'ds_opt_lion'"),
         r"'DeepSpeedCPU(?P<op>Adam|Lion|Adagrad)' object has no attribute 'ds_opt_\w{1,20}'", _never_built,
         "dsdoctor env --build-ops ds_config.json", follows=("op-abi",)),  # built, but its .so did not load
    _sig("no-cxx", "ENV315", ("cc1plus", "c++:"),
         r"cannot execute .cc1plus.|error trying to exec 'cc1plus'|\bc\+\+: (?:command )?not found", _first_line,
         "dsdoctor env", caught_note="(the C++ compiler torch's extension builder calls)"),
    _sig("no-python-h", "ENV333", "Python.h",
         r"fatal error: Python\.h: No such file or directory", _first_line, "dsdoctor env",
         caught_note="(Python.h in the include directory of the Python that runs the job)"),
    _sig("op-build-ninja", "ENV324", ("ninja: build stopped", "'ninja', '-v'", "FAILED: "),
         r"ninja: build stopped: subcommand failed|Command '\['ninja', '-v'[^\]\n]{0,100}\]' returned non-zero exit|"
         r"FAILED: (?:\S{0,300}/)?\w{1,100}\.(?:so|o|cuda\.o)\s{0,3}$", _build,
         "dsdoctor env --build-ops ds_config.json"),
    # cuBLAS refusing a bf16 GEMM (torch's aten/src/ATen/cuda/CUDABlas.cpp names the call and its CUDA_R_16BF
    # operands): a GPU before compute capability 8.0 has no bf16 tensor cores, and Pascal's cuBLAS no bf16 GEMM
    _sig("bf16-unsupported", "DS111", ("bf16", "16BF"),
         r"doesn't support bf16/gpu|bf16 is not supported on your device|Type bf16 is not supported|"
         r"CUBLAS_STATUS_NOT_SUPPORTED when calling `?cublas\w{1,40}\([^\n]{0,400}?CUDA_R_16BF", _first_line,
         "dsdoctor check ds_config.json --gpu auto",
         caught_note="on the training machine (auto reads its GPUs through NVML; elsewhere --gpu NAME as nvidia-smi "
                     "names it: --gpu V100)"),
    _sig("dtype-mismatch", "DS113", ("expected scalar type", "same dtype", "should be the same"),
         r"expected scalar type \w{1,40} but found \w{1,40}|mat1 and mat2 must have the same dtype|"
         r"Input type \([^()\n]{1,200}\) and weight type \([^()\n]{1,200}\) should be the same|"
         r"expected (?:mat1 and mat2|both) to have the same dtype", _dtype_mismatch,
         "dsdoctor check ds_config.json --model MODEL"),
    # the fp16 loss scale at its floor (precision.py: DeepSpeed's loss scalers, what they print)
    _sig("loss-scale-floor", "DS114", precision.FLOOR_NEEDLES, precision.FLOOR, precision.describe_floor,
         "dsdoctor check ds_config.json --model MODEL", spoils=True),
    _sig("loss-scale-stuck", "DS114", (), precision.STUCK, precision.describe_floor,  # no needles: findings.scan
         "dsdoctor check ds_config.json --model MODEL", spoils=True),
    _sig("nan-loss", "TRN602", ("nan", "NaN"),
         r"['\"]loss['\"]: '?nan|\bloss[=:]\s{0,4}nan\b|Loss is NaN|loss is nan",
         _first_line, "dsdoctor smoke --model PATH --deepspeed ds_config.json --steps 100", spoils=True,
         follows=FP16_FLOOR),
    # a NaN gradient norm: a NaN of the weights, unless it is a step the fp16 loss scaler skipped (findings.scan)
    _sig("nan-grad-norm", "TRN602", ("nan",),
         r"['\"]grad_norm['\"]: '?nan",
         _first_line, "dsdoctor smoke --model PATH --deepspeed ds_config.json --steps 100", spoils=True,
         follows=FP16_FLOOR),
    # the model's side is the placeholder: a full checkpoint loaded with load_state_dict into a model built under
    # zero.Init (from_config with HfDeepSpeedConfig alive, deepspeed.zero.Init), outside DeepSpeed's gathering
    _sig("zero3-load-into-placeholders", "LOG812", "the shape in current model is torch.Size(",
         r"copying a param with shape torch\.Size\(\[(?!0\])[\d, ]{1,60}\]\) from checkpoint, the shape in current "
         r"model is torch\.Size\(\[0\]\)", _into_placeholders),
    _sig("zero3-empty-weights", "DS142", "torch.Size([0])",
         r"copying a param with shape torch\.Size\(\[0\]\)|"
         # (not the model's side: zero3-load-into-placeholders)
         r"size mismatch for [^\n]{0,400}?torch\.Size\(\[0\]\)(?<!current model is torch\.Size\(\[0\]\))|"
         # a saved state dict printed name by name: ZeRO-3's placeholders (zero_pp_rank_*_model_states.pt, a
         # save_pretrained without the gather) have shape [0]
         r"(?<![\w.])[\w.]{1,300}\.(?:weight|bias)['\"]?\s{0,3}[:=,]?\s{0,3}torch\.Size\(\[0\]\)",
         _first_line, "dsdoctor check ds_config.json", spoils=True,
         caught_note="(stage3_gather_16bit_weights_on_model_save)"),
    _sig("adapter-keys-missing", "DS142", "missing adapter keys",
         r"Found missing adapter keys while loading the checkpoint", _first_line,
         "dsdoctor check ds_config.json", spoils=True,
         caught_note="(ZeRO-3 saves); `dsdoctor smoke --deepspeed ds_config.json --steps 100` reloads the adapter"),
    _sig("lora-targets", "LOG803", "not found in the base model",
         r"Target modules? [^\n]{0,2000}? not found in the base model", _first_line,
         "dsdoctor estimate --model MODEL --method lora"),
    _sig("zero3-lora-base", "LOG804", "ZeRO3 is incompatible with LoRA",
         r"ZeRO3 is incompatible with LoRA", _first_line),
    _sig("remote-code", "LOG802", ("custom code", "trust_remote_code"),
         r"contains custom code which must be executed|Do you wish to run the custom code|"
         r"requires you to execute [^\n]{0,300}?custom code|"
         r"(?:pass the argument|set the option) `trust_remote_code=True`",
         _first_line, "dsdoctor smoke --model PATH --trust-remote-code",
         caught_note="(after reading the model's own code: smoke refuses a model whose auto_map runs code without "
                     "it, before any rank starts, and with it proves the model loads and trains)"),
    # import failures (imports.py): a package not installed, an incomplete or shadowed one, another version's code
    _sig("no-deepspeed", "ENV309", imports.NO_DEEPSPEED_NEEDLES, imports.NO_DEEPSPEED, imports.missing_deepspeed,
         "dsdoctor env", caught_note="(run with the job's python: the versions it imports)"),
    _sig("no-deepspeed-cli", "ENV334", ("command not found", "deepspeed: not found"), imports.NO_DEEPSPEED_CLI,
         imports.missing_deepspeed_cli, "dsdoctor env",
         caught_note="(run with the job's python: whether DeepSpeed imports and its launcher is on PATH)"),
    _sig("no-torch", "ENV301", imports.NO_TORCH_NEEDLES, imports.NO_TORCH, imports.missing_torch, "dsdoctor env",
         caught_note="(run with the job's python: the versions it imports)"),
    _sig("no-package", "LOG808", imports.NO_PACKAGE_NEEDLES, imports.NO_PACKAGE, imports.missing_package,
         "dsdoctor env", caught_note="(run with the job's python: the fine-tuning stack it imports)"),
    _sig("op-abi", "ENV317", imports.OP_ABI_NEEDLES, imports.OP_ABI, imports.op_abi, "dsdoctor env --deep",
         caught_note="(each DeepSpeed op against the installed torch)"),
    # transformers' require_version (utils/versions.py), which LLaMA-Factory and others call for their pins
    _sig("version-required", "ENV310", "is required for a normal functioning of this module",
         r"(?P<req>[\w.-]{1,80}[<>=!~][^\s,]{1,40}(?:,[<>=!~][^\s,]{1,40}){0,3}) is required for a normal functioning of "
         r"this module, but found (?P<found>[\w.-]{1,80}==[\w.+-]{1,40})", _required),
    _sig("glibcxx", "ENV335", imports.GLIBCXX_NEEDLES, imports.GLIBCXX, imports.glibcxx,
         "dsdoctor env --build-ops ds_config.json", caught_note="(builds and loads the ops the config needs)"),
    # sh/dash and bash report a word they cannot run: an option line run as a command, because the command above it
    # ended early (a missing backslash, a comment inside the continuation)
    _sig("option-run-as-command", "PRE017", ": --",
         r"^\S{1,400}\.sh: (?:line )?\d{1,6}: (?P<opt>--[A-Za-z][\w.-]{0,100})|"
         r"^(?:ba|z)?sh: (?:line \d{1,6}: )?(?:command not found: )?(?P<opt2>--[A-Za-z][\w.-]{0,100})"
         r"[^\n]{0,300}?(?:command )?not found", _option_as_command, "dsdoctor preflight -- bash SCRIPT.sh"),
    _sig("import-error", "ENV310", imports.VERSION_MISMATCH_NEEDLES, imports.VERSION_MISMATCH,
         imports.version_mismatch, "dsdoctor env", caught_note="(the installed versions and those known to break "
                                                               "each other)"),
    _sig("no-optimizer", "DS120", ("requires an optimizer", "DeepSpeedZeRoOffload"),
         r"zero stage \d requires an optimizer|'DeepSpeedZeRoOffload' object has no attribute "
         r"'(?:set_gradient_accumulation_boundary|backward|step|zero_grad)'", _first_line,
         "dsdoctor check ds_config.json --launch engine"),
    _sig("offload-client-optimizer", "DS121", "ZeRO-Offload with a client provided optimizer",
         r"You are using ZeRO-Offload with a client provided optimizer \((?P<opt>[^\n]{0,200}?)\)", _first_line,
         "dsdoctor check ds_config.json --launch engine --client-optimizer"),
    # ZeRO-3 keeps every partitioned weight as an empty placeholder (torch.Size([0])) outside the engine's forward
    # hooks: F.embedding refuses it
    _sig("zero3-placeholder", "LOG812", "must be 2-D",
         r"'weight' must be 2-D", _first_line),
    _sig("no-grad-fn", "TRN613", "does not require grad and does not have a grad_fn",
         r"element 0 of tensors does not require grad and does not have a grad_fn", _no_grad_fn,
         "dsdoctor smoke --model PATH --method lora",
         caught_note="(the reference trainer enables input grads under checkpointing)"),
    # a script's argparse refusing its command line: the launcher's --local_rank before the user's own arguments
    _sig("argparse-error", "ENV331", ".py: error: ",
         r"^[\w./-]{1,200}\.py: error: (?P<msg>[^\n]{1,300})$", _argparse),
    # argparse's refusal pasted without its "prog: error: " head
    _sig("argparse-value", "PRE021", (": invalid ",),
         r"^\s{0,8}(?:argument )?(?P<msg>-{1,2}[\w-]{1,100}(?:/-{1,2}[\w-]{1,100})?: invalid (?:choice: [^\n]{0,300}|"
         r"\w{1,40} value(?:: [^\n]{0,300}|\s*)))$", _argparse),
    _sig("local-rank-arg", "ENV331", ("unrecognized arguments", "not used by the HfArgumentParser", "--local_rank="),
         r"error: unrecognized arguments:[^\n]{0,200}?--local[_-]rank|"
         r"Some specified arguments are not used by the HfArgumentParser: [^\n]{0,200}?--local[_-]rank|"
         # a script reading sys.argv[1] as a path gets the launcher's --local_rank=N, which comes first
         r"No such file or directory: '--local_rank=\d{1,6}'", _first_line),
    # DeepSpeed's config_utils.py of the pydantic 1 API (0.9.x: requires pydantic<2) under pydantic 2
    _sig("pydantic-2-old-deepspeed", "ENV310", "has no attribute 'field_info'",
         r"'FieldInfo' object has no attribute 'field_info'", _pydantic_api),
    # HfDeepSpeedConfig (accelerate/utils/deepspeed.py, transformers' integrations/deepspeed.py before): a value of
    # --deepspeed that is no file is taken for base64; its decoding fails first when the path is a long one
    _sig("ds-config-not-found", "PRE014", ("a string path to an existing deepspeed config",
                                           "urlsafe_b64decode(config_file_or_dict)"),
         r"Expected a string path to an existing deepspeed config|urlsafe_b64decode\(config_file_or_dict\)",
         _config_not_found),
    _sig("zero3-device-map", "HF209", "is not compatible with `low_cpu_mem_usage=True`",
         r"DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` or with passing a `device_map`",
         _first_line),
    _sig("zero-resume-world-size", "DS146", ("DP world size of", "zero_pp_rank_"),
         r"used a DP world size of (?P<saved>\d{1,6}) but the current world size is (?P<now>\d{1,6})|"
         r"No such file or directory: '(?P<shard>[^'\n]{0,400}?zero_pp_rank_\d{1,6}_mp_rank_\d{1,4}_optim_states\.pt)'",
         _missing_shard),
    # a traceback's frame stopped at `with ...main_process_first(...)`: entering it is the other ranks' barrier while
    # the main process runs the block (a traceback shows the line a frame executes: in the block's body, another line)
    _sig("main-process-first-barrier", "DATA707", "main_process_first(",
         r"^\s{0,12}with [\w.]{0,120}main_process_first\(", _main_process_first, "dsdoctor data FILE --model MODEL",
         code=True),
    # a frame stopped at the engine's save (the script's own line): when no rank's own error explains the run, a save
    # that waited for ranks that never called it (a rank-0-only branch)
    _sig("one-rank-save", "TRN614", ("save_checkpoint(", "save_16bit_model("),
         r"^\s{0,12}[\w.\[\]]{1,80}\.save_(?:checkpoint|16bit_model)\(", _one_rank_save, "dsdoctor preflight -- torchrun --nproc_per_node N SCRIPT.py",
         consequence=True, code=True),
    _sig("remote-code-race", "ENV332", "transformers_modules",
         r"(?:FileNotFoundError|ModuleNotFoundError|ImportError)[^\n]{0,300}?transformers_modules", _first_line),
    _sig("ds-config-invalid", "DS199", ("validation error for DeepSpeed", "validation errors for DeepSpeed"),
         r"(?<!\d)\d{1,6} validation errors? for DeepSpeed\w{0,60}Config", _validation, "dsdoctor check ds_config.json"),
    _sig("rank-exit", "LOG806", ("exits with return", "failed (exitcode", "received by PID", "died with <Signals.",
                                 "exitcode  :", "exitcode :", "exitcode:"),
         r"--local_rank=(?P<rank2>\d{1,6})'?(?:, [^\]\n]{0,400})?\] exits with return code = (?P<code2>-?(?!9(?!\d))[1-9]\d{0,3})"
         r"(?!\d)|sigkill_handler\]\s{0,3}exits with return(?: code)?\s{0,3}=?\s{0,3}(?P<code4>-?(?!9(?!\d))[1-9]\d{0,3})"
         r"(?!\d)|failed \(exitcode: (?P<code>-?(?!9(?!\d))[1-9]\d{0,3})\) local_rank: (?P<rank>\d{1,6})(?!\d)|"
         # (SIGTERM is sent from outside: the agent ending the ranks left after another failed, or a stop: LOG807)
         r"Signal (?P<sig>(?!9 |15 )\d{1,2}) \((?P<signame>SIG\w{2,8})\) received by PID|"
         r"died with <Signals\.(?P<signame2>SIG(?!KILL|TERM)\w{2,8}): (?P<sig2>\d{1,2})>|"
         # torchrun's failure summary (torch/distributed/elastic/multiprocessing/errors), its rank on the line above
         # (-15 there is the agent's own SIGTERM of the ranks left when another failed: a cascade)
         r"^\s{0,8}exitcode\s{0,8}:\s{0,4}(?P<code5>-?(?!9(?!\d)|15(?!\d))[1-9]\d{0,3}) \(pid: \d{1,10}\)", _rank_exit,
         consequence=True),
    _sig("nccl-error", "NET408", "NCCL error",
         r"NCCL error in: [^\n]{0,400}?(?:unhandled system error|unhandled cuda error|internal error|"
         r"remote process exited)", _nccl_error, "dsdoctor nccl", consequence=True),
    # the run stopped from outside: torchrun's agent (SignalException, "Received 15 death signal"), DeepSpeed's
    # launcher, slurm's cancel (a time limit, a preemption), a Ctrl-C's KeyboardInterrupt; never the cause of a failure
    # before it
    _sig("stopped", "LOG807", ("got signal:", "death signal", "Main process received SIG", "CANCELLED AT",
                               "KeyboardInterrupt"),
         r"SignalException: Process (?P<pid>\d{1,10}) got signal: (?:Signals\.)?(?P<sig>SIG[A-Z]{2,8}|\d{1,3})\b|"
         r"Received (?:Signals\.)?(?P<sig2>SIG[A-Z]{2,8}|\d{1,3}) death signal|"
         r"Main process received (?P<sig3>SIG[A-Z]{2,8}), exiting|"
         r"\*\*\* (?:JOB|STEP) [\w.]{1,40} ON \S{1,100} CANCELLED AT \S{1,40}(?: DUE TO (?P<why>[A-Z][A-Z ]{0,40}?))? "
         r"\*\*\*|^\s{0,40}KeyboardInterrupt(?::[^\n]{0,200})?$", _stopped,
         consequence=True),
)


#: Every signature's needles in one pattern: one search rules out most lines, ``findall`` names the needles a line
#: has. No needle may contain another (``findall`` would hide the shorter one; tests/test_explain.py checks it).
def trie_pattern(words) -> str:
    """A regular expression matching any of ``words``, factored as a trie (``Assertion (?:`|')``): the same
    language as their alternation, the longest word at a position first, but one branch per shared prefix, which
    ``re`` tries several times faster than one alternative per word (measured: 0.28 s against 0.09 s for 10,400 log
    lines)."""
    root: dict = {}
    for word in words:
        node = root
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict) -> str:
        branches = [re.escape(ch) + build(node[ch]) for ch in sorted(k for k in node if k)]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return build(root)


NEEDLES = re.compile(trie_pattern({n for s in SIGNATURES for n in s.needles}))
#: the signatures read on a traceback's quoted source lines (:attr:`Signature.code`)
CODE_SIGNATURES = tuple(s for s in SIGNATURES if s.code)
#: The same needles found at every position (a lookahead: overlapping occurrences too), so that ``findall`` names
#: every needle a line holds; and, for each needle, the indices in :data:`SIGNATURES` of the signatures that have it:
#: a line is tried against those signatures only (a frequent needle, DeepSpeed's ``skipped=`` on every step line,
#: costs one signature, not the whole table).
NEEDLES_AT = re.compile("(?=(" + NEEDLES.pattern + "))")
NEEDLE_SIGNATURES: dict[str, tuple[int, ...]] = {
    n: tuple(i for i, s in enumerate(SIGNATURES) if n in s.needles) for s in SIGNATURES for n in s.needles}


def candidates(text: str) -> list[Signature]:
    """The signatures whose needles ``text`` holds, in :data:`SIGNATURES` order (the order a line's matches are
    added in)."""
    found = set(NEEDLES_AT.findall(text))
    if len(found) == 1:
        return [SIGNATURES[i] for i in NEEDLE_SIGNATURES[found.pop()]]
    return [SIGNATURES[i] for i in sorted({i for n in found for i in NEEDLE_SIGNATURES[n]})]
#: An exception's (dotted) name, as a traceback's last line starts


def _python_error(match: Match, lines: list[Line]) -> tuple[str, str]:
    """The exception line, and where it comes from (:func:`.origin.failure_origin`)."""
    from .origin import describe_frame, failure_origin

    origin = failure_origin(lines, match.line_index, match.line.rank)
    return _where(match) + match.line.text.strip()[:240] + (f"; {describe_frame(origin)}" if origin else ""), ""


PYTHON_ERROR_SIGNATURE = Signature("python-error", "LOG805", (), PYTHON_ERROR, _python_error)
