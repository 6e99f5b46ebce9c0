"""Issue 13's calibration runs: the programs users run, measured as nvidia-smi shows them, over the whole run.

Each point builds a registry model from its config.json on the GPU (random init, bf16, transformers' default
attention: SDPA, or eager where the class has no SDPA, as Gemma-2), applies the method (peft LoRA / prefix tuning,
freeze of the last layers, full), and trains 3 steps on random tokens in one of two loops:

- ``engine``: the tutorials' DeepSpeed loop exactly: ``outputs = engine(input_ids=ids, labels=ids);
  engine.backward(outputs.loss); engine.step()`` (``outputs`` lives until the next forward has returned);
- ``engine-loss``: the same loop keeping only the loss, as MEM509's fix writes it and as dsdoctor's reference
  trainer does: ``loss = engine(input_ids=ids, labels=ids).loss``;
- ``trainer``: ``transformers.Trainer`` with ``TrainingArguments(deepspeed=<the same config dict>)``.

Measured, over the whole run (build and ``initialize`` included):

- NVML's device "used", polled every 5 ms by a thread, with the idle baseline read before CUDA starts;
- ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` (never reset);
- the phase the allocated peak fell in (``build``, ``initialize``, ``stepN:forward|backward|step``; the Trainer's
  steps are one phase each, found with a callback), and whether the run ran out of memory.

    # on the GPU machine (each point in its own process; one JSON per point into OUT)
    python benchmarks/memory_loops.py run --grid benchmarks/memory_loops_grid.json --out OUT [--only a,b]
    # anywhere: predicted (dsdoctor, DeepSpeed's and accelerate's estimators) against measured
    python benchmarks/memory_loops.py report benchmarks/results/memory-loops/points
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

GIB = 2 ** 30


class NvmlPoller:
    """NVML "used" of GPU 0 every ``period_s`` seconds in a thread: ``baseline`` (before anything of ours), ``peak``."""

    def __init__(self, period_s: float = 0.005):
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.baseline = self.used()
        self.peak = self.baseline
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period_s,), daemon=True)
        self._thread.start()

    def used(self) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def _run(self, period_s: float) -> None:
        while not self._stop.is_set():
            try:
                value = self.used()
            except Exception:  # noqa: BLE001 - a failed read is skipped
                continue
            self.samples += 1
            if value > self.peak:
                self.peak = value
            time.sleep(period_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1)


def ds_config(point: dict) -> dict:
    """The DeepSpeed config of a point: the calibration grid's own (``memory_accuracy.ds_config``), so both grids
    measure one config."""
    from memory_accuracy import ds_config as grid_config

    return grid_config(point)


def point_config(point: dict) -> dict:
    """The config.json of a point: its own ``config`` (a hub config.json that is no registry row, e.g. Phi-4),
    else its registry row's."""
    from dsdoctor.models import REGISTRY

    return point.get("config") or REGISTRY[point["model"]][1]


def lora_targets(point: dict):
    """peft's ``target_modules`` of a point: its names, or peft's "all-linear" (a string there, not a module name)."""
    targets = point.get("lora_targets")
    return "all-linear" if targets == ["all-linear"] else targets


