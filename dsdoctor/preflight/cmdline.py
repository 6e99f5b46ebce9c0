"""Reading a user's launch line without running it: which launcher, how many processes on how many nodes, where the
rendezvous is, which script with which arguments, and which tool config file.

The launchers' own options come from their argparse parsers (``launchers.json``, written by
:mod:`dsdoctor.preflight.generate` from DeepSpeed's ``runner.py``, torch's ``run.py`` and accelerate's
``launch.py``), and the line is parsed by an ``argparse`` parser rebuilt from them, so abbreviations, ``--opt=value``
and the script's position are read exactly as the launcher reads them. Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from dsdoctor.report import DsdoctorError

#: shell operators that end the command: what follows (``| tee log``, ``> out 2>&1``, ``&& echo done``) is not it
_ENDS = re.compile(r"^(\||\|\||&&|;|&|>>?|\d>>?|\d>&\d|&>|<)")
#: words a line may start with before the launcher itself
_PREFIX_WORDS = {"nohup", "exec", "time", "env", "sudo", "srun", "command"}
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_PYTHON = re.compile(r"^(?:.*/)?python(?:\d+(?:\.\d+)?)?$")


@functools.lru_cache(maxsize=1)
def launcher_specs() -> dict:
    """The shipped launcher options (``launchers.json``): {launcher: {version, source, options, positionals}}."""
    return json.loads(Path(__file__).with_name("launchers.json").read_text())


def _typed(name: str | None):
    """A converter that checks the text as the launcher's own ``type=int|float`` does and keeps the text (a
    ``$VAR`` or ``${VAR}`` passes: its value is not known here)."""
    if name not in ("int", "float"):
        return None
    convert = int if name == "int" else float

    def check(text: str) -> str:
        if _VAR.search(text) or _SUBSTITUTION.search(text):
            return text
        try:
            convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {name} value: {text!r}") from None
        return text

    check.__name__ = name
    return check


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage and exits; here it is one line for the caller
        raise ValueError(message)


@functools.lru_cache(maxsize=None)
def _parser(launcher: str) -> argparse.ArgumentParser:
    """An argparse parser with ``launcher``'s options and positionals, every value kept as text."""
    spec = launcher_specs()[launcher]
    parser = _Parser(prog=launcher, add_help=False, allow_abbrev=spec["allow_abbrev"])
    for option in spec["options"]:
        nargs = option["nargs"]
        if nargs == 0:
            parser.add_argument(*option["strings"], dest=option["dest"], action="store_true", default=None)
        elif nargs == 1:
            parser.add_argument(*option["strings"], dest=option["dest"], default=None,
                                type=_typed(option.get("type")))
        else:
            parser.add_argument(*option["strings"], dest=option["dest"], nargs=nargs, default=None)
    if launcher == "torchrun":  # torch.distributed.launch (the legacy module) is run.py's parser plus --use-env
        parser.add_argument("--use-env", "--use_env", dest="use_env", action="store_true", default=None)
    first, rest = spec["positionals"]
    parser.add_argument(first["dest"], nargs=None)
    parser.add_argument(rest["dest"], nargs=argparse.REMAINDER)
    return parser


