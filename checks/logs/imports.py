"""Import failures: a package that is not installed (ENV309 DeepSpeed, ENV301 torch, LOG808 any other), one that is
installed but incomplete or shadowed by a file of the user's (LOG808), and code written for another version of a
package (ENV310: ``cannot import name``, a missing submodule, a compiled extension built for another torch).

What Python says, and what it means (``importlib._bootstrap._find_and_load_unlocked``, ``runpy._get_module_details``):

- ``ModuleNotFoundError: No module named 'flash_attn'``: the first missing component of the dotted name. A top-level
  name is a package that is not installed in the Python the launcher started; ``'transformers.deepspeed'`` means
  transformers is installed and has no such module (another version); ``'deepspeed.launcher'; 'deepspeed' is not a
  package`` means a module file ``deepspeed.py`` was imported instead of the package (a file of the user's shadows it).
- ``python -m deepspeed`` without it: ``/usr/bin/python: No module named deepspeed``; ``python -m
  deepspeed.launcher.runner``: ``Error while finding module specification for 'deepspeed.launcher.runner'
  (ModuleNotFoundError: No module named 'deepspeed')``; the console script absent: ``bash: deepspeed: command not
  found``.
- ``ImportError: /path/x.so: undefined symbol: ...``: a compiled extension built against another torch (a DeepSpeed op:
  ENV317); ``ImportError: libcudart.so.11.0: cannot open shared object file`` (``OSError`` from ctypes, bitsandbytes):
  a package built for another CUDA (the dynamic loader's messages, ``dlopen``).
- ``ImportError: cannot import name 'X' from 'Y' (/path/Y/__init__.py)``: Y is installed without X (another
  version); ``(unknown location)``: Y is a folder without ``__init__.py`` (a namespace package: a clone or a folder
  named Y in the working directory, and Y not installed); ``from partially initialized module 'Y' (most likely due to
  a circular import) (/path/Y.py)``: a file of the user's named Y.py, or a circular import.
- DeepSpeed's ``deepspeed.ops.<group>.<op>_op`` is imported for an op its install recorded as prebuilt
  (``deepspeed/ops/op_builder/builder.py`` ``OpBuilder.load``: ``installed_ops`` of ``git_version_info``, then
  ``importlib.import_module(self.absolute_name())``); ``deepspeed.ops.op_builder`` is missing from some source builds
  and forks (DeepSpeed issue 2060): either is an incomplete DeepSpeed install.
- accelerate's, for the DeepSpeed plugin without DeepSpeed (``accelerate/state.py`` ``PartialState``): ``ImportError:
  DeepSpeed is not available => install it using `pip3 install deepspeed` or build it from source``.
- A module another version moved or removed (``transformers.deepspeed``, now ``transformers.integrations.deepspeed``;
  ``torch._six``, gone in torch 2.0): the frame that raised it says whose code is old (an installed package's, in
  site-packages, or the user's own).
- transformers' own messages for a missing package: remote code's ``This modeling file requires the following packages
  that were not found in your environment: A, B. Run `pip install A B``` (``dynamic_module_utils.check_imports``),
  ``FlashAttention2 has been toggled on, but it cannot be used due to the following error: the package for
  FlashAttention2 doesn't seem to be installed`` (``modeling_utils``; 4.x: ``the package flash_attn seems to be not
  installed``), ``PEFT is not installed`` (``utils/peft_utils.py``), ``Using `bitsandbytes` 4-bit quantization
  requires bitsandbytes: `pip install -U bitsandbytes>=...``` (``quantizers/quantizer_bnb_4bit.py``).
"""

from __future__ import annotations

import difflib
import functools
import re

from .lines import where

#: What a missing module's name is installed as, where pip's name differs from the import name (each from the
#: package's own install instructions; a name not here is installed under its own name, pip normalising ``_``/``-``).
PIP_NAMES = {
    "yaml": "pyyaml", "sklearn": "scikit-learn", "skimage": "scikit-image", "cv2": "opencv-python",
    "PIL": "pillow", "attr": "attrs", "dateutil": "python-dateutil", "bs4": "beautifulsoup4",
    "google": "protobuf", "Crypto": "pycryptodome", "fitz": "pymupdf", "jwt": "pyjwt", "dotenv": "python-dotenv",
    # flash-attention's README: it builds against the installed torch, so without build isolation
    "flash_attn": "flash-attn --no-build-isolation",
}
#: packages pip cannot install by their import name, and what to do instead
NOT_ON_PYPI = {
    "apex": "NVIDIA apex is not on PyPI: build it from its repository (github.com/NVIDIA/apex), or drop the apex "
            "fused optimizer/LayerNorm option of the training script",
}
#: the packages of a fine-tuning stack whose absence says the wrong Python ran (a venv or conda env not activated)
STACK = ("deepspeed", "torch", "transformers", "peft", "accelerate", "datasets", "bitsandbytes", "flash_attn", "trl")

#: the exception's line start: a dotted exception name at the start of a traceback's last line
_START = r"^\s{0,40}(?:\w{1,80}\.){0,8}"
#: one module name: a dotted name of at most 200 characters (bounded: no quadratic backtracking)
_DOTTED = r"[A-Za-z_][\w.]{0,200}"

#: The missing packages (ENV309, ENV301, LOG808) and the version mismatches (ENV310): one pattern each, matching
#: disjoint lines.
NO_DEEPSPEED = (
    _START + r"ModuleNotFoundError: No module named 'deepspeed'|"
    # accelerate/state.py PartialState (the Trainer's and accelerate launch's DeepSpeed plugin)
    r"ImportError: DeepSpeed is not available => install it|"
    r"Error while finding module specification for '[\w.]{1,200}' \(ModuleNotFoundError: No module named "
    r"'deepspeed'\)|python[\d.]{0,6}: No module named deepspeed(?![\w.])")
