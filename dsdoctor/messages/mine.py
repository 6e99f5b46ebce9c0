"""Mine the messages a library can print when something fails, from its own source: every ``raise X(...)``,
``assert ..., "..."``, ``logger.error/warning/critical/exception(...)``, ``warnings.warn(...)``, ``print`` of an
error and message appended to a list of errors (``error_msgs.append(...)``, raised together later) in Python (read with :mod:`ast`, never imported or run), and NCCL's ``WARN(...)`` / ``INFO(...)`` format strings
in C (``src/`` of NVIDIA/nccl).

A message becomes a *template*: its literal text with a placeholder where the code puts a value (an f-string's
``{...}``, ``%s``/``%d``/``%lx`` of ``%``-formatting and of C's printf, ``str.format``'s ``{}``, a variable, a call). A
message that is nothing but placeholders (``raise ValueError(msg)``) tells nothing and is counted as dynamic, not
kept. Whitespace runs are one space: logs wrap and indent the same text differently.

Each template records the package, its kind (``raise``, ``assert``, ``log``, ``warn``, ``print``, ``nccl-warn``,
``nccl-info``), the exception class where one is raised, the file (relative to the package) and line, and the
enclosing function. :mod:`dsdoctor.messages.generate` merges the templates of several versions of a package.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

#: A message with fewer literal characters than this (after whitespace is collapsed) is not kept: "{} != {}" would
#: match every log.
MIN_LITERAL = 12
#: The method names of a logger (or of ``warnings``) whose message is kept; ``info``/``debug`` print progress, not
#: failures (DeepSpeed's ``log_dist`` / ``print_rank_0`` likewise).
LOG_METHODS = {"error": "log", "warning": "log", "warn": "warn", "critical": "log", "exception": "log", "fatal": "log",
               "warning_once": "log", "warning_advice": "log", "error_once": "log"}
#: A ``print`` is kept only when its literal text says it reports a failure, or a setting ignored (DeepSpeed's launcher
#: "Detected VISIBLE_DEVICES=... but ignoring it because ...").
PRINT_WORDS = re.compile(r"\b(?:error|fail|failed|cannot|can't|unable|invalid|not supported|warning|ignor(?:e|es|ed|ing))\b",
                         re.I)
#: a list of error messages raised together later (``error_msgs``, ``errors``, ``missing_keys_msg``)
ERROR_LIST = re.compile(r"err|msg|message", re.I)
#: printf conversions (C and Python ``%``-formatting): flags, width, precision, length, conversion
PRINTF = re.compile(r"%(?:\([^)]{0,40}\))?[-+ #0]{0,4}(?:\d{1,3}|\*)?(?:\.(?:\d{1,3}|\*))?(?:hh|h|ll|l|z|j|t|L|q)?"
                    r"[diouxXeEfFgGcrsap]|%%")
#: ``str.format`` fields: ``{}``, ``{0}``, ``{name!r:>10}``; ``{{`` and ``}}`` are literal braces
FORMAT_FIELD = re.compile(r"\{\{|\}\}|\{[^{}]{0,80}\}")
SPACES = re.compile(r"\s+")

#: a placeholder in :attr:`Template.parts`
HOLE = None


@dataclass
class Template:
    """One message: ``parts`` alternate literal text (str) and placeholders (None), whitespace collapsed."""

    package: str
    kind: str
    parts: list
    file: str
    line: int
    function: str = ""
    exception: str = ""
    versions: list = field(default_factory=list)

    @property
    def text(self) -> str:
        """The message with each placeholder as ``{}`` (the key versions are merged on)."""
        return "".join("{}" if p is HOLE else p.replace("{", "{{").replace("}", "}}") for p in self.parts)

    @property
    def literal_chars(self) -> int:
        return sum(len(p.strip()) for p in self.parts if p is not HOLE)


def normalise(parts: list) -> list:
    """Adjacent literals joined, runs of placeholders one, whitespace collapsed, empty literals dropped; ends
    stripped of spaces."""
    out: list = []
    for p in parts:
        if p is HOLE:
            if out and out[-1] is HOLE:
                continue
            out.append(HOLE)
            continue
        p = SPACES.sub(" ", p)
        if not p:
            continue
        if out and out[-1] is not HOLE:
            out[-1] += p
        else:
            out.append(p)
    while out and out[0] is not HOLE and not out[0].strip():
        out.pop(0)
    if out and out[0] is not HOLE:
        out[0] = out[0].lstrip()
    if out and out[-1] is not HOLE:
        out[-1] = out[-1].rstrip()
    return [p for p in out if p is HOLE or p]


def _split_format(text: str, pattern: re.Pattern, literal: dict[str, str]) -> list:
    """``text`` cut at ``pattern``'s fields: placeholders, except the escapes in ``literal`` (``%%`` -> ``%``)."""
    parts: list = []
    last = 0
    for m in pattern.finditer(text):
        parts.append(text[last:m.start()])
        parts.append(literal.get(m.group(0), HOLE))
        last = m.end()
    parts.append(text[last:])
    return parts


