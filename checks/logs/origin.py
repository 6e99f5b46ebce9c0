"""Where a failure comes from when no rule names it: the innermost frame of the traceback the log holds (the package,
its file and function, the line of code), and a library's own warning in a log that shows no failure (LOG811).

A pasted log is often only the tail of a traceback: ``File ".../site-packages/deepspeed/runtime/zero/stage3.py", line
525, in defragment`` and ``assert len(set(t.dtype for t in tensors)) == 1``, with no exception line. The frame still
says whose code stopped the run; the package is read from the path as Python's import system lays it out
(``site-packages/<package>/...``, or a source checkout's ``src/<package>/...`` of a package dsdoctor's message
catalogue knows).
"""

from __future__ import annotations

import re

from .lines import Line, continued, joined

#: a traceback's frame line (``traceback.format_list``: ``  File "PATH", line N, in NAME``)
#: a traceback's frame line; a paste cut inside it keeps the path's tail (``.env/lib/python3.11/site-packages/
#: deepspeed/runtime/engine.py", line 3288, in _get_zero_param_shapes``)
FRAME = re.compile(r"(?:File \"|^\s{0,8}(?=[\w.~/-]{1,500}\.py\", line ))(?P<path>[^\"\n]{1,500})\", line (?P<line>\d{1,7}), "
                   r"in (?P<func>[^\s]{1,120})")
#: IPython's and Jupyter's frame line: ``File ~/venv/lib/python3.8/site-packages/transformers/modeling_utils.py:3756, in
#: PreTrainedModel._load_pretrained_model(cls, model, ...)``; its failing line is marked ``-> 3756     raise ...``
IPYTHON_FRAME = re.compile(r"^\s{0,8}File (?P<path>[^\s,\"]{1,500}\.py):(?P<line>\d{1,7}), in (?P<func>[^\s(]{1,120})")
IPYTHON_CURRENT = re.compile(r"^-+> ?\d{1,7}\s{1,12}(?P<code>\S.{0,300})")
#: an installed package's file: ``.../site-packages/deepspeed/runtime/engine.py``
SITE = re.compile(r"(?:site|dist)-packages/(?P<pkg>[A-Za-z_]\w{0,60})/(?P<file>.{1,400})$")
#: how far back from a failure's line its traceback's frames are looked for
FRAME_LOOKBACK = 400
#: a frame of Python's standard library (``/usr/lib/python3.10/subprocess.py``, ``<frozen importlib._bootstrap>``)
STDLIB = re.compile(r"^<frozen |/lib/python3\.\d{1,2}/(?!(?:site|dist)-packages/)[\w./-]{1,200}\.py$")
#: a qualified exception class at a line's start: ``torch.utils.checkpoint.CheckpointError:``
QUALIFIED = re.compile(r"^(?P<module>[A-Za-z_]\w{0,60}(?:\.[A-Za-z_]\w{0,60}){1,10})\.(?P<cls>[A-Z]\w{0,80}):")
#: the class an AttributeError or TypeError names: ``'DeepSpeedCPUAdam' object has no attribute``
OBJECT_CLASS = re.compile(r"'(?P<cls>[A-Z]\w{0,80})' object (?:has no attribute|is not (?:callable|subscriptable|"
                          r"iterable))")


def _package(path: str) -> tuple[str | None, str]:
    """(package, file inside it) of a frame's path; (None, the path's last component) for a script of the user."""
    from dsdoctor.messages.catalogue import PACKAGES

    path = PIP_BUILD.sub(r"/\g<name>/", path.replace("\\", "/"))  # pip's /tmp/pip-install-x/deepspeed_<hex>/
    found = SITE.search(path)
    if found:
        return found.group("pkg"), found.group("file")
    if "transformers_modules/" in path:  # a model's remote code (trust_remote_code), which transformers imports
        return "transformers_modules", path.split("transformers_modules/", 1)[1]  # as this package (HF_MODULES_CACHE)
    parts = path.split("/")
    chain = len(parts) - 1  # a source checkout (pip install -e): the outermost known package of the trailing chain of
    while chain > 0 and PACKAGE_DIR.match(parts[chain - 1]):  # import-name folders (openrlhf/utils/deepspeed/
        chain -= 1  # deepspeed.py is OpenRLHF's), else the nearest known package folder
    for i in [*range(chain, len(parts) - 1), *range(len(parts) - 2, -1, -1)]:
        if parts[i] in PACKAGES and parts[i + 1] != parts[i]:  # verl/verl/trainer: the checkout's folder, its package
            return parts[i], "/".join(parts[i + 1:])
    from dsdoctor.messages.catalogue import script_origin

    copied = script_origin(parts[-1])  # a package's script copied beside the user's files (zero_to_fp32.py, which
    if copied:  # DeepSpeed writes into every checkpoint folder)
        return copied
    return _checkout_package(parts)