#: the shell could not find the `deepspeed` launcher command (bash, sh, zsh)
NO_DEEPSPEED_CLI = r"\bdeepspeed: (?:command )?not found|command not found: deepspeed\b"
NO_TORCH = (
    _START + r"ModuleNotFoundError: No module named 'torch'|"
    r"Error while finding module specification for '[\w.]{1,200}' \(ModuleNotFoundError: No module named "
    r"'torch'\)|python[\d.]{0,6}: No module named torch(?![\w.])|"
    r"\btorchrun: (?:command )?not found|command not found: torchrun\b")
NO_PACKAGE = (
    _START + r"ModuleNotFoundError: No module named '(?!(?:deepspeed|torch)')(?P<module>[A-Za-z_]\w{0,100})'|"
    + _START + r"ModuleNotFoundError: No module named '(?P<dsop>deepspeed\.ops\.[\w.]{1,200})'|"
    + _START + r"ModuleNotFoundError: No module named '(?P<dotted>" + _DOTTED + r")'; '(?P<shadow>\w{1,100})' is "
    r"not a package|"
    + _START + r"ImportError: cannot import name '?\w{1,200}'? from '(?P<namespace>" + _DOTTED
    + r")' \(unknown location\)|"
    + _START + r"ImportError: cannot import name '?\w{1,200}'? from partially initialized module '(?P<partial>"
    + _DOTTED + r")'|"
    r"This modeling file requires the following packages that were not found in your environment: "
    r"(?P<remote>[\w., -]{1,500}?)\. Run|"
    r"FlashAttention(?P<fa>\d?) has been toggled on, but it cannot be used due to the following error: the package "
    r"(?:flash_attn seems to be not installed|for FlashAttention\d? doesn't seem to be installed)|"
    r"(?P<peft>PEFT is not installed)|"
    r"Using `bitsandbytes` \d-bit quantization requires (?:the latest version of )?(?P<bnb>bitsandbytes|accelerate)")
VERSION_MISMATCH = (
    _START + r"(?:ImportError: cannot import name '?(?P<name>\w{1,200})'?(?: from '(?P<from>" + _DOTTED
    + r")'(?! \(unknown location\))|\s{0,8}$)|"
    r"ModuleNotFoundError: No module named '(?!deepspeed\.ops\.)(?P<sub>[A-Za-z_]\w{0,100}\.[\w.]{1,200})'(?!; )|"
    # the same message alone on its line: transformers' lazy import prints it after "Failed to import X because of
    # the following error (look up to see its traceback):"
    r"^\s{0,8}No module named '(?!deepspeed\.ops\.)(?P<bare>[A-Za-z_]\w{0,100}\.[\w.]{1,200})'\s{0,4}$|"
    r"TypeError: deepspeed_init\(\) got an unexpected keyword argument|"
    r"AttributeError: module '(?P<attr_of>[\w.]{1,200})' has no attribute|"
    r"ImportError: (?P<so>(?![^\s]{0,400}/(?:deepspeed|torch_extensions)/)\S{1,400}\.so(?:\.\d{1,6}){0,4}): "
    r"undefined symbol|"
    # the same without the library's path (a paste that kept only the message): a symbol of torch's C++ API
    # (c10::, at::, torch::, mangled: _ZN3c10..., _ZNK2at..., _ZN5torch...) that the installed torch does not export
    r"ImportError: undefined symbol: (?P<sym>_ZNK?(?:3c10|2at|5torch)\w{1,300})|"
    r"(?:ImportError|OSError): (?P<lib>lib[\w+-]{1,80}\.so(?:\.\d{1,6}){0,4}): cannot open shared object file)")
#: a DeepSpeed op (prebuilt under site-packages/deepspeed/ops, or JIT-built into torch's extensions cache) compiled
#: against another torch: the dynamic loader's "undefined symbol" when it is imported
OP_ABI = (_START + r"ImportError: (?P<so>\S{0,400}/(?:deepspeed|torch_extensions)/\S{1,400}\.so(?:\.\d{1,6}){0,4}): "
          r"undefined symbol")
#: the needles of each (a substring every matching line holds)
#: (few and distinct: every needle costs each line of a log a little; the messages transformers, accelerate and the
#: dynamic loader raise are ImportErrors, PEFT's a ValueError)
NO_DEEPSPEED_NEEDLES = ("No module named", "command not found", "deepspeed: not found", "ImportError")
NO_TORCH_NEEDLES = ("No module named", "command not found", "torchrun: not found")
NO_PACKAGE_NEEDLES = ("No module named", "ImportError", "PEFT is not installed")
VERSION_MISMATCH_NEEDLES = ("ImportError", "No module named", "deepspeed_init()", "AttributeError",
                            "cannot open shared object file")
OP_ABI_NEEDLES = ("ImportError",)


def pip_install(module: str) -> str:
    """The pip command that installs the top-level module ``module`` (``pip install flash-attn
    --no-build-isolation`` for ``flash_attn``), or what to do for a package not on PyPI."""
    top = module.split(".")[0]
    if top in NOT_ON_PYPI:
        return NOT_ON_PYPI[top]
    return f"pip install {PIP_NAMES.get(top, top)}"


def _where(match) -> str:
    return where(match.line)


def _line(match) -> str:
    return match.line.text.strip()[:300]


_SAME_PYTHON = ("in the Python environment the launcher starts: the same python on every node (`which python`, "
                "`python -c 'import {module}'`; a virtual or conda environment activated in the job script)")


