"""What a failed JIT op build shows: the op, the compiler's or linker's first error line and its fix (ENV324), and
an architecture list DeepSpeed's op builder cannot parse (ENV307). Describers of :mod:`.signatures`."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .lines import Line

if TYPE_CHECKING:
    from .signatures import Match


#: a compiler's or ninja's error line
COMPILER_ERROR = re.compile(r"nvcc fatal|fatal error|\berror\b:|: not found|command not found|"
                            r"unsupported gpu architecture|cannot find -l|undefined reference to", re.I)
#: the op a JIT build was making: torch's "Building extension module OP...", ninja's "FAILED: OP.so"
BUILDING_OP = re.compile(r"Building extension module (?P<a>\w{1,100})|FAILED: (?:\S{0,300}/)?(?P<b>\w{1,100})\.so\b|"
                         r"Error building extension '(?P<c>\w{1,100})'")
#: the linker's "cannot find -lcurand": a library of the CUDA toolkit that is not on the linker's path
MISSING_LIB = re.compile(r"cannot find -l(?P<lib>[\w.+-]{1,60})")


def build(match: Match, lines: list[Line]) -> tuple[str, str]:
    """The op that failed to build and the compiler's or linker's first error line: after torch's RuntimeError
    ("Error building extension 'OP'", ninja's output follows it), or before ninja's "build stopped" (a log pasted
    without the RuntimeError)."""
    op = match.groups.groupdict().get("op")
    around = lines[max(0, match.line_index - 200):match.line_index + 200]
    if not op:
        op = next((g.group("a") or g.group("b") or g.group("c") for g in (BUILDING_OP.search(ln.text) for ln in around
                                                                             if "xtension" in ln.text or "FAILED" in
                                                                             ln.text) if g), None)
    after = lines[match.line_index + 1:match.line_index + 200]
    before = lines[max(0, match.line_index - 200):match.line_index]
    error = next((text for text in (ln.text.strip() for ln in after + before) if COMPILER_ERROR.search(text)
                  and not text.startswith(("Traceback", "subprocess.", "RuntimeError"))), "")
    fix = ("`dsdoctor env --build-ops ds_config.json` builds the ops the config needs before launch and shows the "
           "compiler's error; install the CUDA toolkit matching torch's CUDA (nvcc), gcc, ninja, or pre-build "
           "(DS_BUILD_OPS=1 pip install deepspeed).")
    lib = MISSING_LIB.search(error)
    if lib:  # torch's JIT link passes -L torch/lib only (cpp_extension.py _prepare_ldflags)
        fix = (f"The linker cannot find lib{lib.group('lib')}.so: it is in the CUDA toolkit (CUDA_HOME/lib64), not on "
               f"the path torch's JIT link gives it. export LIBRARY_PATH=$CUDA_HOME/lib64:$LIBRARY_PATH (and "
               f"LD_LIBRARY_PATH likewise), or install the toolkit's libraries (conda install -c nvidia "
               f"libcurand-dev), then run again. " + fix)
    return f"building op '{op or '?'}' failed" + (f": {error[:240]}" if error else ""), fix


ARCH_LIST = re.compile(r"TORCH_CUDA_ARCH_LIST[=:\s\"']{1,8}([\w.;+ ]{1,100})")


def arch(match: Match, lines: list[Line]) -> tuple[str, str]:
    listed = next((ARCH_LIST.search(line.text) for line in lines
                   if "TORCH_CUDA_ARCH_LIST" in line.text), None)
    value = listed.group(1).strip() if listed else None
    return (f"{match.line.text.strip()[:200]}" + (f" (TORCH_CUDA_ARCH_LIST={value})" if value else ""),
            "DeepSpeed's op builder cannot parse an arch suffix such as 9.0a: export TORCH_CUDA_ARCH_LIST=9.0 (the "
            "GPUs' compute capabilities, digits only). `dsdoctor env` finds it before launch.")