#: the folder pip unpacks a source distribution in to build it: ``/tmp/pip-install-3_cqq7tl/deepspeed_405e...d8ba/``
PIP_BUILD = re.compile(r"/(?P<name>[A-Za-z][\w.-]{0,80})_[0-9a-f]{32}/")
#: where a user's checkouts live: the folders before a project's own
HOME = re.compile(r"^(?:home|Users|data\d{0,3}|mnt|workspace|work|root|opt|app|content|code|projects?|src|repos?|"
                  r"git(?:hub)?|user|~|[A-Za-z]:)$")
#: a folder that can be a Python package (an import name): lower case, as PEP 8 and every package of the field name it
PACKAGE_DIR = re.compile(r"^[a-z_][a-z0-9_]{0,60}$")


def _machine_folder(name: str) -> bool:
    """A folder a job system made, not a package: a hash (``d81be8a5d3ae4306b72803cebea562af``) or one or two
    letters (AzureML's ``/azureml/cr/j/<hash>/exe/wd/``)."""
    return len(name) <= 2 or bool(re.fullmatch(r"[0-9a-f]{16,}", name))


def _checkout_package(parts: list[str]) -> tuple[str | None, str]:
    """(package, file inside it) of a file in a project's source checkout (a fine-tuning repository cloned and run in
    place: xtuner, FastChat, LLaVA), or (None, the file name) for a script of the user's. The package is the
    outermost folder of the path's trailing chain of import-name folders (``/home/u/LLaVA/llava/model/x.py``:
    ``llava``; ``/home/u/FastChat/fastchat/train/train_lora.py``: ``fastchat``), when the file is at least one
    folder below it (a package with modules in folders, not a folder of scripts: ``/home/u/Qwen/finetune.py`` is
    the user's script) or is its ``__init__.py``; the folders a checkout is kept in (``home``, ``data``, ``src``,
    ...) are never the package. Python itself gives the package by the folders holding ``__init__.py``; a log does
    not show them, and this is the layout every such repository uses."""
    folders = [p for p in parts[:-1] if p]
    chain = 0
    while chain < len(folders) and PACKAGE_DIR.match(folders[len(folders) - 1 - chain]) and \
            not _machine_folder(folders[len(folders) - 1 - chain]):
        chain += 1
    while chain and HOME.match(folders[len(folders) - chain]):  # /home/user/..., /data/...: not the package
        chain -= 1
    if chain == 0:
        return None, parts[-1]
    top = len(folders) - chain
    if chain < 2 and parts[-1] != "__init__.py":
        return None, parts[-1]
    if top > 0 and folders[top - 1].lower().replace("-", "_") not in (folders[top], "") and chain < 2:
        return None, parts[-1]
    return folders[top], "/".join(folders[top + 1:] + [parts[-1]])


def frame_origin(lines: list[Line], before: int | None = None, rank: int | None = None) -> dict | None:
    """The innermost frame of the traceback that ends just before ``lines[before]`` (its exception line; only the
    lines of ``rank`` and those without one count when it is given), or, with ``before`` None, of the first traceback
    in the log: ``{"package": name or None (the user's own script), "file":
    path inside the package, "function", "line": int, "code": the quoted source line or "", "from": "traceback"}``;
    None when there is no frame."""
    start = 0 if before is None else max(0, before - FRAME_LOOKBACK)
    stop = len(lines) if before is None else before
    last = library = None  # the innermost frame, and the innermost one outside Python's standard library
    for index in range(start, stop):
        if rank is not None and lines[index].rank not in (rank, None):
            continue
        text = lines[index].text
        found = FRAME.search(text) if "\", line " in text else \
            IPYTHON_FRAME.search(text) if "File " in text and ".py:" in text else None
        if found:
            last = (index, found)
            if not STDLIB.search(found.group("path")):
                library = last
        elif last is not None and before is None and text.strip() and not text[:1].isspace() \
                and index > last[0] + 1:
            break  # the first traceback's block has ended
    if last is None:
        return None
    index, found = library or last  # subprocess.py's check_output is not where the launcher failed
    code = lines[index + 1].text.strip() if index + 1 < len(lines) and not FRAME.search(lines[index + 1].text) \
        and lines[index + 1].text[:1].isspace() else ""
    if found.re is IPYTHON_FRAME:  # the frame's failing line, among the source lines IPython prints around it
        current = next((m for m in (IPYTHON_CURRENT.match(ln.text) for ln in lines[index + 1:index + 40]) if m), None)
        code = current.group("code").strip() if current else ""
    package, file = _package(found.group("path"))
    return {"package": package, "file": file, "function": found.group("func"), "line": int(found.group("line")),
            "code": code[:200], "from": "traceback"}