def build(point: dict, torch):
    """The model of ``point`` on the GPU with its method applied; (model, its config)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    row = point_config(point)
    values = {k: v for k, v in row.items() if k not in ("torch_dtype", "model_type", "auto_map", "_name_or_path",
                                                         "architectures", "transformers_version")}
    config = AutoConfig.for_model(row["model_type"], **values)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    method = point["method"]
    if method == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=point.get("lora_r", 8), lora_alpha=16,
                                                 lora_dropout=point.get("lora_dropout", 0.05),
                                                 target_modules=lora_targets(point)))
    elif method == "ptuning":
        from peft import PrefixTuningConfig, get_peft_model

        model = get_peft_model(model, PrefixTuningConfig(task_type="CAUSAL_LM",
                                                         num_virtual_tokens=point.get("prefix_tokens", 16)))
    elif method == "freeze":
        model.requires_grad_(False)
        layers = max((m for m in model.modules() if isinstance(m, torch.nn.ModuleList)), key=len)
        for layer in layers[len(layers) - point.get("freeze_last", 2):]:
            layer.requires_grad_(True)
    if point.get("grad_ckpt", True):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if method != "full":
            model.enable_input_require_grads()
    model.config.use_cache = False
    return model, config.get_text_config() if hasattr(config, "get_text_config") else config


def run_point(point: dict, out_dir: Path) -> dict:
    """Train 3 steps of ``point`` in its loop and record the whole-run peaks (see the module docstring)."""
    poller = NvmlPoller()  # before torch touches CUDA: the baseline is the idle device
    import torch

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    record: dict = {"point": point, "oom": False, "nvml_baseline": poller.baseline}
    phase = {"name": "build"}
    peaks: list[tuple[int, str]] = []
    reserved: list[tuple[int, str]] = []

    marks: list[tuple[int, str]] = []

    def mark(name: str) -> None:
        torch.cuda.synchronize()
        marks.append((time.time_ns() // 1000, name))
        peaks.append((torch.cuda.max_memory_allocated(), phase["name"]))
        reserved.append((torch.cuda.max_memory_reserved(), phase["name"]))
        phase["name"] = name

    if point.get("snapshot"):
        # every allocator event with its Python stack, summarised at the end (:func:`trace_summary`)
        # ("nostack": sizes only; stack capture breaks ZeRO-3's autograd Function under parameter offload: SystemError)
        torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python",
                                                 context=None if point["snapshot"] == "nostack" else "all")
    t0 = time.time()
    try:
        model, config = build(point, torch)
        record["total_params"] = sum(p.numel() for p in model.parameters())
        record["trainable_params"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
        mark("initialize")
        b, s = point["micro_batch"], point["seq_len"]
        generator = torch.Generator().manual_seed(0)
        if point.get("loop", "engine") in ("engine", "engine-loss"):
            import deepspeed

            trainable = [p for p in model.parameters() if p.requires_grad]
            engine, *_ = deepspeed.initialize(model=model, model_parameters=trainable, config=ds_config(point))
            losses = []
            outputs = None
            for step in range(3):
                ids = torch.randint(0, config.vocab_size, (b, s), generator=generator).to(engine.device)
                mark(f"step{step + 1}:forward")
                if point.get("loop", "engine") == "engine":
                    outputs = engine(input_ids=ids, labels=ids)  # the tutorial keeps `outputs` to the next forward
                    loss = outputs.loss
                else:
                    loss = engine(input_ids=ids, labels=ids).loss
                mark(f"step{step + 1}:backward")
                engine.backward(loss)
                mark(f"step{step + 1}:step")
                engine.step()
                losses.append(float(loss.detach()))
            mark("done")
        else:
            from transformers import Trainer, TrainerCallback, TrainingArguments

            class Data(torch.utils.data.Dataset):
                def __len__(self):
                    return 3 * b

                def __getitem__(self, i):
                    ids = torch.randint(0, config.vocab_size, (s,), generator=torch.Generator().manual_seed(i))
                    return {"input_ids": ids, "labels": ids}

            class Phases(TrainerCallback):
                def on_step_begin(self, args, state, control, **kw):
                    mark(f"step{state.global_step + 1}")

            args = TrainingArguments(output_dir=str(out_dir / f"trainer-{point['name']}"), max_steps=3,
                                     per_device_train_batch_size=b, bf16=True, deepspeed=ds_config(point),
                                     logging_steps=1, save_strategy="no", report_to=[], learning_rate=1e-5,
                                     gradient_checkpointing=False, dataloader_num_workers=0)
            trainer = Trainer(model=model, args=args, train_dataset=Data(), callbacks=[Phases()])
            result = trainer.train()
            losses = [result.training_loss]
            mark("done")
        record["losses"] = losses
    except torch.cuda.OutOfMemoryError as exc:
        record["oom"] = True
        record["error"] = str(exc).splitlines()[0][:300]
        peaks.append((torch.cuda.max_memory_allocated(), phase["name"]))
    record["seconds"] = round(time.time() - t0, 1)
    torch.cuda.synchronize()
    time.sleep(0.05)  # one more poll after the last kernel
    poller.stop()
    record["nvml_peak_used"] = poller.peak
    record["nvml_samples"] = poller.samples
    record["nvml_peak_over_baseline"] = poller.peak - poller.baseline
    record["max_allocated"] = torch.cuda.max_memory_allocated()
    record["max_reserved"] = torch.cuda.max_memory_reserved()
    record["peak_phase"] = max(peaks)[1] if peaks else phase["name"]
    record["phase_peaks"] = [[p, n] for p, n in peaks]
    record["phase_reserved"] = [[p, n] for p, n in reserved]
    import resource

    record["host_max_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    record["gpu_total"] = torch.cuda.get_device_properties(0).total_memory
    record["gpu"] = torch.cuda.get_device_name(0)
    if point.get("snapshot"):
        try:
            snapshot = torch.cuda.memory._snapshot()
            record["trace_summary"] = trace_summary(snapshot)
            record["large_pool_events"] = large_pool_events(snapshot)
            record["phase_marks_us"] = marks
        except Exception as exc:  # noqa: BLE001 - a diagnostic; the point's measures stay
            record["trace_summary"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    (out_dir / f"{point['name']}.json").write_text(json.dumps(record, indent=1))
    return record


def _site(frames: list[dict]) -> str:
    """Where an allocation was made: the innermost frames in deepspeed, transformers, peft, accelerate or this
    benchmark (up to three), as ``file:line name`` joined by `` < ``."""
    keep = []
    for f in frames or []:
        name = f.get("filename", "")
        for lib in ("deepspeed/", "transformers/", "peft/", "accelerate/", "benchmarks/"):
            if lib in name:
                keep.append(f"{lib}{name.split(lib, 1)[1]}:{f.get('line')} {f.get('name')}")
                break
        if len(keep) == 3:
            break
    return " < ".join(keep) or "(no library frame)"


def trace_summary(snapshot: dict, top: int = 25) -> dict:
    """What the caching allocator held at the run's allocated peak and at its reserved peak, replayed from
    ``torch.cuda.memory._snapshot()``'s device trace (``torch/cuda/memory.py`` ``_record_memory_history``: actions
    ``alloc`` / ``free_completed`` move allocated bytes, ``segment_alloc`` / ``segment_free`` (and ``segment_map`` /
    ``segment_unmap`` with expandable segments) move reserved bytes). Bytes; the blocks alive at each peak grouped by
    :func:`_site`, the largest ``top`` groups; at the reserved peak, each segment's free bytes, the largest ``top``."""
    trace = snapshot["device_traces"][0]

    def replay(stop: int | None = None):
        """(alive blocks, segments, allocated, reserved) after event ``stop``; with no stop, the peaks' events."""
        alive: dict[int, tuple[int, str]] = {}
        segments: dict[int, tuple[int, str]] = {}
        allocated = reserved = 0
        peak_alloc = peak_res = (-1, 0)
        for i, ev in enumerate(trace):
            action, addr, size = ev["action"], ev["addr"], ev["size"]
            if action == "alloc":
                alive[addr] = (size, _site(ev.get("frames")) if stop is not None else "")
                allocated += size
            elif action == "free_completed" and addr in alive:
                allocated -= alive.pop(addr)[0]
            elif action in ("segment_alloc", "segment_map"):
                segments[addr] = (size, _site(ev.get("frames")) if stop is not None else "")
                reserved += size
            elif action in ("segment_free", "segment_unmap") and addr in segments:
                reserved -= segments.pop(addr)[0]
            if stop is not None and i == stop:
                return alive, segments, allocated, reserved
            peak_alloc = max(peak_alloc, (allocated, -i))
            peak_res = max(peak_res, (reserved, -i))
        return -peak_alloc[1], -peak_res[1]

    i_alloc, i_res = replay()
    state_alloc = replay(i_alloc) if trace else None
    state_res = replay(i_res) if trace else None

    def groups(blocks: dict) -> list:
        by: dict[str, list[int]] = {}
        for size, site in blocks.values():
            g = by.setdefault(site, [0, 0, 0])
            g[0] += size
            g[1] += 1
            g[2] = max(g[2], size)
        return [[site, *v] for site, v in sorted(by.items(), key=lambda kv: -kv[1][0])[:top]]

    out = {"events": len(trace), "columns": "site, bytes, blocks, largest block"}
    if state_alloc:
        blocks, segs, alloc_then, res_then = state_alloc
        out["at_peak_allocated"] = {"event": i_alloc, "allocated": alloc_then, "reserved": res_then,
                                    "groups": groups(blocks)}
    if state_res:
        blocks, segs, alloc_then, res_then = state_res
        holes = []
        for seg_addr, (seg_size, site) in segs.items():
            used = sum(size for addr, (size, _) in blocks.items() if seg_addr <= addr < seg_addr + seg_size)
            holes.append([site, seg_size, seg_size - used])
        holes.sort(key=lambda h: -h[2])
        out["at_peak_reserved"] = {"event": i_res, "reserved": res_then, "allocated": alloc_then,
                                   "segments": len(segs), "groups": groups(blocks),
                                   "free_in_segments (site that made it, segment bytes, free bytes)": holes[:top]}
    return out


