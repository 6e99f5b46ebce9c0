"""``dsdoctor check CONFIG``: DeepSpeed config and batch-math validation before the model loads.

Static by default (no torch or DeepSpeed import: a key schema generated from DeepSpeed's own pydantic models is
read instead); ``--deep`` also builds DeepSpeed's own ``DeepSpeedConfig`` from the file.
"""

from __future__ import annotations

import json
import os

import click

from dsdoctor.cli import report_command
from dsdoctor.report import DsdoctorError, Finding, Report


#: the largest --world-size taken (a million GPUs); 10**400 is a usage error, not an overflow in the batch math
MAX_WORLD_SIZE = 1 << 20


def resolve_world_size(option: int | None, gpus: list) -> tuple[int, str]:
    """The data-parallel world size and where it came from: ``--world-size``, the launcher's ``WORLD_SIZE``,
    the visible GPUs, else 1.

    Raises:
        DsdoctorError: a world size below 1, or a ``WORLD_SIZE`` that is not a positive integer.
    """
    if option is not None:
        if option < 1:
            raise DsdoctorError(f"--world-size must be at least 1, got {option}")
        return option, "--world-size"
    env = os.environ.get("WORLD_SIZE")
    if env:
        import re

        if not re.fullmatch(r"\s*[0-9]{1,7}\s*", env) or int(env) < 1:
            shown = env if len(env) <= 20 else env[:20] + "..."
            raise DsdoctorError(f"WORLD_SIZE={shown!r} in the environment is not a positive integer")
        return int(env), "WORLD_SIZE from the launcher environment"
    if gpus:
        return len(gpus), f"{len(gpus)} visible GPU(s) (NVML)"
    return 1, "no --world-size, no WORLD_SIZE from a launcher, no visible GPU"


def resolve_transformers(option: str | None) -> tuple[str | None, str]:
    """The transformers version of the training run, and where it came from: ``--transformers X.Y[.Z]``, or
    ``installed`` for the one installed here; ``(None, "")`` when not given.

    Raises:
        DsdoctorError: a value that is no version.
    """
    if option is None:
        return None, ""
    from dsdoctor.checks.hf_trainer import parse_version

    if option.strip().lower() == "installed":
        from dsdoctor.checks.deepspeed_config import installed_version

        version = installed_version("transformers")
        if not version:
            raise DsdoctorError("--transformers installed: transformers is not installed here; give the version the "
                                "run uses (--transformers 4.57.6)")
        return version, "--transformers installed"
    version = parse_version(option)
    if version is None or len(option) > 40:
        raise DsdoctorError(f"--transformers {option[:40]!r}: not a version (give it as X.Y or X.Y.Z, e.g. 4.57.6, "
                            "or installed)")
    return ".".join(map(str, version)), "--transformers"


#: the largest CONFIG read a second time as YAML to tell a training tool's file (those are a few kilobytes)
MAX_TRAINING_FILE_BYTES = 64 << 10


def _training_fields(schema: dict | None = None):
    """A function returning the TrainingArguments field names (the schema's, and those other transformers versions
    have), computed when first called: most files are told apart by their keys alone."""
    found: list[set[str]] = []

    def fields() -> set[str]:
        if not found:
            from dsdoctor.checks.deepspeed_config import load_schema
            from dsdoctor.checks.hf_trainer import FIELD_VERSIONS

            known = schema if schema is not None else load_schema()[0]
            found.append(set((known.get("training_arguments") or {}).get("fields", [])) | set(FIELD_VERSIONS))
        return found[0]

    return fields


