"""``dsdoctor smoke``: a short real run of the reference trainer that proves the setup trains.

It launches N ranks of ``reference_train/train.py`` through torchrun or the deepspeed launcher, follows
rank 0's metrics with a live progress bar (stderr), and then judges what the ranks wrote to ``--out``:
loss goes down (TRN601), memory is stable (TRN604), the save reloads and merges (TRN605), throughput
(TRN606), the run's environment (TRN600); when the run dies, which rank failed first and why
(TRN607/TRN610/DATA7xx), with no process left behind (also on Ctrl-C and on --timeout).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click

from dsdoctor.cli import report_command
from dsdoctor.report import DsdoctorError, Report

GiB = 2**30
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json", "vocab.txt")
# Written into --out by the first smoke run: a later run may clear RUN_OUTPUTS only where it finds this.
MARKER = ".dsdoctor-smoke"
# What the trainer writes under --out; cleared before a run so that old results are never read back.
RUN_OUTPUTS = ("metrics", "errors", "adapter", "checkpoint", "base_model", "eval.jsonl", "summary.json",
               "run_env.json", "train.log", "smoke.png", "report.json")


def trainer_script() -> Path:
    """The installed reference trainer (``dsdoctor/reference_train/train.py`` in site-packages)."""
    from dsdoctor import reference_train

    return Path(reference_train.__file__).resolve().parent / "train.py"


def bundled_model() -> Path:
    return trainer_script().parent / "assets" / "tiny-model"


@dataclass
class SmokeOptions:
    steps: int = 100
    model: str | None = None
    deepspeed: str | None = None
    method: str = "lora"
    nproc: int | None = None
    data: str | None = None
    seq_len: int = 256
    out: str = "dsdoctor-smoke"
    launcher: str = "torchrun"
    timeout_s: float = 1800.0
    learning_rate: float | None = None
    zero: int | None = None
    micro_batch: int | None = None
    lora_targets: str | None = None
    freeze_last: int | None = None
    trust_remote_code: bool = False
    verify: bool = True
    check: bool = True


def resolve_model(model: str | None) -> Path:
    """A local model directory with config.json and a tokenizer. Raises DsdoctorError otherwise."""
    if model in (None, "tiny", "default"):
        return bundled_model()
    path = Path(model).expanduser()
    if path.is_file() and path.name == "config.json":
        path = path.parent
    if not path.is_dir():
        raise DsdoctorError(f"--model {model}: no such directory (smoke needs a local model directory with "
                            f"config.json and a tokenizer; nothing is downloaded)")
    if not (path / "config.json").is_file():
        raise DsdoctorError(f"--model {model}: no config.json in {path}")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise DsdoctorError(f"--model {model}: no tokenizer files in {path} (expected one of {', '.join(TOKENIZER_FILES)})")
    return path


def read_ds_config(path: str) -> dict:
    """Parse a ds_config (JSON, or HJSON as DeepSpeed accepts). Raises DsdoctorError on a missing file,
    broken syntax, or a top level that is not an object."""
    from dsdoctor import configfile

    return configfile.read_ds_config(path, "--deepspeed")[0]


def visible_gpus() -> int:
    """GPUs this process may use: NVML's count, narrowed by CUDA_VISIBLE_DEVICES; 0 without NVML."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        return 0
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception:
        return 0
    if visible is not None:
        count = min(count, len([v for v in visible.split(",") if v.strip()]))
    return count


