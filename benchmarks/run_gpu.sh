#!/bin/bash
# The GPU measurements of issue 2, run on the device machine from the repository root:
#   source .whl/prelude.sh && bash benchmarks/run_gpu.sh verify $OUT   # bundled smoke + 6B-shape LoRA with reload/merge
#   source .whl/prelude.sh && bash benchmarks/run_gpu.sh speed  $OUT   # reference trainer vs HF Trainer, same call
#   source .whl/prelude.sh && bash benchmarks/run_gpu.sh zero3  $OUT   # bundled smoke + 6B-shape LoRA under ZeRO-3
# Results are copied into benchmarks/results/ with the command that made them.
set -u
MODE=$1; OUT=$2
M=/tmp/chatglm6b-shape; D=/tmp/long.jsonl; CFG=benchmarks/ds_zero2_bf16.json
STEPS=${STEPS:-40}
python3 benchmarks/trainer_speed.py make-model $M && python3 benchmarks/trainer_speed.py make-data $D || exit 1
{ nvidia-smi; env | grep -E '^(TORCH_CUDA_ARCH_LIST|CUDA_VISIBLE_DEVICES|NCCL_)'; } > $OUT/machine.txt 2>&1
smoke6b() {  # $1: name, then extra smoke flags
  local name=$1; shift
  timeout ${T6B:-360} dsdoctor smoke --model $M --data $D --deepspeed $CFG --seq-len 1024 --steps $STEPS --nproc 1 \
    --out /tmp/$name --json $OUT/$name.json --format markdown "$@" > $OUT/$name.md 2> /tmp/$name.stderr
  echo "$name exit $?"; tail -c 1500 /tmp/$name.stderr; tail -c 1500 /tmp/$name/train.log
  cp /tmp/$name/smoke.png $OUT/$name.png 2>/dev/null; cp /tmp/$name/metrics/rank0.jsonl $OUT/$name.metrics.jsonl 2>/dev/null
}
if [ "$MODE" = verify ]; then
  timeout 200 dsdoctor smoke --steps 100 --out /tmp/smoke_default --json $OUT/smoke_default_gpu.json --format markdown \
    > $OUT/smoke_default_gpu.md 2> /tmp/smoke_default_gpu.stderr
  echo "default smoke exit $?"
  tail -c 1500 /tmp/smoke_default/train.log
  smoke6b smoke_6b_lora_verify
elif [ "$MODE" = zero3 ]; then
  timeout 200 dsdoctor smoke --steps 100 --out /tmp/smoke_default --json $OUT/smoke_default_gpu.json --format markdown \
    > $OUT/smoke_default_gpu.md 2> /tmp/smoke_default_gpu.stderr
  echo "default smoke exit $?"
  CFG=benchmarks/ds_zero3_bf16.json smoke6b smoke_6b_lora_zero3_verify
else
  smoke6b smoke_6b_lora_speed --no-verify
  for variant in nonreentrant default; do
    flag=""; [ $variant = default ] && flag=--hf-default-ckpt
    timeout ${THF:-200} python3 -m deepspeed.launcher.runner --num_gpus 1 benchmarks/trainer_speed.py hf --model $M --data $D \
      --deepspeed $CFG --seq-len 1024 --steps $STEPS --result $OUT/hf_trainer_6b_$variant.json $flag > /tmp/hf_$variant.log 2>&1
    echo "hf trainer ($variant checkpointing) exit $?"; tail -c 1200 /tmp/hf_$variant.log
  done
fi
ls -la $OUT