def read_config_or_training_file(config_path: str, schema: dict | None = None):
    """The ds_config at ``config_path`` (:func:`dsdoctor.configfile.read_ds_config_file`), refusing a training
    tool's file given in its place (a LLaMA-Factory train.yaml, an axolotl YAML, an accelerate config, a
    TrainingArguments JSON) with one line that names the DeepSpeed config it points to
    (:func:`dsdoctor.checks.deepspeed_config.training_file.training_file_message`).

    Raises:
        DsdoctorError: the file cannot be read or parsed, or it is a training tool's file.
    """
    from dsdoctor.checks.deepspeed_config.training_file import training_file_message
    from dsdoctor.configfile import read_ds_config_file, read_hf_args

    from dsdoctor.checks.deepspeed_config.training_file import MARKERS

    def small() -> bool:  # a training tool's file is a few kilobytes; YAML-parsing a 1 MiB junk file takes seconds
        try:
            return os.path.getsize(config_path) <= MAX_TRAINING_FILE_BYTES
        except (OSError, ValueError):
            return False

    try:
        parsed = read_ds_config_file(config_path, "CONFIG")
    except DsdoctorError:
        values = None
        if small():
            try:  # YAML that is not HJSON either (lists, nested blocks): read it as YAML, with the same caps
                values = read_hf_args(config_path, "CONFIG")
            except DsdoctorError:
                values = None
        message = training_file_message(values, config_path, _training_fields(schema)) if values is not None else None
        if message:
            raise DsdoctorError(message) from None
        raise
    values = parsed.config
    if parsed.json_error is not None and small() and MARKERS & set(values):
        # HJSON only: a YAML file reads as HJSON too, with its nested blocks garbled; read it as YAML
        try:
            values = read_hf_args(config_path, "CONFIG")
        except DsdoctorError:
            values = parsed.config
    message = training_file_message(values, config_path, _training_fields(schema))
    if message:
        raise DsdoctorError(message)
    return parsed


def run_check(config_path: str, world_size: int | None = None, launch: str = "engine", hf_args: str | None = None,
              gpu: str | None = None, model: str | None = None, client_optimizer: bool = False,
              fix: str | None = None, deep: bool = False, gpu_cc: str | None = None,
              transformers: str | None = None, hf_values: dict | None = None, hf_label: str = "") -> Report:
    """Check a ds_config file; the body of ``dsdoctor check``.

    Returns a Report whose ``result`` holds ``world_size`` (and its source), ``launch``, ``effective`` (the config
    after the Trainer's fills and DeepSpeed's derivation and defaults), ``batch`` (the derived triple),
    ``provenance`` (user / default / derived / auto per value), ``changes`` (what ``--fix`` writes) and
    ``schema``. ``transformers``: the transformers version of the training run ("4.57.6", or "installed": the one
    here), for the TrainingArguments fields that depend on it (HF205). ``hf_values``: TrainingArguments values
    already read (``dsdoctor preflight`` reads them off the launch line), in place of ``hf_args``'s file, named
    ``hf_label`` in messages. Raises DsdoctorError on bad input (one line, exit 2).
    """
    from dsdoctor.checks.deepspeed_config import CheckContext, check_config, load_schema
    from dsdoctor.configfile import read_hf_args
    from dsdoctor.files import write_output
    from dsdoctor.hardware import gpu_from_name, visible_gpus

    if client_optimizer and launch == "trainer":
        raise DsdoctorError("--client-optimizer goes with --launch engine (under the Trainer, an optimizer block "
                            "in the config decides it)")
    if (hf_args is not None or hf_values is not None) and launch != "trainer":
        raise DsdoctorError("--hf-args goes with --launch trainer")
    run_transformers, transformers_source = resolve_transformers(transformers)
    if run_transformers is not None and launch != "trainer":
        raise DsdoctorError("--transformers goes with --launch trainer (it says which TrainingArguments the run has)")
    schema, schema_note = load_schema()
    parsed = read_config_or_training_file(config_path, schema)
    config = parsed.config
    args = read_hf_args(hf_args) if hf_args is not None else hf_values
    if args is not None:
        from dsdoctor.checks.deepspeed_config.training_file import hf_args_message

        message = hf_args_message(args, hf_args or hf_label)
        if message:
            raise DsdoctorError(message)
    seen = visible_gpus() if (gpu == "auto" or world_size is None) and not os.environ.get("WORLD_SIZE") else []
    if gpu == "auto":
        if not seen:
            seen = visible_gpus()
        gpu_info = seen[0] if seen else None
        if gpu_info is None:
            raise DsdoctorError("--gpu auto: no GPU visible through NVML here; name it (--gpu V100, --gpu A100)")
    else:
        gpu_info = gpu_from_name(gpu, gpu_cc) if (gpu or gpu_cc) else None
    model_info = None
    if model:
        from dsdoctor.models import model_info as lookup

        model_info = lookup(model)
    ws, ws_source = resolve_world_size(world_size, seen)
    assumed = world_size is None and not os.environ.get("WORLD_SIZE") and not seen
    ctx = CheckContext(world_size=ws, world_size_source=ws_source, launch=launch,
                       client_optimizer=client_optimizer, hf_args=args, gpu=gpu_info, model=model_info,
                       duplicates=parsed.duplicates, schema=schema, schema_note=schema_note,
                       json_error=parsed.json_error, hjson_feature=parsed.hjson_feature,
                       world_size_assumed=assumed, transformers_version=run_transformers,
                       transformers_source=transformers_source)
    result = check_config(config, ctx)
    report = Report("check", result={
        "config": str(config_path), "world_size": ws, "world_size_source": ws_source,
        "world_size_assumed": assumed, "launch": launch,
        "transformers": {"run": run_transformers, "source": transformers_source or "not given",
                         "installed": ctx.transformers_installed or None} if launch == "trainer" else None,
        "client_optimizer": client_optimizer, "gpu": None if gpu_info is None else {
            "name": gpu_info.name, "compute_capability": f"{gpu_info.capability[0]}.{gpu_info.capability[1]}",
            "source": gpu_info.source},
        "model": None if model_info is None else {"name": model_info.name, "dtype": model_info.dtype,
                                                  "hidden_size": model_info.hidden_size},
        "schema": schema_note, "batch": result.batch, "provenance": result.provenance,
        "communication_buffers_bytes": result.buffers or None,
        "effective": result.effective, "changes": [c.to_dict() for c in result.changes],
        "filled": result.filled if launch == "trainer" else None})
    for finding in result.findings:
        report.add(finding)
    if result.unfixed:
        report.result["unfixed"] = [{"path": p, "needs": what} for p, what in result.unfixed]
    if deep:
        for finding in deep_check(result.filled if launch == "trainer" else config, ws, launch,
                                  config_path if launch == "engine" else None):
            report.add(finding)
    if fix is not None:
        fixed = result.fixed_config(config)
        write_output(fix, json.dumps(fixed, indent=2, ensure_ascii=False) + "\n", "--fix")
        report.result["fixed_config"] = str(fix)
    report.tables.append(("effective values (after DeepSpeed's derivation and defaults)",
                          ["key", "value", "came from"], _cells(effective_rows(result))))
    if result.unfixed:
        report.tables.append(("--fix cannot choose these: write them yourself", ["path", "needs"],
                              _cells(_capped([[p, what] for p, what in result.unfixed]))))
    if result.changes:
        report.tables.append((f"--fix: changes{' written to ' + fix if fix else ' (give --fix OUT.json to write them)'}",
                              ["path", "now", "becomes", "rule", "why"],
                              _cells(_capped([[_show(c["path"], 120).strip('"'), _show(c["old"]),
                                               "(deleted)" if c["action"] == "delete" else _show(c["new"]),
                                               c["rule"], (f"changes {c['changes_training']}: "
                                                           if c["changes_training"] else "") + c["why"]]
                                              for c in report.result["changes"][:51]],
                                             total=len(report.result["changes"])))))
    if not any(f.severity in ("error", "warning") for f in report.findings):
        report.add(Finding("DS100", "ok", "config passes every check",
                           evidence=f"world size {ws}; batch {result.batch or 'not computed'}; {schema_note}"))
    return report