def large_pool_events(snapshot: dict, smallest: int = 2 ** 20) -> dict:
    """The allocator's events on blocks and segments of at least ``smallest`` bytes (torch's large pool is requests
    above 1 MiB, ``c10/cuda/CUDACachingAllocator.cpp`` kSmallSize), for replaying in an allocator model: columns
    ``time_us, action, addr, size, site, stream`` (site: an index into ``sites``, :func:`_site` of the event's
    stack; stream: the CUDA stream's handle, 0 the default stream)."""
    codes = {"alloc": "a", "free_completed": "f", "segment_alloc": "S", "segment_free": "F", "segment_map": "S",
             "segment_unmap": "F"}
    sites: dict[str, int] = {}
    rows = []
    for ev in snapshot["device_traces"][0]:
        code = codes.get(ev["action"])
        if code is None or ev["size"] < smallest:
            continue
        site = sites.setdefault(_site(ev.get("frames")), len(sites))
        rows.append([ev.get("time_us"), code, ev["addr"], ev["size"], site, ev.get("stream", 0)])
    return {"columns": ["time_us", "action", "addr", "size", "site", "stream"], "rows": rows, "sites": list(sites)}


def run_grid(grid: list[dict], out_dir: Path, only: set[str] | None, timeout_s: int, budget_s: float) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()
    for point in grid:
        if only and point["name"] not in only:
            continue
        if (out_dir / f"{point['name']}.json").exists():
            continue
        if time.time() - start > budget_s:
            print(f"budget of {budget_s:.0f} s spent: stopping before {point['name']}", flush=True)
            break
        t0 = time.time()
        cmd = [sys.executable, __file__, "point", json.dumps(point), "--out", str(out_dir)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            status = f"rc {proc.returncode}"
            if not (out_dir / f"{point['name']}.json").exists():
                (out_dir / f"{point['name']}.json").write_text(json.dumps(
                    {"point": point, "failed": True, "rc": proc.returncode, "stderr": proc.stderr[-3000:]}, indent=1))
        except subprocess.TimeoutExpired:
            status = "timeout"
            (out_dir / f"{point['name']}.json").write_text(json.dumps({"point": point, "failed": True,
                                                                        "timeout": True}, indent=1))
        r = json.loads((out_dir / f"{point['name']}.json").read_text())
        print(f"{point['name']:34s} {status:8s} {time.time() - t0:6.1f}s oom={r.get('oom')} "
              f"nvml={(r.get('nvml_peak_over_baseline') or 0) / GIB:.2f} GiB "
              f"alloc={(r.get('max_allocated') or 0) / GIB:.2f} GiB peak@{r.get('peak_phase')}", flush=True)


#: What the GPU machine's transformers (5.17.0) ran where it differs from the one dsdoctor reads here (5.24), by
#: model type: its Gemma2 class has ``_supports_sdpa = True`` (softcapping dropped), 5.24's False (eager attention).
RAN_SDPA = {"gemma2": "sdpa"}


def setup_of(point: dict):
    """The Setup ``dsdoctor estimate`` builds for a point (one GPU; ``memory_accuracy.setup_of``), for the point's
    loop (``--launch``) and the attention the GPU machine's transformers ran (:data:`RAN_SDPA`)."""
    from memory_accuracy import setup_of as grid_setup

    spec = point["model"]
    if point.get("config"):  # estimated as a user would: `--model DIR` holding that config.json
        import tempfile

        folder = Path(tempfile.gettempdir()) / "dsdoctor-grid-configs" / point["name"]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(point["config"]))
        spec = str(folder)
    return grid_setup({**point, "model": spec, "launch": point.get("loop", "engine")},
                      attn=point.get("attn") or RAN_SDPA.get(point_config(point)["model_type"]))


