"""The verdicts of a finished (or stopped) smoke run, from what its ranks wrote to ``--out``: the run's environment
(TRN600), how it ended (TRN607/TRN608/TRN610/ENV329/DATA7xx), the loss (TRN601/TRN611), memory (TRN604), throughput
(TRN606) and the save (TRN605)."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from dsdoctor.report import Report

GiB = 2 ** 30


def read_jsonl(path: Path) -> list[dict]:
    """The JSON objects of a JSON-lines file; a line that does not parse (being written when the run was killed) or
    is not an object is skipped."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def read_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def metric_rows(path: Path) -> list[dict]:
    """Rank metric rows that carry what the verdicts read (step, loss, step time, memory), in step order."""
    rows = [r for r in read_jsonl(path) if isinstance(r.get("step"), int) and isinstance(r.get("loss"), (int, float))
            and isinstance(r.get("step_time_s"), (int, float)) and isinstance(r.get("mem_allocated_bytes"), int)]
    return sorted(rows, key=lambda r: r["step"])


def environment_evidence(env: dict) -> str:
    ranks = "; ".join(f"rank {r.get('rank')} on {r.get('host')} {r.get('device')} ({r.get('device_name')}) pid "
                      f"{r.get('pid')}" for r in env.get("ranks", []) if isinstance(r, dict))
    versions = ", ".join(f"{k} {env[k]}" for k in ("python", "torch", "cuda", "nccl", "deepspeed", "transformers", "peft")
                         if env.get(k))
    return (f"world size {env.get('world_size')} over {env.get('backend')} (master {env.get('master')}); {ranks}; "
            f"{versions}; {env.get('method')} on {env.get('total_params', 0):,} parameters, "
            f"{env.get('trainable_params', 0):,} trainable; {env.get('dtype')}, ZeRO-{env.get('zero_stage')}, micro "
            f"batch {env.get('train_micro_batch_size_per_gpu')} x grad acc {env.get('gradient_accumulation_steps')} x "
            f"world {env.get('world_size')} = {env.get('train_batch_size')}")


def timeout_finding(rows_by_rank: dict[int, list[dict]], nproc: int, steps: int, timeout_s: float, builds: list[dict],
                    started: bool = True):
    """TRN608, always an error: a run that did not finish proved neither its loss nor its save. The title and fix say
    whether it was still advancing (slow, not hung), still building an op, or stopped."""
    from dsdoctor.checks import training

    seen = {r: rows[-1]["step"] if rows else 0 for r, rows in rows_by_rank.items()}
    silent = [r for r in range(nproc) if not seen.get(r)]
    last_write = max((rows[-1].get("time", 0) for rows in rows_by_rank.values() if rows), default=None)
    step_s = statistics.median([r["step_time_s"] for rows in rows_by_rank.values() for r in rows] or [0])
    progressing = last_write is not None and time.time() - last_write < 30 + 3 * step_s
    evidence = (f"no end after {timeout_s:g} s; last step per rank {seen or 'none'} of {steps}"
                + (f"; rank(s) {silent} never logged a step" if silent else ""))
    unfinished = [b for b in builds if "seconds" not in b]
    if progressing:
        return training.TRN608.finding(
            evidence + f"; still advancing at {step_s:.2f} s/step", title="Run did not finish within --timeout",
            fix=f"The run is slow, not hung, but it did not finish, so the loss and the save were not judged: raise "
                f"--timeout (about {steps * step_s * 1.5 + 120:.0f} s) or lower --steps.")
    if unfinished and not any(seen.values()):
        build = unfinished[0]
        return training.TRN608.finding(
            evidence + f"; the ranks were still building DeepSpeed op {build['op']} ({build['by']}, lock "
                       f"{build['path']})", title="Run timed out while DeepSpeed's op was still building",
            fix="A first JIT build takes a minute or more on few cores: raise --timeout, or build it once beforehand "
                "(dsdoctor env --build-ops ds_config.json).")
    if not started and not any(seen.values()):  # run_env.json is written after deepspeed.initialize
        return training.TRN608.finding(
            evidence + "; no rank finished starting (loading the model, deepspeed.initialize)",
            title="Run timed out before its ranks finished starting",
            fix="Start-up alone (imports, building or loading the model, DeepSpeed's first op builds) takes tens of "
                "seconds on a CPU and minutes for a large model: raise --timeout. If it stays stuck there, the "
                "ranks' last lines in train.log show where (a rendezvous waiting for a rank, a lock, a download).")
    return training.TRN608.finding(evidence)