def _capped(rows: list[list[str]], limit: int = 50, total: int | None = None) -> list[list[str]]:
    """At most ``limit`` table rows; the JSON ``result`` keeps them all. ``total``: how many rows there are when
    ``rows`` holds only the first ones (built for ``limit + 1`` of them, not all 80,000)."""
    total = len(rows) if total is None else total
    if total <= limit:
        return rows
    return rows[:limit] + [[f"... {total - limit:,} more (all in --json)"] + [""] * (len(rows[0]) - 1)]


def _cells(rows: list[list[str]]) -> list[list[str]]:
    """Table cells as a terminal may show them: each cut at 300 characters and with its control characters
    escaped (a key with a newline or an escape sequence stays on its row and cannot move the cursor)."""
    from dsdoctor.checks.deepspeed_config.result import clean_text

    return [[clean_text(str(cell), 300) for cell in row] for row in rows]


def _show(value, limit: int = 200) -> str:
    """A value for a table cell: JSON, cut at ``limit`` characters (a 22 MB value must not fill the terminal)."""
    text = "(absent)" if value is None else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"


def effective_rows(result) -> list[list[str]]:
    """Rows of the effective-values table: the batch triple, precision, clipping, learning rate, ZeRO stage."""
    from dsdoctor.checks.deepspeed_config import MISSING, get_path

    rows = []
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                "zero_optimization.stage", "fp16.enabled", "bf16.enabled", "gradient_clipping",
                "optimizer.params.lr"):
        value = result.batch.get(key, get_path(result.effective, key)) if key in result.batch else \
            get_path(result.effective, key)
        if value is MISSING:
            value = None
        rows.append([key, _show(value), result.provenance.get(key, "")])
    return rows