def predict(point: dict):
    """dsdoctor's estimate of a point (:func:`setup_of`), and DeepSpeed's and accelerate's estimators."""
    from dsdoctor.checks.memory import accelerate_estimator_bytes, deepspeed_estimator_bytes, estimate

    setup = setup_of(point)
    return estimate(setup), deepspeed_estimator_bytes(setup), accelerate_estimator_bytes(setup)


def report(points_dir: Path) -> str:
    rows = {"fit": [], "held-out": []}
    for path in sorted(points_dir.glob("*.json")):
        r = json.loads(path.read_text())
        if r.get("failed"):
            continue
        point = r["point"]
        est, ds, acc = predict(point)
        measured = r["nvml_peak_over_baseline"]
        err = (est.total - measured) / measured
        from dsdoctor.checks.memory import verdict as memory_verdict

        kind = memory_verdict(est.total, r["gpu_total"])  # fits / tight (MEM502, either side: warned) / no
        verdict = kind == "tight" or (kind == "no") == r["oom"]
        rows["held-out" if point.get("holdout") else "fit"].append((point["name"], point.get("loop", "engine"),
                                                                    measured, est.total, err, r["oom"],
                                                                    (verdict, kind),
                                                                    r["max_allocated"], est.allocated, ds, acc,
                                                                    r["peak_phase"], est.peak_phase))
    out = ["# python benchmarks/memory_loops.py report benchmarks/results/memory-loops/points", ""]
    for group, items in rows.items():
        out.append(f"## {group} points ({len(items)})")
        out.append("| point | loop | NVML peak - idle GiB | dsdoctor GiB | error | OOM | verdict | peak alloc GiB | "
                   "dsdoctor alloc GiB | DeepSpeed est. GiB | accelerate est. GiB | peak phase (measured / est.) |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for (name, loop, measured, total, err, oom, verdict, alloc, est_alloc, ds, acc, phase,
             est_phase) in items:
            out.append(f"| {name} | {loop} | {measured / GIB:.2f} | {total / GIB:.2f} | {100 * err:+.1f}% | {oom} | "
                       f"{verdict[1]}: {'right' if verdict[0] else 'WRONG'} | {alloc / GIB:.2f} | {est_alloc / GIB:.2f} | "
                       f"{ds / GIB:.2f} | {acc / GIB:.2f} | {phase} / {est_phase} |")
        fits = [abs(i[4]) for i in items if not i[5]]
        if fits:
            out.append(f"\n|error| on points that ran: median {100 * statistics.median(fits):.1f}%, max "
                       f"{100 * max(fits):.1f}%; verdicts right: {sum(i[6][0] for i in items)}/{len(items)} (tight, a warning "
                       f"either way: {sum(i[6][1] == 'tight' for i in items)})\n")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    run = sub.add_parser("run")
    run.add_argument("--grid", required=True)
    run.add_argument("--out", required=True)
    run.add_argument("--only", default=None)
    run.add_argument("--timeout", type=int, default=240)
    run.add_argument("--budget", type=float, default=500, help="stop starting points after this many seconds")
    one = sub.add_parser("point")
    one.add_argument("point")
    one.add_argument("--out", required=True)
    rep = sub.add_parser("report")
    rep.add_argument("points")
    args = parser.parse_args()
    if args.mode == "run":
        grid = json.loads(Path(args.grid).read_text())
        run_grid(grid, Path(args.out), set(args.only.split(",")) if args.only else None, args.timeout, args.budget)
    elif args.mode == "point":
        run_point(json.loads(args.point), Path(args.out))
    else:
        print(report(Path(args.points)))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
