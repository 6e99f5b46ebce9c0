"""Regenerate ``launchers.json``: the command-line options of the launchers a user's line starts with, read off the
launchers' own argparse parsers (``python -m dsdoctor.preflight.generate``), as ``dsdoctor/schemas/generate.py``
reads DeepSpeed's config models. ``tests/test_preflight.py`` regenerates it from the installed packages and compares.

- ``deepspeed``: ``deepspeed/launcher/runner.py`` ``parse_args`` (its parser is built inside the function: it is
  captured when ``parse_args`` is called);
- ``torchrun``: ``torch/distributed/run.py`` ``get_args_parser``;
- ``accelerate launch``: ``accelerate/commands/launch.py`` ``launch_command_parser``.

For each option: its strings, ``dest``, its ``type`` when argparse converts it (int, float), and how many values it
takes (0 for a flag: ``store_true``,
``store_const``, torchrun's ``check_env``), ``"?"``, ``"*"``, ``"+"`` or 1; for each positional, its ``dest`` and
``nargs`` (the script, then ``argparse.REMAINDER`` for the script's own arguments)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

OUT = Path(__file__).with_name("launchers.json")


def _describe(parser: argparse.ArgumentParser) -> dict:
    options, positionals = [], []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        nargs = action.nargs
        if nargs is None:
            nargs = 1
        if not action.option_strings:
            positionals.append({"dest": action.dest, "nargs": nargs})
            continue
        entry = {"strings": list(action.option_strings), "dest": action.dest, "nargs": nargs}
        if action.type in (int, float):  # the launcher refuses "--num_gpus abc" before any rank starts
            entry["type"] = action.type.__name__
        options.append(entry)
    return {"options": options, "positionals": positionals, "allow_abbrev": parser.allow_abbrev}


def _deepspeed_parser() -> argparse.ArgumentParser:
    from deepspeed.launcher import runner

    captured = []
    original = argparse.ArgumentParser.parse_args

    def capture(self, args=None, namespace=None):
        captured.append(self)
        raise SystemExit(0)

    argparse.ArgumentParser.parse_args = capture
    try:
        try:
            runner.parse_args(["train.py"])
        except SystemExit:
            pass
    finally:
        argparse.ArgumentParser.parse_args = original
    return captured[0]


def generate() -> dict:
    """{launcher: {"version", "source", "options", "positionals", "allow_abbrev"}} from the installed packages."""
    import accelerate
    import deepspeed
    import torch
    from accelerate.commands.launch import launch_command_parser
    from torch.distributed.run import get_args_parser

    return {
        "deepspeed": {"version": deepspeed.__version__, "source": "deepspeed/launcher/runner.py parse_args",
                      **_describe(_deepspeed_parser())},
        "torchrun": {"version": torch.__version__.split("+")[0], "source": "torch/distributed/run.py get_args_parser",
                     **_describe(get_args_parser())},
        "accelerate": {"version": accelerate.__version__,
                       "source": "accelerate/commands/launch.py launch_command_parser",
                       **_describe(launch_command_parser())},
    }


def main() -> None:
    OUT.write_text(json.dumps(generate(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