@dataclass
class Launch:
    """A launch line, read.

    Attributes:
        launcher: ``deepspeed``, ``torchrun``, ``accelerate``, ``python``, ``llamafactory`` or ``axolotl``.
        line: the command's words as given (environment assignments excluded).
        env: the ``VAR=value`` assignments before the command (``CUDA_VISIBLE_DEVICES=0,1``).
        options: the launcher's own options by argparse ``dest``, as text (``{"num_gpus": "4"}``); flags are True.
        script: the training script's path, or a module name when ``module`` is True; None for a tool's CLI.
        module: the script is ``-m module``.
        script_args: the words after the script.
        tool_config: the YAML or JSON file LLaMA-Factory's or axolotl's CLI takes, or a config file the script
            takes as its only argument (``HfArgumentParser.parse_yaml_file``).
        overrides: ``key=value`` words after a LLaMA-Factory YAML (its CLI merges them over the file).
        source: where the line was read from (a shell script's path and line), or "" for the command line.
    """

    launcher: str
    line: list[str]
    env: dict[str, str] = field(default_factory=dict)
    options: dict[str, object] = field(default_factory=dict)
    script: str | None = None
    module: bool = False
    script_args: list[str] = field(default_factory=list)
    tool: str | None = None
    tool_config: str | None = None
    overrides: list[str] = field(default_factory=list)
    source: str = ""
    notes: list[str] = field(default_factory=list)
    dangling: str = ""  # the line after the command, when it starts with an option (a missing backslash)
    cd: str = ""  # the directory the text's `cd` lines moved to before the launch (relative to where it started)

    def to_dict(self) -> dict:
        return {"launcher": self.launcher, "line": self.line, "env": self.env, "options": self.options,
                "script": self.script, "module": self.module, "script_args": self.script_args, "tool": self.tool,
                "tool_config": self.tool_config, "overrides": self.overrides, "source": self.source}


def words_of(text: str) -> list[str]:
    """The words of the first command in a pasted ``text``: backslash-newline continuations joined, ``#`` comments
    dropped, cut at the first shell operator (``|``, ``&&``, ``;``, ``>``, ``2>&1``). Raises DsdoctorError on
    unbalanced quotes."""
    text = re.sub(r"\\\r?\n", " ", text)
    # a command or arithmetic substitution is one word to bash (its value, known only at run time): kept whole
    text = _SUBSTITUTION.sub(lambda m: re.sub(r"[ \t]", _HELD_SPACE, m.group(0)), text)
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars="|&;<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words = list(lexer)
    except ValueError as exc:
        raise DsdoctorError(f"cannot read the launch line: {exc} (unbalanced quotes?)") from None
    out = []
    for word in words:
        if _ENDS.match(word) or word == "\n":
            break
        out.append(word.replace(_HELD_SPACE, " "))
    # a line ending in a redirect's file descriptor ("2" before ">&1") leaves that digit: drop it
    if out and out[-1].isdigit() and len(out) < len(words) and _ENDS.match(words[len(out)] or ""):
        out.pop()
    return out


def _split_env(words: list[str]) -> tuple[dict[str, str], list[str]]:
    env = {}
    i = 0
    while i < len(words):
        word = words[i]
        match = _ASSIGNMENT.match(word)
        if match:
            env[match.group(1)] = match.group(2)
        elif word in _PREFIX_WORDS or (word == "run" and i and words[i - 1] == "uv"):
            pass
        elif word == "uv" and i + 1 < len(words) and words[i + 1] == "run":
            pass
        elif word == "export":  # `export X=1 && ...` is cut at &&; `export X=1 deepspeed` is not a launch
            pass
        else:
            break
        i += 1
    return env, words[i:]


def _argparse(launcher: str, words: list[str]) -> argparse.Namespace:
    try:
        return _parser(launcher).parse_args(words)
    except ValueError as exc:
        message = str(exc)
        if "required" in message:
            raise DsdoctorError(f"the launch line names no script: `{shlex.join([launcher] + words)[:160]}` "
                                f"({launcher} needs the training script after its own options)") from None
        raise DsdoctorError(f"{launcher} would refuse this line: {message}") from None


