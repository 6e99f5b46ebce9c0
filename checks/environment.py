"""Environment checks (``ENV3xx``; the distributed variables go to :mod:`dsdoctor.checks.network`'s ``NET4xx``):
the facts of a machine and the verdicts on them.

Facts are gathered by :func:`collect` through a :class:`Probe` (environment, executables, NVML), so every rule can
be tested with controlled inputs; :func:`diagnose` turns facts into findings and never imports anything. The fast
path imports neither torch nor DeepSpeed: torch's version and CUDA come from ``torch/version.py`` and DeepSpeed's
build from ``deepspeed/git_version_info_installed.py``, read as files (what ``ds_report`` prints after importing
both).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from dsdoctor.checks.network import interface_addresses, route_to
from dsdoctor.extensions import build_locks
from dsdoctor.extensions import roots as extension_roots
from dsdoctor.hardware import host_ram_bytes
from dsdoctor.report import Finding
from dsdoctor.rules import rule

GIB = 2 ** 30

# --- rules --------------------------------------------------------------------------------------------------------

ENV300 = rule("ENV300", "ok", "environment looks right", what="No environment rule fired.", why="", fix="",
              source="dsdoctor env")
ENV301 = rule(
    "ENV301", "error", "torch is not installed",
    what="No importable torch.", why="DeepSpeed, transformers and peft all need it.",
    fix="pip install torch with the CUDA build matching your driver (https://pytorch.org/get-started/locally/).",
    source="importlib.util.find_spec('torch')")
ENV302 = rule(
    "ENV302", "error", "CPU-only torch on a machine with GPUs",
    what="torch.version.cuda is None while NVML sees NVIDIA GPUs.",
    why="Training silently runs on the CPU or DeepSpeed picks the CPU accelerator ('Setting accelerator to CPU').",
    fix="Reinstall torch from the CUDA index (pip install torch --index-url https://download.pytorch.org/whl/cu124, "
        "the CUDA version your driver supports).",
    source="torch/version.py; deepspeed/accelerator/real_accelerator.py")
ENV303 = rule(
    "ENV303", "error", "torch's CUDA is newer than the driver supports",
    what="torch was built for a CUDA version above the highest the NVIDIA driver supports.",
    why="CUDA initialisation fails ('The NVIDIA driver on your system is too old') or torch.cuda.is_available() "
        "is False.",
    fix="Upgrade the driver, or install the torch build for a CUDA version the driver supports.",
    source="NVML nvmlSystemGetCudaDriverVersion; CUDA minor version compatibility (docs.nvidia.com/deploy/cuda-compatibility)")
ENV304 = rule(
    "ENV304", "warning", "nvcc's CUDA major version differs from torch's",
    what="The CUDA toolkit that will compile DeepSpeed's JIT ops is of another major version than torch's CUDA.",
    why="torch.utils.cpp_extension refuses the build ('The detected CUDA version ... mismatches the version that "
        "was used to compile PyTorch') at the first FusedAdam/CPUAdam use, after the model has loaded.",
    fix="Point CUDA_HOME at a toolkit of torch's CUDA major version (e.g. /usr/local/cuda-12.4), or install the torch "
        "build for your toolkit.",
    source="torch/utils/cpp_extension.py _check_cuda_version")
ENV305 = rule(
    "ENV305", "warning", "no CUDA toolkit for DeepSpeed's JIT ops",
    what="torch has CUDA, DeepSpeed's ops are not prebuilt, and neither CUDA_HOME nor nvcc on PATH was found.",
    why="The first optimizer DeepSpeed builds (FusedAdam, CPUAdam) fails: 'MissingCUDAException: CUDA_HOME does not "
        "exist, unable to compile CUDA op(s)'.",
    fix="Install a CUDA toolkit of torch's CUDA version and export CUDA_HOME=/usr/local/cuda-X.Y, or install DeepSpeed "
        "with prebuilt ops (DS_BUILD_OPS=1 pip install deepspeed).",
    source="deepspeed/ops/op_builder/builder.py (MissingCUDAException); DeepSpeed issue 2772")
ENV306 = rule(
    "ENV306", "warning", "ninja is missing",
    what="No ninja executable on PATH.", why="DeepSpeed's JIT op builds need it ('JIT compiled ops requires ninja').",
    fix="pip install ninja", source="deepspeed/env_report.py")
ENV307 = rule(
    "ENV307", "error", "TORCH_CUDA_ARCH_LIST has entries DeepSpeed cannot parse",
    what="An entry of TORCH_CUDA_ARCH_LIST is not MAJOR.MINOR with an optional +PTX (e.g. 9.0a, sm_90, Hopper).",
    why="DeepSpeed's JIT builder sorts the entries with int(): the FusedAdam build dies at the first optimizer step "
        "with \"ValueError: invalid literal for int() with base 10: '0a'\" (seen on the H200 image, which sets 9.0a).",
    fix="export TORCH_CUDA_ARCH_LIST=9.0 (plain MAJOR.MINOR entries, e.g. \"8.0;9.0\")",
    source="deepspeed/ops/op_builder/builder.py compute_capability_args; seen on an H200 whose image sets 9.0a")
ENV308 = rule(
    "ENV308", "warning", "TORCH_CUDA_ARCH_LIST does not cover the GPUs here",
    what="No entry of TORCH_CUDA_ARCH_LIST matches a GPU's compute capability (and no lower +PTX entry).",
    why="JIT-built ops contain no kernel for the GPU: 'no kernel image is available for execution on the device'.",
    fix="Add the GPUs' capability, e.g. export TORCH_CUDA_ARCH_LIST=\"8.0;9.0\", or unset it to build for the GPUs "
        "present.",
    source="deepspeed/ops/op_builder/builder.py; CUDA fatbinary compatibility")
ENV309 = rule(
    "ENV309", "error", "DeepSpeed is not installed",
    what="No deepspeed distribution.", why="Nothing to train with.", fix="pip install deepspeed",
    source="importlib.metadata")
ENV310 = rule(
    "ENV310", "warning", "versions known to break each other",
    what="An installed combination matches a row of dsdoctor's table of known incompatibilities.",
    why="Each row is a failure seen in a public report (the source is in the finding).",
    fix="See the row's fix.", source="checks/environment.py KNOWN_BAD")
ENV311 = rule(
    "ENV311", "warning", "GPU memory held by other processes",
    what="NVML lists processes using a GPU's memory.",
    why="A leftover run (often a zombie from a killed launcher) makes the next one run out of memory or hang in "
        "NCCL initialisation.",
    fix="Stop them (nvidia-smi shows the PIDs; kill PID) or choose other GPUs with CUDA_VISIBLE_DEVICES.",
    source="NVML nvmlDeviceGetComputeRunningProcesses")
ENV312 = rule(
    "ENV312", "warning", "/dev/shm is small",
    what="The shared-memory filesystem has less than 1 GiB.",
    why="NCCL's shared-memory transport and DataLoader workers fail in containers with Docker's 64 MB default "
        "('NCCL WARN Error while creating shared memory segment', 'Bus error').",
    fix="docker run --shm-size=16g (or --ipc=host); Kubernetes: an emptyDir with medium: Memory on /dev/shm.",
    source="NCCL troubleshooting: shared memory (docs.nvidia.com/deeplearning/nccl)")
ENV313 = rule(
    "ENV313", "info", "locked-memory limit is low",
    what="ulimit -l (RLIMIT_MEMLOCK) is below 64 GiB and not unlimited.",
    why="Pinned host memory (ZeRO-Offload's pin_memory, NCCL over InfiniBand) needs locked pages; registration "
        "fails or falls back to slow paths.",
    fix="ulimit -l unlimited (docker run --ulimit memlock=-1), or set pin_memory false in the offload blocks.",
    source="getrlimit(RLIMIT_MEMLOCK); NCCL troubleshooting")
ENV314 = rule(
    "ENV314", "error", "CUDA_VISIBLE_DEVICES names GPUs that do not exist",
    what="An index in CUDA_VISIBLE_DEVICES is not below the number of GPUs NVML sees.",
    why="CUDA then hides every GPU listed after it; torch sees fewer GPUs than the launcher starts ranks for.",
    fix="List only existing indices (nvidia-smi -L), or unset CUDA_VISIBLE_DEVICES.",
    source="CUDA environment variables (docs.nvidia.com/cuda/cuda-c-programming-guide)")
ENV315 = rule(
    "ENV315", "warning", "no C++ compiler",
    what="No $CXX (default c++) on PATH: the compiler torch's extension builder calls.", why="DeepSpeed's JIT ops (CPUAdam, the CPU communication op) need one.",
    fix="apt install build-essential (g++ provides c++), or export CXX=/path/to/g++",
    source="torch/utils/cpp_extension.py (os.environ.get('CXX', 'c++'))")
ENV316 = rule(
    "ENV316", "info", "libaio is missing",
    what="No libaio headers/library.", why="DeepSpeed's async_io op (NVMe offload) cannot build.",
    fix="apt install libaio-dev (only needed for NVMe offload)", source="deepspeed/ops/op_builder/async_io.py")
ENV317 = rule(
    "ENV317", "error", "DeepSpeed's prebuilt ops were built for another torch/CUDA",
    what="DeepSpeed has prebuilt ops, and the torch or CUDA version it recorded at build time differs from the "
         "installed one.",
    why="Loading the ops fails with undefined symbols, or DeepSpeed warns and the ops misbehave.",
    fix="Rebuild DeepSpeed against this torch: DS_BUILD_OPS=1 pip install --no-cache-dir --force-reinstall deepspeed.",
    source="deepspeed/git_version_info_installed.py torch_info; deepspeed/env_report.py")

ENV318 = rule(
    "ENV318", "warning", "DeepSpeed ops training needs cannot be built here",
    what="DeepSpeed's own op builders (as ds_report runs them) report an optimizer op neither prebuilt nor "
         "JIT-compatible on this machine.",
    why="The first optimizer DeepSpeed creates (FusedAdam on GPUs, DeepSpeedCPUAdam with offload) fails after the "
        "model has loaded.",
    fix="Install what the op needs (ninja; a CUDA toolkit of torch's version with CUDA_HOME set; a C++ compiler), "
        "or use \"torch_adam\": true in the optimizer params.",
    source="deepspeed/env_report.py op_report; deepspeed/ops/op_builder/*.py is_compatible")
ENV319 = rule(
    "ENV319", "error", "torch cannot use the GPUs",
    what="torch is a CUDA build and NVML sees GPUs, but torch.cuda.is_available() is False.",
    why="Driver/runtime mismatch, a container without the GPU devices, or CUDA_VISIBLE_DEVICES hiding them: "
        "DeepSpeed falls back to the CPU accelerator.",
    fix="Check nvidia-smi inside the same environment, the container's --gpus flag, and CUDA_VISIBLE_DEVICES.",
    source="torch.cuda.is_available(); deepspeed/accelerator/real_accelerator.py")
ENV320 = rule(
    "ENV320", "warning", "DeepSpeed selects the CPU accelerator on a GPU machine",
    what="deepspeed.accelerator.get_accelerator() is 'cpu' while NVML sees NVIDIA GPUs.",
    why="Training runs on the CPU (DeepSpeed logs 'Setting accelerator to CPU'), or DS_ACCELERATOR forces it.",
    fix="unset DS_ACCELERATOR (or set it to cuda) and make torch see the GPUs (ENV302/ENV319).",
    source="deepspeed/accelerator/real_accelerator.py")

ENV321 = rule(
    "ENV321", "warning", "RTX 40-series GPUs with NCCL peer-to-peer on",
    what="Two or more GeForce RTX 40xx GPUs and NCCL_P2P_DISABLE is not 1.",
    why="These cards do not support peer-to-peer between GPUs, yet NCCL may try it: multi-GPU runs hang forever in "
        "the first collective (inside deepspeed.initialize) with no error.",
    fix="export NCCL_P2P_DISABLE=1 (and NCCL_IB_DISABLE=1 on machines without InfiniBand)",
    source="https://github.com/deepspeedai/DeepSpeed/issues/4433 (reporter-confirmed fix)")
ENV322 = rule(
    "ENV322", "warning", "a GPU reports uncorrected ECC errors",
    what="NVML's volatile uncorrected ECC error count is above 0 for a GPU.",
    why="Uncorrectable memory errors crash kernels ('an illegal memory access', Xid 48/63/64) or corrupt results.",
    fix="Reset the GPU (nvidia-smi -r -i N, when idle) or leave it out (CUDA_VISIBLE_DEVICES); if errors return, "
        "the GPU needs service.",
    source="NVML nvmlDeviceGetTotalEccErrors; NVIDIA Xid errors documentation")
ENV323 = rule(
    "ENV323", "warning", "a GPU is being slowed down",
    what="NVML reports hardware slowdown, thermal slowdown or power-brake throttling for a GPU.",
    why="One slow GPU slows every rank (each step waits for the slowest), which looks like a DeepSpeed problem.",
    fix="Check cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER); move the job off that GPU.",
    source="NVML nvmlDeviceGetCurrentClocksThrottleReasons")

ENV324 = rule(
    "ENV324", "error", "a DeepSpeed op the config needs does not build",
    what="dsdoctor env --build-ops really JIT-built the ops the ds_config's optimizer needs, and one failed.",
    why="The same build runs at the first optimizer creation of the real job, after the model has loaded.",
    fix="Read the compiler error in the evidence: usually a toolkit of torch's CUDA version (CUDA_HOME), a "
        "TORCH_CUDA_ARCH_LIST DeepSpeed can parse, a C++ compiler, or \"torch_adam\": true to skip the op.",
    source="deepspeed/ops/op_builder/builder.py load/jit_load; deepspeed/runtime/engine.py _configure_basic_optimizer")

ENV325 = rule(
    "ENV325", "warning", "little free disk where checkpoints go",
    what="The --output-dir filesystem has less than 50 GiB free.",
    why="A 7B full fine-tune checkpoint with optimizer states is about 100 GB; the save fails (or truncates) "
        "hours into the run.",
    fix="Point output_dir at a larger disk, keep fewer checkpoints (save_total_limit), or save only the 16-bit "
        "weights / the LoRA adapter.",
    source="statvfs of --output-dir; DeepSpeed checkpoints hold 12-16 bytes per trainable parameter")

ENV326 = rule(
    "ENV326", "info", "the GPUs talk over PCIe only",
    what="Several GPUs, none with an active NVLink; pairs whose PCIe path crosses the CPU sockets (SYS) are listed.",
    why="Every all-reduce (and ZeRO-3's parameter gathers, 1.5x ZeRO-2's traffic) goes through PCIe and, across "
        "sockets, through the CPU interconnect: often the step's bottleneck.",
    fix="Prefer ZeRO-2 over ZeRO-3, larger gradient accumulation, and GPUs under one CPU socket "
        "(CUDA_VISIBLE_DEVICES); dsdoctor nccl measures the bus bandwidth.",
    source="NVML nvmlDeviceGetTopologyCommonAncestor / nvmlDeviceGetNvLinkState; ZeRO paper section 7")

ENV327 = rule(
    "ENV327", "error", "CUDA_HOME points to no CUDA toolkit",
    what="CUDA_HOME (or CUDA_PATH) is set, torch has CUDA, and there is no bin/nvcc under it.",
    why="torch's extension builder takes CUDA_HOME as it is: DeepSpeed's JIT ops fail to build ('nvcc: not found' "
        "or 'MissingCUDAException') even when an nvcc is on PATH.",
    fix="export CUDA_HOME to the toolkit's root (the directory holding bin/nvcc, e.g. /usr/local/cuda-12.4), or "
        "unset it.",
    source="torch/utils/cpp_extension.py _find_cuda_home")

ENV328 = rule(
    "ENV328", "info", "DeepSpeed will use the CPU accelerator",
    what="torch has no CUDA and NVML sees no NVIDIA GPU.",
    why="Fine for tests (gloo, bf16 only: the CPU accelerator refuses fp16), not for fine-tuning a 6B model.",
    fix="On a GPU machine install torch's CUDA build; here, keep bf16 and torch_adam for DeepSpeed on the CPU.",
    source="deepspeed/accelerator/real_accelerator.py; deepspeed/accelerator/cpu_accelerator.py (no fp16)")
ENV329 = rule(
    "ENV329", "error", "a stale build lock blocks DeepSpeed's JIT op builds",
    what="A torch extensions build lock (<TORCH_EXTENSIONS_DIR or ~/.cache/torch_extensions>/<py>_<device>/<op>/lock) "
         "exists that no live process holds open and no compiler is working on.",
    why="torch's JIT builder (torch.utils.cpp_extension, FileBaton) waits forever, silently, while that file exists. "
        "A build interrupted by Ctrl-C or a kill leaves it behind; every later run then sits before its first step "
        "until a timeout, which looks like a NCCL or network hang.",
    fix="Delete the lock file named in the evidence (rm PATH), then run again: the op is rebuilt once.",
    source="torch/utils/cpp_extension.py _jit_compile; torch/utils/file_baton.py FileBaton (O_CREAT|O_EXCL, the fd "
           "held open while building)")
ENV330 = rule(
    "ENV330", "error", "nvcc cannot compile for a GPU architecture the build asks for",
    what="The CUDA toolkit's nvcc does not list an architecture that the JIT op build targets: an entry of "
         "TORCH_CUDA_ARCH_LIST, or a GPU here (`nvcc --list-gpu-arch`).",
    why="Every DeepSpeed op build (FusedAdam at the first optimizer step, CPUAdam with offload) stops with \"nvcc fatal "
        ": Unsupported gpu architecture 'compute_XY'\": the toolkit is older than the GPU (CUDA 11.7 and H100's "
        "compute_90), or the list names an architecture this toolkit dropped.",
    fix="A CUDA toolkit that supports the GPU (CUDA_HOME pointing to it), or TORCH_CUDA_ARCH_LIST limited to what "
        "`nvcc --list-gpu-arch` prints.",
    source="nvcc --list-gpu-arch; torch/utils/cpp_extension.py _get_cuda_arch_flags; "
           "deepspeed/ops/op_builder/builder.py compute_capability_args")
ENV331 = rule(
    "ENV331", "error", "the training script does not accept the launcher's --local_rank",
    what="The `deepspeed` launcher (and torch.distributed.launch) start every rank with `--local_rank=N`; the script's "
         "argparse does not declare it.",
    why="Every rank exits at once with 'error: unrecognized arguments: --local_rank=N' (argparse's exit code 2), "
        "before any model loads.",
    fix="Add parser.add_argument('--local_rank', type=int, default=-1) (or parse_known_args), or start the script with "
        "torchrun, which passes LOCAL_RANK in the environment instead.",
    source="deepspeed/launcher/launch.py (the --local_rank argument it appends); argparse's error()")
ENV332 = rule(
    "ENV332", "warning", "remote code is imported by every rank at once",
    what="The model needs trust_remote_code, and all ranks load it at the same moment: each copies the repository's "
         "modeling files into the modules cache (HF_MODULES_CACHE, ~/.cache/huggingface/modules/transformers_modules).",
    why="The copies race: a rank imports a file another rank is rewriting, and fails with FileNotFoundError or "
        "ModuleNotFoundError on transformers_modules.<model>, on one rank and one run out of several.",
    fix="Load the config once before launching (python -c \"from transformers import AutoConfig; "
        "AutoConfig.from_pretrained(PATH, trust_remote_code=True)\"), or load on the main process first "
        "(training_args.main_process_first()), or give each rank its own HF_MODULES_CACHE.",
    source="transformers/dynamic_module_utils.py get_class_from_dynamic_module, create_dynamic_module")
ENV333 = rule(
    "ENV333", "warning", "no Python development headers",
    what="Python.h is not in this interpreter's include directory (sysconfig.get_paths()['include']).",
    why="Every DeepSpeed op built at first use (CPUAdam for optimizer offload, fused Adam, the CPU communication op) "
        "includes it through torch/csrc/python_headers.h: the build fails with 'fatal error: Python.h: No such file "
        "or directory', and the run stops when the op is loaded, after the model has loaded.",
    fix="Install the headers of this Python: apt install python3.X-dev (X: this Python's minor version), dnf install "
        "python3-devel, or use a Python that ships them (conda, pyenv, uv).",
    source="torch/include/torch/csrc/python_headers.h (#include <Python.h>); torch/utils/cpp_extension.py "
           "(include_paths: sysconfig's include)")

def _python_minor(versions: dict | None) -> str:
    """'3.10' of the job's Python version (``versions['python']``, else this interpreter's)."""
    full = (versions or {}).get("python") or platform.python_version()
    return ".".join(str(full).split(".")[:2])


#: NVML throttle reason bits that mean the GPU is slowed down against its will (nvml.h).
THROTTLE_BAD = {0x8: "hardware slowdown", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
                0x80: "hardware power brake"}

#: Combinations seen failing in public reports: (package, first bad version, first good version, the package it
#: breaks with, what happens, fix, source). Versions compare numerically on their first three numbers.
KNOWN_BAD = [
    ("deepspeed", "0.9.0", "0.9.3", "accelerate",
     "DeepSpeedConfig checks the batch size before the process group exists, with world size 1: 'Check batch "
     "related parameters. train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size'",
     "pip install 'deepspeed>=0.9.3' (accelerate and transformers require it since)",
     "https://github.com/deepspeedai/DeepSpeed/issues/3228; https://github.com/huggingface/transformers/pull/24541"),
    ("accelerate", "0.23.0", "0.26.0", "deepspeed",
     "the learning-rate scheduler is stepped once per process: multi-GPU DeepSpeed runs learn more slowly than "
     "one GPU",
     "pip install 'accelerate>=0.26' (the change was reverted)",
     "https://github.com/huggingface/accelerate/pull/2304"),
]


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
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / filename
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
                "python_include": sysconfig.get_paths().get("include"),
                "python_h": os.path.exists(os.path.join(sysconfig.get_paths().get("include") or "", "Python.h")),
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

        shm = _statvfs_bytes("/dev/shm")
        memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
        facts["host"] = {"hostname": socket.gethostname(), "euid": os.geteuid(), "cores": os.cpu_count(),
                         "ram": host_ram_bytes(),
                         "dev_shm": shm, "memlock": None if memlock == resource.RLIM_INFINITY else memlock,
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


def diagnose(facts: dict, env: dict | None = None, live: bool = True) -> list[Finding]:
    """Findings for ``facts`` (from :func:`collect`, or a saved ``dsdoctor env --json`` result). ``env`` holds the
    distributed variables; ``live`` is False for saved facts (no port or name lookups on this machine then)."""
    from dsdoctor.checks.network import network_findings

    out: list[Finding] = []
    v, tc, gpu = facts.get("versions"), facts.get("toolchain"), facts.get("gpu") or {}
    host, net = facts.get("host"), facts.get("network")
    gpus = gpu.get("gpus") or []
    if v is not None:
        if not v.get("torch"):
            out.append(ENV301.finding("torch: not found"))
        elif gpus and not v.get("torch_cuda"):
            out.append(ENV302.finding(f"torch {v['torch']} (torch.version.cuda None); NVML: {len(gpus)} x "
                                      f"{gpus[0]['name']}"))
        if v.get("torch_cuda") and gpu.get("driver_cuda") and \
                _numbers(v["torch_cuda"], 1) > _numbers(gpu["driver_cuda"], 1):
            out.append(ENV303.finding(f"torch {v['torch']} is built for CUDA {v['torch_cuda']}; driver "
                                      f"{gpu.get('driver')} supports CUDA up to {gpu['driver_cuda']}"))
        if not v.get("deepspeed"):
            out.append(ENV309.finding("deepspeed: not found"))
        elif v.get("torch") and not v.get("torch_cuda") and gpu.get("nvml") is False and not gpus:
            out.append(ENV328.finding(f"torch {v['torch']} (no CUDA); no NVIDIA GPU seen"))
        built = v.get("deepspeed_built_with") or {}
        if v.get("deepspeed_prebuilt_ops") and v.get("torch") and built.get("version") not in (None, "0.0") and \
                _numbers(built.get("version"), 2) != _numbers(v["torch"], 2):
            out.append(ENV317.finding(f"prebuilt ops {', '.join(v['deepspeed_prebuilt_ops'])} built with torch "
                                      f"{built.get('version')} / CUDA {built.get('cuda_version')}; installed torch "
                                      f"{v['torch']} / CUDA {v.get('torch_cuda')}"))
        for pkg, first_bad, first_good, other, what, fix, source in KNOWN_BAD:
            have, have_other = v.get(pkg), v.get(other)
            if have and have_other and _numbers(first_bad, 3) <= _numbers(have, 3) < _numbers(first_good, 3):
                found = ENV310.finding(f"{pkg} {have} with {other} {have_other}: {what}", fix=fix)
                out.append(replace(found, source=source))
    if tc is not None:
        cuda_torch = (v or {}).get("torch_cuda")
        jit = not (v or {}).get("deepspeed_prebuilt_ops")
        if cuda_torch and tc.get("nvcc_cuda") and _numbers(tc["nvcc_cuda"], 1) != _numbers(cuda_torch, 1):
            out.append(ENV304.finding(f"nvcc ({tc.get('nvcc')}) is CUDA {tc['nvcc_cuda']}; torch is built for CUDA "
                                      f"{cuda_torch}",
                                      fix=f"Point CUDA_HOME at a CUDA {_numbers(cuda_torch, 1)[0]}.x toolkit (e.g. "
                                          f"/usr/local/cuda-{cuda_torch}), or install the torch build for CUDA "
                                          f"{tc['nvcc_cuda']}."))
        if cuda_torch and tc.get("CUDA_HOME") and tc.get("cuda_home_has_nvcc") is False:
            out.append(ENV327.finding(f"CUDA_HOME={tc['CUDA_HOME']}: no bin/nvcc there; torch CUDA {cuda_torch}"))
        if cuda_torch and jit and (v or {}).get("deepspeed") and not tc.get("nvcc"):
            out.append(ENV305.finding(f"torch CUDA {cuda_torch}; CUDA_HOME={tc.get('CUDA_HOME') or '(unset)'}; "
                                      f"no nvcc on PATH; DeepSpeed ops prebuilt: none"))
        if not tc.get("ninja") and (v or {}).get("deepspeed"):
            out.append(ENV306.finding("ninja: not on PATH"))
        if not tc.get("gcc"):
            out.append(ENV315.finding(f"{tc.get('cxx') or 'c++'}: not on PATH (torch compiles with $CXX or c++)"))
        if tc.get("python_h") is False and (v or {}).get("deepspeed"):
            out.append(ENV333.finding(f"{tc.get('python_include')}/Python.h: not found (Python "
                                      f"{(v or {}).get('python') or platform.python_version()})",
                                      fix=f"apt install python{_python_minor(v)}-dev (Debian, Ubuntu), or dnf install "
                                          f"python3-devel; or use a Python that ships its headers (conda, pyenv, uv)"))
        if not tc.get("libaio"):
            out.append(ENV316.finding("libaio.h: not found in /usr/include or /usr/local/include"))
        for lock in tc.get("build_locks") or []:
            if isinstance(lock, dict) and lock.get("stale"):
                out.append(ENV329.finding(f"{lock.get('path')} (op {lock.get('op')}, {lock.get('age_s', 0):.0f} s "
                                          f"old): no live process holds it open and no compiler works on it",
                                          fix=f"rm {lock.get('path')}  # then run again: the op is rebuilt once"))
        arch = tc.get("TORCH_CUDA_ARCH_LIST")
        if arch:
            bad, good = arch_list_problems(arch)
            if bad:
                fixed = sorted({m for e in re.split(r"[;,\s]+", arch) for m in re.findall(r"\d+\.\d+", e)},
                               key=lambda e: _numbers(e, 2))
                out.append(ENV307.finding(f"TORCH_CUDA_ARCH_LIST={arch!r}: {', '.join(repr(b) for b in bad)}",
                                          fix=f'export TORCH_CUDA_ARCH_LIST="{";".join(fixed)}"' if fixed
                                          else ENV307.fix))
            caps = sorted({g["capability"] for g in gpus})
            covered = [c for c in caps if any(e.split("+")[0] == c or (e.endswith("+PTX") and
                                                                        _numbers(e, 2) <= _numbers(c, 2)) for e in good)]
            if caps and good and len(covered) < len(caps):
                out.append(ENV308.finding(f"TORCH_CUDA_ARCH_LIST={arch!r}; GPUs here: compute capability "
                                          f"{', '.join(caps)}"))
        listed = tc.get("nvcc_archs")
        if listed and jit:
            # what torch's _get_cuda_arch_flags builds for: the list's entries, else the GPUs here
            wanted = sorted({e.split("+")[0] for e in (arch_list_problems(arch)[1] if arch else [])}
                            or {g["capability"] for g in gpus if g.get("capability")})
            missing = [a for a in wanted if a not in listed]
            if missing:
                out.append(ENV330.finding(
                    f"nvcc ({tc.get('nvcc')}, CUDA {tc.get('nvcc_cuda') or '?'}) compiles for compute capability "
                    f"{listed[0]}-{listed[-1]}, not {', '.join(missing)} "
                    f"({'TORCH_CUDA_ARCH_LIST=' + repr(arch) if arch else 'the GPUs here'})"))
    deep = facts.get("deep")
    if deep:
        prebuilt = set((v or {}).get("deepspeed_prebuilt_ops") or [])
        ops = deep.get("deepspeed_ops_compatible") or {}
        accel = deep.get("deepspeed_accelerator")
        wanted = ("fused_adam", "cpu_adam") if accel != "cpu" else ("cpu_adam",)
        broken = [op for op in wanted if op in ops and not ops[op] and op not in prebuilt]
        if broken:
            out.append(ENV318.finding(f"not prebuilt and not JIT-compatible here: {', '.join(broken)} "
                                      f"(accelerator {accel})"))
        if gpus and (v or {}).get("torch_cuda") and deep.get("cuda_available") is False:
            out.append(ENV319.finding(f"torch {(v or {}).get('torch')}: torch.cuda.is_available() is False; NVML: "
                                      f"{len(gpus)} GPU(s)"))
        if gpus and accel == "cpu":
            out.append(ENV320.finding(f"get_accelerator() is cpu; NVML: {len(gpus)} x {gpus[0]['name']}"))
    if gpus:
        busy = [(g["index"], p) for g in gpus for p in g.get("processes", [])]
        if busy:
            shown = ", ".join(f"GPU {i}: PID {p['pid']} ({p['used'] / GIB:.1f} GiB)" for i, p in busy[:8])
            out.append(ENV311.finding(shown))
        rtx40 = [g for g in gpus if re.search(r"RTX 40\d\d", g.get("name", ""))]
        p2p_off = ((facts.get("network") or {}).get("NCCL_P2P_DISABLE") or (env or {}).get("NCCL_P2P_DISABLE")
                   or "").strip() == "1"
        if len(rtx40) >= 2 and not p2p_off:
            out.append(ENV321.finding(f"{len(rtx40)} x {rtx40[0]['name']}; NCCL_P2P_DISABLE is not 1"))
        ecc = [(g["index"], g["ecc_uncorrected"]) for g in gpus if (g.get("ecc_uncorrected") or 0) > 0]
        if ecc:
            out.append(ENV322.finding(", ".join(f"GPU {i}: {n} uncorrected" for i, n in ecc)))
        slow = [(g["index"], [t for bit, t in THROTTLE_BAD.items() if (g.get("throttle_reasons") or 0) & bit])
                for g in gpus]
        slow = [(i, reasons) for i, reasons in slow if reasons]
        if slow:
            out.append(ENV323.finding("; ".join(f"GPU {i}: {', '.join(r)}" for i, r in slow)))
        if len(gpus) >= 2 and all(g.get("nvlinks_active") == 0 for g in gpus):
            far = [f"GPU {t['gpus'][0]}-{t['gpus'][1]}" for t in gpu.get("topology") or [] if t["pcie_path"] == "SYS"]
            out.append(ENV326.finding(f"{len(gpus)} GPUs, no active NVLink" +
                                      (f"; across CPU sockets: {', '.join(far[:6])}" if far else "")))
        visible = gpu.get("CUDA_VISIBLE_DEVICES")
        if visible and visible.strip():
            indices = [x.strip() for x in visible.split(",") if x.strip()]
            missing = [x for x in indices if x.isdecimal() and int(x) >= len(gpus)]
            if missing:
                out.append(ENV314.finding(f"CUDA_VISIBLE_DEVICES={visible}; NVML sees {len(gpus)} GPU(s)"))
            twice = sorted({x for x in indices if indices.count(x) > 1})
            if twice:
                from dsdoctor.checks.network import NET415

                out.append(NET415.finding(f"CUDA_VISIBLE_DEVICES={visible}: {', '.join(twice)} listed twice",
                                          fix="List each GPU once (CUDA_VISIBLE_DEVICES=0,1,...)"))
    if host is not None:
        if host.get("dev_shm") is not None and host["dev_shm"] < GIB:
            out.append(ENV312.finding(f"/dev/shm: {host['dev_shm'] / 2 ** 20:.0f} MiB"))
        if host.get("output_dir_free") is not None and host["output_dir_free"] < 50 * GIB:
            out.append(ENV325.finding(f"{host.get('output_dir')}: {host['output_dir_free'] / GIB:.1f} GiB free"))
        if host.get("memlock") is not None and host["memlock"] < 64 * GIB:
            out.append(ENV313.finding(f"ulimit -l: {host['memlock'] // 1024} KiB"))
    if net is not None:
        out.extend(network_findings(net, euid=net.get("euid", (host or {}).get("euid")), gpus=gpus, live=live))
        if "TORCH_FR_BUFFER_SIZE" in net:  # facts saved before dsdoctor read these say nothing of them
            from dsdoctor.checks.hang.flight import status
            from dsdoctor.checks.hang.rules import HANG908

            recorder = status({k: v for k, v in net.items() if isinstance(v, str)})
            if not recorder["on"]:
                out.append(HANG908.finding("TORCH_FR_BUFFER_SIZE and TORCH_NCCL_TRACE_BUFFER_SIZE: "
                                           + ", ".join(str(net.get(k)) for k in ("TORCH_FR_BUFFER_SIZE",
                                                                                 "TORCH_NCCL_TRACE_BUFFER_SIZE"))))
    return out


def paste_block(facts: dict) -> list[tuple[str, str]]:
    """The ``- key: value`` lines for a bug report, in a stable order (``accelerate env`` style)."""
    rows: list[tuple[str, str]] = []
    v = facts.get("versions") or {}
    for key in ("python", "platform", "torch", "torch_cuda", "deepspeed", "transformers", "peft", "accelerate",
                "nvidia-ml-py", "cudnn_wheel", "nccl_wheel"):
        if key in v:
            rows.append((key, str(v[key])))
    if v:
        rows.append(("deepspeed_prebuilt_ops", ", ".join(v.get("deepspeed_prebuilt_ops") or []) or "none (JIT)"))
        built = v.get("deepspeed_built_with") or {}
        if built.get("version") not in (None, "0.0"):
            rows.append(("deepspeed_built_with", f"torch {built.get('version')}, CUDA {built.get('cuda_version')}"))
    for key, value in (facts.get("toolchain") or {}).items():
        if key == "build_locks":
            value = ", ".join(f"{lock.get('path')} ({'stale' if lock.get('stale') else 'building'})"
                              for lock in value if isinstance(lock, dict)) or "none"
        rows.append((key, str(value)))
    gpu = facts.get("gpu") or {}
    if gpu:
        rows.append(("driver", f"{gpu.get('driver')} (CUDA {gpu.get('driver_cuda')})" if gpu.get("nvml") else
                     "no NVML / no NVIDIA GPU"))
        for g in gpu.get("gpus", []):
            rows.append((f"gpu{g['index']}", f"{g['name']}, {g['memory_total'] / GIB:.1f} GiB, "
                                             f"cc {g['capability']}, {len(g.get('processes', []))} process(es)"))
        rows.append(("CUDA_VISIBLE_DEVICES", str(gpu.get("CUDA_VISIBLE_DEVICES"))))
    host = facts.get("host") or {}
    for key in ("cores", "ram", "dev_shm", "memlock", "output_dir_free"):
        if key in host:
            value = host[key]
            if isinstance(value, int) and key != "cores":
                rows.append((key, f"{value / GIB:.1f} GiB" if value >= GIB else f"{value / 2 ** 20:.0f} MiB"))
            else:
                rows.append((key, "unlimited" if key == "memlock" and value is None else str(value)))
    for key, value in (facts.get("deep") or {}).items():
        if key == "deepspeed_ops_compatible":
            rows.append(("deepspeed_ops_jit_compatible", ", ".join(k for k, ok in value.items() if ok) or "none"))
        else:
            rows.append((key, str(value)))
    for key, value in (facts.get("network") or {}).items():
        if key == "euid":
            continue
        if key == "interfaces":
            rows.append((key, ", ".join(value)))
        elif key == "addresses":
            rows.append((key, ", ".join(f"{name} {address}" for name, address in value)))
        elif key == "route_to_master" and value:
            rows.append((key, f"{value[0]} ({value[1]})"))
        elif value is not None:
            rows.append((key, str(value)))
    return rows
