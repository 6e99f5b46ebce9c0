"""The shipped message catalogues (``dsdoctor/messages/<package>.json``, written by
:mod:`dsdoctor.messages.generate`) and the lookup of a log line in them: which library printed this message, from
which file and function, in which of its versions.

A line is matched against a template by the template's longest literal piece (a substring test), then by the whole
template as a regular expression (each placeholder a bounded ``.{0,300}?``); among the templates that match, the one
with the most literal text wins, a whole match before a partial one (the line holds only the longest piece: a message
whose other pieces are printed on other lines). A line that ends inside the longest piece, with at least
:data:`MIN_PREFIX` of its characters, counts as whole: the message cut, or another version's shorter wording.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

HERE = Path(__file__).parent
#: the packages whose catalogues ship, in the order a tie is broken: the libraries first (the library nearest the
#: user's code first), then the training tools built on them, since a tool that has a library's message or class word
#: for word copied it (ms-swift's Seq2SeqTrainer is transformers'; unsloth_zoo patches torch's and transformers' code
#: with their messages); a traceback through the tool's own frame still names the tool (:func:`lookup`'s ``prefer``)
PACKAGES = ("transformers", "peft", "accelerate", "deepspeed", "torch", "nccl", "llamafactory", "axolotl", "swift",
            "trl", "openrlhf", "xtuner", "fastchat", "unsloth", "unsloth_zoo", "verl")
#: display names
NAMES = {"transformers": "transformers", "peft": "peft", "accelerate": "accelerate", "deepspeed": "DeepSpeed",
         "torch": "PyTorch", "nccl": "NCCL", "llamafactory": "LLaMA-Factory", "axolotl": "axolotl",
         "swift": "ms-swift", "trl": "TRL", "openrlhf": "OpenRLHF", "xtuner": "xtuner", "fastchat": "FastChat",
         "unsloth": "unsloth", "unsloth_zoo": "unsloth_zoo", "verl": "verl"}
#: a piece of fewer characters than this is no anchor (it is in too many lines)
MIN_ANCHOR = 12
#: nor one of fewer letters: a banner (torchrun's line of 41 '*' before its OMP_NUM_THREADS notice) is no message
MIN_ANCHOR_LETTERS = 8
#: a line that ends inside a template's longest piece matches it when it holds this many of its characters: an
#: older or newer wording that ends earlier ("Ninja is required to load C++ extensions", without torch 2.x's "(pip
#: install ninja to get it)"), or a message cut by the log
MIN_PREFIX = 24
HOLE_RE = ".{0,300}?"
SPACES = re.compile(r"\s+")


def _plain(text: str) -> str:
    """A message without its backticks: an issue tracker renders them as code and drops them from the pasted text
    ("via accelerator = Accelerator() before" for accelerate's "via `accelerator = Accelerator()` before"), so
    templates and lines are compared without them."""
    return text.replace("`", "")


@dataclass(frozen=True)
class Entry:
    """A template of a catalogue (see :mod:`dsdoctor.messages.mine`): ``parts`` literal text and ``None``
    placeholders; ``versions`` of the package it is in, oldest first; file, line and function in the newest."""

    package: str
    kind: str
    exception: str
    parts: tuple
    file: str
    line: int
    function: str
    versions: tuple
    all_versions: tuple  # every version the catalogue was made from

    @functools.cached_property
    def anchor(self) -> str:
        return max((_plain(p).strip() for p in self.parts if p is not None), key=len, default="")

    @functools.cached_property
    def regex(self) -> re.Pattern:
        return re.compile("".join(HOLE_RE if p is None else re.escape(_plain(p)) for p in self.parts))

    @property
    def text(self) -> str:
        return "".join("{}" if p is None else p for p in self.parts)

    def version_span(self) -> str:
        """``0.12.6-0.19.8`` (the versions the message is in, of those mined), or ``every version mined (...)``."""
        if self.versions == self.all_versions:
            return f"every version mined ({self.versions[0]}-{self.versions[-1]})" if len(self.versions) > 1 else \
                self.versions[0]
        return ", ".join(self.versions) if len(self.versions) <= 2 else f"{self.versions[0]}-{self.versions[-1]}" \
            + (" (not in every version between)" if not _contiguous(self.versions, self.all_versions) else "")

    def origin(self) -> str:
        """One line: 'DeepSpeed raised this (AssertionError) in runtime/zero/stage3.py (_partition_param), 0.12-0.19'."""
        verb = {"raise": f"raised this ({self.exception})" if self.exception else "raised this",
                "assert": "asserted this", "log": "logged this", "warn": "warned this", "print": "printed this",
                "nccl-warn": "warned this (WARN)", "nccl-info": "printed this (INFO)",
                "command": "ran this command"}.get(self.kind, "printed this")
        where = f"{self.file}" + (f" ({self.function})" if self.function else "")
        return f"{NAMES.get(self.package, self.package)} {verb} in {where}, {self.version_span()}"


def _contiguous(versions: tuple, all_versions: tuple) -> bool:
    idx = [all_versions.index(v) for v in versions if v in all_versions]
    return bool(idx) and idx == list(range(idx[0], idx[0] + len(idx)))


#: Python code whose errors CPython itself raises: a library template made only of the words of one of these
#: messages (peft's ``"'{}' object has no attribute '{}'"``, which mirrors the interpreter's) is no origin, since the
#: interpreter prints the same for any object.
BUILTIN_SNIPPETS = ("object().x", "None()", "1 + ''", "[][1]", "{}['k']", "1 / 0", "int('x')", "len(1)",
                    "open('/nonexistent/dsdoctor')", "(lambda: 0)(1)", "(lambda a: 0)(b=1)", "None[0]", "1 < ''",
                    "import dsdoctor_no_such_module", "iter(1)", "'%d' % 'x'", "float('x')", "[].pop()",
                    "(1, 2)[5]", "__import__('os').mkdir('/')", "exec('x = ')", "next(iter([]))",
                    "__import__('os').dsdoctor_no_such_name", "from os import dsdoctor_no_such_name",
                    "(lambda: 0)(**{'a': 1})", "1 .bit_length(2)",
                    "class C:\n    def __init__(self): pass\nC(a=1)")  # "C.__init__() got an unexpected keyword"


@functools.lru_cache(maxsize=1)
def builtin_messages() -> tuple[str, ...]:
    """The messages CPython raises for :data:`BUILTIN_SNIPPETS` (run here, in this interpreter)."""
    import warnings

    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "'NoneType' object is not callable; perhaps you missed a comma?"
        for code in BUILTIN_SNIPPETS:
            try:
                exec(code, {})  # noqa: S102 - constant snippets of this module, each raising a builtin error
            except BaseException as exc:  # noqa: BLE001 - the message is what is wanted, whatever the type
                out.append(str(exc))
    return tuple(out)


#: a template that starts with a placeholder and has fewer literal characters than this is generic wording
#: (torch's "{} has no attribute `{}`" would name any AttributeError as torch's)
MIN_LEADING_HOLE_LITERAL = 24


def _generic(entry: Entry) -> bool:
    pieces = [p.strip() for p in entry.parts if p is not None and len(p.strip()) > 3]
    if entry.parts and entry.parts[0] is None and sum(len(p) for p in pieces) < MIN_LEADING_HOLE_LITERAL:
        return True
    return any(all(piece in message for piece in pieces) for message in builtin_messages())


@functools.lru_cache(maxsize=1)
def catalogues() -> dict[str, dict]:
    """{package: its shipped catalogue as written by :mod:`dsdoctor.messages.generate`}, each file read once per
    process (about 3 MB in all), in :data:`PACKAGES` order; a missing file is left out."""
    out = {}
    for package in PACKAGES:
        path = HERE / f"{package}.json"
        if path.exists():
            out[package] = json.loads(path.read_text())
    return out


@functools.lru_cache(maxsize=1)
def entries() -> tuple[Entry, ...]:
    """Every template of every shipped catalogue, but those that only repeat an interpreter's message
    (:func:`builtin_messages`)."""
    out = []
    for package, data in catalogues().items():
        versions = tuple(data["versions"])
        for t in data["templates"]:
            out.append(Entry(package, t["kind"], t.get("exception", ""), tuple(t["parts"]), t["file"], t["line"],
                             t.get("function", ""), tuple(t["versions"]), versions))
    return tuple(e for e in out if e.kind == "command" or len(e.anchor) >= MIN_ANCHOR and not _generic(e) and
                 sum(c.isalpha() for c in e.anchor) >= MIN_ANCHOR_LETTERS)


@functools.lru_cache(maxsize=1)
def _classes() -> dict[str, list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]]:
    """{class name: [(package, file, its versions, the versions mined), ...]} of every shipped catalogue, the packages
    in :data:`PACKAGES` order (the library nearest the user's code first)."""
    out: dict = {}
    order = {p: i for i, p in enumerate(PACKAGES)}
    for package, data in sorted(catalogues().items(), key=lambda item: order.get(item[0], len(order))):
        for name, c in data.get("classes", {}).items():
            out.setdefault(name, []).append((package, c["file"], tuple(c["versions"]), tuple(data["versions"])))
    return out


def class_defined_by(name: str) -> int:
    """How many mined packages define a module-level class ``name`` (``AdamW``: several)."""
    return len(_classes().get(name, ()))


def class_origin(name: str, named: Callable[[str], bool] | None = None) -> dict | None:
    """Where class ``name`` is defined, as mined (``'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'`` names
    DeepSpeed's ops/adam/cpu_adam.py): ``{"package", "file", "versions", "from": "class"}``, or None. Defined by
    several packages (``DummyOptim``: accelerate and DeepSpeed), the one ``named`` says the log names, else the first
    in :data:`PACKAGES` order (the library nearest the user's code)."""
    found = _classes().get(name)
    if not found:
        return None
    chosen = [f for f in found if named is not None and named(f[0])] or found[:1]
    package, file, versions, mined = chosen[0]
    span = Entry(package, "", "", (), file, 0, "", versions, mined).version_span()
    return {"package": package, "file": file, "function": None, "versions": span, "from": "class"}


@dataclass(frozen=True)
class Found:
    entry: Entry
    whole: bool  # the whole template matched, not only its longest piece
    literal: int  # literal characters matched


#: entries are indexed by the first characters of their anchor, so that a line is tested against the few whose
#: anchor can start at one of its positions
KEY = 6


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, list[Entry]]:
    index: dict[str, list[Entry]] = {}
    for e in entries():
        if e.kind != "command":  # a command is looked up only as a failed command (:func:`command_lookup`)
            index.setdefault(e.anchor[:KEY], []).append(e)
    return index


@functools.lru_cache(maxsize=1)
def _commands() -> tuple[Entry, ...]:
    """The catalogues' ``command`` templates (:func:`command_lookup`'s, kept out of :func:`_index`)."""
    return tuple(e for e in entries() if e.kind == "command")


#: Python's report of a command that failed (subprocess.CalledProcessError's str): the command as repr'd
FAILED_COMMAND = re.compile(r"Command '(?P<cmd>.{1,2000}?)' returned non-zero exit status (?P<code>-?\d{1,4})")


def command_lookup(text: str) -> Found | None:
    """The mined command (kind ``command``: the first argument of a package's subprocess call, ``ssh {} hostname
    -I`` in DeepSpeed's launcher/runner.py) that a failed command's line names (``Command '['ssh node1 hostname
    -I']' returned non-zero exit status 255``: a list's elements joined by spaces), matched whole (its placeholders
    any text); of several, the one with the most literal text. None when the line names no failed command or no
    package runs it."""
    import ast

    found = FAILED_COMMAND.search(text)
    if found is None:
        return None
    command = found.group("cmd")
    if command.startswith(("[", "(")):
        try:
            value = ast.literal_eval(command)
            command = " ".join(str(v) for v in value) if isinstance(value, (list, tuple)) else command
        except (ValueError, SyntaxError):
            pass
    command = SPACES.sub(" ", command).strip()
    best: Found | None = None
    for e in _commands():
        if e.regex.fullmatch(command):
            literal = sum(len(p) for p in e.parts if p is not None)
            if best is None or literal > best.literal:
                best = Found(e, True, literal)
    return best


def lookup(text: str, prefer: str | None = None) -> Found | None:
    """See :func:`_lookup`; a failed command's line (:data:`FAILED_COMMAND`) is first looked up among the mined
    commands (:func:`command_lookup`)."""
    if "returned non-zero exit status" in text:
        found = command_lookup(text)
        if found is not None:
            return found
    return _lookup(text, prefer)


def _lookup(text: str, prefer: str | None = None) -> Found | None:
    """The catalogue's template that ``text`` (one log line, or wrapped lines joined) holds, or None (see the module
    docstring). Of templates that match as well, one of package ``prefer`` (the package whose frame raised it: a
    message ms-swift copied from transformers' Trainer is transformers' in a traceback that ends there)."""
    line = _plain(SPACES.sub(" ", text))
    index = _index()
    seen: set[int] = set()
    best: Found | None = None
    tail = line.rstrip()
    for i, e in ((i, e) for i in range(len(line) - KEY + 1) for e in index.get(line[i:i + KEY], ())):
        if id(e) in seen:
            continue
        if e.anchor in line:
            whole = e.regex.search(line) is not None
            literal = sum(len(p) for p in e.parts if p is not None) if whole else len(e.anchor)
            if not whole:  # the line may end inside the message, after its anchor: "... or flax_model.msgpack found"
                cut = _cut_at_end(e, line)
                if cut >= MIN_PREFIX:
                    whole, literal = True, cut
        elif len(tail) - i >= MIN_PREFIX and e.anchor.startswith(tail[i:]) and \
                sum(c.isalpha() for c in tail[i:]) >= MIN_ANCHOR_LETTERS:  # the line ends inside the message
            whole, literal = True, len(tail) - i
        else:
            continue
        seen.add(id(e))
        candidate = Found(e, whole, literal)
        if best is None or (candidate.whole, candidate.literal, e.package == prefer) > \
                (best.whole, best.literal, best.entry.package == prefer):
            best = candidate
    return best


def _cut_at_end(e: Entry, line: str) -> int:
    """The literal characters of ``e``'s first parts that ``line`` holds up to its end, the line ending inside the
    message after a placeholder (the log, or the terminal's wrap, cut it: "Error no file named pytorch_model.bin,
    tf_model.h5, model.ckpt.index or flax_model.msgpack found" of transformers' "... or {} found in directory {}."):
    the parts before the placeholder as a whole, then the beginning of the literal after it (whole words, or none);
    0 when the line does not end so, or the parts it holds miss the template's anchor."""
    parts, text = e.parts, line.rstrip()
    for k in range(len(parts) - 1, 1, -1):
        if parts[k] is None or parts[k - 1] is not None:
            continue  # the literal after a placeholder, where the line may end
        after = _plain(parts[k]).strip()
        words = after.split(" ")
        for n in range(len(words) - 1, -1, -1):  # the longest beginning of it (whole words) the line ends with
            begun = " ".join(words[:n])
            if begun and not text.endswith(begun):
                continue
            rest = text[:len(text) - len(begun)] if begun else text
            head = "".join(HOLE_RE if p is None else re.escape(_plain(p)) for p in parts[:k - 1])
            if re.search(head + r".{1,300}$", rest):
                literal = sum(len(p) for p in parts[:k] if p is not None) + len(begun)
                kept = "".join(p for p in parts[:k] if p is not None)
                return literal if e.anchor in kept or e.anchor.startswith(begun) and begun else 0
    return 0


#: approximate matching (:func:`approximate`): words of at least this many letters index a template
WORD = re.compile(r"[a-z][a-z_]{3,}")
#: a template is tried approximately only when its anchor has this many characters (short ones match by chance)
MIN_FUZZY_ANCHOR = 40
#: and matches when this share of its anchor's characters is found in the line, in order
FUZZY_COVERAGE = 0.9


@functools.lru_cache(maxsize=1)
def _words() -> dict[str, list[tuple[Entry, int]]]:
    """{word: [(a template whose anchor has it, how many words that anchor has)]}."""
    index: dict[str, list[tuple[Entry, int]]] = {}
    for e in entries():
        if len(e.anchor) >= MIN_FUZZY_ANCHOR and e.kind in ("raise", "assert"):
            words = set(WORD.findall(e.anchor.lower()))
            for word in words:
                index.setdefault(word, []).append((e, len(words)))
    return index


def approximate(text: str) -> Found | None:
    """The raised or asserted message a line holds with another wording than the template's at a few places (a
    message retyped by hand: "DeepSpeed Zreo-3 is not compatible with 'low_cpu_mem_usage=True'"; quotes for
    backticks): the template whose anchor (40 characters or more) shares the most words with the line and of which
    90% of the characters are found in the line in order (``difflib.SequenceMatcher``'s matching blocks). None
    when none does. Used only where :func:`lookup` found nothing."""
    import difflib

    line = _plain(SPACES.sub(" ", text))[:2000]
    lower = line.lower()
    words = set(WORD.findall(lower))
    if len(words) < 4:
        return None
    shared: dict[int, list] = {}  # id(entry) -> [words shared, the anchor's words, entry]
    for word in words:
        for e, total in _words().get(word, ()):
            shared.setdefault(id(e), [0, total, e])[0] += 1
    ranked = sorted(shared.values(), key=lambda item: -item[0] / item[1])
    for count, total, e in ranked[:8]:
        if count < 0.6 * total:
            break
        anchor = e.anchor.lower()
        matcher = difflib.SequenceMatcher(None, lower, anchor, autojunk=False)
        found = sum(block.size for block in matcher.get_matching_blocks())
        if found >= FUZZY_COVERAGE * len(anchor):
            return Found(e, False, found)
    return None


def catalogue_versions() -> dict[str, tuple[str, ...]]:
    """{package: the versions its shipped catalogue was mined from}."""
    return {package: tuple(data["versions"]) for package, data in catalogues().items()}


@functools.lru_cache(maxsize=1)
def _cpp() -> tuple[dict[str, list[tuple[str, str]]], str]:
    """({first characters: [(sentence, library)]}, torch's version) of ``torch_cpp.json`` (torch's C++ messages,
    :func:`dsdoctor.messages.mine.mine_binary`); ({}, "") when it is not shipped."""
    path = HERE / "torch_cpp.json"
    if not path.exists():
        return {}, ""
    data = json.loads(path.read_text())
    index: dict[str, list[tuple[str, str]]] = {}
    for library, sentences in data["libraries"].items():
        for sentence in sentences:
            index.setdefault(sentence[:KEY], []).append((sentence, library))
    return index, ", ".join(data["versions"])


def cpp_origin(text: str) -> dict | None:
    """torch's C++ message ``text`` holds (the longest of its sentences found in the line: "Expected to mark a variable
    ready only once.", "Expected all tensors to be on the same device, but found at least two devices"), as an
    origin ``{"package": "torch", "file": "lib/libtorch_cpu.so", "message": ..., "from": "cpp"}``, or None. These
    messages are in no Python source: TORCH_CHECK and c10d's errors, compiled into torch's libraries."""
    index, versions = _cpp()
    if not index:
        return None
    line = SPACES.sub(" ", text)
    best = None
    for i in range(len(line) - KEY + 1):  # the first message of the line, the longest there
        for sentence, library in index.get(line[i:i + KEY], ()):
            if (best is None or len(sentence) > len(best[0])) and line.startswith(sentence, i):
                best = (sentence, library)
        if best is not None:
            break
    if best is None:
        return None
    return {"package": "torch", "file": f"lib/{best[1]}", "function": None, "line": None, "versions": versions,
            "message": best[0], "from": "cpp"}


#: script names too common to say whose they are (a user's own launch.py is not DeepSpeed's launcher)
COMMON_SCRIPTS = re.compile(r"^(?:_\w*|[a-z0-9]{1,16}|conftest)\.py$")  # __init__.py, launch.py, ...


@functools.lru_cache(maxsize=1)
def _scripts() -> dict[str, list[tuple[str, str]]]:
    """{file name: [(package, path inside it)]} of the files the mined packages run as scripts (the catalogues'
    ``scripts``)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for package, data in catalogues().items():
        for rel in data.get("scripts", ()):
            out.setdefault(rel.rsplit("/", 1)[-1], []).append((package, rel))
    return out


def script_origin(name: str) -> tuple[str, str] | None:
    """(package, its path) of a script file name only one mined package has, when the name says more than a word
    (``zero_to_fp32.py``, which DeepSpeed copies into every checkpoint folder; ``ds_to_universal.py``, which users
    copy): a frame in such a file outside the package is that package's code. None otherwise."""
    if COMMON_SCRIPTS.match(name):
        return None
    found = _scripts().get(name, [])
    return found[0] if len({package for package, _ in found}) == 1 else None