def missing_deepspeed(match, lines) -> tuple[str, str, dict]:
    """ENV309 from a log: DeepSpeed is not importable in the Python that ran."""
    evidence = _where(match) + _line(match) + " (the Python that ran has no DeepSpeed)"
    fix = ("Install DeepSpeed " + _SAME_PYTHON.format(module="deepspeed") + ": `pip install deepspeed`; then "
           "`dsdoctor env`, run with that python, shows what is installed.")
    return evidence, fix, {}


def missing_deepspeed_cli(match, lines) -> tuple[str, str, dict]:
    """ENV334 from a log: the shell found no `deepspeed` command. The log cannot tell whether DeepSpeed is installed
    in an environment that is not on PATH (ENV334's cause) or not installed at all (ENV309's): the fix tells them
    apart."""
    evidence = _where(match) + _line(match) + " (the shell found no `deepspeed` launcher on PATH)"
    fix = ("Run `python -c \"import deepspeed, sys; print(deepspeed.__version__, sys.prefix)\"` with the Python meant "
           "to train: if it prints a version, activate that environment or add its bin directory to PATH (or "
           "launch with `python -m deepspeed.launcher.runner` and the same arguments); if it fails, `pip install "
           "deepspeed` into it. `dsdoctor env`, run with that Python, says which.")
    return evidence, fix, {}


def missing_torch(match, lines) -> tuple[str, str, dict]:
    """ENV301 from a log: torch is not importable in the Python that ran (or torchrun is not on PATH)."""
    command = "command not found" in match.line.text or ": not found" in match.line.text
    evidence = _where(match) + _line(match) + (
        " (torchrun is not on PATH: torch is not installed in this environment, or the environment is not "
        "activated)" if command else " (the Python that ran has no torch)")
    fix = ("Install torch " + _SAME_PYTHON.format(module="torch") + ": the CUDA build for your driver "
           "(https://pytorch.org/get-started/locally/), then DeepSpeed; `dsdoctor env`, run with that python, shows "
           "what is installed.")
    return evidence, fix, {}


def missing_package(match, lines) -> tuple[str, str, dict]:
    """LOG808: the package a run imports is not installed, its install is incomplete (DeepSpeed's ops), or a file
    of the user's shadows it. Returns (evidence, fix, {'title': ...})."""
    g = match.groups.groupdict()
    evidence = _where(match) + _line(match)
    if g.get("module"):
        module = g["module"]
        fallback = mpi_fallback(match, lines) if module == "mpi4py" else None
        if fallback is not None:
            return fallback[0], fallback[1], {"rule": "PRE023", "title": fallback[2]}
        stack = module in STACK
        return (evidence + f" (the Python that ran has no package {module})",
                f"`{pip_install(module)}` " + _SAME_PYTHON.format(module=module) + "."
                + (" It belongs to the fine-tuning stack: if it is installed elsewhere, the run started another "
                   "Python (`dsdoctor env`, run with the job's python, lists the stack)." if stack else ""),
                {"title": f"{module} is not installed"})
    if g.get("dsop"):
        module = g["dsop"]
        return (evidence + f" (DeepSpeed is installed, without its module {module})",
                "DeepSpeed's install is incomplete: a source build without deepspeed/ops/op_builder, a fork, or an "
                "op recorded as prebuilt whose module is gone (copied between machines, a partial upgrade). "
                "Reinstall it: `pip install --force-reinstall --no-cache-dir deepspeed` (its ops are then JIT-built "
                "at first use); `dsdoctor env --deep` shows the ops DeepSpeed finds.",
                {"title": f"DeepSpeed's install is incomplete ({module} is missing)"})
    if g.get("shadow") or g.get("partial") or g.get("namespace"):
        name = g.get("shadow") or g.get("partial") or g.get("namespace")
        top = name.split(".")[0]
        if g.get("namespace"):
            what = (f"'{name}' was found as a folder without __init__.py (a namespace package), not the installed "
                    f"package: a folder named {top} in the working directory or on PYTHONPATH (a clone), with "
                    f"{top} itself not installed")
        elif g.get("shadow"):
            what = (f"'{top}' was imported as a module file, not the package: a file named {top}.py in the working "
                    f"directory or on PYTHONPATH shadows it")
        else:
            what = (f"'{name}' was imported while it was still being imported: a file of yours named "
                    f"{name.split('.')[-1]}.py shadows the package, or two of your modules import each other")
        return (evidence + f" ({what})",
                f"Rename the file or folder named {top} that is not the package (the path in the traceback), delete "
                f"its __pycache__, and run again; then `{pip_install(top)}` if {top} is not installed.",
                {"title": f"a local file or folder shadows the package {top}"})
    if g.get("remote"):
        packages = [p.strip() for p in g["remote"].split(",") if p.strip()][:12]
        commands = sorted({pip_install(p) for p in packages})
        return (evidence + f" (the model repository's own code imports {', '.join(packages)}, not installed)",
                "Install what the model's code imports, " + _SAME_PYTHON.format(module=packages[0] if packages else
                                                                                 "MODULE")
                + ": " + "; ".join(f"`{c}`" if c.startswith("pip ") else c for c in commands) + ".",
                {"title": f"the model's remote code needs {', '.join(packages[:4])}, not installed"})
    if "toggled on" in match.line.text:
        return (evidence + " (flash-attn is not installed)",
                "`pip install flash-attn --no-build-isolation` (it compiles against the installed torch and CUDA), "
                "or load the model without it: attn_implementation=\"sdpa\" (LLaMA-Factory: --flash_attn sdpa).",
                {"title": "flash-attn is not installed (attn_implementation=\"flash_attention_2\")"})
    if g.get("peft"):
        return (evidence, "`pip install peft` " + _SAME_PYTHON.format(module="peft") + ".",
                {"title": "peft is not installed"})
    if g.get("bnb") == "accelerate":
        return (evidence, "`pip install accelerate` " + _SAME_PYTHON.format(module="accelerate") + ".",
                {"title": "accelerate is not installed (bitsandbytes quantization needs it)"})
    return (evidence, "Install or upgrade bitsandbytes as the message says (`pip install -U bitsandbytes`), "
                      + _SAME_PYTHON.format(module="bitsandbytes") + "; on a machine without a supported GPU, load "
                      "the model without quantization.",
            {"title": "bitsandbytes is not installed, or too old, for the quantization asked for"})