def _from_launcher(launcher: str, words: list[str], env: dict, line: list[str]) -> Launch:
    ns = _argparse(launcher, words)
    spec = launcher_specs()[launcher]
    first, rest = spec["positionals"]
    script = getattr(ns, first["dest"])
    script_args = list(getattr(ns, rest["dest"]) or [])
    options = {k: v for k, v in vars(ns).items() if v is not None and k not in (first["dest"], rest["dest"])}
    module = bool(options.get("module"))
    unexpanded = []
    while script and _VAR.fullmatch(script) and script_args and not script_args[0].startswith("-"):
        # `torchrun ${DIST_ARGS} train.py`: the variable holds launcher options (its value is not known here)
        unexpanded.append(script)
        script, script_args = script_args[0], script_args[1:]
    if unexpanded:
        options["unexpanded"] = " ".join(unexpanded)
    launch = Launch(launcher=launcher, line=line, env=env, options=options, script=script, module=module,
                    script_args=script_args)
    _tool_from_script(launch)
    return launch


def _tool_from_script(launch: Launch) -> None:
    """A tool's entry point named as the script: ``-m axolotl.cli.train cfg.yml``, LLaMA-Factory's
    ``src/train.py cfg.yaml`` or its ``launcher.py`` (what ``llamafactory-cli`` runs under torchrun)."""
    script, args = launch.script or "", launch.script_args
    name = script if launch.module else Path(script).name
    if launch.module and name.startswith("axolotl.cli"):
        launch.tool = "axolotl"
    elif launch.module and name.startswith(("llamafactory", "llmtuner")):
        launch.tool = "llamafactory"
    elif not launch.module and ("llamafactory" in script or "LLaMA-Factory" in script or "llmtuner" in script
                                or name in ("train_bash.py", "launcher.py") or
                                (name == "train.py" and Path(script).parent.name == "src" and args
                                 and args[0].endswith((".yaml", ".yml", ".json")))):
        launch.tool = "llamafactory"
    if args and not args[0].startswith("-") and (args[0].endswith((".yaml", ".yml", ".json")) or
                                                 launch.tool == "axolotl"):
        launch.tool_config = args[0]
        rest = args[1:]
        launch.overrides = [a for a in rest if "=" in a and not a.startswith("-")]
        launch.script_args = [a for a in rest if a not in launch.overrides]