def describe_frame(origin: dict) -> str:
    """Evidence for an origin: 'stopped in DeepSpeed's runtime/zero/stage3.py (defragment), line 525: `assert ...`
    (the traceback's innermost frame)', or the module of a qualified exception, or the package defining a class."""
    from dsdoctor.messages.catalogue import NAMES

    who = f"{NAMES.get(origin['package'], origin['package'])}'s " if origin["package"] else "the script "
    if origin["from"] == "exception":
        return f"the exception is {who}{origin['file']}'s (its qualified name)"
    if origin["from"] == "class":
        return f"the object is {who}class defined in {origin['file']}, {origin['versions']}"
    if origin["from"] == "mention":
        return f"the line names {who}{origin['file']}"
    if origin["from"] == "cpp":
        return (f"the message is {who}C++ ({origin['file']}, {origin['versions']}: \"{origin['message'][:80]}\"), "
                f"raised by the op the code called")
    if origin["from"] == "attribute":
        return (f"{origin['attribute']} is an attribute ZeRO-3 gives every parameter it partitions ({who}"
                f"{origin['file']}): this parameter was made after the model was partitioned (model code that "
                f"replaces a weight with a new nn.Parameter, or a module added after deepspeed.initialize), so "
                f"ZeRO-3 never partitioned it")
    code = f": `{origin['code']}`" if origin["code"] else ""
    return (f"stopped in {who}{origin['file']} ({origin['function']}), line {origin['line']}{code} (the traceback's "
            f"innermost frame)")


def exception_origin(text: str) -> dict | None:
    """The module of a qualified exception at the start of ``text`` (``torch.utils.checkpoint.CheckpointError`` is
    torch's utils/checkpoint.py; ``deepspeed.runtime.zero.utils.ZeRORuntimeException`` DeepSpeed's
    runtime/zero/utils.py), when its top-level module is not Python's own (``subprocess.CalledProcessError``)."""
    import sys

    found = QUALIFIED.match(text.strip())
    if not found:
        return None
    parts = found.group("module").split(".")
    if parts[0] in sys.stdlib_module_names or parts[0] == "builtins":
        return None
    return {"package": parts[0], "file": "/".join(parts[1:]) + ".py" if len(parts) > 1 else "__init__.py",
            "function": None, "from": "exception"}


def failure_origin(lines: list[Line], index: int, rank: int | None = None) -> dict | None:
    """Where the exception at ``lines[index]`` comes from, most specific first: its qualified name's module, the
    library class its message names (:func:`dsdoctor.messages.catalogue.class_origin`), the traceback's innermost
    frame outside the standard library; None when the log says none of them."""
    from dsdoctor.messages.catalogue import class_defined_by, class_origin

    text = lines[index].text
    origin = exception_origin(text)
    if origin is not None:
        return origin
    zero3 = ZERO3_ATTRIBUTE.search(text) if "ds_" in text else None
    if zero3:  # an attribute ZeRO-3 puts on every parameter it partitions: this one it never partitioned
        return {"package": "deepspeed", "file": "runtime/zero/partition_parameters.py", "function": None,
                "line": None, "code": "", "from": "attribute", "attribute": zero3.group("attr")}
    named = OBJECT_CLASS.search(text) if "object " in text else None

    def in_log(package: str) -> bool:
        return any(package in ln.text.lower() for ln in lines[:20000])

    by_class = class_origin(named.group("cls"), in_log) if named else None
    frame = frame_origin(lines, index, rank)
    if by_class is not None and frame is not None and frame["package"] == by_class["package"]:
        return frame  # the class's own package raised it: the frame says where ('BF16_Optimizer' read in engine.py)
    if by_class is not None and class_defined_by(named.group("cls")) == 1 and in_log(by_class["package"]):
        # one package defines it and the log names that package (the class's own name may: 'DeepSpeedZeroOptimizer'):
        # its origin, whatever frames the paste kept (torch's autograd engine ran DeepSpeed's hook)
        return by_class
    return frame or by_class  # an 'AdamW' of a package the log never names: the frame