#: the site of a compiled extension's path: torch's JIT cache, DeepSpeed's prebuilt ops
_JIT_CACHE = re.compile(r"^(?P<dir>\S{0,300}/torch_extensions/[^/\s]{1,100}/[^/\s]{1,100})/[^/\s]{1,200}$")


def version_mismatch(match, lines) -> tuple[str, str, dict]:
    """ENV310 from a log: code written for another version of a package (a name or a module it lacks, an argument
    it does not take), or a compiled extension built for another torch. Returns (evidence, fix, {'title': ...})."""
    g = match.groups.groupdict()
    evidence = _where(match) + _line(match)
    package = None
    if g.get("from"):
        package = g["from"].split(".")[0]
    elif g.get("sub") or g.get("bare"):
        package = (g.get("sub") or g["bare"]).split(".")[0]
    elif g.get("attr_of"):
        package = g["attr_of"].split(".")[0]
    elif "deepspeed_init()" in match.line.text:
        package = "transformers"
    if g.get("lib"):
        lib = g["lib"]
        cuda = re.match(r"lib(?:cudart|cublas\w{0,8}|cusparse|cufft|curand|cusolver|nvrtc|cudnn\w{0,12})\.so\.(\d{1,3})", lib)
        why = (f"{lib} is the runtime of CUDA {cuda.group(1)}: a package here was built for CUDA {cuda.group(1)} "
               f"(bitsandbytes, flash-attn, xformers, an older torch or DeepSpeed op)" if cuda else
               f"a compiled package needs {lib}, which is not on the library path")
        return (evidence + f" ({why})",
                "Install the build of that package for the installed torch's CUDA (`python -c 'import torch; "
                "print(torch.version.cuda)'`), or the CUDA runtime it names; `dsdoctor env` shows torch's CUDA, the "
                "driver's and nvcc's.",
                {"title": f"a shared library is missing ({lib[:60]}): a package built for another CUDA"})
    if g.get("sym"):
        return (evidence + " (a symbol of torch's C++ API: a compiled extension, its path not in the paste, was built "
                           "against another torch)",
                "Find the extension the traceback imported (flash-attn, xformers, bitsandbytes, apex, a DeepSpeed op) "
                "and reinstall a build made for the installed torch and CUDA (flash-attn: `pip install "
                "--force-reinstall --no-build-isolation flash-attn`, or a release whose wheel names this torch), or "
                "install the torch version it was built for.",
                {"title": "a compiled extension was built for another torch"})
    if g.get("so"):
        name = g["so"].rsplit("/", 1)[-1]
        return (evidence, "Reinstall the package that ships it, built for the installed torch and CUDA (flash-attn: "
                          "`pip install --force-reinstall --no-build-isolation flash-attn`), or install the torch "
                          "version it was built for.",
                {"title": f"a compiled extension ({name[:80]}) was built for another torch or CUDA"})
    inside = _imported_from_itself(match, lines, g.get("from"), g.get("name")) or \
        _own_module_missing(match, lines, g.get("sub") or g.get("bare"))
    if inside is not None:
        return inside
    shown = package or "a package"
    moved = MOVED.get(g.get("sub") or g.get("bare") or "")
    if moved:
        evidence += f" ({moved})"
    raiser = _raised_in(match, lines)
    if raiser and raiser != package:
        fix = (f"The installed {raiser} (the frame that raised it is in its package) was written for another version "
               f"of {shown}: upgrade it to a release made for the installed {shown} (`pip install -U "
               f"{PIP_NAMES.get(raiser, raiser)}`), or pin {shown} to a version it supports; `dsdoctor env` lists the "
               f"installed versions and those known to break each other.")
        return evidence, fix, {"title": f"a version mismatch: the installed {raiser} expects another version of "
                                        f"{shown}"}
    fix = (f"The code was written for another version of {shown}: `dsdoctor env` lists the installed versions and "
           f"those known to break each other; pin the versions the training repository names (its "
           f"requirements.txt), or update the code to the installed {shown}.")
    return evidence, fix, {"title": f"a version mismatch: the code expects another version of {shown}"}


#: the module file Python names after ``cannot import name 'X' from 'P.m'``: `` (/path/P/m/__init__.py)``
_FROM_FILE = re.compile(r"from '[\w.]{1,200}' \((?P<path>[^()\n]{1,400}\.py)\)")


