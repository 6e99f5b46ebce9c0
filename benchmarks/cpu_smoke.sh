#!/bin/bash
# Wall time of `dsdoctor smoke --steps 100` on the bundled default, 2 CPU ranks: first with an empty DeepSpeed
# JIT op cache (TORCH_EXTENSIONS_DIR), then twice with it warm. Writes benchmarks/results/cpu-smoke.txt.
set -u
cd "$(dirname "$0")/.."
cache=$(mktemp -d); out=benchmarks/results/cpu-smoke.txt
{
  echo "# $(date -u +%F) $(nproc) cores, $(python3 -c 'import torch, deepspeed; print("torch", torch.__version__, "deepspeed", deepspeed.__version__)' 2>/dev/null | tail -1)"
  for run in cold warm warm; do
    start=$(date +%s.%N)
    TORCH_EXTENSIONS_DIR=$cache HF_HUB_OFFLINE=1 dsdoctor smoke --steps 100 --out /tmp/cpu-smoke --json /tmp/cpu-smoke.json > /dev/null 2>&1
    code=$?
    end=$(date +%s.%N)
    python3 - "$run" "$code" "$start" "$end" <<'PY'
import json, sys
run, code, start, end = sys.argv[1:]
wall = float(end) - float(start)
r = json.load(open("/tmp/cpu-smoke.json"))["result"]
print(f"{run:5s} exit {code} wall {float(wall):5.1f} s  loss {r['loss_first']} -> {r['loss_last']}  "
      f"checkpoint_roundtrip {r['checkpoint_roundtrip']}  tokens/s per rank {r['tokens_per_s']}  "
      f"peak RSS per rank {[round(b / 2**30, 2) for b in r['peak_allocated_bytes']]} GiB")
PY
  done
} | tee $out
rm -rf "$cache"