def message_parts(node: ast.AST | None) -> list:
    """The literal parts and placeholders of a message expression (see the module docstring)."""
    if node is None:
        return []
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else [HOLE]
    if isinstance(node, ast.JoinedStr):
        out: list = []
        for v in node.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                out.append(v.value)
            else:
                out.append(HOLE)
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return message_parts(node.left) + message_parts(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) \
            and isinstance(node.left.value, str):
        return _split_format(node.left.value, PRINTF, {"%%": "%"})
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format" \
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str):
        return _split_format(node.func.value.value, FORMAT_FIELD, {"{{": "{", "}}": "}"})
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join" and node.args:
        return [HOLE]
    return [HOLE]


#: a command is kept with this many literal characters (``ssh {} hostname -I``; ``nvcc --version``)
MIN_COMMAND = 8
#: the calls that run a command (subprocess's, os's): their first argument is the command a failure names
#: (``subprocess.CalledProcessError: Command '['ssh', 'node1', 'hostname -I']' returned non-zero exit status 255``)
COMMAND_CALLS = {"check_output", "check_call", "run", "Popen", "call", "getoutput", "getstatusoutput", "system"}


def command_parts(node: ast.AST | None) -> list:
    """The literal parts and placeholders of a command: a string (f-string, ``%``, ``.format``), or a list or tuple
    of them joined by spaces as the shell would show it; a starred or computed element is a placeholder."""
    if isinstance(node, (ast.List, ast.Tuple)):
        out: list = []
        for i, element in enumerate(node.elts):
            if i:
                out.append(" ")
            out.extend(message_parts(element))  # a starred or computed element is a placeholder
        return out
    return message_parts(node)


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _name(node.func)
    return ""