def _imported_from_itself(match, lines, module: str | None, name: str | None) -> tuple[str, str, dict] | None:
    """LOG808 for ``cannot import name 'X' from 'P.m'`` raised by P's own code (the traceback's innermost frame is
    in the package P, or under the folder P.m's file is in): P.m does not define a name its own package imports
    from it, so no version of another package explains it. The module's body failed part-way without raising: its
    imports wrapped in try/except (LLaVA's llava/model/__init__.py, many model repositories) swallowed the real
    ImportError, usually a compiled dependency (flash-attn, a CUDA extension) built for another torch. None when
    the importer is another package's code (a version mismatch: ENV310) or the log shows no frame."""
    from .origin import frame_origin

    if not module:
        return None
    top = module.split(".")[0]
    stack = [line for line in lines[max(0, match.line_index - 60):match.line_index] if line.rank == match.line.rank]
    frame = frame_origin(stack, before=len(stack))
    if frame is None:
        return None
    same = frame.get("package") == top
    where = _FROM_FILE.search(match.line.text)
    if not same and where:  # the importer's file is under the package's folder: .../P/ in both paths
        root = where.group("path").replace("\\", "/")
        marker = "/" + "/".join(module.split(".")) + "/"
        cut = root.find(marker) if marker in root else root.rfind("/" + "/".join(module.split(".")) + ".py")
        importer = _last_frame_path(stack)
        same = cut > 0 and importer is not None and importer.startswith(root[:cut] + "/" + top + "/")
    if not same:
        return None
    return (_where(match) + _line(match) + f" ({top}'s own code imports {name or 'it'} from {module}, which does not "
            f"define it: {module}'s imports failed part-way, and the error was swallowed)",
            f"See the hidden error: `python -c \"import {module}\"` prints nothing when {module} wraps its imports in "
            f"try/except, so import what {module} imports directly (flash-attn is the usual one: `python -c "
            f"\"import flash_attn\"`). A compiled dependency built for another torch is the common cause: `pip "
            f"install --force-reinstall --no-build-isolation --no-cache-dir flash-attn` after a torch upgrade.",
            {"rule": "LOG808", "title": f"{module} failed to import part of itself: a dependency it imports is "
                                        f"missing or broken"})


#: DeepSpeed's fallback when no launcher set the ranks (deepspeed/comm/comm.py, utils/distributed.py before 0.6:
#: init_distributed -> mpi_discovery): its frame, or its notice before it
MPI_DISCOVERY = re.compile(r"\bin mpi_discovery\b|attempting to detect MPI environment")


def mpi_fallback(match, lines) -> tuple[str, str, str] | None:
    """(evidence, fix, title) of PRE023 when the failure at ``match`` happened in DeepSpeed's MPI discovery (a frame
    ``in mpi_discovery`` in the 40 lines above it, of its rank, or DeepSpeed's notice "Not using the DeepSpeed or dist
    launchers, attempting to detect MPI environment..."): deepspeed.init_distributed found none of the variables a
    launcher sets, so it imported mpi4py and ran ``hostname -I``; what failed there (mpi4py missing, GNU inetutils'
    hostname refusing -I) is its consequence. None otherwise."""
    above = [ln for ln in lines[max(0, match.line_index - 40):match.line_index + 1]
             if ln.rank in (match.line.rank, None)]
    if not any(MPI_DISCOVERY.search(ln.text) for ln in above):
        return None
    return (_where(match) + _line(match) + " (raised in DeepSpeed's MPI discovery: deepspeed.init_distributed found "
                                           "no RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, so no "
                                           "launcher started this process)",
            "Launch with `deepspeed --num_gpus N script.py`, `torchrun --nproc_per_node N script.py` or `accelerate "
            "launch --use_deepspeed ...` (accelerate without its DeepSpeed plugin starts one plain process); for one "
            "process without a launcher set RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500. "
            "(With mpi4py installed, a plain process runs as an MPI world of one: it starts no other rank.) Before "
            "launch: `dsdoctor preflight \"python script.py ...\"` names it.",
            "no launcher set the ranks: DeepSpeed fell back to MPI discovery")


#: a call of a package's API on a quoted source line: ``with deepspeed.zero.Init(sequence_data_parallel_group=...``
PACKAGE_CALL = re.compile(r"\b(?P<pkg>deepspeed|transformers|peft|accelerate|trl|torch)(?P<path>(?:\.[A-Za-z_]\w{0,60})"
                          r"{1,6})\(")
UNEXPECTED_KEYWORD = re.compile(r"TypeError: (?P<callee>[\w.<>]{1,120})\(\) got an unexpected keyword argument "
                                r"'(?P<arg>\w{1,80})'")


@functools.lru_cache(maxsize=64)
def installed_parameters(package: str, file: str | None, name: str) -> frozenset[str] | None:
    """The keyword parameters the installed ``package`` gives function or class ``name`` (a class: its ``__init__``'s,
    or a dataclass's fields), read from its source without importing it: in ``file`` (a path inside the package)
    or, for a dotted ``name`` (``zero.Init``), in the module the dots name; one ``from .x import name`` followed.
    None when the package is not installed here, the definition is not found, or it takes ``**kwargs``. Cached: the
    misspelling and version refiners ask for the same signature in turn."""
    import ast

    from dsdoctor.files import installed_package_dir

    root = installed_package_dir(package)
    if root is None:
        return None
    *modules, last = name.split(".")
    if modules and not root.joinpath(modules[0]).exists() and not root.joinpath(modules[0] + ".py").exists():
        try:  # a module the package re-exports under another name (deepspeed/__init__.py: from .runtime import zero)
            top = ast.parse((root / "__init__.py").read_text(encoding="utf-8", errors="replace"))
        except (OSError, SyntaxError, ValueError):
            top = ast.Module(body=[], type_ignores=[])
        alias = next((n for n in top.body if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module and
                      any((a.asname or a.name) == modules[0] and a.name == modules[0] for a in n.names)), None)
        if alias is not None:
            root = root.joinpath(*alias.module.split("."))
    candidates = [root / file] if file else [root.joinpath(*modules, "__init__.py")] + (
        [root.joinpath(*modules[:-1], modules[-1] + ".py")] if modules else [])
    for path in candidates:
        for _ in range(3):  # the definition, or the module it is imported from
            try:
                tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
            except (OSError, SyntaxError, ValueError):
                break
            node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == last),
                        None)
            if isinstance(node, ast.FunctionDef):
                args = node.args
                return None if args.kwarg else frozenset(a.arg for a in args.args + args.kwonlyargs)
            if isinstance(node, ast.ClassDef):
                init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
                if init is not None:
                    return None if init.args.kwarg else frozenset(a.arg for a in init.args.args +
                                                                  init.args.kwonlyargs)
                fields = frozenset(n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and
                                   isinstance(n.target, ast.Name))
                return fields or None
            source = next((n for n in tree.body if isinstance(n, ast.ImportFrom) and n.level and
                           any(a.name == last for a in n.names)), None)
            if source is None:
                break
            base = path.parent
            for _ in range(source.level - 1):
                base = base.parent
            parts = (source.module or "").split(".") if source.module else []
            nxt = base.joinpath(*parts).with_suffix(".py") if parts else base / "__init__.py"
            path = nxt if nxt.exists() else base.joinpath(*parts, "__init__.py")
    return None


