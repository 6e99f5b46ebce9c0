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
#: a CUDA toolkit header the compiler cannot find ("fatal error: curand_kernel.h: No such file or directory")
MISSING_CUDA_HEADER = re.compile(r"fatal error: (?P<header>(?:cu\w{1,40}|cuda\w{0,40}|nv\w{1,40}|cusparse\w{0,40}|"
                                 r"cublas\w{0,40})\.h): No such file")
#: DeepSpeed's op builder accepting a CUDA toolkit whose minor version differs from torch's
#: (op_builder/builder.py ``assert_no_cuda_mismatch``: "... but since the APIs are compatible, accepting this
#: combination")
ACCEPTED_SKEW = re.compile(r"Installed CUDA version (?P<nvcc>\d{1,3}\.\d{1,3}) does not match the version torch was "
                           r"compiled with (?P<torch>\d{1,3}\.\d{1,3}) but since the APIs are compatible")
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
    header = MISSING_CUDA_HEADER.search(error)
    skew = next((m for m in (ACCEPTED_SKEW.search(ln.text) for ln in lines[:match.line_index + 1]
                             if "accepting this combination" in ln.text) if m), None)
    if header:  # a header of the CUDA toolkit's: the toolkit at CUDA_HOME lacks it
        found = (f" DeepSpeed built against CUDA {skew.group('nvcc')}'s toolkit while torch was built with "
                 f"{skew.group('torch')}: it accepted the minor difference (the same major), but that toolkit is "
                 f"not the one torch's CUDA libraries come from." if skew else "")
        fix = (f"{header.group('header')} is a header of the CUDA toolkit (CUDA_HOME/include): the toolkit the build "
               f"used lacks it.{found} Install the full toolkit of torch's CUDA version (its -dev packages, e.g. "
               f"cuda-toolkit-X-Y or conda install -c nvidia cuda-toolkit=X.Y) and point CUDA_HOME at it, then run "
               f"again. " + fix)
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