def parse_launch(command: list[str], nested: bool = False) -> Launch:
    """Read ``command`` (the words after ``dsdoctor preflight --``, or one pasted string holding the whole line)
    into a :class:`Launch`. ``bash run.sh`` / ``sh run.sh`` read the launch line inside the shell script
    (:func:`from_shell_script`).

    Raises:
        DsdoctorError: an empty line, a line with no script, a launcher option the launcher would refuse, a shell
            script that does not exist or holds no launch line.
    """
    words = list(command)
    if len(words) == 1 and not nested and any(c.isspace() for c in words[0].strip()):
        try:  # a block pasted from a terminal, a notebook or a bug report, or one line with prose before it
            return launch_in_text(words[0])
        except DsdoctorError as exc:
            if "no launch line" not in str(exc):
                raise
        # no launcher found in it: read it as one line, for the error that names what is wrong with it
    if len(words) == 1 and (any(c.isspace() for c in words[0]) or "=" in words[0].split("/")[0]):
        words = words_of(words[0])
    env, words = _split_env(words)
    if not words:
        raise DsdoctorError("no launch line: give it after `--`, e.g. "
                            "`dsdoctor preflight -- deepspeed --num_gpus 4 train.py --deepspeed ds.json`")
    line = list(words)
    head, rest = words[0], words[1:]
    name = Path(head).name
    if name in ("bash", "sh", "zsh") and rest:
        return from_shell_script(rest[0], env)
    if name.endswith(".sh") and not rest:
        return from_shell_script(head, env)
    if _PYTHON.match(head) and rest[:1] == ["-m"] and len(rest) > 1:
        module, margs = rest[1], rest[2:]
        if module in ("torch.distributed.run", "torch.distributed.launch"):
            launch = _from_launcher("torchrun", margs, env, line)
            if module == "torch.distributed.launch":
                launch.notes.append("torch.distributed.launch is deprecated: it passes --local_rank to the script "
                                    "unless --use-env (torchrun sets LOCAL_RANK instead)")
            return launch
        if module in ("deepspeed.launcher.runner", "deepspeed"):
            return _from_launcher("deepspeed", margs, env, line)
        if module == "accelerate.commands.launch":
            return _from_launcher("accelerate", margs, env, line)
        launch = Launch(launcher="python", line=line, env=env, script=module, module=True, script_args=margs)
        _tool_from_script(launch)
        return launch
    if _PYTHON.match(head):
        flags = []
        while rest and rest[0].startswith("-") and rest[0] != "-m":
            flags.append(rest.pop(0))
        if not rest:
            raise DsdoctorError(f"the launch line names no script: `{shlex.join(line)[:160]}`")
        launch = Launch(launcher="python", line=line, env=env, script=rest[0], script_args=rest[1:])
        _tool_from_script(launch)
        return launch
    if name in ("deepspeed", "torchrun"):
        return _from_launcher(name, rest, env, line)
    if name == "accelerate":
        if rest[:1] != ["launch"]:
            raise DsdoctorError(f"`accelerate {' '.join(rest[:1])}` is not a launch: give `accelerate launch ...`")
        return _from_launcher("accelerate", rest[1:], env, line)
    if name in ("llamafactory-cli", "lmf"):
        if not rest or rest[0] != "train":
            raise DsdoctorError(f"`{name} {' '.join(rest[:1])}` is not a training run: give `{name} train CONFIG.yaml`")
        if len(rest) < 2:
            raise DsdoctorError(f"`{name} train` names no config file: give `{name} train CONFIG.yaml`")
        return Launch(launcher="llamafactory", line=line, env=env, tool="llamafactory", tool_config=rest[1],
                      overrides=[a for a in rest[2:] if "=" in a], script_args=[a for a in rest[2:] if "=" not in a])
    if name == "axolotl":
        if not rest or rest[0] != "train":
            raise DsdoctorError(f"`axolotl {' '.join(rest[:1])}` is not a training run: give `axolotl train CONFIG.yml`")
        if len(rest) < 2:
            raise DsdoctorError("`axolotl train` names no config file: give `axolotl train CONFIG.yml`")
        return Launch(launcher="axolotl", line=line, env=env, tool="axolotl", tool_config=rest[1],
                      script_args=rest[2:])
    if head.endswith(".py"):
        raise DsdoctorError(f"`{head}` is a script, not a launcher: give the line you run (`python {head} ...`, "
                            f"`torchrun --nproc_per_node N {head} ...`, `deepspeed {head} ...`)")
    raise DsdoctorError(f"`{head[:80]}` is not a launcher dsdoctor reads: give a line starting with deepspeed, "
                        "torchrun, python, accelerate launch, llamafactory-cli train or axolotl train (or bash "
                        "SCRIPT.sh)")


_VAR = re.compile(r"\$\{([A-Za-z_]\w*)(?::-([^}]*))?\}|\$([A-Za-z_]\w*)")
#: bash's arithmetic and command substitutions: ``$((29500 + RANDOM % 100))``, ``$(shuf -i 20000-30000 -n 1)``
_SUBSTITUTION = re.compile(r"\$\(\([^()\n]{0,300}\)\)|\$\([^()\n]{0,300}\)")
_HELD_SPACE = "\x00"


def from_shell_script(path: str, env: dict | None = None) -> Launch:
    """The launch line inside a shell script (``bash finetune.sh``, as ChatGLM's and Qwen's repositories ship):
    see :func:`launch_in_text`. Raises DsdoctorError: the file cannot be read, or holds no launch line."""
    from dsdoctor.files import read_input, shown

    raw = read_input(path, "the shell script", 1 << 20, what="shell script")
    return launch_in_text(raw.decode("utf-8", errors="replace"), env, shown(path))


