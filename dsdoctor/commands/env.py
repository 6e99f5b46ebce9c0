"""``dsdoctor env``: the environment as facts to paste into a bug report, and a verdict with a fix for each problem.

The facts and the rules are :mod:`dsdoctor.checks.environment` (``ENV3xx``; ``NET4xx`` for the distributed
variables). Nothing here imports torch or DeepSpeed: a report in a few hundredths of a second where ``ds_report``
takes seconds, and it works with neither installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from dsdoctor.cli import report_command
from dsdoctor.report import DsdoctorError, Report

SECTIONS = ("versions", "toolchain", "gpu", "host", "network")


def host_ram_check(deepspeed: str, model: str, method: str, facts: dict,
                   ranks_per_node: int | None = None) -> tuple[list, dict]:
    """MEM504 for this host: what loading ``model`` and ``deepspeed``'s offload need per node (``dsdoctor
    estimate``'s arithmetic) against this host's RAM, for ``ranks_per_node`` ranks (the launch line's, from
    ``dsdoctor preflight``), else one per GPU NVML sees."""
    from dsdoctor.commands.estimate import run_estimate

    ram = (facts.get("host") or {}).get("ram")
    if not ram:
        raise DsdoctorError("--deepspeed: this host's RAM is unknown (/proc/meminfo unreadable)")
    gpus = ranks_per_node or len((facts.get("gpu") or {}).get("gpus") or []) or None
    estimate = run_estimate(model=model, zero=2, offload_optimizer="none", offload_param="none", method=method,
                            lora_r=8, lora_targets=None, lora_dropout=0.05, freeze_last=2, prefix_tokens=16,
                            gpus=gpus, nodes=1, micro_batch=1, seq_len=1024, grad_ckpt=method != "ptuning", precision="bf16",
                            deepspeed=deepspeed, gpu_mem=None, host_mem=ram / 2 ** 30, compare=False, explicit=set())
    return [f for f in estimate.findings if f.id == "MEM504"], estimate.result["host_bytes"]


def run_env(only: str | None, from_file: str | None, output_dir: str, deep: bool = False,
            build_ops: str | None = None, deepspeed: str | None = None, model: str | None = None,
            method: str = "full", ranks_per_node: int | None = None) -> Report:
    """The body of ``dsdoctor env``. Raises DsdoctorError for an unknown section or an unreadable ``--from``."""
    from dsdoctor.checks import environment as envcheck

    sections = SECTIONS
    for name, value in (("--only", only), ("--from", from_file), ("--output-dir", output_dir)):
        if value is not None and not value.strip():
            raise DsdoctorError(f"{name} is empty")
    if only:
        sections = tuple(s.strip() for s in only.split(",") if s.strip())
        unknown = [s for s in sections if s not in SECTIONS]
        if unknown or not sections:
            raise DsdoctorError(f"--only {only}: sections are {', '.join(SECTIONS)}")
    if from_file:
        from dsdoctor.files import read_input, shown

        raw = read_input(from_file, "--from", 16 * 2 ** 20, what="dsdoctor env report")
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise DsdoctorError(f"--from {shown(from_file)}: not valid JSON") from None
        result = data.get("result") if isinstance(data, dict) else None
        facts = result.get("facts") if isinstance(result, dict) else None
        if not isinstance(facts, dict):
            raise DsdoctorError(f"--from {from_file}: not a `dsdoctor env --json` report (no result.facts)")
        facts = {s: facts[s] for s in sections + ("deep",) if s in facts}
        if not any(s in facts for s in sections):
            raise DsdoctorError(f"--from {from_file}: no facts of the sections asked for ({', '.join(sections)})")
        sections = tuple(s for s in sections if s in facts)
        try:
            findings = envcheck.diagnose(facts, live=False)
            rows = envcheck.paste_block(facts)
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError, IndexError, OverflowError) as exc:
            raise DsdoctorError(f"--from {from_file}: facts of an unexpected shape ({type(exc).__name__}: "
                                f"{str(exc)[:120]})") from None
    else:
        if not Path(output_dir).is_dir():
            raise DsdoctorError(f"--output-dir {output_dir}: not a directory")
        facts = envcheck.collect(sections=sections, output_dir=output_dir, deep=deep)
        findings = envcheck.diagnose(facts)
        rows = envcheck.paste_block(facts)
    report = Report("env", result={"facts": facts, "sections": list(sections)})
    if deepspeed:
        if "host" not in facts:
            facts["host"] = envcheck.collect(sections=("host",), output_dir=output_dir)["host"]
        host_findings, host_bytes = host_ram_check(deepspeed, model, method, facts, ranks_per_node)
        findings = findings + host_findings
        report.result["host_needed_bytes"] = host_bytes
    if build_ops:
        from dsdoctor.configfile import read_ds_config

        config, _ = read_ds_config(build_ops)
        needed = envcheck.ops_for_config(config)
        results = []
        for name in needed:
            click.echo(f"dsdoctor: building {name} (a first JIT build takes minutes)...", err=True)
            results.append(envcheck.build_op(name))
        report.result["built_ops"] = results
        findings = findings + envcheck.build_findings(results)
        report.tables.append((f"DeepSpeed ops {build_ops} needs, built now", ["op", "built", "seconds", "error"],
                              [[r["name"], ("yes" if r.get("compiled") else "yes (from the extension cache)")
                                if r["ok"] else "NO", str(r["seconds"]), r.get("error", "")]
                               for r in results] or [["(none: the optimizer needs no DeepSpeed op)", "", "", ""]]))
    for finding in findings:
        report.add(finding)
    if not any(f.severity in ("error", "warning") for f in findings):
        report.add(envcheck.ENV300.finding(f"checked: {', '.join(sections)}"
                                           + ("; the saved report's port and name lookups are not redone here"
                                              if from_file and "network" in sections else "")))
    from dsdoctor import __version__

    report.block = [f"- dsdoctor: {__version__}"] + [f"- {key}: {value}" for key, value in rows]
    report.block_title = "Environment (paste into a bug report)" + (f", from {from_file}" if from_file else "")
    report.result["paste_block"] = {"lines": report.block}
    return report


@click.command("env")
@click.option("--only", default=None, metavar="SECTIONS",
              help=f"Comma-separated sections to check: {', '.join(SECTIONS)} (default: all).")
@click.option("--from", "from_file", default=None, metavar="REPORT.json",
              help="Diagnose the facts of a saved `dsdoctor env --json` report (e.g. from a user's machine).")
@click.option("--output-dir", default=".", show_default=True, metavar="DIR",
              help="Where checkpoints will go (its free disk is reported).")
@click.option("--deep", is_flag=True,
              help="Also import torch and DeepSpeed: CUDA usable, cuDNN, ABI, NCCL, each op's compatibility.")
@click.option("--build-ops", default=None, metavar="ds_config.json",
              help="JIT-build the DeepSpeed ops this config's optimizer needs (FusedAdam, CPUAdam, ...) now.")
@click.option("--deepspeed", default=None, metavar="ds_config.json",
              help="With --model: the host RAM that loading the model and this config's offload need, against this "
                   "host's.")
@click.option("--model", default=None, metavar="NAME|PATH", help="The model, for --deepspeed's host RAM check.")
@click.option("--method", type=click.Choice(["full", "lora", "freeze", "ptuning"]), default="full",
              show_default=True, help="The fine-tuning method, for --deepspeed's host RAM check.")
@report_command(inputs=("from_file", "build_ops", "deepspeed", "model"))
def env(only, from_file, output_dir, deep, build_ops, deepspeed, model, method) -> Report:
    """Versions, CUDA toolchain, GPUs, host and distributed variables: facts and a verdict with a fix for each
    problem."""
    if deep and from_file:
        raise DsdoctorError("--deep probes this machine; --from diagnoses a saved report (its deep facts are used "
                            "when it has them)")
    if (build_ops or deepspeed) and from_file:
        raise DsdoctorError("--build-ops and --deepspeed check this machine; they do not go with --from")
    if bool(deepspeed) != bool(model):
        raise DsdoctorError("--deepspeed and --model go together (the host RAM check needs both)")
    return run_env(only, from_file, output_dir, deep, build_ops, deepspeed, model, method)