def _keyword_call(match, lines) -> tuple[str, str, str] | None:
    """(the keyword, the package, its API's dotted path inside the package) of ``TypeError: X() got an unexpected
    keyword argument 'k'`` raised where the code calls a package's API with ``k=`` (the frame's quoted source lines
    right above it: ``with deepspeed.zero.Init(sequence_data_parallel_group=...)``), or None."""
    found = UNEXPECTED_KEYWORD.search(match.line.text)
    if found is None:
        return None
    arg = found.group("arg")
    code = [ln.text for ln in lines[max(0, match.line_index - 6):match.line_index]
            if ln.rank == match.line.rank and ln.text[:1].isspace() and "File \"" not in ln.text]
    call = next((m for m in (PACKAGE_CALL.search(t) for t in reversed(code) if f"{arg}=" in t or f"{arg} =" in t)
                 if m), None)
    return (arg, call.group("pkg"), call.group("path").lstrip(".")) if call else None


def _misspelled(package: str, api: str, arg: str) -> str:
    """The parameter of the installed ``package``'s ``api`` whose name is close to ``arg`` (``config`` for
    ``config_file``), or "" (none, or the API's parameters cannot be read here)."""
    taken = installed_parameters(package, None, api)
    near = difflib.get_close_matches(arg, sorted(taken - {"self"}), n=1, cutoff=0.6) if taken else []
    return near[0] if near and arg not in taken else ""


def misspelled_keyword(match, lines) -> tuple[str, str, str] | None:
    """(evidence, fix, title) for an unexpected keyword the code passes to a package's API (:func:`_keyword_call`)
    whose installed signature has a parameter of a close name (``config`` for ``config_file`` in
    ``deepspeed.initialize``): a misspelled keyword, which no version takes. None otherwise."""
    called = _keyword_call(match, lines)
    near = _misspelled(called[1], called[2], called[0]) if called else ""
    if not near:
        return None
    arg, package, path = called
    api = f"{package}.{path}"
    return (_where(match) + _line(match) + f" (the installed {package}'s {api} takes {near}, not {arg})",
            f"Pass {near}= instead of {arg}= to {api} (the installed version's signature: `python -c \"import "
            f"inspect, {package}; print(inspect.signature({api}))\"`).",
            f"{api} has no parameter {arg}: did you mean {near}?")


def keyword_of_another_version(match, lines) -> tuple[str, str, str] | None:
    """(evidence, fix, title) of ENV310 for an unexpected keyword the code passes to a package's API
    (:func:`_keyword_call`) that is no misspelling of the installed signature's (:func:`misspelled_keyword`, tried
    first): the installed version of that package does not take the argument the code was written for. None
    otherwise (a keyword of the user's own function; an optimizer's params from the config: DS118)."""
    called = _keyword_call(match, lines)
    if called is None or _misspelled(called[1], called[2], called[0]):
        return None
    arg, package, path = called
    api = f"{package}.{path}"
    return (_where(match) + _line(match) + f" (the code calls {api}({arg}=...): the installed {package} does not take "
                                           f"{arg})",
            f"The code was written for another version of {package}: `dsdoctor env` shows the installed one; install "
            f"the version the training repository pins (its requirements.txt), or the release that added {arg} to "
            f"{api} (`pip install -U {PIP_NAMES.get(package, package)}`).",
            f"a version mismatch: the installed {package}'s {api} does not take {arg}")


#: transformers' TrainingArguments and its subclasses by name (Seq2SeqTrainingArguments): the fields
#: dsdoctor.checks.hf_trainer.FIELD_VERSIONS describes (TRL's SFTConfig adds fields of TRL's own versions)
TRAINING_ARGUMENTS = re.compile(r"^\w{0,40}TrainingArguments$")


def training_arguments_field(match, lines) -> tuple[str, str, str] | None:
    """(evidence, fix, title) of HF205 for ``TypeError: TrainingArguments.__init__() got an unexpected keyword
    argument 'k'``: a field the installed transformers does not have, with the releases that have it and the
    field of a close name the others have (``evaluation_strategy`` / ``eval_strategy``), from the fields of the
    sampled transformers releases (:data:`dsdoctor.checks.hf_trainer.FIELD_VERSIONS`). None for another class."""
    found = UNEXPECTED_KEYWORD.search(match.line.text)
    if found is None or not TRAINING_ARGUMENTS.match(found.group("callee").split(".")[0]):
        return None
    from dsdoctor.checks.hf_trainer import FIELD_VERSIONS

    arg = found.group("arg")
    had = FIELD_VERSIONS.get(arg, ("", "", ""))[0]
    near = [n for n in difflib.get_close_matches(arg, sorted(FIELD_VERSIONS), n=3, cutoff=0.6) if n != arg][:1]
    said = (f"of the transformers releases sampled, {had.replace(' ', ', ')} have {arg}" if had else
            f"no transformers release sampled has {arg}")
    instead = f"; {near[0]}: {FIELD_VERSIONS[near[0]][0].replace(' ', ', ')}" if near else ""
    return (_where(match) + _line(match) + f" ({said}{instead})",
            (f"Use {near[0]} with this transformers, or pin the transformers the script was written for"
             f"{' (' + had.split()[-1] + ')' if had else ''}. " if near else
             "Remove the field, or pin the transformers the script was written for. ")
            + "`dsdoctor check ds_config.json --launch trainer --hf-args ARGS.json --transformers installed` names such fields before launch.",
            "a TrainingArguments field the installed transformers does not have")