def judge_run(report: Report, out: Path, opts, nproc: int, supervised, device_type: str) -> None:
    """Add every verdict of the run in ``out`` to ``report`` (and its numbers to ``report.result``)."""
    from dsdoctor.checks import environment, training
    from dsdoctor.checks.logs import pitfall_findings

    from .plot import make_plot

    run_env = read_json(out / "run_env.json")
    summary = read_json(out / "summary.json") or {}
    rows_by_rank = {}
    for path in sorted((out / "metrics").glob("rank*.jsonl")):
        try:
            rows_by_rank[int(path.stem.removeprefix("rank"))] = metric_rows(path)
        except ValueError:
            continue
    errors = [e for e in (read_json(p) for p in sorted((out / "errors").glob("rank*.json")))
              if e and isinstance(e.get("rank"), int) and isinstance(e.get("message", ""), str)]
    try:
        log_text = (out / "train.log").read_bytes()[-4 * 2 ** 20:].decode("utf-8", "replace")  # the end of the log
    except OSError:
        log_text = ""
    log_tail = log_text[-20000:]

    if run_env:
        report.add(training.TRN600.finding(environment_evidence(run_env)))
        report.result["environment"] = run_env
    failed = supervised.timed_out or supervised.stale_lock is not None or supervised.returncode != 0 or bool(errors)
    if supervised.stale_lock is not None:
        lock = supervised.stale_lock
        report.add(environment.ENV329.finding(
            f"the ranks waited on {lock['path']} (op {lock['op']}, {lock['age_s']:.0f} s old), which no live "
            f"process holds open and no compiler works on; the run was stopped after "
            f"{supervised.wall_s:.0f} s", fix=f"rm {lock['path']}  # then run again: the op is rebuilt once"))
    elif supervised.timed_out:
        report.add(timeout_finding(rows_by_rank, nproc, opts.steps, opts.timeout_s, supervised.builds,
                                   started=run_env is not None))
        for finding in supervised.hang:  # which rank waited where when the run was stopped
            report.add(finding)
    elif supervised.returncode != 0 or errors:
        for finding in training.failure_findings(errors, supervised.returncode, log_tail):
            report.add(finding)
        # the pitfall by name, as `dsdoctor explain` reads a log: the run's output and its ranks' error records
        text = log_text + "\n" + "\n".join(str(e.get("message", "")) for e in errors)
        for finding in pitfall_findings(text, already={f.id for f in report.findings}):
            report.add(finding)
    if supervised.removed_locks:
        report.result["removed_build_locks"] = supervised.removed_locks
    if supervised.builds:
        report.result["op_builds"] = supervised.builds

    rows0 = rows_by_rank.get(0, [])
    losses = [r["loss"] for r in rows0]
    report.result["steps"] = len(rows0)
    loss_plot = None
    if losses and not failed:
        lrs = [r["lr"] for r in rows0 if isinstance(r.get("lr"), (int, float))]
        context = {"parameter_change": summary.get("parameter_change"), "lr_peak": max(lrs) if lrs else None,
                   "random_init": (run_env or summary).get("random_init"),
                   "bundled_model": (run_env or summary).get("bundled_model"), "method": opts.method}
        for finding in training.loss_verdicts(losses, context=context):
            report.add(finding)
            if finding.id in ("TRN601", "TRN611"):
                loss_plot = {"status": {"ok": "PASS", "warning": "INCONCLUSIVE", "error": "FAIL"}.get(
                    finding.severity, finding.severity.upper()), "title": finding.title}
        if summary.get("parameter_change"):
            report.result["parameter_change"] = summary["parameter_change"]
    if len(losses) >= 2:
        first, last = training.loss_means(losses)
        report.result.update(loss_first=round(first, 4), loss_last=round(last, 4))
        if loss_plot:
            loss_plot.update(window=min(10, len(losses) // 2), first=first, last=last)
    report.result["loss_decreased"] = any(f.id == "TRN601" and f.severity == "ok" for f in report.findings)

    if run_env and run_env.get("ranks") and isinstance(run_env["ranks"][0], dict):
        device_type = "cuda" if str(run_env["ranks"][0].get("device", "")).startswith("cuda") else "cpu"
    if any(rows_by_rank.values()):
        def per_rank_peak(key: str) -> list[int | None]:
            return [max((r.get(key, 0) for r in rows), default=None) for _, rows in sorted(rows_by_rank.items())]

        report.result["peak_allocated_bytes"] = per_rank_peak("mem_allocated_bytes")
        report.result["peak_reserved_bytes"] = per_rank_peak("mem_reserved_bytes")
        if any("nvml_used_bytes" in r for rows in rows_by_rank.values() for r in rows):
            report.result["nvml_used_bytes"] = per_rank_peak("nvml_used_bytes")
        report.result["memory_kind"] = "torch.cuda max allocated/reserved" if device_type == "cuda" \
            else "process resident set (CPU)"
        memory = {r: [x["mem_allocated_bytes"] for x in rows] for r, rows in rows_by_rank.items() if rows}
        band = {}
        if not failed:
            report.add(training.memory_verdict(memory, device_type))
            skipped = 5 if all(len(v) > 9 for v in memory.values()) else 0
            for rank, series in memory.items():
                half = series[skipped:][: len(series[skipped:]) // 2]
                if half:
                    band[rank] = (max(half), training.memory_tolerance(max(half), device_type))
        speed = training.throughput({r: rows for r, rows in rows_by_rank.items() if rows})
        report.result["tokens_per_s"] = [round(v, 1) for v in speed["tokens_per_s"]]
        report.result["samples_per_s"] = [round(v, 2) for v in speed["samples_per_s"]]
        evidence = (f"tokens/s per rank {report.result['tokens_per_s']} (total {sum(speed['tokens_per_s']):,.0f}); "
                    f"samples/s per rank {report.result['samples_per_s']}")
        if device_type == "cuda" and run_env:
            peak = training.peak_flops(str(run_env["ranks"][0].get("device_name", "")))
            if peak and summary.get("num_layers"):
                per_token = training.model_flops_per_token(
                    summary["total_params"], summary["trainable_params"], summary["num_layers"],
                    summary["hidden_size"], statistics.fmean(speed["mean_tokens_per_sample"]))
                report.result["mfu"] = [round(t * per_token / peak, 4) for t in speed["tokens_per_s"]]
                evidence += f"; MFU per rank {report.result['mfu']} of {peak / 1e12:.0f} TFLOP/s dense 16-bit"
        if not failed:
            report.add(training.TRN606.finding(evidence))
        plot = make_plot(out / "smoke.png", rows_by_rank,
                         "peak allocated per step" if device_type == "cuda" else "resident memory per step",
                         loss_verdict=loss_plot, memory_band=band)
        report.result["plot"] = str(plot) if plot else None

    if not failed and opts.verify:
        report.add(training.checkpoint_verdict(summary.get("verify"), opts.method, summary.get("parameter_change")))
    verify = summary.get("verify") or {}
    report.result["checkpoint_roundtrip"] = bool(verify.get("roundtrip_ok")) and not failed
    report.result["verify"] = verify or None
    for key in ("trainable_params", "total_params", "zero_stage", "dtype"):
        if key in summary:
            report.result[key] = summary[key]
    eval_rows = [r for r in read_jsonl(out / "eval.jsonl") if "step" in r]
    if eval_rows:  # the generations of the last evaluation
        report.result["greedy_eval"] = [r for r in eval_rows if r["step"] == eval_rows[-1]["step"]]
