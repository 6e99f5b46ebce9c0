"""GPUs by name: compute capability and memory, and the GPUs this machine has (NVML, no torch import).

Compute capabilities are NVIDIA's (developer.nvidia.com/cuda-gpus). bf16 needs 8.0 (Ampere): DeepSpeed refuses
it below with "Type bf16 is not supported on your device" (deepspeed/runtime/engine.py, from
``accelerator.is_bf16_supported()``) and transformers with "Your setup doesn't support bf16/gpu".
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from dsdoctor.report import DsdoctorError


@dataclass(frozen=True)
class Gpu:
    """One GPU model. ``memory_bytes`` is the usable total of the common variant (0 when unknown)."""

    name: str
    capability: tuple[int, int]
    memory_bytes: int = 0
    source: str = "table"  # "table" (from --gpu NAME) or "nvml" (seen on this machine)

    @property
    def bf16(self) -> bool:
        return self.capability >= (8, 0)


GIB = 2 ** 30

#: name (lower case, no vendor prefix) -> (compute capability, memory in GiB of the common variant)
GPU_TABLE: dict[str, tuple[tuple[int, int], int]] = {
    "k80": ((3, 7), 12), "p40": ((6, 1), 24), "p100": ((6, 0), 16), "titan xp": ((6, 1), 12),
    "1080 ti": ((6, 1), 11), "v100": ((7, 0), 32), "titan v": ((7, 0), 12), "t4": ((7, 5), 16),
    "2080 ti": ((7, 5), 11), "titan rtx": ((7, 5), 24), "a100": ((8, 0), 80), "a800": ((8, 0), 80),
    "a30": ((8, 0), 24), "a10": ((8, 6), 24), "a40": ((8, 6), 48), "a6000": ((8, 6), 48),
    "3090": ((8, 6), 24), "3080": ((8, 6), 10), "l4": ((8, 9), 24), "l20": ((8, 9), 48), "l40": ((8, 9), 48),
    "l40s": ((8, 9), 48), "4090": ((8, 9), 24), "4090d": ((8, 9), 24), "6000 ada": ((8, 9), 48),
    "h100": ((9, 0), 80), "h800": ((9, 0), 80), "h20": ((9, 0), 96), "h200": ((9, 0), 141),
    "gh200": ((9, 0), 96), "b200": ((10, 0), 180), "5090": ((12, 0), 32),
}


def _normalise(name: str) -> str:
    name = name.lower().replace("nvidia", "").replace("geforce", "").replace("tesla", "").replace("rtx", "")
    name = re.sub(r"[-_]", " ", name)
    return re.sub(r"\s+", " ", name).strip()


def gpu_from_name(name: str) -> Gpu:
    """The :class:`Gpu` for a marketing name (``V100``, ``Tesla V100-SXM2-32GB``, ``RTX 4090``, ``A100``).

    Raises:
        DsdoctorError: a name that matches no known GPU (the message lists them).
    """
    key = _normalise(name)
    best = None
    for known in sorted(GPU_TABLE, key=len, reverse=True):  # "4090d" before "4090", "l40s" before "l40"
        if re.search(rf"(^|\s){re.escape(known)}($|\s|\d+gb|pcie|sxm|nvl)", key) or key == known:
            best = known
            break
    if best is None:
        raise DsdoctorError(f"--gpu {name}: unknown GPU; known: {', '.join(sorted(GPU_TABLE))} (or 'auto')")
    capability, gib = GPU_TABLE[best]
    return Gpu(name=name, capability=capability, memory_bytes=gib * GIB)


def visible_gpus() -> list[Gpu]:
    """The GPUs this process may use, from NVML (nvidia-ml-py), narrowed by ``CUDA_VISIBLE_DEVICES`` when it
    lists indices. Empty without a driver, without NVML, or with ``CUDA_VISIBLE_DEVICES=""``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        return []
    if not os.path.exists("/dev/nvidiactl") and not os.environ.get("DSDOCTOR_FORCE_NVML"):
        return []  # no NVIDIA driver loaded: skip loading NVML (30 ms of check's 0.3 s budget)
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            total = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            gpus.append(Gpu(name=name, capability=(major, minor), memory_bytes=int(total), source="nvml"))
    except Exception:
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    if visible is not None:
        wanted = [v.strip() for v in visible.split(",")]
        if all(v.isdigit() for v in wanted):
            gpus = [gpus[int(v)] for v in wanted if int(v) < len(gpus)]
    return gpus


def host_ram_bytes() -> int | None:
    """This host's RAM (``MemTotal`` of ``/proc/meminfo``), bytes; None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
