"""The allocator's slack as the replay finds it, on a grid of setups no GPU ran: targets for the calibrated
formulas' slack (``checks/memory.py`` ``slack_features``) that cost no device time.

``estimate --replay`` reproduces the H200's reserved peak within 5% on 17 of 18 held-out points of rounds 7-9
(median 0.5%), while the calibrated slack, fitted on 34 GPU points mostly at ZeRO-0/1/2, is 5-11% under on
ZeRO-3 points. This script replays many more setups on the CPU (the meta device; each 5-40 s) and records, per
setup, the replayed reserved and allocated peaks beside the formulas' allocated terms and slack features, so
``benchmarks/fit_calibration.py --replays FILE`` can fit the slack on them. No GPU point is among them: the GPU
rounds stay held out.

    python benchmarks/replay_grid.py --n 48 --part 0/2 > /tmp/replays-0.jsonl   # two processes, one per core
    python benchmarks/replay_grid.py --n 48 --part 1/2 > /tmp/replays-1.jsonl
    python benchmarks/replay_grid.py --n 144 --start 48 --part 0/2 > /tmp/replays-2.jsonl  # more, the same draws first
    cat /tmp/replays-*.jsonl > benchmarks/results/memory-loops/replays.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

#: registry models the replay can run (transformers' own modeling code), 1B to 14B, several architectures
MODELS = ["qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b",
          "qwen2.5-1.5b", "qwen2.5-7b", "gemma-2-2b", "phi-3-mini-4k-instruct", "mistral-7b", "glm-4-9b-chat-hf",
          "yi-1.5-9b"]
LORA_TARGETS = {"phi-3-mini-4k-instruct": ["qkv_proj", "o_proj"]}


def grid(n: int, seed: int = 13) -> list[dict]:
    """``n`` grid points (the memory_loops grid format), drawn with ``seed``: every ZeRO stage, four methods,
    optimizer (and, at ZeRO-3, parameter) offload, micro batches 1-16, sequences 1024-4096, the three loops."""
    rng = random.Random(seed)
    points = []
    while len(points) < n:
        model = rng.choice(MODELS)
        method = rng.choice(["full", "lora", "lora", "freeze", "ptuning"])
        zero = rng.choice([0, 1, 2, 2, 3, 3, 3])
        micro = rng.choice([1, 2, 4, 8, 16])
        seq = rng.choice([1024, 2048, 2048, 4096])
        loop = rng.choice(["engine", "engine-loss", "trainer"])
        point = {"model": model, "method": method, "zero": zero, "micro_batch": micro, "seq_len": seq, "loop": loop,
                 "grad_ckpt": method != "ptuning"}
        if method == "lora" and model in LORA_TARGETS:
            point["lora_targets"] = LORA_TARGETS[model]
        if method == "full" and zero and rng.random() < 0.3:
            point["offload_optimizer"] = "cpu"
            if zero == 3 and rng.random() < 0.5:
                point["offload_param"] = "cpu"
        point["name"] = "rg-{model}-{method}-z{zero}{off}-mb{micro_batch}-s{seq_len}-{loop}".format(
            off="-offopt" if point.get("offload_optimizer") and not point.get("offload_param") else
            "-offboth" if point.get("offload_param") else "", **point)
        points.append(point)
    return points


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=48)
    parser.add_argument("--part", default="0/1", help="K/M: the K-th of M interleaved slices of the grid")
    parser.add_argument("--start", type=int, default=0, help="skip the grid's first START points (done before)")
    parser.add_argument("--budget", type=float, default=1e9, help="stop starting points after this many seconds")
    args = parser.parse_args()
    k, m = map(int, args.part.split("/"))
    from heldout_report import setup_attn
    from memory_loops import setup_of

    from dsdoctor.checks.memory import estimate, slack_features
    from dsdoctor.checks.step_trace import replay_setup

    start = time.time()
    for point in grid(args.n)[args.start:][k::m]:
        if time.time() - start > args.budget:
            break
        try:
            setup = setup_of(point)
            est = estimate(setup)
            r = replay_setup(setup, None, attn=setup_attn(point))
        except Exception as exc:  # noqa: BLE001 - recorded, the grid goes on
            print(json.dumps({"point": point, "error": f"{type(exc).__name__}: {exc}"[:300]}), flush=True)
            continue
        print(json.dumps({"point": point, "replay_reserved": r.reserved, "replay_allocated": r.allocated,
                          "replay_peak_phase": r.peak_phase, "seconds": round(r.seconds, 1),
                          "formula_allocated": est.allocated, "formula_peak_phase": est.peak_phase,
                          "formula_slack": est.reserved - est.allocated, "features": slack_features(setup)}),
              flush=True)


if __name__ == "__main__":
    main()