def deep_check(config: dict, world_size: int, launch: str, path: str | None = None) -> list[Finding]:
    """Build DeepSpeed's own ``DeepSpeedConfig`` (world size forced to ``world_size``) and report what it raises
    as DS199. Imports DeepSpeed (seconds). ``path``: give DeepSpeed the file itself, as ``--deepspeed_config``
    does (its loader also refuses repeated keys); else the dict ``config`` (under the Trainer: after the fills).
    Skipped when "auto" values are left (the Trainer fills them at train time)."""
    from dsdoctor.checks.deepspeed_config import DS199, auto_paths

    if any(True for _ in auto_paths(config)) and launch == "trainer":
        return [DS199.finding('--deep skipped: "auto" values are left that the Trainer fills only at train time '
                              "(give --hf-args and --model to fill them here)", severity="info", fix="")]
    try:
        import logging

        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        from deepspeed.runtime import config as ds_config_module
    except Exception as exc:  # no DeepSpeed, or one that does not import
        raise DsdoctorError(f"--deep needs DeepSpeed importable here: {type(exc).__name__}: {exc}") from None
    logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
    import copy
    from unittest import mock

    try:
        with mock.patch.object(ds_config_module.dist, "get_world_size", return_value=world_size), \
                mock.patch.object(ds_config_module.dist, "get_rank", return_value=0):
            ds_config_module.DeepSpeedConfig(path if path is not None else copy.deepcopy(config))
    except Exception as exc:
        text = " ".join(str(exc).split())
        return [DS199.finding(f"DeepSpeedConfig raised {type(exc).__name__}: {text[:600]}")]
    return [DS199.finding("DeepSpeedConfig accepted the config (world size "
                          f"{world_size}); optimizer and scheduler are built later, at initialize",
                          severity="ok", fix="")]


@click.command("check")
@click.argument("config", metavar="CONFIG")
@click.option("--world-size", type=click.IntRange(max=MAX_WORLD_SIZE), default=None,
              help="Data-parallel ranks (default: WORLD_SIZE from the launcher, else the visible GPUs, else 1).")
@click.option("--launch", type=click.Choice(["engine", "trainer"]), default="engine", show_default=True,
              help="engine: your loop calls deepspeed.initialize; trainer: the HF Trainer fills \"auto\".")
@click.option("--hf-args", default=None, metavar="FILE",
              help="TrainingArguments values (JSON, or a LLaMA-Factory style YAML); with --launch trainer.")
@click.option("--gpu", default=None, metavar="NAME|auto",
              help="The GPU as nvidia-smi names it (\"NVIDIA A100-SXM4-80GB\", V100, RTX 4090) or auto (NVML).")
@click.option("--gpu-cc", default=None, metavar="X.Y", help="Compute capability, for a GPU the table lacks (6.1).")
@click.option("--model", default=None, metavar="NAME|PATH",
              help="A model name (qwen2-7b, chatglm3-6b, ...) or a local directory with config.json.")
@click.option("--transformers", "transformers", default=None, metavar="X.Y|installed",
              help="The transformers version the training run uses (TrainingArguments fields differ: warmup_ratio is "
                   "gone from 5.2); with --launch trainer. Default: both behaviours are named.")
@click.option("--client-optimizer", is_flag=True, help="Your script passes optimizer= to deepspeed.initialize.")
@click.option("--fix", default=None, metavar="OUT.json", help="Write a corrected copy here (CONFIG is never edited).")
@click.option("--deep", is_flag=True, help="Also build DeepSpeed's own DeepSpeedConfig from the file (imports DeepSpeed).")
@report_command(inputs=("config", "hf_args", "model"), outputs=("fix",))
def check(config, world_size, launch, hf_args, gpu, gpu_cc, model, transformers, client_optimizer, fix,
          deep) -> Report:
    """Check a DeepSpeed config (JSON or HJSON) before the model loads."""
    if gpu == "auto" and gpu_cc is not None:
        raise DsdoctorError("--gpu-cc goes with a GPU's name; with --gpu auto, NVML reports the capability")
    return run_check(config, world_size=world_size, launch=launch, hf_args=hf_args, gpu=gpu, model=model,
                     client_optimizer=client_optimizer, fix=fix, deep=deep, gpu_cc=gpu_cc,
                     transformers=transformers)
