"""Refit the calibrated formulas' allocator slack on replays (``benchmarks/replay_grid.py``), and judge it on every
GPU point measured (rounds 1-9), none of which the refit sees.

    python benchmarks/slack_refit.py benchmarks/results/memory-loops/replays.jsonl \
        > benchmarks/results/memory-loops/slack-refit.txt

Target of a replay: its own slack, replayed reserved minus replayed allocated (as ``fit_calibration.py`` takes the
GPU's reserved minus allocated, so the fit does not absorb errors of the allocated terms). Replays alternate
between the fit and a held-out half. Judged against NVML's peak "used" on the GPU points, beside the calibration
now in ``checks/memory.py`` (fitted on 34 GPU points of rounds 1-2): the GPU rounds are held out from this fit.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
GIB = 2 ** 30
H200 = 150_109_880_320  # torch's total_memory of the H200 (the GPU points' gpu_total)
GPU_ROUNDS = ["points", "points-r3", "points-r4", "points-r5", "points-r6", "points-r7", "points-r8", "points-r9",
              "points-r10"]


def load_replays(paths: list[Path]) -> list[dict]:
    from memory_loops import setup_of

    out = []
    for path in paths:
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if "error" in rec or rec.get("replay_reserved") is None:
                continue
            rec["setup"] = setup_of(rec["point"])
            out.append(rec)
    return out


def load_gpu() -> list[dict]:
    """Every GPU point of the memory-loops rounds that trained or ran out of memory, with its Setup."""
    from memory_loops import setup_of

    out = []
    for folder in GPU_ROUNDS:
        for path in sorted((HERE / "results/memory-loops" / folder).glob("*.json")):
            r = json.loads(path.read_text())
            if r.get("failed") or "nvml_peak_over_baseline" not in r:
                continue
            try:
                setup = setup_of(r["point"])
            except Exception:  # noqa: BLE001 - a point dsdoctor refuses (MEM510's peft refusal) is no target
                continue
            out.append({"round": folder, "name": r["point"]["name"], "oom": r["oom"], "setup": setup,
                        "nvml": r["nvml_peak_over_baseline"], "gpu_total": r["gpu_total"]})
    return out


#: coefficients kept as the GPU fit has them: the offload features, which few replays exercise (and whose
#: replays under-count the GPU's pinned-copy staging, benchmarks/results/memory-loops/step-replay-zero3-offload.md)
KEEP = ("offload", "param_offload")


def fit(replays: list[dict]):
    """Least squares of the slack features but :data:`KEEP` on the replays' slack less the kept features' share."""
    from dsdoctor.checks.memory import CALIBRATION, slack_features

    names = [n for n in slack_features(replays[0]["setup"]) if n not in KEEP]
    feats = [slack_features(r["setup"]) for r in replays]
    X = np.array([[f[n] for n in names] for f in feats])
    kept = np.array([sum(getattr(CALIBRATION, "slack_" + n) * f[n] for n in KEEP) for f in feats])
    y = np.array([r["replay_reserved"] - r["replay_allocated"] for r in replays], dtype=float) - kept
    used = [i for i, n in enumerate(names) if np.any(X[:, i])]
    coef, *_ = np.linalg.lstsq(X[:, used], y, rcond=None)
    values = {names[i]: float(c) for i, c in zip(used, coef)}
    return replace(CALIBRATION, **{"slack_" + n: v for n, v in values.items()}), values


def summary(errors: list[float]) -> str:
    if not errors:
        return "none"
    a = [abs(e) for e in errors]
    return (f"median {100 * statistics.median(a):.1f}%, max {100 * max(a):.1f}%, within 5%: "
            f"{sum(e <= 0.05 for e in a)}/{len(a)}")


def main() -> None:
    from dsdoctor.checks.memory import CALIBRATION, estimate
    from dsdoctor.checks.memory import verdict as memory_verdict

    # a setup no H200 holds (the replay ran with no capacity) is outside what the slack is for
    replays = [r for r in load_replays([Path(p) for p in sys.argv[1:]]) if r["replay_reserved"] <= H200]
    fit_set, held_set = replays[0::2], replays[1::2]
    cal, values = fit(fit_set)
    print(f"# python benchmarks/slack_refit.py {' '.join(sys.argv[1:])}")
    print(f"\nslack = sum(coefficient x feature), least squares on {len(fit_set)} replays (checks/memory.py "
          "slack_features):")
    for name, value in values.items():
        print(f"- slack_{name} = {value / GIB:.3f} GiB" if name == "base" else f"- slack_{name} = {value:.3f}")
    for label, group in (("fit replays", fit_set), ("held-out replays", held_set)):
        for which, c in (("now", CALIBRATION), ("refit", cal)):
            errs = [(estimate(r["setup"], c).reserved - r["replay_reserved"]) / r["replay_reserved"] for r in group]
            print(f"{label} ({len(group)}), reserved against the replay's, calibration {which}: {summary(errs)}")
    gpu = load_gpu()
    print(f"\n## GPU points (rounds 1-10, {len(gpu)}): estimate total against NVML's peak used")
    print("| point | zero | launch | NVML GiB | now GiB | error | refit GiB | error | OOM | verdict now / refit |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    errs = {"now": [], "refit": []}
    by_stage = {}
    right = {"now": 0, "refit": 0}
    for p in gpu:
        cells = []
        for which, c in (("now", CALIBRATION), ("refit", cal)):
            est = estimate(p["setup"], c)
            err = (est.total - p["nvml"]) / p["nvml"]
            verdict = memory_verdict(est.total, p["gpu_total"])
            ok = verdict == "tight" or (verdict == "no") == p["oom"]
            right[which] += ok
            if not p["oom"]:
                errs[which].append(err)
                by_stage.setdefault((p["setup"].zero_stage == 3, which), []).append(err)
            cells.append((est.total, err, verdict, ok))
        (now_t, now_e, now_v, now_ok), (re_t, re_e, re_v, re_ok) = cells
        print(f"| {p['name']} | {p['setup'].zero_stage} | {p['setup'].launch} | {p['nvml'] / GIB:.2f} | "
              f"{now_t / GIB:.2f} | {100 * now_e:+.1f}% | {re_t / GIB:.2f} | {100 * re_e:+.1f}% | {p['oom']} | "
              f"{now_v}{'' if now_ok else ' WRONG'} / {re_v}{'' if re_ok else ' WRONG'} |")
    print()
    for which in ("now", "refit"):
        print(f"calibration {which}: {summary(errs[which])}; verdicts right {right[which]}/{len(gpu)}")
        for z3 in (False, True):
            print(f"  {'ZeRO-3' if z3 else 'ZeRO-0/1/2'}: {summary(by_stage.get((z3, which), []))}")


if __name__ == "__main__":
    main()