def trainer_args(opts: SmokeOptions, model: Path, out: Path) -> list[str]:
    args = ["--model", str(model), "--method", opts.method, "--max-steps", str(opts.steps),
            "--seq-len", str(opts.seq_len), "--output-dir", str(out), "--eval-every", str(max(opts.steps // 2, 1))]
    for flag, value in (("--data", opts.data), ("--deepspeed", opts.deepspeed),
                        ("--learning-rate", opts.learning_rate), ("--zero-stage", opts.zero),
                        ("--per-device-train-batch-size", opts.micro_batch), ("--lora-targets", opts.lora_targets),
                        ("--freeze-last", opts.freeze_last)):
        if value is not None:
            args += [flag, str(value)]
    if opts.trust_remote_code:
        args.append("--trust-remote-code")
    if not opts.verify:
        args.append("--no-verify")
    return args


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written when the run was killed
            pass
    return rows


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def supervise(cmd: list[str], env: dict, out: Path, steps: int, timeout_s: float) -> tuple[int | None, bool, float]:
    """Run the launcher with its output in ``out/train.log``; show a live progress bar with rank 0's loss on
    stderr. Returns (exit code or None on timeout, timed_out, wall seconds). Kills every rank on timeout,
    on a rank's error record that the launcher does not act on within 60 s, and on Ctrl-C (re-raised)."""
    from dsdoctor.launch import stop_on_termination, terminate_tree
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    metrics = out / "metrics" / "rank0.jsonl"
    start = time.monotonic()
    first_error_at = None
    with open(out / "train.log", "wb") as log, Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} steps"),
            TextColumn("{task.fields[loss]}"), TimeElapsedColumn(),
            console=Console(stderr=True), transient=False) as progress:
        task = progress.add_task("starting ranks", total=steps, loss="")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
        offset, last = 0, None
        try:
            with stop_on_termination():  # SIGTERM/SIGHUP stop the ranks as Ctrl-C does
                while proc.poll() is None:
                    time.sleep(0.5)
                    if metrics.is_file():
                        with open(metrics, encoding="utf-8") as f:
                            f.seek(offset)
                            chunk = f.read()
                        complete = chunk[: chunk.rfind("\n") + 1]
                        offset += len(complete.encode("utf-8"))
                        for line in complete.splitlines():
                            last = json.loads(line)
                        if last:
                            progress.update(task, description="training", completed=last["step"],
                                            loss=f"loss {last['loss']:.4f}")
                    if first_error_at is None and any((out / "errors").glob("rank*.json")):
                        first_error_at = time.monotonic()
                        progress.update(task, description="a rank failed")
                    if time.monotonic() - start > timeout_s or (
                            first_error_at is not None and time.monotonic() - first_error_at > 60):
                        timed_out = time.monotonic() - start > timeout_s
                        terminate_tree(proc)
                        return (None if timed_out else proc.returncode), timed_out, time.monotonic() - start
        except KeyboardInterrupt:
            progress.update(task, description="interrupted: stopping every rank")
            terminate_tree(proc)
            raise
        terminate_tree(proc, grace_s=2.0)  # the launcher has exited; reap any straggler it left
    return proc.returncode, False, time.monotonic() - start


def make_plot(path: Path, rows_by_rank: dict[int, list[dict]], memory_label: str) -> Path | None:
    """Loss (rank 0's global mean) and per-rank peak memory per step, as a PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    rows0 = rows_by_rank.get(0, [])
    ax1.plot([r["step"] for r in rows0], [r["loss"] for r in rows0], color="tab:blue")
    ax1.set_xlabel("optimizer step")
    ax1.set_ylabel("loss (mean over ranks)")
    ax1.set_title("loss")
    for rank, rows in sorted(rows_by_rank.items()):
        ax2.plot([r["step"] for r in rows], [r["mem_allocated_bytes"] / GiB for r in rows], label=f"rank {rank}")
        if any("nvml_used_bytes" in r for r in rows):
            ax2.plot([r["step"] for r in rows], [r.get("nvml_used_bytes", 0) / GiB for r in rows], "--",
                     label=f"rank {rank} NVML used")
    ax2.set_xlabel("optimizer step")
    ax2.set_ylabel("GiB")
    ax2.set_title(memory_label)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def environment_evidence(env: dict) -> str:
    ranks = "; ".join(f"rank {r['rank']} on {r['host']} {r['device']} ({r['device_name']}) pid {r['pid']}"
                      for r in env.get("ranks", []))
    versions = ", ".join(f"{k} {env[k]}" for k in ("python", "torch", "cuda", "nccl", "deepspeed", "transformers", "peft")
                         if env.get(k))
    return (f"world size {env['world_size']} over {env['backend']} (master {env['master']}); {ranks}; {versions}; "
            f"{env.get('method')} on {env.get('total_params', 0):,} parameters, {env.get('trainable_params', 0):,} "
            f"trainable; {env.get('dtype')}, ZeRO-{env.get('zero_stage')}, micro batch "
            f"{env.get('train_micro_batch_size_per_gpu')} x grad acc {env.get('gradient_accumulation_steps')} x "
            f"world {env['world_size']} = {env.get('train_batch_size')}")


def prepare_out(out: Path) -> Path:
    """Create --out, or clear the outputs of a previous smoke run in it. A directory that holds anything
    else and no smoke marker is refused: it may be a real training output (checkpoints, logs).
    Raises DsdoctorError."""
    out = out.expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise DsdoctorError(f"--out {out}: is a file, not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).exists():
        raise DsdoctorError(f"--out {out}: not empty and not made by dsdoctor smoke; choose a new directory "
                            f"(nothing in it was touched)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / MARKER).write_text("written by dsdoctor smoke: a later run clears its own outputs here\n")
        for name in RUN_OUTPUTS:  # only what a previous smoke run wrote
            target = out / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
        (out / "metrics").mkdir()
        (out / "errors").mkdir()
    except OSError as exc:
        raise DsdoctorError(f"--out {out}: {exc.strerror}") from None
    return out


def run_smoke(opts: SmokeOptions) -> Report:
    """Launch, supervise and judge one smoke run. Raises DsdoctorError on bad input (exit 2)."""
    from dsdoctor.checks import training
    from dsdoctor.checks.network import free_port, master_port_finding

    if opts.steps < 1:
        raise DsdoctorError(f"--steps must be at least 1, got {opts.steps}")
    for module, hint in (("torch", "pip install torch"), ("deepspeed", "pip install deepspeed"),
                         ("transformers", "pip install transformers"), ("peft", "pip install peft")):
        if importlib.util.find_spec(module) is None:
            raise DsdoctorError(f"{module} is not installed in {sys.executable}: {hint}")
    model = resolve_model(opts.model)
    if opts.data is not None and not Path(opts.data).is_file():
        raise DsdoctorError(f"--data {opts.data}: no such file")
    ds_config = read_ds_config(opts.deepspeed) if opts.deepspeed is not None else None
    gpus = visible_gpus()
    nproc = opts.nproc or gpus or 2
    if nproc < 1:
        raise DsdoctorError(f"--nproc must be at least 1, got {nproc}")
    if gpus and nproc > gpus:
        raise DsdoctorError(f"--nproc {nproc} but {gpus} GPU(s) visible (CUDA_VISIBLE_DEVICES="
                            f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): one rank per GPU")

    report = Report("smoke", result={"world_size": nproc, "launcher": opts.launcher, "device": "cuda" if gpus else "cpu",
                                     "steps_requested": opts.steps, "model": str(model), "method": opts.method})
    # Problems that fail every rank for certain are reported before any rank starts: a busy port, and every
    # error `dsdoctor check` finds in the ds_config (the reference trainer calls deepspeed.initialize with
    # model_parameters and no client optimizer: --launch engine).
    finding = master_port_finding()
    if finding is not None:
        report.add(finding)
    if ds_config is not None and opts.check:
        from dsdoctor.checks.deepspeed_config import CheckContext, check_config

        checked = check_config(ds_config, CheckContext(world_size=nproc, world_size_source="--nproc",
                                                       launch="engine"))
        for finding in checked.findings:
            if finding.severity in ("error", "warning"):
                report.add(finding)
    if any(f.severity == "error" for f in report.findings):
        return report
    port = int(os.environ["MASTER_PORT"]) if os.environ.get("MASTER_PORT") else free_port()

    out = prepare_out(Path(opts.out))

    from dsdoctor.launch import launcher_command

    cmd = launcher_command(opts.launcher, nproc, port, trainer_script(), trainer_args(opts, model, out))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
    # torchrun sets 1 thread per rank when unset, the deepspeed launcher does not: ranks then oversubscribe
    # the cores (3.5x slower on 2 CPU ranks). Share the cores between the ranks for both.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    env.pop("MASTER_PORT", None)
    report.result["command"] = " ".join(cmd)
    returncode, timed_out, wall_s = supervise(cmd, env, out, opts.steps, opts.timeout_s)
    report.result.update(wall_s=round(wall_s, 1), out=str(out), log=str(out / "train.log"))

    run_env = _read_json(out / "run_env.json")
    summary = _read_json(out / "summary.json") or {}
    rows_by_rank = {int(p.stem.removeprefix("rank")): _read_jsonl(p) for p in sorted((out / "metrics").glob("rank*.jsonl"))}
    errors = [e for e in (_read_json(p) for p in sorted((out / "errors").glob("rank*.json"))) if e]
    log_text = (out / "train.log").read_bytes()[-4 * 2 ** 20:].decode("utf-8", "replace")  # the end of the log
    log_tail = log_text[-20000:]

    if run_env:
        report.add(training.TRN600.finding(environment_evidence(run_env)))
        report.result["environment"] = run_env
    if timed_out:
        seen = {r: rows[-1]["step"] if rows else 0 for r, rows in rows_by_rank.items()}
        silent = [r for r in range(nproc) if not seen.get(r)]
        last_write = max((rows[-1]["time"] for rows in rows_by_rank.values() if rows), default=None)
        step_s = statistics.median([r["step_time_s"] for rows in rows_by_rank.values() for r in rows] or [0])
        progressing = last_write is not None and time.time() - last_write < 30 + 3 * step_s
        evidence = (f"no end after {opts.timeout_s:g} s; last step per rank {seen or 'none'} of {opts.steps}"
                    + (f"; rank(s) {silent} never logged a step" if silent else ""))
        if progressing:
            report.add(training.TRN608.finding(
                evidence + f"; still advancing at {step_s:.2f} s/step", title="Run did not finish within --timeout",
                severity="warning", fix=f"The run is slow, not hung: raise --timeout (about "
                                        f"{opts.steps * step_s * 1.5 + 120:.0f} s) or lower --steps."))
        else:
            report.add(training.TRN608.finding(evidence))
    elif returncode != 0 or errors:
        for finding in training.failure_findings(errors, returncode, log_tail):
            report.add(finding)
        # the pitfall by name, as `dsdoctor explain` reads a log: the run's output and its ranks' error records
        from dsdoctor.checks.logs import pitfall_findings

        text = log_text + "\n" + "\n".join(str(e.get("message", "")) for e in errors)
        for finding in pitfall_findings(text, already={f.id for f in report.findings}):
            report.add(finding)

    rows0 = rows_by_rank.get(0, [])
    losses = [r["loss"] for r in rows0]
    report.result["steps"] = len(rows0)
    failed = timed_out or returncode != 0 or bool(errors)
    if losses and not failed:
        for finding in training.loss_verdicts(losses):
            report.add(finding)
    if len(losses) >= 2:
        first, last = training.loss_means(losses)
        report.result.update(loss_first=round(first, 4), loss_last=round(last, 4))
    report.result["loss_decreased"] = any(f.id == "TRN601" and f.severity == "ok" for f in report.findings)

    device_type = report.result["device"]
    if run_env and run_env.get("ranks"):
        device_type = "cuda" if run_env["ranks"][0]["device"].startswith("cuda") else "cpu"
    if rows_by_rank and any(rows_by_rank.values()):
        def per_rank_peak(key: str) -> list[int | None]:
            return [max((r.get(key, 0) for r in rows), default=None) for _, rows in sorted(rows_by_rank.items())]

        report.result["peak_allocated_bytes"] = per_rank_peak("mem_allocated_bytes")
        report.result["peak_reserved_bytes"] = per_rank_peak("mem_reserved_bytes")
        if any("nvml_used_bytes" in r for rows in rows_by_rank.values() for r in rows):
            report.result["nvml_used_bytes"] = per_rank_peak("nvml_used_bytes")
        report.result["memory_kind"] = "torch.cuda max allocated/reserved" if device_type == "cuda" \
            else "process resident set (CPU)"
        if not failed:
            report.add(training.memory_verdict({r: [x["mem_allocated_bytes"] for x in rows]
                                                for r, rows in rows_by_rank.items() if rows}, device_type))
        speed = training.throughput({r: rows for r, rows in rows_by_rank.items() if rows})
        report.result["tokens_per_s"] = [round(v, 1) for v in speed["tokens_per_s"]]
        report.result["samples_per_s"] = [round(v, 2) for v in speed["samples_per_s"]]
        evidence = (f"tokens/s per rank {report.result['tokens_per_s']} (total {sum(speed['tokens_per_s']):,.0f}); "
                    f"samples/s per rank {report.result['samples_per_s']}")
        if device_type == "cuda" and run_env:
            peak = training.peak_flops(run_env["ranks"][0]["device_name"])
            if peak and summary.get("num_layers"):
                per_token = training.model_flops_per_token(
                    summary["total_params"], summary["trainable_params"], summary["num_layers"],
                    summary["hidden_size"], statistics.fmean(speed["mean_tokens_per_sample"]))
                report.result["mfu"] = [round(t * per_token / peak, 4) for t in speed["tokens_per_s"]]
                evidence += f"; MFU per rank {report.result['mfu']} of {peak / 1e12:.0f} TFLOP/s dense 16-bit"
        if not failed:
            report.add(training.TRN606.finding(evidence))
        plot = make_plot(out / "smoke.png", rows_by_rank,
                         "peak allocated per step" if device_type == "cuda" else "resident memory per step")
        report.result["plot"] = str(plot) if plot else None

    if not failed and opts.verify:
        report.add(training.checkpoint_verdict(summary.get("verify"), opts.method))
    verify = summary.get("verify") or {}
    report.result["checkpoint_roundtrip"] = bool(verify.get("roundtrip_ok")) and not failed
    report.result["verify"] = verify or None
    for key in ("trainable_params", "total_params", "zero_stage", "dtype"):
        if key in summary:
            report.result[key] = summary[key]
    eval_rows = _read_jsonl(out / "eval.jsonl")
    if eval_rows:  # the generations of the last evaluation
        report.result["greedy_eval"] = [r for r in eval_rows if r["step"] == eval_rows[-1]["step"]]
    (out / "report.json").write_text(json.dumps(report.to_dict(), indent=1, ensure_ascii=False), encoding="utf-8")
    return report


@click.command("smoke")
@click.option("--steps", type=click.IntRange(min=1), default=100, show_default=True, help="Optimizer steps to run.")
@click.option("--model", default=None, metavar="NAME|PATH",
              help="Local model directory (config.json, weights or not, tokenizer). Default: the bundled tiny model.")
@click.option("--deepspeed", "ds_config", default=None, metavar="ds_config.json",
              help="Your DeepSpeed config, used as is. Default: one built for this machine (ZeRO-2, AdamW, WarmupLR).")
@click.option("--method", type=click.Choice(["lora", "freeze", "ptuning", "full"]), default="lora", show_default=True)
@click.option("--nproc", type=click.IntRange(min=1), default=None, help="Ranks to launch. Default: the visible GPUs, else 2 CPU ranks.")
@click.option("--data", default=None, metavar="FILE", help="JSON lines with instruction, input, output. Default: bundled.")
@click.option("--seq-len", type=click.IntRange(min=8), default=256, show_default=True, help="Truncate samples to this many tokens.")
@click.option("--out", default="dsdoctor-smoke", show_default=True, metavar="DIR",
              help="Where the run's logs, metrics, adapter, plot and report go.")
@click.option("--launcher", type=click.Choice(["torchrun", "deepspeed"]), default="torchrun", show_default=True)
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=1800, show_default=True, help="Seconds before the run is killed.")
@click.option("--lr", "learning_rate", type=float, default=None, help="Learning rate of the default config.")
@click.option("--zero", type=click.IntRange(0, 3), default=None, help="ZeRO stage of the default config (2).")
@click.option("--micro-batch", type=click.IntRange(min=1), default=None, help="Micro batch per rank of the default config (4).")
@click.option("--lora-targets", default=None, metavar="NAMES",
              help="LoRA target modules, comma-separated. Default: peft's table for the architecture.")
@click.option("--freeze-last", type=click.IntRange(min=0), default=None, help="freeze: train the last N layers (2).")
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
                                  learning_rate=learning_rate, zero=zero, micro_batch=micro_batch, lora_targets=lora_targets, freeze_last=freeze_last,
                                  trust_remote_code=trust_remote_code, verify=verify, check=check_config))
