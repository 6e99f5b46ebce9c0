"""The facts of a machine: :func:`collect` through a :class:`Probe` (environment, executables, NVML), the op builds
(:func:`build_op`), and what only importing torch and DeepSpeed tells (:func:`deep_facts`)."""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Callable

from dsdoctor.checks.network import interface_addresses, route_to
from dsdoctor.extensions import build_locks
from dsdoctor.extensions import roots as extension_roots
from dsdoctor.hardware import host_ram_bytes
from dsdoctor.report import Finding


from .rules import ENV324


@dataclass
class Probe:
    """Where facts come from: the process environment, executables on PATH, NVML. Tests replace the callables."""

    env: dict = field(default_factory=lambda: dict(os.environ))
    which: Callable[[str], str | None] = shutil.which
    run: Callable[[list[str]], str | None] = None  # type: ignore[assignment]
    nvml: Callable[[], dict | None] = None  # type: ignore[assignment]

    def __post_init__(self):
        if self.run is None:
            self.run = _run
        if self.nvml is None:
            self.nvml = nvml_facts


def _run(argv: list[str]) -> str | None:
    """stdout + stderr of ``argv`` (5 s limit), None when it cannot run."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout + proc.stderr


def _archs_of(output: str | None) -> list[str] | None:
    """The compute capabilities ``nvcc --list-gpu-arch`` prints (``compute_90`` -> ``9.0``), or None where it prints
    none (nvcc before CUDA 11.4 has no such option)."""
    archs = sorted({f"{int(m[:-1])}.{m[-1]}" for m in re.findall(r"\bcompute_(\d{2,3})[a-z]?\b", output or "")},
                   key=lambda a: tuple(map(int, a.split("."))))
    return archs or None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _module_file_values(package: str, filename: str) -> dict | None:
    """Top-level assignments of ``<package>/<filename>`` read as data (the module is not imported)."""
    import ast

    from dsdoctor.files import installed_package_dir

    root = installed_package_dir(package)
    if root is None:
        return None
    path = root / filename
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    values = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            (node.target if isinstance(node, ast.AnnAssign) else None)
        if isinstance(target, ast.Name) and node.value is not None:
            try:
                values[target.id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return values


def nvml_facts() -> dict | None:
    """Driver, the highest CUDA it supports, and every GPU (NVML); None without NVML or GPUs."""
    if not (os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia")):
        return None
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        facts = {"driver": _s(pynvml.nvmlSystemGetDriverVersion()), "driver_cuda": f"{cuda // 1000}.{cuda % 1000 // 10}",
                 "gpus": []}
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            gpu = {"index": i, "name": _s(pynvml.nvmlDeviceGetName(h)), "memory_total": int(mem.total),
                   "memory_used": int(mem.used), "capability": f"{major}.{minor}", "bf16": major >= 8,
                   "processes": []}
            for getter, key in ((pynvml.nvmlDeviceGetPersistenceMode, "persistence"),
                                (lambda d: pynvml.nvmlDeviceGetTotalEccErrors(
                                    d, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
                                 "ecc_uncorrected"),
                                (pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, "throttle_reasons")):
                try:
                    gpu[key] = int(getter(h))
                except pynvml.NVMLError:
                    gpu[key] = None
            try:
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                    gpu["processes"].append({"pid": int(proc.pid), "used": int(proc.usedGpuMemory or 0)})
            except pynvml.NVMLError:
                pass
            links = 0
            for link in range(18):  # NVML_NVLINK_MAX_LINKS
                try:
                    links += int(pynvml.nvmlDeviceGetNvLinkState(h, link) == pynvml.NVML_FEATURE_ENABLED)
                except pynvml.NVMLError:
                    break
            gpu["nvlinks_active"] = links
            # the link's generation and width, for dsdoctor nccl's busbw verdict (the current PCIe generation drops
            # when the GPU idles, so the maximum is the link's)
            for getter, key in (((lambda d: pynvml.nvmlDeviceGetNvLinkVersion(d, 0)) if links else None,
                                 "nvlink_version"),
                                (pynvml.nvmlDeviceGetMaxPcieLinkGeneration, "pcie_gen"),
                                (pynvml.nvmlDeviceGetMaxPcieLinkWidth, "pcie_width")):
                try:
                    gpu[key] = int(getter(h)) if getter else None
                except (pynvml.NVMLError, AttributeError):
                    gpu[key] = None
            facts["gpus"].append(gpu)
        levels = {0: "same board", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
        facts["topology"] = []
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(len(facts["gpus"]))]
        for i in range(len(handles)):
            for j in range(i + 1, len(handles)):
                try:
                    level = pynvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
                except pynvml.NVMLError:
                    continue
                facts["topology"].append({"gpus": [i, j], "pcie_path": levels.get(int(level), str(level))})
        return facts
    except pynvml.NVMLError:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _s(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda_of(text: str | None) -> str | None:
    found = re.search(r"release (\d+\.\d+)", text or "")
    return found.group(1) if found else None


def _route_to_master(addr: str | None, addresses: list[list[str]]) -> list[str] | None:
    """[interface, local address] of the route to MASTER_ADDR (``lo`` for this host), or None when it is unset or
    does not resolve."""
    if not addr:
        return None
    try:
        ip = socket.getaddrinfo(addr, None)[0][4][0]
    except (OSError, UnicodeError):
        return None
    return route_to(ip, addresses)


def _interfaces() -> list[str]:
    try:
        return sorted(name for _, name in socket.if_nameindex())
    except OSError:
        return []


def ops_for_config(config: dict) -> list[str]:
    """DeepSpeed op builders the config's optimizer will build, as ``engine.py`` ``_configure_basic_optimizer``
    chooses them: Adam/AdamW -> FusedAdam, or CPUAdam with ``offload_optimizer`` to cpu/nvme (none with
    ``torch_adam``); Lion -> FusedLion / CPULion; Adagrad with offload -> CPUAdagrad; Lamb -> FusedLamb."""
    optimizer = config.get("optimizer") if isinstance(config.get("optimizer"), dict) else {}
    name = str(optimizer.get("type", "")).lower()
    params = optimizer.get("params") if isinstance(optimizer.get("params"), dict) else {}
    zero = config.get("zero_optimization") if isinstance(config.get("zero_optimization"), dict) else {}
    offload = zero.get("offload_optimizer") if isinstance(zero.get("offload_optimizer"), dict) else {}
    stage = zero.get("stage", 0)
    stage = int(stage) if isinstance(stage, str) and stage.strip().isdecimal() else stage  # DeepSpeed coerces "2"
    cpu = offload.get("device") in ("cpu", "nvme") and isinstance(stage, int) and stage >= 1
    if name in ("adam", "adamw"):
        return [] if params.get("torch_adam") else ["CPUAdamBuilder" if cpu else "FusedAdamBuilder"]
    if name == "lion":
        return ["CPULionBuilder" if cpu else "FusedLionBuilder"]
    if name == "adagrad":
        return ["CPUAdagradBuilder"] if cpu else []
    if name == "lamb":
        return ["FusedLambBuilder"]
    return []


BUILD_SCRIPT = ("import sys\n"
                "from deepspeed.accelerator import get_accelerator\n"
                "builder = get_accelerator().create_op_builder(sys.argv[1])\n"
                "if builder is None:\n"
                "    sys.exit(f'{sys.argv[1]}: no such op for the {get_accelerator()._name} accelerator')\n"
                "builder.load(verbose=True)\n")


def build_op(class_name: str, timeout_s: int = 900) -> dict:
    """JIT-build one DeepSpeed op in a fresh process, as the first optimizer creation would. Returns ``name``,
    ``ok``, ``seconds`` and, on failure, ``error``: the first compiler error line, else the last line of the
    output."""
    import sys
    import time

    start = time.time()
    try:
        proc = subprocess.run([sys.executable, "-c", BUILD_SCRIPT, class_name], capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"name": class_name, "ok": False, "seconds": round(time.time() - start, 1),
                "error": f"the build took more than {timeout_s} s"}
    output = proc.stdout + proc.stderr
    result = {"name": class_name, "ok": proc.returncode == 0, "seconds": round(time.time() - start, 1),
              "compiled": bool(re.search(r"^\[1/\d+\] ", output, re.M))}  # ninja's first build step
    if proc.returncode != 0:
        lines = [line.strip() for line in (proc.stdout + "\n" + proc.stderr).splitlines() if line.strip()]
        compiler = [line for line in lines if re.search(r"(error:|fatal error|not found|No such file|returned non-zero)",
                                                        line) and "Error building extension" not in line]
        result["error"] = (compiler[0] if compiler else (lines[-1] if lines else f"exit {proc.returncode}"))[:400]
    return result


def build_findings(results: list[dict]) -> list[Finding]:
    """ENV324 for each op that failed to build."""
    return [ENV324.finding(f"{r['name']} after {r['seconds']} s: {r['error']}") for r in results if not r["ok"]]


def deep_facts() -> dict:
    """What only importing torch and DeepSpeed tells (``dsdoctor env --deep``): whether torch can use CUDA, cuDNN,
    the C++ ABI, the NCCL torch really loads, and each DeepSpeed op's compatibility as ``ds_report`` probes it."""
    facts: dict[str, Any] = {}
    try:
        import torch
    except ImportError:
        return {"torch_importable": False}
    facts["torch_importable"] = True
    facts["cuda_available"] = bool(torch.cuda.is_available())
    facts["device_count"] = torch.cuda.device_count() if facts["cuda_available"] else 0
    facts["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    facts["cxx11_abi"] = bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", False))
    try:
        facts["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version()) if torch.version.cuda else None
    except Exception:  # noqa: BLE001 - a CPU build has no NCCL
        facts["nccl"] = None
    try:
        import io
        from contextlib import redirect_stdout

        with redirect_stdout(io.StringIO()):
            from deepspeed.accelerator import get_accelerator
            from deepspeed.ops.op_builder.all_ops import ALL_OPS

            facts["deepspeed_accelerator"] = get_accelerator()._name
            facts["deepspeed_ops_compatible"] = {name: bool(builder.is_compatible(False))
                                                 for name, builder in sorted(ALL_OPS.items())}
    except Exception as exc:  # noqa: BLE001 - DeepSpeed missing or broken: reported as a fact
        facts["deepspeed_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return facts


def collect(probe: Probe | None = None, sections: tuple[str, ...] = ("versions", "toolchain", "gpu", "host",
                                                                    "network"), output_dir: str = ".",
            deep: bool = False) -> dict:
    """Facts by section (JSON-serialisable). Slow probes (nvcc, gcc, ninja, NVML) run concurrently; ``deep`` adds
    :func:`deep_facts` (imports torch and DeepSpeed)."""
    probe = probe or Probe()
    env = probe.env
    facts: dict[str, Any] = {}
    with ThreadPoolExecutor(max_workers=4) as pool:
        cuda_home = env.get("CUDA_HOME") or env.get("CUDA_PATH")  # torch's _find_cuda_home reads both
        nvcc_path = (os.path.join(cuda_home, "bin", "nvcc") if cuda_home and
                     os.path.exists(os.path.join(cuda_home, "bin", "nvcc")) else probe.which("nvcc"))
        tools = {"nvcc": nvcc_path, "gcc": probe.which(env.get("CXX") or "c++"), "ninja": probe.which("ninja")}
        futures = {name: pool.submit(probe.run, [path, "--version"]) if path and "toolchain" in sections else None
                   for name, path in tools.items()}
        futures["nvcc_arch"] = (pool.submit(probe.run, [nvcc_path, "--list-gpu-arch"])
                                if nvcc_path and "toolchain" in sections else None)
        futures["nvml"] = pool.submit(probe.nvml) if {"gpu", "toolchain", "versions"} & set(sections) else None
        if "versions" in sections:
            torch_version = _module_file_values("torch", "version.py")
            ds_build = _module_file_values("deepspeed", "git_version_info_installed.py")
            facts["versions"] = {
                "python": platform.python_version(), "platform": platform.platform(),
                "torch": torch_version.get("__version__") if torch_version else None,
                "torch_cuda": torch_version.get("cuda") if torch_version else None,
                "deepspeed": _version("deepspeed"),
                "deepspeed_prebuilt_ops": sorted(k for k, v in (ds_build or {}).get("installed_ops", {}).items() if v),
                "deepspeed_built_with": (ds_build or {}).get("torch_info"),
                "transformers": _version("transformers"), "peft": _version("peft"),
                "accelerate": _version("accelerate"), "nvidia-ml-py": _version("nvidia-ml-py"),
                "cudnn_wheel": next((v for d in ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu11")
                                     if (v := _version(d))), None),
                "nccl_wheel": next((v for d in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")
                                    if (v := _version(d))), None),
            }
        nvml = futures["nvml"].result() if futures["nvml"] else None
        if "toolchain" in sections:
            paths = sysconfig.get_paths()  # this interpreter's include and scripts directories
            facts["toolchain"] = {
                "CUDA_HOME": cuda_home, "nvcc": nvcc_path,
                "nvcc_cuda": _cuda_of(futures["nvcc"].result()) if futures["nvcc"] else None,
                "nvcc_archs": _archs_of(futures["nvcc_arch"].result()) if futures["nvcc_arch"] else None,
                "cxx": env.get("CXX") or "c++",
                "gcc": ((futures["gcc"].result() or "").splitlines() or [None])[0] if futures["gcc"] else None,
                "cuda_home_has_nvcc": (os.path.exists(os.path.join(cuda_home, "bin", "nvcc")) if cuda_home
                                       else None),
                "ninja": (futures["ninja"].result() or "").strip() or None if futures["ninja"] else None,
                "TORCH_CUDA_ARCH_LIST": env.get("TORCH_CUDA_ARCH_LIST"),
                "libaio": any(os.path.exists(p) for p in ("/usr/include/libaio.h", "/usr/local/include/libaio.h")),
                "python_include": paths.get("include"),
                # the deepspeed launcher pip installed beside this Python, and the one PATH finds (deepspeed's
                # setup.py scripts: bin/deepspeed)
                "deepspeed_cli": probe.which("deepspeed"),
                "scripts_dir": paths.get("scripts"),
                "python_h": os.path.exists(os.path.join(paths.get("include") or "", "Python.h")),
                "TORCH_EXTENSIONS_DIR": env.get("TORCH_EXTENSIONS_DIR"),
                "build_locks": [lock.to_dict() for lock in build_locks(extension_roots(env))],
            }
    if "gpu" in sections or "versions" in sections:
        facts["gpu"] = {"nvml": nvml is not None, "driver": (nvml or {}).get("driver"),
                        "topology": (nvml or {}).get("topology", []),
                        "driver_cuda": (nvml or {}).get("driver_cuda"), "gpus": (nvml or {}).get("gpus", []),
                        "CUDA_VISIBLE_DEVICES": env.get("CUDA_VISIBLE_DEVICES")}
    if "host" in sections:
        import resource

        from dsdoctor.shm import deepspeed_segments

        shm = _statvfs_bytes("/dev/shm")
        memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
        facts["host"] = {"hostname": socket.gethostname(), "euid": os.geteuid(), "cores": os.cpu_count(),
                         "ram": host_ram_bytes(),
                         "dev_shm": shm, "deepspeed_shm": [seg.to_dict() for seg in deepspeed_segments()],
                         "memlock": None if memlock == resource.RLIM_INFINITY else memlock,
                         "output_dir": output_dir, "output_dir_free": _free_bytes(output_dir)}
    if "network" in sections:
        facts["network"] = {k: env.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG",
                                                     "NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_TIMEOUT", "DEEPSPEED_TIMEOUT",
                                                     "TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                                                     # the Flight Recorder (checks/hang/flight.py)
                                                     "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE",
                                                     "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_FR_DUMP_TEMP_FILE",
                                                     "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                                                     "TORCH_NCCL_DEBUG_INFO_PIPE_FILE")}
        facts["network"]["interfaces"] = _interfaces()
        addresses = facts["network"]["addresses"] = interface_addresses()
        facts["network"]["route_to_master"] = _route_to_master(env.get("MASTER_ADDR"), addresses)
        facts["network"]["euid"] = os.geteuid()
    if deep:
        facts["deep"] = deep_facts()
    return facts


def _statvfs_bytes(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def _free_bytes(path: str) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def _numbers(version: str | None, parts: int) -> tuple[int, ...]:
    """The first ``parts`` numbers of a version, local part dropped: ``_numbers("2.5.1+cu124", 2) == (2, 5)``."""
    return tuple(int(x) for x in re.findall(r"\d+", (version or "").split("+")[0])[:parts])


def arch_list_problems(value: str) -> tuple[list[str], list[str]]:
    """(entries DeepSpeed's JIT builder cannot parse, the parsed MAJOR.MINOR entries), split as
    ``compute_capability_args`` does (``;`` or whitespace)."""
    entries = [e.strip() for e in value.replace(" ", ";").split(";") if e.strip()]
    bad = [e for e in entries if not re.fullmatch(r"\d+\.\d+(\+PTX)?", e)]
    return bad, [e for e in entries if e not in bad]