def _own_module_missing(match, lines, module: str | None) -> tuple[str, str, dict] | None:
    """LOG808 for ``No module named 'P.x'`` raised by P's own code (the traceback's innermost frame is in package
    P): P's install lacks a module of its own, which no version of another package explains (a new folder without
    ``__init__.py`` that its packaging left out of the wheel; a partial upgrade over an older install; a source
    checkout missing a file). None when the importer is another package's or the user's
    (code written for another version of P: ENV310) or the log shows no frame."""
    from .origin import frame_origin

    if not module:
        return None
    top = module.split(".")[0]
    stack = [line for line in lines[max(0, match.line_index - 60):match.line_index] if line.rank == match.line.rank]
    frame = frame_origin(stack, before=len(stack))
    if frame is None or frame.get("package") != top:
        return None
    return (_where(match) + _line(match) + f" ({top}'s own code, {frame['file']}, imports {module}, which its "
                                           f"install does not have)",
            f"Reinstall {top} cleanly (`pip uninstall -y {PIP_NAMES.get(top, top)}` until none is left, then `pip "
            f"install --no-cache-dir {PIP_NAMES.get(top, top)}`); if a fresh install still lacks {module}, that "
            f"release left it out of its package (a folder without __init__.py): use the release before or after "
            f"it, or install from the source repository.",
            {"rule": "LOG808", "title": f"{top}'s install lacks its own module {module}"})


def _last_frame_path(lines) -> str | None:
    from .origin import FRAME

    for line in reversed(lines):
        found = FRAME.search(line.text) if "\", line " in line.text else None
        if found:
            return found.group("path").replace("\\", "/")
    return None


#: modules that moved or went away, and what to import instead (their packages' own changes)
MOVED = {
    "transformers.deepspeed": "transformers moved it to transformers.integrations.deepspeed (is_deepspeed_zero3_enabled, "
                              "HfDeepSpeedConfig); the old module is gone from current releases",
    "torch._six": "torch 2.0 removed torch._six; DeepSpeed's own import of it is guarded since (runtime/utils.py: "
                  "try ... except ModuleNotFoundError: from torch import inf)",
}
#: a traceback frame in an installed package: File ".../site-packages/<package>/..." (dist-packages: Debian's Python)
_FRAME_PACKAGE = re.compile(r"^\s{0,8}File \"[^\"\n]{0,400}?/(?:site|dist)-packages/(?P<package>[A-Za-z_]\w{0,80})/")


def _raised_in(match, lines, checkouts: bool = False) -> str | None:
    """The installed package whose code raised ``match``'s error: the last frame of its rank before it, when that
    frame is in site-packages (None for the user's own code). ``checkouts``: a project's source checkout run in
    place (``/home/u/FastChat/fastchat/train/train_lora.py``: fastchat; :func:`origin._checkout_package`) counts
    as a package too."""
    from .origin import FRAME, _package

    for line in reversed(lines[max(0, match.line_index - 40):match.line_index]):
        if line.rank != match.line.rank or "File \"" not in line.text:
            continue
        found = _FRAME_PACKAGE.match(line.text)
        if found:
            return found.group("package")
        frame = FRAME.search(line.text) if checkouts else None
        return _package(frame.group("path"))[0] if frame else None
    return None


def op_abi(match, lines) -> tuple[str, str, dict]:
    """ENV317 from a log: a DeepSpeed op compiled against another torch (prebuilt in DeepSpeed's install, or
    JIT-built by an earlier torch and still in torch's extensions cache). Returns (evidence, fix, {'title': ...})."""
    path = match.groups.group("so")
    evidence = _where(match) + _line(match)
    symbol = re.search(r"undefined symbol: (?P<sym>\S{1,300})", match.line.text)
    library = CUDA_LIBRARY_SYMBOL.match(symbol.group("sym")) if symbol else None
    if library:  # a C function of a CUDA library: the op was linked without it, not built for another torch
        lib = library.group("lib").lower()
        return (evidence + f" (a function of lib{lib}, not of torch: the op was built against this torch but not "
                           f"linked with lib{lib}, which torch no longer loads for it)",
                f"Upgrade DeepSpeed and rebuild the op: its builder links lib{lib} since DeepSpeed 0.6.1 (PR 1879: "
                f"torch 1.11 stopped loading it; `pip install -U deepspeed`, then delete the cached build in "
                f"~/.cache/torch_extensions or reinstall with DS_BUILD_OPS=1); meanwhile LD_PRELOAD the CUDA "
                f"library (`LD_PRELOAD=$CUDA_HOME/lib64/lib{lib}.so`).",
                {"rule": "LOG810", "title": f"a DeepSpeed op was linked without lib{lib} (inconclusive: no rule names "
                                            f"it)"})
    cache = _JIT_CACHE.match(path)
    if cache:
        return (evidence + " (an op JIT-built by an earlier torch, still in torch's extensions cache)",
                f"Delete the cached build: `rm -rf {cache.group('dir')}` (it is rebuilt at first use, for the "
                f"installed torch).", {"title": "a DeepSpeed op in torch's extensions cache was built for another "
                                                "torch"})
    return (evidence + " (DeepSpeed's prebuilt op, compiled against another torch)",
            "Reinstall DeepSpeed against the installed torch: `DS_BUILD_OPS=1 pip install --no-cache-dir "
            "--force-reinstall deepspeed`, or without DS_BUILD_OPS (its ops are then JIT-built at first use).", {})