class _Visitor(ast.NodeVisitor):
    """Templates of one file. A message held in a variable (``msg = f"..."; raise ZeRORuntimeException(msg)``, as
    DeepSpeed's engine writes its ZeRO-Offload client-optimizer error) is the string last assigned to that name
    before the call, in the enclosing function or at module level (``+=`` appends)."""

    def __init__(self, package: str, file: str):
        self.package, self.file = package, file
        self.scope: list[str] = []
        self.found: list[Template] = []
        self.dynamic = 0
        self.strings: list[dict[str, list]] = [{}]  # per scope: name -> parts of the string last assigned to it
        self.commands: list[dict[str, list]] = [{}]  # per scope: name -> parts of the list or string assigned
        self.classes: dict[str, int] = {}  # class name -> line of its definition

    def _resolved(self, message: ast.AST | None) -> ast.AST | list | None:
        if isinstance(message, ast.Name):
            for scope in reversed(self.strings):
                if message.id in scope:
                    return scope[message.id]
        return message

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            parts = message_parts(node.value)
            if any(p is not HOLE for p in parts):
                self.strings[-1][node.targets[0].id] = parts
            else:
                self.strings[-1].pop(node.targets[0].id, None)
            command = self._command_of(node.value)
            if any(p is not HOLE and p.strip() for p in command):
                self.commands[-1][node.targets[0].id] = command
            else:
                self.commands[-1].pop(node.targets[0].id, None)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name) and isinstance(node.op, ast.Add) and node.target.id in self.strings[-1]:
            self.strings[-1][node.target.id] = self.strings[-1][node.target.id] + message_parts(node.value)
        if isinstance(node.target, ast.Name) and isinstance(node.op, ast.Add) and node.target.id in self.commands[-1]:
            self.commands[-1][node.target.id] = self.commands[-1][node.target.id] + command_parts(node.value)
        self.generic_visit(node)

    def _command_of(self, node: ast.AST | None) -> list:
        """The parts of a command expression (:func:`command_parts`), a name resolved to the list or string last
        assigned to it in scope (``+=`` appends to a string), ``shlex.split(x)`` to ``x``'s."""
        if isinstance(node, ast.Call) and _name(node.func) == "split" and node.args and \
                isinstance(node.func, ast.Attribute) and _name(node.func.value) == "shlex":
            return self._command_of(node.args[0])
        if isinstance(node, ast.Name):
            for scope in reversed(self.commands):
                if node.id in scope:
                    return scope[node.id]
            for scope in reversed(self.strings):
                if node.id in scope:
                    return scope[node.id]
            return [HOLE]
        return command_parts(node)

    def _keep(self, kind: str, node: ast.AST, message: ast.AST | None, exception: str = "") -> None:
        message = self._resolved(message)
        parts = normalise(message if isinstance(message, list) else message_parts(message))
        t = Template(self.package, kind, parts, self.file, getattr(node, "lineno", 0), ".".join(self.scope),
                     exception)
        if t.literal_chars < MIN_LITERAL:
            self.dynamic += 1
            return
        self.found.append(t)

    def _scoped(self, node) -> None:
        self.scope.append(node.name)
        self.strings.append({})
        self.commands.append({})
        self.generic_visit(node)
        self.commands.pop()
        self.strings.pop()
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _scoped

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if not self.scope:  # a module's own classes: what "'DeepSpeedCPUAdam' object has no attribute" names
            self.classes.setdefault(node.name, node.lineno)
        self._scoped(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if isinstance(exc, ast.Call):
            message = exc.args[0] if exc.args else next((k.value for k in exc.keywords if k.arg in ("msg", "message")),
                                                        None)
            if message is not None:
                self._keep("raise", node, message, _name(exc.func))
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        if node.msg is not None:
            self._keep("assert", node, node.msg, "AssertionError")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in LOG_METHODS and node.args:
            message = node.args[0]
            if func.attr != "warn" and len(node.args) > 1 and isinstance(message, ast.Constant) and \
                    isinstance(message.value, str):  # logging's own %-formatting: logger.warning("... %s ...", x)
                message = _split_format(message.value, PRINTF, {"%%": "%"})
            self._keep(LOG_METHODS[func.attr], node, message,
                       _name(node.args[1]) if func.attr == "warn" and len(node.args) > 1 else "")
        elif isinstance(func, ast.Attribute) and func.attr == "append" and node.args and \
                isinstance(func.value, ast.Name) and ERROR_LIST.search(func.value.id):
            # a message collected to be raised together (torch's load_state_dict: error_msgs.append(...))
            self._keep("raise", node, node.args[0])
        elif _name(func) in COMMAND_CALLS and node.args and (not isinstance(func, ast.Attribute) or
                                                             _name(func.value) in ("subprocess", "os", "sp")):
            t = Template(self.package, "command", normalise(self._command_of(node.args[0])), self.file, node.lineno,
                         ".".join(self.scope))
            if t.literal_chars >= MIN_COMMAND:
                self.found.append(t)
        elif isinstance(func, ast.Name) and func.id == "print" and node.args:
            message = self._resolved(node.args[0])
            parts = normalise(message if isinstance(message, list) else message_parts(message))
            if any(p is not HOLE and PRINT_WORDS.search(p) for p in parts):
                self._keep("print", node, node.args[0])
        self.generic_visit(node)


def _is_script(tree: ast.Module) -> bool:
    """Whether a module runs as a script: an ``if __name__ == "__main__":`` at its top level."""
    for node in tree.body:
        test = node.test if isinstance(node, ast.If) else None
        if isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__" and \
                any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators):
            return True
    return False


def mine_python(root: Path, package: str, only: tuple[str, ...] = (),
                classes: dict[str, str] | None = None,
                scripts: set[str] | None = None) -> tuple[list[Template], int, int]:
    """(templates, dynamic messages skipped, files read) of every ``.py`` under ``root`` (the package's own
    directory: ``.../site-packages/deepspeed``), or of those whose path relative to ``root`` starts with one of
    ``only``. A file Python cannot parse is skipped (counted in neither). ``classes``, when given, receives every
    module-level class of the files read: {name: file} (the first file, in path order, that defines it); ``scripts``
    the files that run as scripts (``zero_to_fp32.py``, which DeepSpeed copies into every checkpoint folder)."""
    found: list[Template] = []
    dynamic = files = 0
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if only and not rel.startswith(only):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, ValueError):
            continue
        files += 1
        v = _Visitor(package, rel)
        v.visit(tree)
        found += v.found
        dynamic += v.dynamic
        if classes is not None:
            for name in v.classes:
                classes.setdefault(name, rel)
        if scripts is not None and _is_script(tree):
            scripts.add(rel)
    return found, dynamic, files


