"""The ``dsdoctor`` command line: a click group; each command lives in ``dsdoctor/commands/<name>.py``.

Every command accepts ``--json PATH|-``, ``--format table|json|markdown`` and ``--fail-on
error|warning|info`` (added by :func:`report_command`). Exit codes: 0 nothing at or above ``--fail-on``,
1 findings at or above it, 2 bad usage or input (one clear line on stderr, never a traceback).
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Callable

import click

from dsdoctor import __version__
from dsdoctor.report import DsdoctorError, Report


def _emit(report: Report, fmt: str, json_path: str | None) -> None:
    from dsdoctor import render

    if json_path is not None:
        text = render.render_json(report)
        if json_path == "-":
            click.echo(text)
        else:
            try:
                Path(json_path).write_text(text + "\n", encoding="utf-8")
            except OSError as exc:
                raise DsdoctorError(f"cannot write --json {json_path}: {exc.strerror or exc}") from None
    if json_path == "-":
        return  # stdout carries the JSON alone, so it can be piped
    if fmt == "json":
        click.echo(render.render_json(report))
    elif fmt == "markdown":
        click.echo(render.render_markdown(report), nl=False)
    else:
        render.render_table(report)


def report_command(func: Callable[..., Report]) -> Callable[..., None]:
    """Wrap a function returning a Report into a command body with the shared options and exit codes."""

    @click.option("--json", "json_path", metavar="PATH|-", default=None,
                  help="Also write the report as JSON to PATH ('-' prints only the JSON on stdout).")
    @click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table",
                  show_default=True, help="How to print the report on stdout.")
    @click.option("--fail-on", type=click.Choice(["error", "warning", "info"]), default="error",
                  show_default=True, help="Exit 1 when a finding is at or above this severity.")
    @functools.wraps(func)
    def wrapper(*args, json_path: str | None, fmt: str, fail_on: str, **kwargs) -> None:
        ctx = click.get_current_context(silent=True)
        if ctx is not None:  # a command can refuse a --json path that is one of its inputs
            ctx.meta["dsdoctor.json_path"] = json_path
        try:
            if json_path not in (None, "-"):  # found before a long run, not after it
                parent = Path(json_path).expanduser().resolve().parent
                if not parent.is_dir() or not os.access(parent, os.W_OK):
                    raise DsdoctorError(f"cannot write --json {json_path}: {parent} is not a writable directory")
            report = func(*args, **kwargs)
            _emit(report, fmt, json_path)
        except DsdoctorError as exc:
            click.echo(f"dsdoctor: error: {exc}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("dsdoctor: interrupted", err=True)
            sys.exit(130)
        except Exception as exc:  # an internal error is still one line unless asked for the traceback
            if os.environ.get("DSDOCTOR_DEBUG"):
                raise
            click.echo(f"dsdoctor: internal error: {type(exc).__name__}: {exc} "
                       f"(set DSDOCTOR_DEBUG=1 for the traceback)", err=True)
            sys.exit(2)
        sys.exit(report.exit_code(fail_on))

    return wrapper


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
            click.echo(f"dsdoctor: error: {exc.format_message()}{where}", err=True)
            sys.exit(2)
        except click.ClickException as exc:
            click.echo(f"dsdoctor: error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("dsdoctor: interrupted", err=True)
            sys.exit(130)


#: command name -> module in dsdoctor/commands holding a click command of that name; imported only when run,
#: so ``dsdoctor check`` does not pay for ``smoke``'s imports
COMMANDS = {"check": "dsdoctor.commands.check", "env": "dsdoctor.commands.env",
            "estimate": "dsdoctor.commands.estimate", "explain": "dsdoctor.commands.explain",
            "nccl": "dsdoctor.commands.nccl",
            "rules": "dsdoctor.commands.rules",
            "smoke": "dsdoctor.commands.smoke"}


class LazyGroup(DsdoctorGroup):
    """Commands are imported on first use (click's documented lazy-loading pattern)."""

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