#: what a paste wraps the command in: code fences, a notebook's ``!`` and ``%`` magics, shell prompts
#: (``(env) user@host:~# ``, ``$ ``, the ``> `` of a continuation)
_FENCE = re.compile(r"```(?:[\w-]*[ \t]*$)?", re.M)  # a fence's language tag only when nothing follows it
_PROMPT = re.compile(r"^\s*(?:\([\w.-]+\)\s*)*(?:[\w.-]+@[\w.-]+:[^\s#$]*\s?[#$]\s+|[$>]\s+|!)")


def launch_in_text(text: str, env: dict | None = None, label: str = "the pasted text") -> Launch:
    """The first launch line in ``text``: a shell script, or a block pasted from a terminal, a notebook or a bug
    report. Code fences, backticks, prompts and notebook magics are dropped; backslash continuations joined (a
    comment line inside one ends the command, as in the shell); the text's plain assignments (``MODEL=...``,
    ``export NPROC=4``) substituted into the line (``$VAR``, ``${VAR}``, ``${VAR:-default}``; a command
    substitution such as ``$(nvidia-smi ...)`` is left as written). A launcher preceded by prose on its line
    (``the command is deepspeed ...``) is found too. Raises DsdoctorError when no line starts a launcher."""
    variables = dict(env or {})
    last_error = None
    cd = ""
    text = _FENCE.sub("\n", text).replace("`", " ")
    lines = []
    for raw in text.splitlines():
        if raw.lstrip().startswith("%"):
            continue
        lines.append(_PROMPT.sub("", raw))
    joined = _continued(lines)
    for number, line in enumerate(joined, start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        moved = re.match(r"^cd\s+(\S+)\s*(?:;\s*)?$", stripped)
        if moved:  # the launch that follows runs there
            cd = _moved(cd, _substitute(moved.group(1), variables))
            continue
        assignment = re.match(r"^(?:export\s+)?([A-Za-z_]\w*)=(.*)$", stripped)
        if assignment and not _LAUNCH_SEARCH.search(stripped):
            if "$(" in assignment.group(2) or "`" in assignment.group(2):  # computed when the script runs
                variables.pop(assignment.group(1), None)
                continue
            try:
                value = shlex.split(_substitute(assignment.group(2), variables), comments=True)
            except ValueError:
                value = []
            variables[assignment.group(1)] = value[0] if len(value) == 1 else " ".join(value)
            continue
        found = _LAUNCH_SEARCH.search(stripped + " ")
        if found:
            # from the launcher to the end of the line as written (a trailing "\\ " is bash's escaped space, a word);
            # a lone backslash at the very end of the text continues nothing and is dropped
            line = re.sub(r"\\$", "", line.lstrip()[found.start():].rstrip("\r\n"))
            below = next((text for text in joined[number:] if text.strip() and not text.lstrip().startswith("#")), "")
            options_below = re.match(r"^\s*--?\w", below)
            try:
                launch = parse_launch([_substitute(line, variables)], nested=True)
            except DsdoctorError as exc:
                if "names no script" not in str(exc) or not options_below:
                    raise
                # a paste whose backslashes Markdown ate: the launcher on a line of its own, its options on the
                # lines below, each starting with "-" (or the script's path)
                follow = number
                while follow < len(joined) and re.match(r"^\s*(--?\w|\S+\.(py|ya?ml|json)\b)", joined[follow]):
                    line += " " + joined[follow].strip().rstrip("\\ \t")
                    follow += 1
                launch = parse_launch([_substitute(line, variables)], nested=True)
                launch.notes.append(f"{label}: the options below line {number} were read as part of it (the "
                                    "paste has no backslashes at the line ends)")
            else:
                if options_below:  # the shell ends the command here: what follows is another command
                    launch.dangling = below.strip()[:160]
            if not _runs_training(launch):  # prose ("supports torchrun and deepspeed"), or a preprocessing step
                last_error = DsdoctorError(f"{label} line {number}: `{line[:80]}` does not start a training run")
                continue
            before = re.search(r"\bcd\s+(\S+)\s*(?:&&|;)\s*$", stripped[:found.start()])
            if before:  # `cd finetune && deepspeed ...`
                cd = _moved(cd, _substitute(before.group(1), variables))
            launch.cd = cd
            launch.env = {**(env or {}), **launch.env}
            if label != "the pasted text" or sum(1 for t in joined if t.strip()) > 1:
                launch.source = f"{label} line {number}"
                launch.notes.append(f"launch line read from {label} line {number}")
            return launch
    if last_error is not None:
        raise last_error
    raise DsdoctorError(f"{label}: no launch line in it (no line starts with deepspeed, torchrun, python "
                        "SCRIPT.py, accelerate launch, llamafactory-cli train or axolotl train)")


def _moved(cd: str, target: str) -> str:
    """The directory after ``cd target`` from ``cd`` (both relative to where the text started; an absolute
    ``target`` replaces it)."""
    import posixpath

    return posixpath.normpath(target if target.startswith(("/", "~")) else posixpath.join(cd or ".", target))


def _continued(lines: list[str]) -> list[str]:
    """``lines`` with backslash continuations joined as the shell joins them: a line ending in a backslash continues
    on the next (a backslash followed by a space is an escaped space instead, and the command ends there, as in
    bash); a comment line never does (its backslash is part of the comment). The result has one entry per input line (a joined line's followers become empty), so
    line numbers stay the text's."""
    out: list[str] = []
    open_at = None
    for line in lines:
        if open_at is not None and line.lstrip().startswith("#"):
            open_at = None  # a comment inside a continuation ends the command there
        if open_at is not None:
            out[open_at] += " " + re.sub(r"\\$", "", line.rstrip("\r\n"))
            out.append("")
            if not re.search(r"\\$", line.rstrip("\r\n")):
                open_at = None
            continue
        out.append(line)
        if not line.lstrip().startswith("#") and re.search(r"\\$", line.rstrip("\r\n")):
            out[-1] = re.sub(r"\\$", "", line.rstrip("\r\n"))
            open_at = len(out) - 1
    return out


#: module entry points that prepare data and do not train (a paste often runs them first)
_NOT_TRAINING = ("axolotl.cli.preprocess", "axolotl.cli.merge_lora", "axolotl.cli.inference")


def _runs_training(launch: Launch) -> bool:
    """Whether ``launch`` starts a script at all: a tool's config, a module, a ``.py`` file, a path or an
    unexpanded variable, and not a data preparation step (:data:`_NOT_TRAINING`). Prose that names a launcher
    ("finetune.py supports torchrun and deepspeed") reads as a launcher whose "script" is a word."""
    if launch.tool_config:
        return not (launch.module and str(launch.script).startswith(_NOT_TRAINING))
    script = launch.script or ""
    if launch.module:
        return not script.startswith(_NOT_TRAINING)
    return script.endswith(".py") or "/" in script or script.startswith("$") or script.strip() == "" or \
        script.endswith(".sh")


#: a launcher's first word where a line starts it (after environment assignments), or after prose on the line
_LAUNCH_SEARCH = re.compile(r"(?:(?<=\s)|^|(?<=[^\x00-\x7f]))(?:[A-Za-z_]\w*=\S*\s+)*(?:(?:nohup|exec|time|uv run|srun)\s+)*"
                            r"(?:deepspeed\s|torchrun\s|accelerate\s+launch\s|llamafactory-cli\s+train\s|"
                            r"axolotl\s+train\s|(?:\S*/)?python\d*(?:\.\d+)?\s+(?:-u\s+)?(?:-m\s+\S+|\S+\.py))")


def _substitute(text: str, variables: dict) -> str:
    def value(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        if name in variables:
            return variables[name]
        if m.group(2) is not None:
            return m.group(2)
        return m.group(0)  # not set in the text: unknown here, left as written

    return _VAR.sub(value, text)