#: NCCL's logging macros (src/include/debug.h): ``WARN(fmt, ...)`` and ``INFO(NCCL_SUBSYS, fmt, ...)``; a format of
#: adjacent C string literals is one string
NCCL_CALL = re.compile(r"\b(WARN|INFO|TRACE)\s*\(\s*(?:[A-Z_|\s]{0,80},\s*)?((?:\"(?:[^\"\\\n]|\\.){0,400}\"\s*){1,8})")
C_STRING = re.compile(r"\"((?:[^\"\\\n]|\\.){0,400})\"")
C_ESCAPES = {"\\n": " ", "\\t": " ", "\\\"": "\"", "\\\\": "\\"}


def mine_nccl(root: Path) -> tuple[list[Template], int, int]:
    """(templates, dynamic, files) of NCCL's ``WARN``/``INFO`` messages in the C/C++ sources under ``root``
    (``src/`` of NVIDIA/nccl). ``TRACE`` is debugging output and is not kept."""
    found: list[Template] = []
    dynamic = files = 0
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".cc", ".c", ".h", ".cu", ".cpp", ".hpp")):
        text = path.read_text(encoding="utf-8", errors="replace")
        files += 1
        for m in NCCL_CALL.finditer(text):
            macro = m.group(1)
            if macro == "TRACE":
                continue
            fmt = "".join(C_STRING.findall(m.group(2)))
            for esc, ch in C_ESCAPES.items():
                fmt = fmt.replace(esc, ch)
            parts = normalise(_split_format(fmt, PRINTF, {"%%": "%"}))
            t = Template("nccl", f"nccl-{macro.lower()}", parts, path.relative_to(root).as_posix(),
                         text.count("\n", 0, m.start()) + 1)
            if t.literal_chars < MIN_LITERAL:
                dynamic += 1
                continue
            found.append(t)
    return found, dynamic, files


# --- a package's own C++/CUDA sources (DeepSpeed's ops: csrc/) -------------------------------------------------------

#: the C++ statements that raise into Python with a message: torch's checks (c10::Error is a RuntimeError there) and
#: thrown standard exceptions (pybind11 makes std::runtime_error a RuntimeError, std::invalid_argument a ValueError)
CPP_RAISE = re.compile(r"\b(?P<macro>TORCH_CHECK|TORCH_INTERNAL_ASSERT|AT_ASSERTM|AT_ERROR|TORCH_WARN|"
                       r"throw\s+std::(?P<exc>runtime_error|invalid_argument|logic_error|out_of_range))\s*\(")
CPP_EXCEPTION = {"invalid_argument": "ValueError", "out_of_range": "IndexError", "TORCH_WARN": "UserWarning"}
#: a C++ message is kept with this many literal characters: its checks are terse ("Size mismatch"), and a short one
#: would name any line that holds its words
MIN_CPP_LITERAL = 20


def _cpp_arguments(text: str, start: int) -> tuple[list[str], int]:
    """The top-level arguments of the call whose ``(`` is at ``text[start - 1]``, and the index after its ``)``
    (strings, characters and nested brackets skipped); ([], start) when it does not close within 4,000 characters."""
    args, depth, i, last = [], 0, start, start
    end = min(len(text), start + 4000)
    while i < end:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < end and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                args.append(text[last:i])
                return args, i + 1
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[last:i])
            last = i + 1
        i += 1
    return [], start


def _cpp_parts(args: list[str]) -> list:
    """The message of a C++ raise's arguments: each argument's string literals as text, anything else (a value, a
    ``+``-joined std::string, a ``<<`` stream) a placeholder."""
    parts: list = []
    for arg in args:
        pieces = re.split(r"(\"(?:[^\"\\\n]|\\.)*\")", arg)
        for piece in pieces:
            if piece.startswith("\"") and piece.endswith("\"") and len(piece) >= 2:
                literal = piece[1:-1]
                for esc, ch in C_ESCAPES.items():
                    literal = literal.replace(esc, ch)
                parts.append(literal)
            elif piece.strip() and not re.fullmatch(r"[\s+<]*", piece):
                parts.append(HOLE)
    return parts


