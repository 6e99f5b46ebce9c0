"""``dsdoctor preflight -- CMD...``: one verdict for the run a launch line starts, before it starts.

The line is read, never executed (:mod:`dsdoctor.preflight.cmdline`); the script is read with ``ast``, never
imported (:mod:`dsdoctor.preflight.script`); then ``check``, ``estimate`` and ``env`` run as their own commands do,
with the values found (:mod:`dsdoctor.preflight.sections`), and their findings are ranked into GO, GO with warnings
or NO-GO: what makes the run crash at the launcher or at ``deepspeed.initialize`` first, then what makes it run out
of memory, then the rest.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from dsdoctor.cli import report_command
from dsdoctor.report import SEVERITY_RANK, DsdoctorError, Finding, Report

#: the order in which blocking findings are fixed: the launcher refuses the line before any rank starts, then
#: DeepSpeed refuses the config at initialize, then the environment (an op that does not build, a port taken), then
#: memory (after the model has loaded), then data
_FAMILY_ORDER = ("PRE", "NET", "DS", "HF", "ENV", "MEM", "DATA", "TRN", "LOG", "HANG")


def _rank(finding: Finding) -> tuple[int, int]:
    family = next((i for i, prefix in enumerate(_FAMILY_ORDER) if finding.id.startswith(prefix)), len(_FAMILY_ORDER))
    return -SEVERITY_RANK[finding.severity], family


#: dsdoctor's settings that must be positive counts (their names are in dsdoctor/preflight/settings.py ALIASES)
_COUNTS = ("micro_batch", "grad_accum", "seq_len", "lora_rank", "max_steps", "max_samples", "epochs")


def _parse_sets(sets: tuple[str, ...]) -> list[tuple[str, object]]:
    """``--set KEY=VALUE`` pairs, values read as the line's are (:func:`coerce`). Raises DsdoctorError for a pair
    without ``=`` and for a count (a batch, a length, steps) that is not positive."""
    from dsdoctor.preflight.settings import ALIASES, coerce

    out = []
    for item in sets:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise DsdoctorError(f"--set {item!r}: give KEY=VALUE (e.g. --set per_device_train_batch_size=2)")
        key, value = item.split("=", 1)
        key, value = key.strip().lstrip("-").replace("-", "_"), coerce(value)
        count = next((k for k in _COUNTS if key in ALIASES[k]), None)
        if count and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise DsdoctorError(f"--set {item}: {key} must be a positive number")
        out.append((key, value))
    return out


def run_preflight(command: list[str], sets: list[tuple[str, object]], workdir: str, gpus: int | None,
                  gpu: str | None, samples: int | None, audit_data: bool = True, probe_steps: int = 0,
                  out: str = "dsdoctor-preflight", gpu_cc: str | None = None, gpu_mem: str | None = None) -> Report:
    """The body of ``dsdoctor preflight``. Raises DsdoctorError for a line that cannot be read (no script, not a
    launcher, a config that is not the tool's)."""
    from dsdoctor.checks import preflight as rules
    from dsdoctor.preflight import sections
    from dsdoctor.preflight.cmdline import parse_launch
    from dsdoctor.preflight.datafiles import count_samples, dataset_files
    from dsdoctor.preflight.plan import build_plan

    started = time.perf_counter()
    where = Path(workdir).expanduser()
    if not where.is_dir():
        raise DsdoctorError(f"--workdir {workdir}: not a directory")
    launch = parse_launch(command)
    plan = build_plan(launch, where, sets, gpus, rules)
    method, method_source = sections.method_of(plan)
    model = plan.settings.get("model")
    model_name = model.value if model is not None and isinstance(model.value, str) else None
    line_findings = list(plan.problems)
    if launch.dangling:
        line_findings.append(rules.PRE017.finding(f"{launch.source}: the command ends there; the next line is "
                                                  f"`{launch.dangling}`"))
    if plan.settings.unknown:
        line_findings.append(rules.PRE015.finding(", ".join(plan.settings.unknown[:40])
                                                  + (" ..." if len(plan.settings.unknown) > 40 else "")))
    check_findings, check_result = sections.check_section(plan, gpu, model_name, rules, gpu_cc)
    estimate_findings, estimate_result, estimate_inputs = sections.estimate_section(plan, gpu, rules, gpu_cc, gpu_mem)
    line_findings += _two_micro_batches(plan, rules)
    line_findings += _no_launcher(plan, rules)
    if plan.script is not None and plan.script.rank0_save:
        from dsdoctor.checks.training import TRN614

        line_findings.append(TRN614.finding(plan.script.rank0_save))
    from dsdoctor.hardware import visible_gpus

    env_findings, env_result = sections.env_section(plan, model_name, method, rules,
                                                    other_machine=bool(gpu) and not visible_gpus())
    files, data_notes, missing = dataset_files(plan)
    line_findings += [rules.PRE014.finding(m, title="A dataset the run names is not there") for m in missing]
    data_findings, data_result = sections.data_section(plan, files, rules) if audit_data else ([], {})
    counted = [count_samples(f) for f in files]
    if samples is None and files and all(c is not None for c in counted):
        samples = sum(counted)
        max_samples = plan.settings.value("max_samples")
        if isinstance(max_samples, int) and max_samples > 0:  # LLaMA-Factory: at most this many per dataset
            samples = sum(min(c, max_samples) for c in counted)
    probe_findings, probe = [], None
    if probe_steps:
        target = Path(out).expanduser()
        target.mkdir(parents=True, exist_ok=True)
        probe_findings, probe = sections.probe_section(plan, files, probe_steps, target / "smoke", rules,
                                                       check_result)
    probe_for_eta = probe
    if probe and probe.get("device") == "cpu" and gpu:  # a CPU probe times this machine, not the --gpu run
        probe_for_eta = None
    eta_finding, eta = _eta(plan, estimate_result, samples, rules, sections, probe_for_eta)
    if probe and probe_for_eta is None and probe.get("step_time_s"):
        eta["probe_not_used"] = (f"the probe ran on this machine's CPU ({probe['step_time_s']} s a step), not on a "
                                 f"{gpu}: the ETA is the FLOPs model's")
    probe = probe or {}

    setup = (estimate_result or {}).get("setup") or {}
    summary = rules.PRE010.finding(
        f"{launch.launcher}{' (' + launch.source + ')' if launch.source else ''}; world size "
        f"{plan.world_size if plan.world_size is not None else 'unknown'} ({plan.world_source}); "
        f"{plan.nodes} node(s); loop: {plan.kind} ({plan.kind_source}); model: {model_name or 'not found'}; "
        f"method: {method} ({method_source}); DeepSpeed config: {plan.deepspeed or 'none found'}"
        + (f"; micro batch {setup.get('micro_batch')} x accumulation {setup.get('gradient_accumulation_steps')} x "
           f"world {setup.get('world_size')}, sequence {setup.get('seq_len')}" if setup else ""))
    ranked = sorted(line_findings + check_findings + env_findings + estimate_findings + data_findings
                    + probe_findings, key=_rank)
    blocking = [f for f in ranked if f.severity == "error"]
    warnings = [f for f in ranked if f.severity == "warning"]
    if blocking:
        verdict, severity = "NO-GO", "error"
    elif warnings:
        verdict, severity = "GO with warnings", "warning"
    else:
        verdict, severity = "GO", "ok"
    first, seen_ids = [], set()
    for f in blocking or warnings:  # one fix per rule, in order
        if f.id not in seen_ids:
            seen_ids.add(f.id)
            first.append(f)
    fixes = " ".join(f"{i}. {f.id}: {f.fix}" for i, f in enumerate(first[:6], start=1))
    report = Report("preflight")
    # without check and estimate, a GO says nothing of the config or the memory: inconclusive, and why
    unrun = [name for name in ("check", "estimate") if any(f.id == "PRE002" and f.title == f"[{name}] not run"
                                                           for f in ranked)]
    said = (f"; inconclusive: {' and '.join(unrun)} did not run (their PRE002 says why), so the verdict says nothing "
            f"of the DeepSpeed config and the memory" if len(unrun) == 2 and not blocking else "")
    report.add(rules.PRE001.finding(
        f"{verdict}: {len(blocking)} blocking, {len(warnings)} warning(s)"
        + (f"; fix first: {', '.join(f.id for f in first[:6])}" if first else "") + said,
        severity=severity, title=verdict + (" (inconclusive)" if said else ""), fix=fixes))
    for finding in [f for f in ranked if f.severity in ("error", "warning")]:
        report.add(finding)
    report.add(summary)
    report.add(eta_finding)
    for finding in [f for f in ranked if f.severity not in ("error", "warning")]:
        report.add(finding)
    report.result = {
        "verdict": verdict, "plan": plan.to_dict(), "method": method, "method_source": method_source,
        "estimate_inputs": {k: {"value": v, "source": s} for k, (v, s) in estimate_inputs.items()},
        "check": check_result, "estimate": estimate_result, "env": env_result,
        "data": {"files": [str(f) for f in files], "samples": samples, "notes": data_notes, "audit": data_result},
        "probe": probe, "eta": eta, "seconds": round(time.perf_counter() - started, 3)}
    from dsdoctor.preflight.settings import _ALIAS_OF

    # what the sections used: every value given, and the script's declared defaults of the names they read
    given = [[name, str(s.value)[:80], s.source] for name, s in plan.settings.given.items()
             if not s.source.startswith("default ") or name in _ALIAS_OF]
    if given:
        report.tables.append(("what the line, its files and the script set", ["name", "value", "from"], given))
    if eta:
        report.tables.append(("ETA", ["", ""], [[k, str(v)] for k, v in eta.items()]))
    report.block = env_result.get("paste_block", []) if env_result else []
    report.block_title = "Environment (paste into a bug report)" if report.block else ""
    return report


#: What the ETA's two bases were worth against real runs (benchmarks/results/eta-gpu/README.md): the same ChatGLM-6B
#: shape LoRA run of 200 steps on one H200, three times.
PROBE_ACCURACY = ("20 probe steps read 13-23% under three 200-step runs of one setup on an H200 (a long run's step "
                  "times drift and spike) and 7% over on 2 CPU ranks; benchmarks/results/eta-gpu/README.md")
FLOPS_ACCURACY = ("-6% to +7% against three 200-step runs of the 6B shape whose speed set the MFU; other shapes and "
                  "GPUs unmeasured: --probe measures this one; benchmarks/results/eta-gpu/README.md")


def _two_micro_batches(plan, rules) -> list:
    """PRE022: an engine loop whose line (or script) and DeepSpeed config give different micro batches."""
    from dsdoctor.preflight import sections
    from dsdoctor.preflight.plan import loaded_json

    micro, where = sections._int_setting(plan, "micro_batch")
    if plan.kind != "engine" or micro is None or not plan.deepspeed_has("train_micro_batch_size_per_gpu"):
        return []
    config = loaded_json(plan.deepspeed)["train_micro_batch_size_per_gpu"]
    if int(config) == micro or plan.settings.get("micro_batch").source.startswith("default "):
        return []  # the same value, or only the script's own default (the line gives none)
    return [rules.PRE022.finding(f"{where}: {micro}; {Path(plan.deepspeed).name} train_micro_batch_size_per_gpu: "
                                 f"{config}; the memory estimate uses {micro}")]


#: what deepspeed.init_distributed needs from a launcher, else it looks for MPI (deepspeed/comm/comm.py required_env)
RANK_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")


def _no_launcher(plan, rules) -> list:
    """PRE023: plain ``python`` runs a script that uses DeepSpeed (a DeepSpeed config in the run, or
    ``deepspeed.initialize`` in the script) without the five variables a launcher sets (:data:`RANK_ENV`, on the
    line or in this shell): deepspeed.init_distributed falls back to MPI discovery (mpi4py, ``hostname -I``)."""
    import os

    if plan.launch.launcher != "python" or not (plan.deepspeed or plan.script is not None and
                                                 plan.script.launch == "engine"):
        return []
    missing = [name for name in RANK_ENV if name not in plan.launch.env and name not in os.environ]
    if not missing:
        return []
    what = f"DeepSpeed config {Path(plan.deepspeed).name}" if plan.deepspeed else "deepspeed.initialize in the script"
    return [rules.PRE023.finding(f"`{' '.join(plan.launch.line[:3])}` with {what}, and no {', '.join(missing)}: "
                                 f"deepspeed.init_distributed will import mpi4py and run `hostname -I`")]


def _eta(plan, estimate_result: dict | None, samples: int | None, rules, sections,
         probe: dict | None = None) -> tuple[Finding, dict]:
    """PRE020: steps x the step time: measured by ``--probe`` (the median of the second half of its steps), else
    estimate's modelled one (its ``step_time_s``: FLOPs at the GPU's dense peak times the MFU of
    ``dsdoctor.checks.memory.speed.Rates``, plus recomputation, communication and offload copies)."""
    if probe and probe.get("step_time_s"):
        setup = (estimate_result or {}).get("setup") or {}
        world = plan.world_size or setup.get("world_size") or 1
        micro = (setup.get("micro_batch") or sections._int_setting(plan, "micro_batch")[0] or 1)
        accum = setup.get("gradient_accumulation_steps") or sections._int_setting(plan, "grad_accum")[0] or 1
        steps, how = sections.steps_of(plan, samples, world, micro, accum)
        step_s = probe["step_time_s"]
        basis = (f"measured by --probe: median of the last {max(probe['steps'] - max(2, probe['steps'] // 2), 1)} "
                 f"of {probe['steps']} steps on {probe['nproc']} "
                 f"{probe.get('device') or ''} rank(s) here" + ("" if probe["nproc"] == world else
                                                               f" (the run has {world}: per-rank work is the same "
                                                               "micro batch, communication differs)"))
        if steps is None:
            return rules.PRE020.finding(f"inconclusive: {how}; measured step {step_s:.3f} s",
                                        title="Time to train: inconclusive",
                                        fix="Give --samples N (the training set's size), or max_steps."), \
                {"step_time_s": step_s, "steps": None, "step_time_from": basis}
        total = steps * step_s
        return rules.PRE020.finding(f"{steps:,} optimizer steps x {step_s:.3f} s = {sections.human_seconds(total)} "
                                    f"({how}; {basis})",
                                    title=f"Time to train: about {sections.human_seconds(total)} (measured step)"), \
            {"steps": steps, "steps_from": how, "step_time_s": step_s, "step_time_from": basis,
             "total_s": round(total, 1), "total": sections.human_seconds(total), "accuracy": PROBE_ACCURACY}
    if not estimate_result or "step_time_s" not in estimate_result:
        return rules.PRE020.finding("inconclusive: no step time (the estimate did not run" +
                                    (", and --probe measured none" if probe is not None else "") + ")",
                                    title="Time to train: inconclusive",
                                    fix="See the [estimate] and [probe] findings for what is missing."
                                    if probe is not None else rules.PRE020.fix), {}
    setup = estimate_result.get("setup") or {}
    world, micro = setup.get("world_size") or 1, setup.get("micro_batch") or 1
    accum = setup.get("gradient_accumulation_steps") or 1
    steps, how = sections.steps_of(plan, samples, world, micro, accum)
    step_s = estimate_result["step_time_s"].get("total")
    basis = estimate_result.get("step_time_basis", "")
    if steps is None or step_s is None:
        return rules.PRE020.finding(f"inconclusive: {how}", title="Time to train: inconclusive",
                                    fix="Give --samples N (the training set's size), or max_steps."), \
            {"step_time_s": step_s, "steps": None, "basis": basis}
    total = steps * step_s
    from dsdoctor.checks.memory.speed import Rates

    mfu = (f"at MFU {Rates().mfu:.2f} (measured: 11,686 tokens/s, ChatGLM-6B shape, LoRA, one H200; "
           "dsdoctor/checks/memory/speed.py Rates)")
    eta = {"steps": steps, "steps_from": how, "step_time_s": round(step_s, 3),
           "step_time_from": f"FLOPs model: {basis} {mfu}, every sample at the full sequence length "
                             f"{setup.get('seq_len')} (shorter samples train faster)",
           "total_s": round(total, 1), "total": sections.human_seconds(total), "accuracy": FLOPS_ACCURACY}
    return rules.PRE020.finding(
        f"{steps:,} optimizer steps x {step_s:.2f} s = {sections.human_seconds(total)} ({how}; step time from the "
        f"FLOPs model: {basis} {mfu}, samples at the full sequence length)",
        title=f"Time to train: about {sections.human_seconds(total)} (modelled)"), eta


@click.command("preflight", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Set a value the line does not give, or override one (e.g. --set per_device_train_batch_size=2).")
@click.option("--workdir", default=".", show_default=True, metavar="DIR",
              help="The directory the launch runs in: relative paths on the line are opened from there.")
@click.option("--gpus", type=click.IntRange(1, 1024), default=None,
              help="GPUs per node, where the line says 'all of them' and none is visible here.")
@click.option("--gpu", default=None, metavar="NAME", help="The GPU model (A100-80GB, RTX 4090), where none is visible here.")
@click.option("--gpu-cc", default=None, metavar="X.Y", help="Compute capability, for a --gpu the table lacks (8.6).")
@click.option("--gpu-mem", default=None, metavar="GiB", help="Memory per GPU, for a --gpu the table lacks.")
@click.option("--samples", type=click.IntRange(1), default=None,
              help="Training samples, for the ETA, when the data file is not readable here.")
@click.option("--probe", is_flag=True, help="Also run a short smoke on this machine (local GPUs, else 2 CPU ranks) "
                                            "with the run's model, data and config: a measured step time for the ETA.")
@click.option("--probe-steps", type=click.IntRange(3, 10_000), default=20, show_default=True)
@click.option("--out", default="dsdoctor-preflight", show_default=True, metavar="DIR",
              help="Where --probe's smoke run writes its logs and metrics.")
@click.option("--no-data", is_flag=True, help="Skip the data audit (it loads the tokenizer: a few seconds).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- CMD...")
@report_command
def preflight(command, sets, workdir, gpus, gpu, gpu_cc, gpu_mem, samples, probe, probe_steps, out,
              no_data) -> Report:
    """One verdict for the run your launch line starts: will it start, fit, train, and how long it will take.
    Nothing is executed."""
    if not command:
        raise DsdoctorError("no launch line: give it after `--`, e.g. "
                            "`dsdoctor preflight -- deepspeed --num_gpus 4 train.py --deepspeed ds.json`")
    if command[0].startswith("-") and len(command[0]) > 1:
        raise DsdoctorError(f"no such option: {command[0][:40]} (preflight's options go before `--`; "
                            "see `dsdoctor preflight --help`)")
    if gpu or gpu_mem or gpu_cc:  # preflight's own options: a bad one is a usage error (exit 2), as in estimate
        from dsdoctor.commands.estimate.inputs import resolve_hardware

        resolve_hardware(gpu_mem, gpus, gpu, gpu_cc)
    return run_preflight(list(command), _parse_sets(sets), workdir, gpus, gpu, samples, audit_data=not no_data,
                         probe_steps=probe_steps if probe else 0, out=out, gpu_cc=gpu_cc, gpu_mem=gpu_mem)
