"""The ENV3xx rules, and the tables they read (NVML's throttle reasons, version pairs known to break)."""

from __future__ import annotations

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
    fix="See the row's fix.", source="checks/environment/rules.py KNOWN_BAD")
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
ENV334 = rule(
    "ENV334", "warning", "the deepspeed launcher is not on PATH",
    what="DeepSpeed imports in this Python, but its `deepspeed` command (the launcher script pip installs into the "
         "environment's bin directory) is not on PATH.",
    why="A fine-tuning script that starts training with `deepspeed --num_gpus N train.py ...` stops at once with "
        "'deepspeed: command not found' (or runs another environment's launcher, with that environment's packages).",
    fix="Activate the environment DeepSpeed is installed in, or add its bin directory (in the evidence) to PATH; or "
        "launch with `python -m deepspeed.launcher.runner` and the same arguments.",
    source="deepspeed's setup.py (scripts: bin/deepspeed); pip installs scripts into sysconfig's 'scripts' path")

ENV335 = rule(
    "ENV335", "error", "the libstdc++ loaded is older than the one an op was built against",
    what="Loading a compiled op (a DeepSpeed op JIT-built into torch's extensions cache, or a package's extension) "
         "fails with \"version `GLIBCXX_3.4.NN' not found\": the libstdc++.so.6 the process loaded first (a conda "
         "environment's, or one a package ships) is older than the one of the compiler that built the op.",
    why="The op (CPUAdam for optimizer offload, FusedAdam) cannot load; DeepSpeed then fails at the first optimizer "
        "creation, after the model has loaded, often with a second error (\"no attribute ds_opt_adam\") that hides "
        "this one.",
    fix="Give the environment a libstdc++ as new as the compiler's: `conda install -c conda-forge libstdcxx-ng` "
        "(or `conda install -c conda-forge gcc` to build with the environment's own), or start the job with "
        "LD_PRELOAD set to the system's libstdc++.so.6 (`g++ -print-file-name=libstdc++.so.6`); then delete the "
        "cached op build so it is rebuilt.",
    source="the dynamic loader's symbol versioning (GLIBCXX_* in libstdc++.so.6); torch/utils/cpp_extension.py "
           "_import_module_from_library; DeepSpeed issue 5207")

ENV336 = rule(
    "ENV336", "warning", "stale DeepSpeed shared-memory segments fill /dev/shm",
    what="/dev/shm holds deepspeed_allreduce_buffer_* segments that no live process maps: DeepSpeed's CPU accelerator "
         "creates one per rank (about 66 MB) for every run started by the deepspeed launcher on one node, and never "
         "deletes it.",
    why="/dev/shm is RAM: the segments of finished CPU runs add up (here 272 of them held 18 GiB) until the host runs "
        "out of memory, ranks are OOM-killed or refuse to start, and NCCL or DataLoader workers fail to create their "
        "own shared memory ('Bus error').",
    fix="Delete the stale segments (the evidence's command lists exactly those no process maps); dsdoctor smoke "
        "deletes its own run's after it ends.",
    source="deepspeed/ops/csrc/cpu/comm/shm.cpp (shm_initialize creates with shm_open; shared_close, the only "
           "shm_unlink, is never called); shm_interface.cpp (only when LOCAL_SIZE equals the world size)")


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
