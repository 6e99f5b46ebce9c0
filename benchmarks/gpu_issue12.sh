#!/bin/bash
# Issue 12 on the GPU machine, one device call, from the repository root:
#   source .whl/prelude.sh && bash benchmarks/gpu_issue12.sh $OUT
# 1. the bundled default smoke on the GPU (bf16, FusedAdam JIT-built into the per-environment extensions dir);
# 2. a Qwen3-8B-shaped random init (config.json only) with the ChatGLM tutorial's LoRA learning rate and scheduler:
#    the verdict must be TRN611 (inconclusive), not TRN601, and its peak memory and tokens/s are recorded;
# 3. a stop (SIGTERM) during the first FusedAdam build, then a second run on the same extensions dir: the lock must be gone
#    and the second run must train (before issue 12 it waited until --timeout);
# 4. dsdoctor itself SIGKILLed mid-run: no rank may stay on the GPU (nvidia-smi's compute processes).
set -u
OUT=$1
ONLY=${ONLY:-1234}
log() { echo "[$(date +%T)] $*" | tee -a $OUT/steps.txt; }
nvidia-smi > $OUT/nvidia-smi.txt 2>&1

if [[ $ONLY == *1* ]]; then
log "1. default smoke"
timeout 300 dsdoctor smoke --steps 100 --out /tmp/s1 --json $OUT/smoke_default.json --format markdown \
  > $OUT/smoke_default.md 2> /tmp/s1.err; log "default smoke exit $?"
cp /tmp/s1/smoke.png $OUT/smoke_default.png 2>/dev/null; tail -c 600 /tmp/s1.err >> $OUT/steps.txt
fi

if [[ $ONLY == *2* ]]; then
log "2. Qwen3-8B shape, tutorial A's LoRA lr and scheduler"
M=/tmp/qwen3-8b-shape; mkdir -p $M
(cd /tmp && python3 - "$M") <<'PY'  # not from the checkout: its dsdoctor/ would shadow the installed package
import json, shutil, sys
from pathlib import Path
from dsdoctor.reference_train import train
m = Path(sys.argv[1])
# Qwen/Qwen3-8B config.json (hub), the fields that shape the model
json.dump({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
           "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
           "vocab_size": 151936, "max_position_embeddings": 40960, "rope_theta": 1000000, "rms_norm_eps": 1e-6,
           "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False, "torch_dtype": "bfloat16"},
          open(m / "config.json", "w"))
for f in train.DEFAULT_MODEL.iterdir():  # the bundled tokenizer (its ids are a subset of the vocabulary)
    if f.name != "config.json":
        shutil.copy(f, m / f.name)
json.dump({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
           "bf16": {"enabled": True}, "zero_optimization": {"stage": 2},
           "optimizer": {"type": "AdamW", "params": {"lr": 2e-5}},
           "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 2e-5,
                                                             "warmup_num_steps": 200, "total_num_steps": 1000}}},
          open("/tmp/tutorial_a_lora.json", "w"))
PY
timeout 420 dsdoctor smoke --model $M --deepspeed /tmp/tutorial_a_lora.json --steps 40 --seq-len 1024 --out /tmp/s2 \
  --json $OUT/smoke_qwen3_8b_tutorial_lora.json --format markdown > $OUT/smoke_qwen3_8b_tutorial_lora.md 2> /tmp/s2.err
log "qwen3-8b smoke exit $?"; tail -c 600 /tmp/s2.err >> $OUT/steps.txt
cp /tmp/s2/smoke.png $OUT/smoke_qwen3_8b.png 2>/dev/null
fi

if [[ $ONLY == *3* ]]; then
log "3. stopped (SIGTERM; a background job of a script ignores SIGINT) during the first FusedAdam build"
export TORCH_EXTENSIONS_DIR=/tmp/fresh_ext; rm -rf $TORCH_EXTENSIONS_DIR
dsdoctor smoke --steps 20 --out /tmp/s3 > /dev/null 2> /tmp/s3.err & pid=$!
for i in $(seq 1 600); do ls $TORCH_EXTENSIONS_DIR/*/lock > /dev/null 2>&1 && break; sleep 0.2; done
log "lock seen: $(ls $TORCH_EXTENSIONS_DIR/*/lock 2>&1)"
sleep 2; kill -TERM $pid; wait $pid; log "stopped smoke exit $? (expected 143)"
log "locks left after the interrupt: $(ls $TORCH_EXTENSIONS_DIR/*/lock 2>/dev/null | wc -l) (expected 0)"
start=$(date +%s)
timeout 300 dsdoctor smoke --steps 20 --out /tmp/s3b --json $OUT/smoke_after_ctrl_c.json > /dev/null 2> /tmp/s3b.err
log "second run exit $? after $(( $(date +%s) - start )) s (it rebuilds the op once, then trains)"
unset TORCH_EXTENSIONS_DIR
fi

if [[ $ONLY == *4* ]]; then
log "4. SIGKILL of dsdoctor mid-run"
dsdoctor smoke --steps 100000 --no-verify --out /tmp/s4 > /dev/null 2>&1 & pid=$!
for i in $(seq 1 600); do [ -s /tmp/s4/metrics/rank0.jsonl ] && break; sleep 0.2; done
log "on the GPU while training: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ';')"
kill -9 $pid; t0=$(date +%s.%N)
for i in $(seq 1 100); do [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader)" ] && break; sleep 0.2; done
log "GPU free $(python3 -c "import time; print(round(time.time() - $t0, 1))") s after the SIGKILL: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | wc -l) process(es) left"
fi
ls -la $OUT >> $OUT/steps.txt
