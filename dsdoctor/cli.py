"""The ``dsdoctor`` command line: a click group; each command lives in ``dsdoctor/commands/<name>.py``.

Every command accepts ``--json PATH|-``, ``--format table|json|markdown`` and ``--fail-on
error|warning|info`` (added by :func:`report_command`). Exit codes: 0 nothing at or above ``--fail-on``,
1 findings at or above it, 2 bad usage or input (one clear line on stderr, never a traceback).
"""

from __future__ import annotations

import errno
import functools
import math
import os
import re
import sys
from pathlib import Path
from typing import Callable

import click

from dsdoctor import __version__
from dsdoctor.report import DsdoctorError, Report


#: control characters (C0, DEL, C1) and the Unicode line and paragraph separators: never printed raw in an error line
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` with every control character escaped (``\\n``, ``\\x1b``), so that an error quoting a user's key
    or path stays one line on the terminal and cannot move the cursor or change colours."""
    def escape(m: re.Match) -> str:
        c = m.group(0)
        named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c)
        return named or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")

    return _CONTROL.sub(escape, text)


def _emit(report: Report, fmt: str, json_path: str | None) -> None:
    from dsdoctor import render
    from dsdoctor.files import write_output

    if json_path is not None:
        text = render.render_json(report)
        if json_path == "-":
            click.echo(text)
        else:
            write_output(json_path, text + "\n", "--json")
    if json_path == "-":
        return  # stdout carries the JSON alone, so it can be piped
    if fmt == "json":
        click.echo(render.render_json(report))
    elif fmt == "markdown":
        click.echo(render.render_markdown(report), nl=False)
    else:
        render.render_table(report)


def _emit_error(command: str, message: str, json_path: str | None) -> None:
    """With ``--json``, a refused input still gives JSON (exit 2): ``{"command", "dsdoctor_version", "error",
    "findings": [], "result": {}}`` on stdout for ``-``, else in PATH, so a script reading it never gets an empty
    document. Writing it is best effort: the one-line error on stderr is already out."""
    if json_path is None:
        return
    import json

    text = json.dumps({"command": command, "dsdoctor_version": __version__, "error": message, "findings": [],
                       "result": {}}, indent=2)
    try:
        if json_path == "-":
            click.echo(text)
        else:
            Path(json_path).write_text(text + "\n")
    except (OSError, ValueError):
        pass


def guard_outputs(kwargs: dict, inputs: tuple[str, ...], outputs: tuple[str, ...], json_path: str | None) -> None:
    """Refuse, before any work, an output path that is one of the command's inputs (or a file inside an input
    directory such as a model directory), two outputs on one file, and an output whose directory is not writable.

    ``inputs`` and ``outputs`` are the command's parameter names (``data``, ``fix``); their option names come from
    the click context. Raises DsdoctorError naming both options."""
    from dsdoctor.files import files_of, same_file, shown

    ctx = click.get_current_context(silent=True)
    names = {p.name: (p.opts[0] if isinstance(p, click.Option) else
                      (p.metavar or p.name.upper()).split("|")[0].split()[0].strip(".[]"))
             for p in (ctx.command.params if ctx is not None else [])}
    given_in = [(names.get(n, n), v) for n in inputs
                for v in (kwargs.get(n) if isinstance(kwargs.get(n), (list, tuple)) else [kwargs.get(n)])
                if isinstance(v, str) and v != "-"]
    given_out = [(names.get(n, n), kwargs[n]) for n in outputs if isinstance(kwargs.get(n), str)]
    if json_path not in (None, "-"):
        given_out.append(("--json", json_path))
    for i, (option, out_path) in enumerate(given_out):
        for in_option, in_path in given_in:
            for path in files_of(in_path):
                if same_file(out_path, path):
                    what = in_option if str(path) == str(Path(in_path).expanduser()) else f"{path.name} in {in_option}"
                    raise DsdoctorError(f"{option} {shown(out_path)}: that is {what} itself; dsdoctor never "
                                        "overwrites its inputs")
        for other_option, other in given_out[:i]:
            if os.path.abspath(os.path.expanduser(other)) == os.path.abspath(os.path.expanduser(out_path)) \
                    or same_file(other, out_path):
                raise DsdoctorError(f"{option} {shown(out_path)}: also given to {other_option}; give each its own file")
        if option in ("--json",) or option in [names.get(n, n) for n in outputs]:
            target = Path(out_path).expanduser()
            if not out_path.strip() or target.is_dir():
                raise DsdoctorError(f"{option} {shown(out_path)!r}: give a file name to write to")
            try:
                parent = target.resolve().parent
            except (OSError, RuntimeError) as exc:
                raise DsdoctorError(f"cannot write {option} {shown(out_path)}: {getattr(exc, 'strerror', None) or exc}") \
                    from None
            if not parent.is_dir() or not os.access(parent, os.W_OK):
                raise DsdoctorError(f"cannot write {option} {shown(out_path)}: {shown(str(parent))} is not a writable "
                                    "directory")
            if option == "--json" and target.is_file() and not _our_report(target):
                # `dsdoctor explain --json logs/*.log` takes the first log as --json's PATH: never write over it
                raise DsdoctorError(f"--json {shown(out_path)}: that file exists and is not a dsdoctor report; "
                                    "dsdoctor never overwrites it (--json takes a path: give a new file, or "
                                    "--json - for standard output)")


def _our_report(path: Path) -> bool:
    """Whether ``path`` holds a dsdoctor JSON report (or nothing): the only files ``--json`` writes over."""
    import json

    try:
        if path.stat().st_size == 0:
            return True
        with path.open("rb") as f:
            head = f.read(1 << 20)
        data = json.loads(head)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "dsdoctor_version" in data and "command" in data


def _stdout_gone() -> None:
    """After a broken pipe (``dsdoctor rules | head -1``): point stdout at /dev/null so the interpreter's final flush
    does not fail again (the recipe of Python's signal module documentation, "Note on SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def report_command(func: Callable[..., Report] | None = None, *, inputs: tuple[str, ...] = (),
                   outputs: tuple[str, ...] = ()):
    """Wrap a function returning a Report into a command body with the shared options and exit codes.

    ``inputs``: the parameters that name files or directories the command reads; ``outputs``: those it writes
    (besides ``--json``). No output may be an input (:func:`guard_outputs`), checked before the command runs. Usable
    bare (``@report_command``) or with arguments (``@report_command(inputs=("config",), outputs=("fix",))``)."""
    if func is None:
        return functools.partial(report_command, inputs=inputs, outputs=outputs)

    @click.option("--json", "json_path", metavar="PATH|-", default=None,
                  help="Also write the report as JSON to PATH ('-' prints only the JSON on stdout).")
    @click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table",
                  show_default=True, help="How to print the report on stdout.")
    @click.option("--fail-on", type=click.Choice(["error", "warning", "info"]), default="error",
                  show_default=True, help="Exit 1 when a finding is at or above this severity.")
    @functools.wraps(func)
    def wrapper(*args, json_path: str | None, fmt: str, fail_on: str, **kwargs) -> None:
        from dsdoctor.launch import stop_on_termination

        json_checked = None  # where an error's JSON may go: never a path guard_outputs refused (a user's input)
        try:
            with stop_on_termination():  # SIGTERM/SIGHUP: a message and 128 + signal, at any point of the command
                if json_path == "-":
                    json_checked = json_path
                guard_outputs(kwargs, inputs, outputs, json_path)  # found before a long run, not after it
                json_checked = json_path
                report = func(*args, **kwargs)
                try:
                    _emit(report, fmt, json_path)
                    sys.stdout.flush()
                except BrokenPipeError:  # the reader stopped reading (| head): not an error of ours
                    _stdout_gone()
                except OSError as exc:
                    if exc.errno in (errno.ENOSPC, errno.EIO, errno.EDQUOT):
                        raise DsdoctorError(f"cannot write the report to stdout: {exc.strerror}") from None
                    raise
        except DsdoctorError as exc:
            click.echo(f"dsdoctor: error: {one_line(str(exc))}", err=True)
            _emit_error(func.__name__.replace("_", "-"), one_line(str(exc)), json_checked)
            sys.exit(2)
        except KeyboardInterrupt as exc:
            signum = getattr(exc, "signum", None)
            click.echo(f"dsdoctor: stopped by {exc} (every process it started is stopped)" if signum
                       else "dsdoctor: interrupted", err=True)
            sys.exit(128 + signum if signum else 130)
        except Exception as exc:  # an internal error is still one line unless asked for the traceback
            if os.environ.get("DSDOCTOR_DEBUG"):
                raise
            click.echo(f"dsdoctor: internal error: {type(exc).__name__}: {one_line(str(exc))[:500]} "
                       f"(set DSDOCTOR_DEBUG=1 for the traceback)", err=True)
            sys.exit(2)
        sys.exit(report.exit_code(fail_on))

    return wrapper


class FiniteFloat(click.ParamType):
    """A float option that refuses NaN and infinity (``float("nan")`` passes every comparison-based range check, so
    ``click.FloatRange(min=1)`` accepts ``--timeout nan``), with an optional closed range."""

    name = "number"

    def __init__(self, min: float | None = None, max: float | None = None, min_open: bool = False):
        self.min, self.max, self.min_open = min, max, min_open

    def convert(self, value, param, ctx):
        if isinstance(value, float) and math.isfinite(value):
            number = value
        else:
            try:
                number = float(value)
            except (TypeError, ValueError, OverflowError):
                self.fail(f"{one_line(str(value))[:40]!r} is not a number", param, ctx)
            if not math.isfinite(number):
                self.fail(f"{one_line(str(value))[:40]!r} is not a finite number", param, ctx)
        if self.min is not None and (number < self.min or (self.min_open and number == self.min)):
            self.fail(f"{number:g} is {'not above' if self.min_open else 'below'} {self.min:g}", param, ctx)
        if self.max is not None and number > self.max:
            self.fail(f"{number:g} is above {self.max:g}", param, ctx)
        return number


class DsdoctorGroup(click.Group):
    """click's group, with usage errors as one line ``dsdoctor: error: ...`` and exit code 2 (click's own
    standalone mode prints the usage block first)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            return super().main(args, prog_name or "dsdoctor", complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help() if exc.ctx else "")
            sys.exit(0)
        except click.UsageError as exc:
            where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
            message = f"{one_line(exc.format_message())}{where}"
            click.echo(f"dsdoctor: error: {message}", err=True)
            given = list(sys.argv[1:] if args is None else args)
            given = given[:given.index("--")] if "--" in given else given  # a launch line's own --json is not ours
            if any(a == "--json=-" for a in given) or any(a == "--json" and b == "-" for a, b in zip(given, given[1:])):
                # a script reading `--json -` gets a document for a refused option too, as for any refused input
                _emit_error(" ".join(["dsdoctor", *given])[:500], message, "-")
            sys.exit(2)
        except click.ClickException as exc:
            click.echo(f"dsdoctor: error: {one_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("dsdoctor: interrupted", err=True)
            sys.exit(130)


#: command name -> module in dsdoctor/commands holding a click command of that name; imported only when run,
#: so ``dsdoctor check`` does not pay for ``smoke``'s imports
COMMANDS = {"check": "dsdoctor.commands.check", "data": "dsdoctor.commands.data", "env": "dsdoctor.commands.env",
            "estimate": "dsdoctor.commands.estimate", "explain": "dsdoctor.commands.explain",
            "hang": "dsdoctor.commands.hang",
            "nccl": "dsdoctor.commands.nccl",
            "preflight": "dsdoctor.commands.preflight",
            "rules": "dsdoctor.commands.rules",
            "smoke": "dsdoctor.commands.smoke"}


class LazyGroup(DsdoctorGroup):
    """Commands are imported on first use (click's documented lazy-loading pattern)."""

    def resolve_command(self, ctx, args):
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:
            import difflib

            close = difflib.get_close_matches(name, sorted(COMMANDS), n=1, cutoff=0.5)
            hint = f"; did you mean `dsdoctor {close[0]}`?" if close else f"; commands: {', '.join(sorted(COMMANDS))}"
            raise click.UsageError(f"no such command {one_line(name)[:60]!r}{hint}", ctx)
        return super().resolve_command(ctx, args)

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        import importlib

        return getattr(importlib.import_module(COMMANDS[name]), name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dsdoctor")
def cli() -> None:
    """Find DeepSpeed fine-tuning pitfalls before the long run."""


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="dsdoctor")


if __name__ == "__main__":
    main()
