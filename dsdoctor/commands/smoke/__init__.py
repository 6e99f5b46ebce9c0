"""``dsdoctor smoke``: a short real run of the reference trainer that proves the setup trains.

It checks what it can before any rank starts (:mod:`.inputs`: the model, the data, the options, the ds_config, the
port, a stale op-build lock, how many ranks this host can run), launches N ranks of ``reference_train/train.py``
through torchrun or the deepspeed launcher, follows them with a live progress bar (stderr) and watches their op builds
(:mod:`.supervise`), and then judges what the ranks wrote to ``--out`` (:mod:`.judge`): loss goes down (TRN601, or
TRN611 when a random init cannot tell), memory is stable (TRN604), the save reloads and merges (TRN605), throughput
(TRN606), the run's environment (TRN600); when the run dies, which rank failed first and why (TRN607/TRN610/DATA7xx),
with no process left behind however it ends (:func:`dsdoctor.launch.launched`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import click

from dsdoctor.cli import FiniteFloat, report_command
from dsdoctor.report import DsdoctorError, Report

from .inputs import (SmokeOptions, bundled_model, model_config, read_ds_config, resolve_model, trainer_args,
                     trainer_script, validate_data, validate_options, visible_gpus)
from .judge import judge_run
from .outdir import MARKER, RUN_OUTPUTS, finish_out, prepare_out
from .supervise import Supervised, supervise

__all__ = ["MARKER", "RUN_OUTPUTS", "SmokeOptions", "Supervised", "bundled_model", "prepare_out", "read_ds_config",
           "run_smoke", "smoke", "supervise", "trainer_script"]


def weight_bytes(model: Path) -> int:
    """Bytes of the weight files in a model directory (safetensors or PyTorch bin shards); 0 when it has none."""
    total = 0
    for pattern in ("*.safetensors", "*.bin"):
        for f in model.glob(pattern):
            try:
                total += f.stat().st_size
            except OSError:
                pass
    return total


def cpu_rank_bytes(config: dict, method: str, nproc: int, model: Path | None = None) -> int:
    """Resident memory of one CPU rank: the trainer's own footprint on the bundled model
    (:data:`dsdoctor.launch.CPU_RANK_BYTES`) plus the model in fp32 (4 bytes a parameter) and, for full and freeze
    fine-tuning, gradients and Adam's two moments partitioned over the ranks (12 bytes a parameter / ranks, ZeRO-2)
    where the parameter count is known from config.json (:func:`dsdoctor.models.arch_from_config`), else from the
    weight files' size (:func:`weight_bytes`)."""
    from dsdoctor.launch import CPU_RANK_BYTES

    from dsdoctor.models import arch_from_config
    from dsdoctor.report import DsdoctorError as _Unmodelled

    try:
        params = arch_from_config(config, "--model", "config.json").total_params
    except _Unmodelled:  # an architecture the analytic count does not model: the weights' size on disk instead
        params = 0
    if not params and model is not None:
        params = weight_bytes(model) // 2  # 16-bit weights on disk: 2 bytes a parameter
    extra = 12 * params // max(nproc, 1) if method in ("full", "freeze") else 0
    return CPU_RANK_BYTES["smoke"] + 4 * params + extra