#: an undefined symbol that is a C function of a CUDA library (curandCreateGenerator, cublasSgemm_v2): not C++, so
#: not torch's ABI (torch's symbols are mangled: _ZN3c10...)
CUDA_LIBRARY_SYMBOL = re.compile(r"^(?P<lib>curand|cublas|cublasLt|cusparse|cufft|cusolver|cudnn|nvrtc|cuda(?=[A-Z])|"
                                 r"cudart)\w{0,100}$", re.I)


#: an op or extension that needs a newer C++ runtime than the one loaded: "version `GLIBCXX_3.4.29' not found
#: (required by .../torch_extensions/py39_cu117/cpu_adam/cpu_adam.so)"
GLIBCXX = (r"(?P<lib>\S{0,400}libstdc\+\+\.so\.6): version `(?P<ver>(?:GLIBCXX|CXXABI)_[\d.]{1,12})' not found"
           r"(?: \(required by (?P<by>[^\n)]{1,400})\))?")
GLIBCXX_NEEDLES = ("GLIBCXX_", "CXXABI_")


def glibcxx(match, lines) -> tuple[str, str, dict]:
    """ENV335 from a log: the loaded libstdc++ lacks the symbol version an op was built against. The fix names the
    cached op build to delete when the op is DeepSpeed's JIT build (torch's extensions cache)."""
    g = match.groups.groupdict()
    evidence = _where(match) + _line(match)
    by = g.get("by") or ""
    cache = _JIT_CACHE.match(by) if by else None
    fix = ("Give the environment a libstdc++ as new as the compiler's: `conda install -c conda-forge libstdcxx-ng` "
           f"(the loaded one is {g['lib'][:200]}), or start the job with LD_PRELOAD set to the system's "
           "(`g++ -print-file-name=libstdc++.so.6`)")
    if cache:
        fix += f"; then delete the cached build (`rm -rf {cache.group('dir')}`) so the op is rebuilt."
    else:
        fix += "."
    op = by.rsplit("/", 1)[-1] if by else "a compiled extension"
    return evidence, fix, {"title": f"{op[:80]} needs {g['ver']}, which the libstdc++ loaded lacks"}


#: an attribute of another package's object that the calling package expects and the installed one lacks:
#: "AttributeError: 'DeepSpeedZeRoOffload' object has no attribute '_register_hooks_recursively'" raised in trl
OBJECT_ATTRIBUTE = r"AttributeError: '(?P<cls>[A-Z]\w{2,100})' object has no attribute '(?P<attr>\w{1,200})'"
#: the packages of the fine-tuning stack whose classes other packages reach into (searched in this order)
_STACK = ("deepspeed", "accelerate", "peft", "trl", "pydantic", "transformers")


def _defining_package(cls: str, besides: str | None) -> str | None:
    """The package of the fine-tuning stack that defines class ``cls``: its name's prefix (DeepSpeed..., Peft...,
    Accelerat...), else the installed packages' sources (``class cls`` at the start of a line; nothing is
    imported). None when no other package than ``besides`` defines it."""
    import importlib.util
    from pathlib import Path

    for package in _STACK:
        if package != besides and cls.lower().startswith(package[:8]):
            return package
    pattern = re.compile(rf"^class {re.escape(cls)}\b", re.M)
    for package in _STACK:
        if package == besides:
            continue
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            continue
        for root in spec.submodule_search_locations:
            for path in Path(root).rglob("*.py"):
                try:
                    if pattern.search(path.read_text(errors="replace")):
                        return package
                except OSError:
                    continue
    return None


def object_attribute(match, lines) -> tuple[str, str, str] | None:
    """(evidence, fix, title) of ENV310 when ``match`` (an unnamed Python error) is an AttributeError on an object
    whose class is another installed package's than the frame that raised it: code written for another version of
    that package (TRL's ZeRO-3 generation hooks calling a method DeepSpeed 0.16.4 renamed; an old DeepSpeed reading
    pydantic 1's FieldInfo.required under pydantic 2). None otherwise: the error stays what it was."""
    found = re.search(OBJECT_ATTRIBUTE, match.line.text)
    if found is None:
        return None
    raiser = _raised_in(match, lines, checkouts=True)
    owner = _defining_package(found.group("cls"), raiser) if raiser else None
    if not raiser or not owner or owner == raiser:
        return None
    cls = found.group("cls")
    if _raised_in(match, lines) is None:  # a source checkout of the project, run in place
        return (_where(match) + _line(match) + f" (raised in the {raiser} checkout; {cls} is {owner}'s)",
                f"This {raiser} checkout was written for another version of {owner}: install the {owner} version "
                f"its requirements name (requirements.txt, setup.py, pyproject.toml), or update the checkout (`git "
                f"pull`) to one made for the installed {owner}; `dsdoctor env` lists the installed versions.",
                f"a version mismatch: the {raiser} code expects another version of {owner}")
    return (_where(match) + _line(match) + f" (raised in {raiser}; {cls} is {owner}'s)",
            f"The installed {raiser} was written for another version of {owner}: upgrade {raiser} to a release made "
            f"for the installed {owner} (`pip install -U {PIP_NAMES.get(raiser, raiser)}`), or pin {owner} to the "
            f"version {raiser} supports (its requirements); `dsdoctor env` lists the installed versions and those "
            f"known to break each other.",
            f"a version mismatch: the installed {raiser} expects another version of {owner}")
