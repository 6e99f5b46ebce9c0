#!/bin/bash
# Issue 16's ETA check on the GPU machine, from the repository root:
#   source .whl/prelude.sh && bash benchmarks/eta_gpu.sh $OUT
# A ChatGLM-6B-shape LoRA run of 200 steps (ZeRO-2, micro batch 2, sequence 1024, one GPU), predicted three ways:
#   1. preflight without --probe (the FLOPs model; also committed before the run: results/eta-gpu/prediction-*.json)
#   2. preflight --probe (20 measured steps)
#   3. the run itself: dsdoctor smoke --steps 200 (the sum of its 200 step times, and its whole wall time)
# then benchmarks/eta_report.py compares them. Results go to benchmarks/results/eta-gpu/.
set -u
OUT=$1
M=/tmp/chatglm6b-shape; D=/tmp/long.jsonl; CFG=benchmarks/ds_zero2_bf16.json
python3 benchmarks/trainer_speed.py make-model $M && python3 benchmarks/trainer_speed.py make-data $D || exit 1
LINE="deepspeed --num_gpus 1 reference_train/train.py --model $M --data $D --deepspeed $CFG --seq-len 1024 --max-steps 200 --method lora"
nvidia-smi > $OUT/machine.txt 2>&1
dsdoctor preflight --no-data --json $OUT/preflight_flops.json -- $LINE > /dev/null 2>&1; echo "flops exit $?"
timeout 300 dsdoctor preflight --no-data --probe --probe-steps 20 --out /tmp/eta_probe --json $OUT/preflight_probe.json -- $LINE \
  > /dev/null 2> /tmp/eta_probe.stderr; echo "probe exit $?"; tail -c 800 /tmp/eta_probe.stderr
cp /tmp/eta_probe/smoke/metrics/rank0.jsonl $OUT/probe.metrics.jsonl 2>/dev/null
START=$(date +%s.%N)
timeout 400 dsdoctor smoke --model $M --data $D --deepspeed $CFG --seq-len 1024 --steps 200 --nproc 1 --no-verify \
  --launcher deepspeed --out /tmp/eta_real --json $OUT/real_smoke.json > /dev/null 2> /tmp/eta_real.stderr
echo "real exit $? wall $(python3 -c "import time; print(round(time.time() - $START, 1))")"; tail -c 800 /tmp/eta_real.stderr
cp /tmp/eta_real/metrics/rank0.jsonl $OUT/real.metrics.jsonl 2>/dev/null
python3 benchmarks/eta_report.py $OUT | tee $OUT/eta-report.md
