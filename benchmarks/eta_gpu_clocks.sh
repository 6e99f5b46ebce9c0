#!/bin/bash
# Why the 200-step run's step time rose from 0.16 s to 0.20 s after ~35 steps: two back-to-back 200-step smokes
# with nvidia-smi polling SM clock, power, temperature and the clock-event reasons every 200 ms.
set -u
OUT=$1
M=/tmp/chatglm6b-shape; D=/tmp/long.jsonl; CFG=benchmarks/ds_zero2_bf16.json
python3 benchmarks/trainer_speed.py make-model $M && python3 benchmarks/trainer_speed.py make-data $D || exit 1
nvidia-smi -q -d CLOCK,POWER,PERFORMANCE > $OUT/smi-q.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active --format=csv -lms 200 > $OUT/clocks.csv 2>&1 &
SMI=$!
for run in 1 2; do
  date +%s.%N > $OUT/run$run.start
  timeout 200 dsdoctor smoke --model $M --data $D --deepspeed $CFG --seq-len 1024 --steps 200 --nproc 1 --no-verify \
    --launcher deepspeed --out /tmp/eta_run$run --json /tmp/eta_run$run.json > /dev/null 2> /tmp/eta_run$run.stderr
  echo "run $run exit $?"
  cp /tmp/eta_run$run/metrics/rank0.jsonl $OUT/run$run.metrics.jsonl
done
kill $SMI