def run_smoke(opts: SmokeOptions) -> Report:
    """Check, launch, supervise and judge one smoke run. Raises DsdoctorError on bad input (exit 2)."""
    from dsdoctor import extensions
    from dsdoctor.checks.environment import ENV329
    from dsdoctor.checks.network import free_port, master_port_finding
    from dsdoctor.launch import cpu_rank_problem, launcher_command

    for module, hint in (("torch", "pip install torch"), ("deepspeed", "pip install deepspeed"),
                         ("transformers", "pip install transformers"), ("peft", "pip install peft")):
        if importlib.util.find_spec(module) is None:
            raise DsdoctorError(f"{module} is not installed in {sys.executable}: {hint}")
    model = resolve_model(opts.model)
    config = model_config(model)
    validate_options(opts, model, config)
    data_problem = validate_data(opts.data) if opts.data is not None else None
    ds_config = read_ds_config(opts.deepspeed) if opts.deepspeed is not None else None
    gpus = visible_gpus()
    nproc = opts.nproc or gpus or 2
    nproc_source = "--nproc" if opts.nproc else (f"default: the {gpus} visible GPU(s)" if gpus else "default: 2 CPU ranks")
    if gpus and nproc > gpus:
        raise DsdoctorError(f"--nproc {nproc} but {gpus} GPU(s) visible (CUDA_VISIBLE_DEVICES="
                            f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): one rank per GPU")
    if opts.nproc is None and ds_config is not None:
        # our default rank count must not fail a config written for another world size: run it on the world size
        # its batch values hold on, when this machine has the GPUs (or the cores and RAM) for it
        from dsdoctor.checks.deepspeed_config import consistent_world_sizes

        fits = consistent_world_sizes(ds_config) or []
        if fits and nproc not in fits:
            # on the CPU at most 2 ranks a core: a config for 8 GPUs would crawl on 2 cores (3 minutes for 10 steps)
            runnable = [w for w in fits if (w <= gpus if gpus else w <= 2 * (os.cpu_count() or 1) and
                                            not cpu_rank_problem(w, cpu_rank_bytes(config, opts.method, w, model)))]
            if runnable:
                nproc = runnable[0]
                nproc_source = (f"the world size {opts.deepspeed}'s batch values hold on (train_batch_size "
                                f"{ds_config.get('train_batch_size')}); --nproc overrides")
            else:
                nproc_source += (f"; {opts.deepspeed} holds on world size(s) {', '.join(map(str, fits[:6]))}: give "
                                 f"--nproc {fits[0]} to run it on as many CPU ranks (slow on {os.cpu_count()} cores), "
                                 f"or smoke it on the GPU machine" if not gpus else
                                 f"; {opts.deepspeed} holds on world size(s) {', '.join(map(str, fits[:6]))}, more "
                                 f"than the {gpus} GPU(s) here")
    if not gpus:
        problem = cpu_rank_problem(nproc, cpu_rank_bytes(config, opts.method, nproc, model))
        if problem:
            raise DsdoctorError(problem)

    report = Report("smoke", result={"world_size": nproc, "world_size_source": nproc_source,
                                     "launcher": opts.launcher, "device": "cuda" if gpus else "cpu",
                                     "steps_requested": opts.steps, "model": str(model), "method": opts.method})
    # Problems that fail every rank for certain are reported before any rank starts: the data, a busy port, a stale
    # op-build lock the ranks would wait on forever, and every error `dsdoctor check` finds in the ds_config (the
    # reference trainer calls deepspeed.initialize with model_parameters and no client optimizer: --launch engine).
    if data_problem is not None:
        from dsdoctor.rules import catalogue

        rule_id, message = data_problem
        report.add(catalogue()[rule_id].finding(message + " (checked before launch, as the trainer reads it)"))
    finding = master_port_finding()
    if finding is not None:
        report.add(finding)
    root = extensions.smoke_root()
    ranks_root = root if root is not None else Path(os.environ["TORCH_EXTENSIONS_DIR"]).expanduser()
    for lock in extensions.build_locks([ranks_root]):
        if lock.stale:
            report.add(ENV329.finding(f"{lock.path} (op {lock.op}, {lock.age_s:.0f} s old): no live process holds it "
                                      f"open and no compiler works on it; the ranks would wait on it forever",
                                      fix=f"rm {lock.path}  # then run again: the op is rebuilt once"))
    fp16 = ds_config.get("fp16") if isinstance(ds_config, dict) else None
    if not gpus and isinstance(fp16, dict) and fp16.get("enabled") is True:
        from dsdoctor.checks.training import TRN612

        report.add(TRN612.finding(f"{opts.deepspeed}: fp16.enabled true; no GPU visible here (CUDA_VISIBLE_DEVICES="
                                  f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}, NVML: none)"))
    if ds_config is not None and opts.check:
        from dsdoctor.checks.deepspeed_config import CheckContext, check_config

        checked = check_config(ds_config, CheckContext(world_size=nproc, world_size_source=nproc_source,
                                                       launch="engine"))
        for finding in checked.findings:
            if finding.severity in ("error", "warning"):
                report.add(finding)
    if any(f.severity == "error" for f in report.findings):
        return report
    port = int(os.environ["MASTER_PORT"]) if os.environ.get("MASTER_PORT") else free_port()
    # a segment an earlier run on this port left (killed before it could be deleted: dsdoctor/shm.py) would be reused
    # by DeepSpeed's shm_open as it is, stale state or wrong size, and crash or hang the ranks: delete it first
    from dsdoctor.shm import remove_stale

    stale_before = remove_stale(port=port)

    out = prepare_out(Path(opts.out))
    try:
        cmd = launcher_command(opts.launcher, nproc, port, trainer_script(), trainer_args(opts, model, out))
        from dsdoctor.launch import flight_recorder_env

        # the Flight Recorder on for the smoke's ranks (dumps in the run's directory), unless the user set it
        env = {**flight_recorder_env(out), **os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
        # torchrun sets 1 thread per rank when unset, the deepspeed launcher does not: ranks then oversubscribe
        # the cores (3.5x slower on 2 CPU ranks). Share the cores between the ranks for both.
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
        env.pop("MASTER_PORT", None)
        if root is not None:  # one extensions directory per Python environment, unless the user chose one
            env["TORCH_EXTENSIONS_DIR"] = str(root)
        report.result.update(command=" ".join(cmd), torch_extensions_dir=str(ranks_root))
        if stale_before:
            report.result["shm_segments_removed_before"] = [str(s.path) for s in stale_before]
        supervised = supervise(cmd, env, out, opts.steps, opts.timeout_s, ranks_root)
        report.result.update(wall_s=round(supervised.wall_s, 1), out=str(out), log=str(out / "train.log"))
        judge_run(report, out, opts, nproc, supervised, report.result["device"])
        (out / "report.json").write_text(json.dumps(report.to_dict(), indent=1, ensure_ascii=False),
                                         encoding="utf-8")
    finally:
        finish_out(out)
        # DeepSpeed's CPU accelerator never deletes its all-reduce segments (dsdoctor/shm.py): 66 MB of RAM a rank
        # that outlive the run. Delete this run's, once no rank maps them.
        removed = remove_stale(port=port)
        if removed:
            report.result["shm_segments_removed"] = [str(s.path) for s in removed]
    if any(f.severity == "error" for f in report.findings):
        click.echo(f"dsdoctor smoke: the run's full log is {out / 'train.log'} (dsdoctor explain "
                   f"{out / 'train.log'})", err=True)
    return report


@click.command("smoke")
@click.option("--steps", type=click.IntRange(1, 10 ** 7), default=100, show_default=True, help="Optimizer steps to run.")
@click.option("--model", default=None, metavar="NAME|PATH",
              help="Local model directory (config.json, weights or not, tokenizer). Default: the bundled tiny model.")
@click.option("--deepspeed", "ds_config", default=None, metavar="ds_config.json",
              help="Your DeepSpeed config, used as is. Default: one built for this machine (ZeRO-2, AdamW, WarmupLR).")
@click.option("--method", type=click.Choice(["lora", "freeze", "ptuning", "full"]), default="lora", show_default=True)
@click.option("--nproc", type=click.IntRange(1, 4096), default=None,
              help="Ranks to launch. Default: the visible GPUs, else 2 CPU ranks.")
@click.option("--data", default=None, metavar="FILE",
              help="JSON lines: instruction/input/output, prompt/response, or messages conversations. Default: bundled.")
@click.option("--seq-len", type=click.IntRange(8, 2 ** 20), default=256, show_default=True,
              help="Truncate samples to this many tokens.")
@click.option("--out", default="dsdoctor-smoke", show_default=True, metavar="DIR",
              help="Where the run's logs, metrics, adapter, plot and report go.")
@click.option("--launcher", type=click.Choice(["torchrun", "deepspeed"]), default="torchrun", show_default=True)
@click.option("--timeout", "timeout_s", type=FiniteFloat(min=1, max=7 * 86400), default=1800, show_default=True,
              help="Seconds before the run is stopped (a run that does not finish fails).")
@click.option("--lr", "learning_rate", type=FiniteFloat(min=0, max=1), default=None,
              help="Learning rate of the default config (not with --deepspeed).")
@click.option("--zero", type=click.IntRange(0, 3), default=None, help="ZeRO stage of the default config (2).")
@click.option("--micro-batch", type=click.IntRange(1, 2 ** 16), default=None,
              help="Micro batch per rank of the default config (4).")
@click.option("--lora-targets", default=None, metavar="NAMES",
              help="LoRA target modules, comma-separated. Default: peft's table for the architecture.")
@click.option("--freeze-last", type=click.IntRange(0, 10 ** 6), default=None,
              help="freeze: train the last N layers (2).")
@click.option("--trust-remote-code", is_flag=True, help="Run the model directory's own modelling code.")
@click.option("--verify/--no-verify", default=True, show_default=True,
              help="Save, reload into a fresh base model, merge, and compare logits.")
@click.option("--check/--no-check", "check_config", default=True, show_default=True,
              help="Run `dsdoctor check`'s rules on --deepspeed first and stop on errors (--no-check: let "
                   "DeepSpeed judge it).")
@report_command(inputs=("model", "data", "ds_config"))
def smoke(steps, model, ds_config, method, nproc, data, seq_len, out, launcher, timeout_s, learning_rate, zero,
          micro_batch, lora_targets, freeze_last, trust_remote_code, verify, check_config) -> Report:
    """Run the reference trainer for a few steps on N ranks and prove it trains, saves and reloads."""
    return run_smoke(SmokeOptions(steps=steps, model=model, deepspeed=ds_config, method=method, nproc=nproc,
                                  data=data, seq_len=seq_len, out=out, launcher=launcher, timeout_s=timeout_s,
                                  learning_rate=learning_rate, zero=zero, micro_batch=micro_batch,
                                  lora_targets=lora_targets, freeze_last=freeze_last,
                                  trust_remote_code=trust_remote_code, verify=verify, check=check_config))
