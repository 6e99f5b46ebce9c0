"""The describers of :mod:`.signatures` for memory: CUDA's out-of-memory (the sizes it prints, against what the
run's settings say it needs) and the kernel's SIGKILL of a rank (the host's OOM killer)."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from .context import localize, run_context
from .evidence import _int, _where
from .launch import summary_rank
from .lines import Line

if TYPE_CHECKING:
    from .signatures import Match

#: a size as torch prints it ("2.00 GiB", "512 MiB"); the number is bounded and starts at a number's start
SIZE = r"(?<![\d.])\d{1,9}(?:\.\d{1,6})? [KMGT]i?B"
OOM_TRIED = re.compile(rf"Tried to allocate ({SIZE})")
OOM_TOTAL = re.compile(rf"total capacity of ({SIZE})")
OOM_FREE = re.compile(rf"({SIZE}) (?:is )?free")
OOM_ALLOCATED = re.compile(rf"({SIZE}) is allocated by PyTorch|({SIZE}) already allocated")
OOM_RESERVED = re.compile(rf"({SIZE}) is reserved by PyTorch but unallocated|({SIZE}) reserved in total by PyTorch")
OOM_GPU = re.compile(r"\bGPU (\d{1,4})(?!\d)")
GIB = re.compile(r"(\d{1,9}(?:\.\d{1,6})?)\s{0,4}([KMGT])i?B")


def _gib(text: str) -> float | None:
    """``text``'s leading size ('2.00 GiB') in GiB (2^30 bytes), or None."""
    number = GIB.match(text)
    if not number:
        return None
    scale = {"K": 2 ** -20, "M": 2 ** -10, "G": 1, "T": 2 ** 10}[number.group(2)]
    return float(number.group(1)) * scale


def _gib_text(value: float) -> str:
    """A size in GiB for a command line: at most two decimals, cut (not rounded up), no trailing zeros."""
    cut = math.floor(value * 100 + 1e-9) / 100
    return f"{cut:.2f}".rstrip("0").rstrip(".")


def _oom(match: Match, lines: list[Line]) -> tuple[str, str]:
    """A CUDA out-of-memory (torch's ``c10/cuda/CUDACachingAllocator.cpp`` message: the request, the card's total
    capacity, free, allocated and reserved memory): its numbers, and the ``dsdoctor estimate`` line of this run,
    made of what the log printed (:func:`context.run_context`: the config file, DeepSpeed's stage, offload, micro
    batch, accumulation and precision, the ranks per node and nodes, the model and sequence length) and the card's
    memory as CUDA reported it, cut to two decimals (never rounded up: an estimate for a larger card than the run
    had would call a setup that did not fit a fit)."""
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
    ctx = match.context or run_context(lines)
    settings = ctx.settings
    args = ["dsdoctor estimate --model MODEL"]
    if ctx.config:
        args.append(f"--deepspeed {ctx.config}")
    if "zero" in settings and settings["zero"] in ("0", "1", "2", "3"):
        args.append(f"--zero {settings['zero']}")
    for key, option in (("offload_optimizer", "--offload-optimizer"), ("offload_param", "--offload-param")):
        if settings.get(key) in ("cpu", "nvme"):
            args.append(f"{option} {settings[key]}")
    for key, option in (("micro_batch", "--micro-batch"), ("grad_acc", "--grad-accum")):
        if _int(settings.get(key), 6):
            args.append(f"{option} {_int(settings[key], 6)}")
    if settings.get("bf16", "").lower() == "true":
        args.append("--precision bf16")
    elif settings.get("fp16", "").lower() == "true":
        args.append("--precision fp16")
    if ctx.launch == "trainer":
        args.append("--launch trainer")
    if ctx.grad_ckpt is False:
        args.append("--no-grad-ckpt")
    ckpt_note = (" The log does not say whether gradient checkpointing was on: estimate assumes it is; the Trainer's "
                 "default is off (add --no-grad-ckpt unless your run enabled it)."
                 if ctx.grad_ckpt is None and ctx.launch == "trainer" else "")
    nodes = ctx.nodes or 1
    per_node = ctx.per_node or (ctx.world_size // nodes if ctx.world_size and ctx.world_size % nodes == 0 else None)
    if per_node and per_node <= 1024:
        args.append(f"--gpus {per_node}" + (f" --nodes {nodes}" if nodes > 1 else ""))
    args.append("--seq-len SEQ_LEN")
    capacity = _gib(total.group(1)) if total else None
    if capacity and capacity >= 0.01:  # as printed, never rounded up: 23.65 GiB is not a 24 GiB card
        args.append(f"--gpu-mem {_gib_text(capacity)}")
    command = localize(f"`{' '.join(args)}`", ctx)
    fragmented = ""
    if reserved and reserved.group(1) and _gib(reserved.group(1)) and tried and _gib(tried.group(1)) and \
            _gib(reserved.group(1)) >= _gib(tried.group(1)):
        fragmented = " The reserved-but-unallocated memory exceeds the request: fragmentation; " \
                     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True may be enough."
    return (where + "CUDA out of memory: " + (", ".join(parts) or text.strip()[:200]),
            f"Run {command} ({_printed(ctx, capacity, command)}) to see the peak and what to "
            f"change: gradient checkpointing, a higher ZeRO stage, offload, a smaller micro batch with more "
            f"gradient accumulation, shorter sequences.{ckpt_note}{fragmented}")


def _printed(ctx, capacity: float | None, command: str) -> str:
    """Which values of the suggested ``command`` came from the log, and which placeholders are left, in words."""
    shown = []
    if ctx.model and " MODEL " not in command:
        shown.append(f"the model {ctx.model}")
    if ctx.config:
        shown.append(f"the config {ctx.config}")
    if ctx.settings:
        shown.append("DeepSpeed's settings")
    if ctx.world_size or ctx.per_node:
        shown.append(f"world size {ctx.world_size or ctx.per_node * (ctx.nodes or 1)}"
                     + (f" on {ctx.nodes} nodes" if ctx.nodes and ctx.nodes > 1 else ""))
    if ctx.seq_len and "SEQ_LEN" not in command:
        shown.append(f"the sequence length {ctx.seq_len}")
    if capacity:
        shown.append("the card's total memory as CUDA reported it")
    left = [word for word in ("MODEL", "SEQ_LEN") if word in command]
    rest = f"; give {' and '.join(left)}" if left else ""
    return ("from this log: " + ", ".join(shown) + rest if shown else
            "this log printed none of the run's settings: give yours")


def _signal(match: Match, lines: list[Line]) -> tuple[str, str]:
    g = match.groups
    rank = next((g.group(k) for k in ("rank", "rank2", "rank3") if g.groupdict().get(k)), None)
    if rank is None:  # torchrun's summary: its rank line above
        summary = summary_rank(match, lines)
        rank = str(summary) if summary is not None else None
    pid = next((g.group(k) for k in ("pid", "pid2", "pid3") if g.groupdict().get(k)), None)
    offload = any("offload" in line.text and ("cpu" in line.text or "nvme" in line.text) for line in lines[:20000])
    evidence = (f"{'rank ' + rank if rank else 'a rank'}{' (pid ' + pid + ')' if pid else ''} killed by signal 9 "
                f"(SIGKILL) with no Python error: the host's out-of-memory killer"
                + ("; the config offloads to the CPU" if offload else ""))
    return evidence, ("Check `dmesg | grep -i oom`. Host RAM must hold what loading the model and offload need on "
                      "every rank: `dsdoctor env --deepspeed ds_config.json --model MODEL` compares it with this "
                      "host's; load with low_cpu_mem_usage, use fewer ranks per node, or offload less.")
