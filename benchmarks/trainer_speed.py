"""The HF Trainer side of the speed comparison: same model, data, batch shape and DeepSpeed config as the
reference trainer, timed the same way (optimizer steps after warm-up, tokens that are not padding).

Run both sides in one device call with ``benchmarks/run_gpu.sh`` (it also runs ``dsdoctor smoke`` for the
reference trainer's side). This script alone:

    python benchmarks/trainer_speed.py make-model DIR          # ChatGLM-6B-sized GPT-NeoX config + tokenizer
    python benchmarks/trainer_speed.py make-data FILE          # samples that fill --seq-len exactly
    deepspeed --num_gpus 1 benchmarks/trainer_speed.py hf --model DIR --data FILE --deepspeed ds.json \
        --seq-len 1024 --steps 40 --result hf.json

The model is ChatGLM-6B's shape (hidden 4096, 28 layers, 32 heads, MLP 16384, vocabulary 130528, untied
embeddings) in transformers' GPT-NeoX architecture, which has the same fused ``query_key_value`` projection
and needs no remote code; weights are a random init built on the GPU.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reference_train"))

import train as ref  # noqa: E402  (the reference trainer's own data, model and LoRA code)

CHATGLM_6B_SHAPE = dict(vocab_size=130528, hidden_size=4096, num_hidden_layers=28, num_attention_heads=32,
                        intermediate_size=16384, max_position_embeddings=2048, tie_word_embeddings=False,
                        use_cache=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def make_model(directory: Path) -> None:
    """config.json of the ChatGLM-6B-sized GPT-NeoX model, plus the bundled tokenizer (ids < 1664)."""
    from transformers import GPTNeoXConfig

    directory.mkdir(parents=True, exist_ok=True)
    config = GPTNeoXConfig(**CHATGLM_6B_SHAPE)
    config.architectures = ["GPTNeoXForCausalLM"]
    config.save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ref.DEFAULT_MODEL / name, directory / name)


def make_data(path: Path, samples: int = 400) -> None:
    """Instruction samples whose answers are long enough to be truncated to any --seq-len up to 2048, so
    every micro batch has the same shape [micro, seq_len] in both trainers."""
    rows = [json.loads(line) for line in ref.DEFAULT_DATA.read_text(encoding="utf-8").splitlines()]
    text = " ".join(r["output"] for r in rows)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(samples):
            start = (i * 97) % (len(text) // 2)
            f.write(json.dumps({"instruction": rows[i % len(rows)]["instruction"],
                                "output": text[start:] + text[:start]}, ensure_ascii=False) + "\n")


def hf_trainer(args: argparse.Namespace) -> None:
    """Train with transformers' Trainer on the same DeepSpeed config and report tokens/s and peak memory."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer, Trainer, TrainerCallback, TrainingArguments

    ds = json.loads(Path(args.deepspeed).read_text())
    opt = ds["optimizer"]["params"]
    # TrainingArguments equal to the config's explicit values, or the HF integration refuses the mismatch
    # (transformers/integrations/deepspeed.py trainer_config_finalize).
    targs = TrainingArguments(
        output_dir=args.output_dir, per_device_train_batch_size=ds["train_micro_batch_size_per_gpu"],
        gradient_accumulation_steps=ds.get("gradient_accumulation_steps", 1), max_steps=args.steps,
        learning_rate=opt["lr"], adam_beta1=opt["betas"][0], adam_beta2=opt["betas"][1], adam_epsilon=opt["eps"],
        weight_decay=opt["weight_decay"], warmup_steps=ds["scheduler"]["params"]["warmup_num_steps"],
        max_grad_norm=ds.get("gradient_clipping", 1.0), bf16=ds.get("bf16", {}).get("enabled", False),
        fp16=ds.get("fp16", {}).get("enabled", False), gradient_checkpointing=True,
        # --hf-default-ckpt: transformers' own default checkpointing kwargs, as the tutorials' scripts run it
        gradient_checkpointing_kwargs=None if args.hf_default_ckpt else {"use_reentrant": False}, deepspeed=ds, logging_steps=10,
        save_strategy="no", report_to=[], dataloader_num_workers=0, remove_unused_columns=False, seed=42)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    dataset = ref.build_dataset(args.data, tokenizer, "chatglm", args.seq_len)
    dtype = torch.bfloat16 if targs.bf16 else torch.float16 if targs.fp16 else torch.float32
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", targs.local_process_index) if cuda else torch.device("cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model = ref.load_base_model(args.model, dtype, device, False, 42)
    model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=8, lora_alpha=16, lora_dropout=0.05,
                                             target_modules=ref.lora_targets(model, None), bias="none"))
    model.enable_input_require_grads()
    trainable, total = ref.count_parameters(model)

    class StepTimer(TrainerCallback):
        """Wall time per optimizer step, synchronised, as the reference trainer measures it."""

        def __init__(self):
            self.times, self.t0 = [], None

        def on_step_begin(self, *a, **k):
            sync()
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            sync()
            self.times.append(time.perf_counter() - self.t0)

    timer = StepTimer()
    trainer = Trainer(model=model, args=targs, train_dataset=dataset, callbacks=[timer],
                      data_collator=lambda b: ref.collate(b, tokenizer.pad_token_id))
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    micro = ds["train_micro_batch_size_per_gpu"] * ds.get("gradient_accumulation_steps", 1)
    steady = timer.times[2:]
    tokens_per_step = micro * args.seq_len  # every sample fills seq_len exactly (make_data)
    result = {"trainer": "transformers.Trainer", "gradient_checkpointing_kwargs": targs.gradient_checkpointing_kwargs,
              "step_times_s": timer.times, "steps": len(timer.times), "trainable_params": trainable,
              "total_params": total, "tokens_per_s": tokens_per_step * len(steady) / sum(steady),
              "step_time_s_median": sorted(steady)[len(steady) // 2], "wall_s": wall,
              "peak_allocated_bytes": torch.cuda.max_memory_allocated() if cuda else None,
              "peak_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None,
              "loss_log": [h for h in trainer.state.log_history if "loss" in h]}
    Path(args.result).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "loss_log"}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--local_rank", type=int, default=-1)  # the deepspeed launcher puts it first
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("make-model").add_argument("dir", type=Path)
    sub.add_parser("make-data").add_argument("file", type=Path)
    hf = sub.add_parser("hf")
    for name, kw in (("--model", {}), ("--data", {}), ("--deepspeed", {}), ("--result", {}),
                     ("--output-dir", {"default": "/tmp/hf-trainer"}), ("--seq-len", {"type": int, "default": 1024}),
                     ("--steps", {"type": int, "default": 40})):
        hf.add_argument(name, **kw)
    hf.add_argument("--hf-default-ckpt", action="store_true")
    args = p.parse_args()
    if args.cmd == "make-model":
        make_model(args.dir)
    elif args.cmd == "make-data":
        make_data(args.file)
    else:
        hf_trainer(args)


if __name__ == "__main__":
    main()
