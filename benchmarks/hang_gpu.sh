#!/bin/bash
# dsdoctor hang on a real NCCL job on the GPU machine (one GPU: one rank), with the Flight Recorder's debug-info pipe:
# the rank stalls in its own code after two all_reduces (tests/hang_job.py sleep), dsdoctor hang asks it for a dump
# through the pipe, reads it, and shows the rank's GPU memory from NVML.
#   source .whl/prelude.sh && bash benchmarks/hang_gpu.sh $OUT
set -u
OUT=${1:-/tmp/hang-gpu}
# where the prelude could not install the project, dsdoctor runs from the checkout: give it its installed layout
python3 -c "import dsdoctor.checks" 2>/dev/null || { ln -sfn "$PWD/checks" dsdoctor/checks; \
  ln -sfn "$PWD/reference_train" dsdoctor/reference_train; }
mkdir -p "$OUT/job"
export HANG_JOB_BACKEND=nccl TORCH_FR_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 \
  TORCH_FR_DUMP_TEMP_FILE="$OUT/job/fr_rank_" TORCH_NCCL_DEBUG_INFO_PIPE_FILE="$OUT/job/fr_pipe_"
setsid torchrun --nproc-per-node 1 --master-port 29611 tests/hang_job.py sleep "$OUT/job" > "$OUT/job/out.txt" 2>&1 &
for i in $(seq 1 120); do [ -f "$OUT/job/loss-0.log" ] && [ "$(wc -l < "$OUT/job/loss-0.log")" -ge 2 ] && break; sleep 0.5; done
sleep 3
ls "$OUT/job"
LAUNCHER=$(pgrep -f "torchrun --nproc-per-node 1 --master-port 29611" | head -1)
start=$(date +%s%N)
python3 -m dsdoctor hang --pid "$LAUNCHER" --json "$OUT/hang.json" > "$OUT/hang.txt" 2>&1
rc=$?
echo "dsdoctor hang rc $rc in $(( ($(date +%s%N) - start) / 1000000 )) ms"
cat "$OUT/hang.txt"
python3 - "$OUT/hang.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for f in d["findings"]:
    print(f["id"], f["title"], "|", f["evidence"])
for r in d["result"]["ranks"]:
    print("rank", r["rank"], r["position"]["state"], "gpu", r.get("gpu"), "flight recorder", json.dumps(r.get("flight_recorder")))
PY
ls -la "$OUT/job"
touch "$OUT/job/release"
wait
tail -3 "$OUT/job/loss-0.log"