#: an attribute ZeRO-3 gives each parameter it partitions (runtime/zero/partition_parameters.py
#: _convert_to_deepspeed_param: ds_id, ds_status, ds_numel, ds_shape, ds_tensor, ...), missing from an object
ZERO3_ATTRIBUTE = re.compile(r"'(?:Parameter|Tensor)' object has no attribute '(?P<attr>ds_\w{1,40})'")


#: a path of a Python file in a line (a URL to it, a message naming it)
PATH_MENTION = re.compile(r"(?P<path>[\w.-]{0,100}(?:/[\w.-]{1,100}){1,20}\.(?:py|h|hpp|cuh|cu|cpp|cc))\b")


def mentioned_origin(text: str) -> dict | None:
    """The package file a failure line names outright (``KeyError: 'PDSH_SSH_ARGS_APPEND' in https://github.com/
    microsoft/DeepSpeed/blob/master/deepspeed/launcher/multinode_runner.py#L77``), when the path holds a package dsdoctor
    knows; else None."""
    for found in PATH_MENTION.finditer(text):
        package, file = _package(found.group("path"))
        if package:
            return {"package": package, "file": file, "function": None, "line": None, "code": "",
                    "from": "mention"}
    return None


#: where NCCL says its message comes from: ``include/shm.h:48 NCCL WARN ...`` (its own file and line)
#: (NCCL before 2.4 printed no "NCCL" there: ``include/socket.h:344 WARN Socket creation failed``)
NCCL_SOURCE = re.compile(r"(?P<file>[\w./-]{1,200}\.(?:h|cc|cu|cpp|c)):(?P<line>\d{1,6}) (?:NCCL )?"
                         r"(?P<level>WARN|INFO)")


def nccl_origin(lines: list[Line]) -> dict | None:
    """The file and line of NCCL's source the first of ``lines`` with an NCCL WARN names (``include/socket.h:344
    WARN ...``), or None."""
    for line in lines:
        found = NCCL_SOURCE.search(line.text) if "WARN" in line.text else None
        if found and found.group("level") == "WARN":
            return {"package": "nccl", "file": found.group("file"), "function": None, "line": int(found.group("line")),
                    "code": "", "from": "mention"}
    return None


def catalogue_origin(entry, text: str = "") -> dict:
    """The structured origin of a catalogue template (:class:`dsdoctor.messages.catalogue.Entry`); for NCCL, the
    file and line its log line names (``include/shm.h:48 NCCL WARN``: the version that ran), else the newest mined."""
    origin = {"package": entry.package, "file": entry.file, "function": entry.function or None, "line": entry.line,
              "versions": entry.version_span(), "from": "catalogue"}
    named = NCCL_SOURCE.search(text) if entry.package == "nccl" else None
    if named:
        origin.update(file=named.group("file"), line=int(named.group("line")))
    return origin


#: warnings that announce a change, not a fault of the run
DEPRECATION = ("DeprecationWarning", "FutureWarning", "PendingDeprecationWarning")
#: catalogue lookups for warnings per log
MAX_WARNING_LOOKUPS = 40


def library_message(lines: list[Line], raised: bool = True):
    """The first line of ``lines`` (of its last 200, and of those that say they warn) that is a library's own message
    as a whole, as (line, Found), or None: a message it raises or asserts (pasted bare: "Model data type and gradient
    accumulation data type must be equal to use ZeRO") when ``raised``, else, or when none is, a warning it logs,
    warns or prints (not a deprecation). A line the terminal wrapped onto the next (:func:`.lines.continued`) is
    looked up joined with it too."""
    from dsdoctor.messages.catalogue import lookup

    tail = set(range(max(0, len(lines) - 200), len(lines)))
    chosen = [i for i in range(len(lines)) if i in tail or "warn" in lines[i].text.lower()][:MAX_WARNING_LOOKUPS]
    warned = None
    for index in chosen:
        text = lines[index].text
        if len(text.strip()) < 12:
            continue
        for candidate in [text] + joined(continued(lines, index, most=1)):
            found = lookup(candidate[:2000])
            if found is None or not found.whole:
                continue
            if found.entry.kind in ("raise", "assert"):
                if raised:
                    return lines[index], found
                continue
            if found.entry.kind not in ("log", "warn", "print", "nccl-warn") or \
                    found.entry.exception in DEPRECATION or "deprecat" in found.entry.text.lower() or \
                    found.entry.function.endswith("is_compatible"):  # DeepSpeed's op notices at every import
                continue
            warned = warned or (lines[index], found)
    return warned
