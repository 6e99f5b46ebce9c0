"""One rank of tests/test_zero3.py: train a tiny Llama with the real DeepSpeed ZeRO-3 engine (gloo, CPU) for three
steps per setting and print, on rank 0, one JSON line per setting with the parameters (elements) gathered when
the forward pass has returned, per step. Settings: argv[1] is a JSON list of [max_reuse_distance, grad_ckpt, tied]."""

import json
import sys

import deepspeed
import torch
from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
from transformers import AutoModelForCausalLM, LlamaConfig

CONFIG = dict(vocab_size=8000, hidden_size=256, intermediate_size=688, num_hidden_layers=8, num_attention_heads=4,
              num_key_value_heads=4)

for reuse, ckpt, tied in json.loads(sys.argv[1]):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(LlamaConfig(**CONFIG, tie_word_embeddings=tied))
    if ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    config = {"train_micro_batch_size_per_gpu": 1, "steps_per_print": 1000,
              "zero_optimization": {"stage": 3, "stage3_max_reuse_distance": reuse, "stage3_prefetch_bucket_size": 0,
                                    "stage3_param_persistence_threshold": 0},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}}}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    params = list(engine.module.parameters())
    ids = torch.randint(0, CONFIG["vocab_size"], (1, 64))
    gathered = []
    for _ in range(3):
        loss = engine(input_ids=ids, labels=ids).loss
        gathered.append(sum(p.ds_numel for p in params if p.ds_status == ZeroParamStatus.AVAILABLE))
        engine.backward(loss)
        engine.step()
    if torch.distributed.get_rank() == 0:
        print(json.dumps({"reuse": reuse, "ckpt": ckpt, "tied": tied, "gathered": gathered}), flush=True)
    engine.destroy()