def mine_cpp(root: Path, package: str, prefix: str = "") -> tuple[list[Template], int, int]:
    """(templates, dynamic, files) of the messages a package's C++/CUDA sources under ``root`` raise into Python
    (:data:`CPP_RAISE`: ``TORCH_CHECK(cond, "expected input to be on cuda")`` in DeepSpeed's
    csrc/adam/multi_tensor_apply.cuh, ``throw std::runtime_error("...")``), each file named ``prefix`` + its path
    (``ops/csrc/``, where the wheel installs the sources). A check's condition is no part of its message; its other
    arguments are joined as c10::str joins them, literals as text and values as placeholders."""
    found: list[Template] = []
    dynamic = files = 0
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".cc", ".c", ".h", ".cu", ".cuh", ".cpp", ".hpp")):
        text = path.read_text(encoding="utf-8", errors="replace")
        files += 1
        for m in CPP_RAISE.finditer(text):
            args, _ = _cpp_arguments(text, m.end())
            if not args:
                continue
            macro = m.group("macro")
            if macro in ("TORCH_CHECK", "TORCH_INTERNAL_ASSERT", "AT_ASSERTM"):
                args = args[1:]  # the condition
            parts = normalise(_cpp_parts(args))
            kind = "warn" if macro == "TORCH_WARN" else "raise"
            exception = CPP_EXCEPTION.get(m.group("exc") or macro, "RuntimeError")
            t = Template(package, kind, parts, prefix + path.relative_to(root).as_posix(),
                         text.count("\n", 0, m.start()) + 1, exception=exception)
            if t.literal_chars < MIN_CPP_LITERAL:
                dynamic += 1
                continue
            found.append(t)
    return found, dynamic, files


# --- torch's C++ messages, read from its shared libraries ---------------------------------------------------------

#: a run of printable ASCII in a compiled library: where a C string literal is
C_RUN = re.compile(rb"[\x20-\x7e]{24,4000}")
#: the sentences of a run (TORCH_CHECK's pieces are joined by c10::str; a run may hold several messages)
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(])")
#: words of an error message: what a fragment must hold to be kept (the others are docstrings, schemas, names)
ERROR_WORDS = re.compile(r"\b(?:expected|expects|must|cannot|can't|not|invalid|failed|unsupported|only|should|"
                         r"requires?|mismatch|out of|error|unable|doesn't|too|exceeds?|illegal|unknown|missing|mark)\b",
                         re.I)
#: code, format strings, schemas and paths: no message
NOT_MESSAGE = re.compile(r"[{};$\\\t%]|::|->|/\*|//|#include|__|\bdef |\breturn\b|\bself\.|aten::|\bconst\b|"
                         r"\btemplate\b|\bstd::|\bTensor\(|\bint64_t\b|\(\*\)|\.cpp\b|\.h\b|^\s*[a-z_]+\(|=\s*\d")


def mine_binary(paths: list[Path]) -> dict[str, list[str]]:
    """{library file name: the sentences of its string constants that read as error messages}: torch's C++ checks
    (TORCH_CHECK, c10d's, the autograd engine's: "Expected all tensors to be on the same device, but found at least
    two devices", "Expected to mark a variable ready only once.") are in no Python source, only compiled into
    libtorch_cpu.so, libc10.so and libtorch_python.so (libtorch_cuda.so on a CUDA build). A sentence is kept when it
    has 24-400 characters, four words, one word of an error (:data:`ERROR_WORDS`), 80% letters and spaces, and
    nothing of code (:data:`NOT_MESSAGE`). These are fragments, not whole templates: c10::str joins them with the
    values at run time."""
    out: dict[str, list[str]] = {}
    for path in paths:
        found: set[str] = set()
        with open(path, "rb") as f:
            data = f.read()
        for run in C_RUN.finditer(data):
            for sentence in SENTENCE.split(run.group().decode("ascii")):
                text = sentence.strip().strip(" ,:(")
                if not 24 <= len(text) <= 400 or NOT_MESSAGE.search(text):
                    continue
                if len(re.findall(r"[A-Za-z]{2,}", text)) < 4 or not ERROR_WORDS.search(text):
                    continue
                if sum(c.isalpha() or c == " " for c in text) < 0.8 * len(text):
                    continue
                found.add(text)
        out[path.name] = sorted(found)
    return out
