#!/bin/bash
# The GPU measurements of issue 2, run on the device machine from the repository root:
#   source .whl/prelude.sh && bash benchmarks/run_gpu.sh verify $OUT   # bundled smoke + 6B-shape LoRA with reload/merge
#   source .whl/prelude.sh && bash benchmarks/run_gpu.sh speed  $OUT   # reference trainer vs HF Trainer, same call
#   source .whl/prelude.sh && bash benchmarks/run_gpu.sh zero3  $OUT   # bundled smoke + 6B-shape LoRA under ZeRO-3
#   source .whl/prelude.sh && bash benchmarks/run_gpu.sh env-nccl $OUT # issues 5, 6, 7: env --deep with the image's
#        TORCH_CUDA_ARCH_LIST=9.0a and with 9.0, --build-ops, single-rank NCCL, a real CUDA OOM log for explain
# Results are copied into benchmarks/results/ with the command that made them.
set -u
MODE=$1; OUT=$2
if [ "$MODE" = env-nccl ]; then  # no model needed: the environment, NCCL on one GPU, and a real OOM
  export TORCH_EXTENSIONS_DIR=$PWD/.torch_ext
  echo '{"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "train_micro_batch_size_per_gpu": 1}' > /tmp/adam.json
  TORCH_CUDA_ARCH_LIST=9.0a dsdoctor env --deep --json $OUT/env_h200_arch_9.0a.json --format markdown > $OUT/env_h200_arch_9.0a.md 2>&1
  echo "env 9.0a exit $? (expected 1: ENV307)"
  TORCH_CUDA_ARCH_LIST=9.0 timeout 300 dsdoctor env --deep --build-ops /tmp/adam.json --json $OUT/env_h200_arch_9.0.json \
    --format markdown > $OUT/env_h200_arch_9.0.md 2>&1
  echo "env 9.0 + FusedAdam build exit $? (expected 0)"
  timeout 120 dsdoctor nccl --nproc 1 --backend nccl --sizes 1M,64M,1G --json $OUT/nccl_h200_1rank.json \
    --format markdown > $OUT/nccl_h200_1rank.md 2>&1
  echo "nccl exit $?"
  python3 - > $OUT/oom_real.log 2>&1 <<'PY'
import torch
x = [torch.empty(40 * 2**30, dtype=torch.uint8, device="cuda") for _ in range(4)]
PY
  dsdoctor explain $OUT/oom_real.log --json $OUT/explain_oom_real.json > /dev/null 2>&1
  echo "explain on a real OOM exit $? (expected 1: MEM501)"
  ls -la $OUT
  exit 0
fi
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
