"""ds_configs for the differential test: valid ones as often as broken ones, each broken one with one or two
faults from the pitfalls users meet (tutorial configs, public issues). World size 1, CPU (fp16 stays off: the
CPU accelerator refuses it, a GPU would not).

``generate(rng)`` returns ``(config, client_optimizer, faults, ignored)``: ``faults`` names what was broken,
``ignored`` lists dotted keys DeepSpeed silently ignores (check must report each).
"""

from __future__ import annotations

import random

TYPO_TOP = {"gradient_accumulation_steps": "gradient_accumulation_step", "steps_per_print": "steps_per_prnt",
            "gradient_clipping": "gradient_cliping", "zero_optimization": "zero_optimisation",
            "train_micro_batch_size_per_gpu": "train_micro_batch_size"}
FOREIGN_TOP = ["model_parallel_size", "fp32_allreduce", "logging_steps"]


def valid(rng: random.Random) -> tuple[dict, bool]:
    """A config DeepSpeed trains with on one CPU rank, and whether the script passes a client optimizer."""
    micro, acc = rng.randint(1, 4), rng.randint(1, 4)
    config: dict = {}
    style = rng.choice(["micro+acc", "all3", "train+micro", "train+acc", "micro", "train"])
    if style == "micro+acc":
        config.update(train_micro_batch_size_per_gpu=micro, gradient_accumulation_steps=acc)
    elif style == "all3":
        config.update(train_batch_size=micro * acc, train_micro_batch_size_per_gpu=micro,
                      gradient_accumulation_steps=acc)
    elif style == "train+micro":
        config.update(train_batch_size=micro * acc, train_micro_batch_size_per_gpu=micro)
    elif style == "train+acc":
        config.update(train_batch_size=micro * acc, gradient_accumulation_steps=acc)
    elif style == "micro":
        config.update(train_micro_batch_size_per_gpu=micro)
    else:
        config.update(train_batch_size=micro)
    stage = rng.choice([0, 1, 2, 3])
    if stage or rng.random() < 0.5:
        zero: dict = {"stage": stage}
        if stage in (1, 2) and rng.random() < 0.3:
            zero.update(overlap_comm=rng.choice([True, False]), reduce_bucket_size=int(rng.choice([2e8, 5e8])))
        if stage == 3 and rng.random() < 0.5:
            zero["stage3_gather_16bit_weights_on_model_save"] = True
        config["zero_optimization"] = zero
    if rng.random() < 0.5:
        config["bf16"] = {"enabled": rng.choice([True, False])}
    if rng.random() < 0.3:
        config["fp16"] = {"enabled": False}
    if rng.random() < 0.5:
        config["gradient_clipping"] = rng.choice([0.0, 1.0])
    if rng.random() < 0.3:
        config["steps_per_print"] = rng.choice([1, 10, 100])
    client = rng.random() < 0.25
    if not client:
        name = rng.choice(["AdamW", "Adam", "adamw"])
        config["optimizer"] = {"type": name, "params": {"lr": rng.choice([1e-5, 2e-5, 1e-4]), "torch_adam": True,
                                                        "weight_decay": 0.0}}
    if rng.random() < 0.4:
        kind = rng.choice(["WarmupLR", "WarmupDecayLR", "WarmupCosineLR"])
        params: dict = {"warmup_num_steps": rng.randint(1, 50)}
        if kind == "WarmupLR":
            params.update(warmup_min_lr=0, warmup_max_lr=2e-5)
        elif kind == "WarmupDecayLR":
            params.update(warmup_min_lr=0, warmup_max_lr=2e-5, total_num_steps=1000)
        else:
            params.update(total_num_steps=1000)
        config["scheduler"] = {"type": kind, "params": params}
    if rng.random() < 0.2:
        config["activation_checkpointing"] = {"partition_activations": False}
    return config, client


def _batch_keys(config: dict) -> list[str]:
    keys = [k for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
            if k in config and isinstance(config[k], int)]
    return keys or ["train_micro_batch_size_per_gpu"]


def break_one(config: dict, client: bool, rng: random.Random, ignored: list[str]) -> tuple[bool, str]:
    """Apply one fault in place; returns (client_optimizer, fault name)."""
    fault = rng.choice([
        "batch_mismatch", "batch_zero", "batch_negative", "batch_string", "batch_fraction", "batch_none",
        "typo_top", "foreign_top", "typo_zero", "typo_bf16", "typo_activation", "both_precisions",
        "no_optimizer", "unknown_optimizer", "untested_optimizer", "decay_without_total", "warmup_zero",
        "unknown_scheduler", "scheduler_typo_param", "stage_4", "deprecated_beside_new", "deprecated_alone",
        "offload_client", "auto_batch", "auto_in_zero", "zero_wrong_type", "max_grad_norm", "removed_key", "predivide",
        "clipping_string", "lr_string", "section_null", "steps_per_print_zero", "flag_string",
        "auto_precision", "typo_precision",
    ])
    if not isinstance(config.get("zero_optimization", {}), dict):
        config.pop("zero_optimization")  # an earlier fault nulled it
    zero = config.setdefault("zero_optimization", {"stage": 0}) if fault in (
        "typo_zero", "deprecated_beside_new", "deprecated_alone", "auto_in_zero", "zero_wrong_type",
        "stage_4") else config.get("zero_optimization")
    if fault == "batch_mismatch":
        micro = config.get("train_micro_batch_size_per_gpu", 2)
        acc = config.get("gradient_accumulation_steps", 1)
        micro = micro if isinstance(micro, int) and micro > 0 else 2
        acc = acc if isinstance(acc, int) and acc > 0 else 1
        config.update(train_batch_size=micro * acc + rng.randint(1, 3), train_micro_batch_size_per_gpu=micro,
                      gradient_accumulation_steps=acc)
    elif fault == "batch_zero":
        config[rng.choice(_batch_keys(config))] = 0
    elif fault == "batch_negative":
        config[rng.choice(_batch_keys(config))] = -2
    elif fault == "batch_string":
        key = rng.choice(_batch_keys(config))
        config[key] = str(config.get(key, 2))
    elif fault == "batch_fraction":
        config.pop("train_batch_size", None)
        config["train_micro_batch_size_per_gpu"] = 2.5
    elif fault == "batch_none":
        config.pop("train_batch_size", None)
        config.pop("train_micro_batch_size_per_gpu", None)
    elif fault == "typo_top":
        key = rng.choice([k for k in TYPO_TOP if k in config] or ["steps_per_print"])
        config[TYPO_TOP[key]] = config.pop(key, 10)
        ignored.append(TYPO_TOP[key])
        if key == "train_micro_batch_size_per_gpu" and "train_batch_size" not in config:
            config["train_batch_size"] = 4  # keep a batch size, so only the typo is the fault
    elif fault == "foreign_top":
        key = rng.choice(FOREIGN_TOP)
        config[key] = 2
        ignored.append(key)
    elif fault == "typo_zero":
        zero[rng.choice(["stagee", "overlap_com", "contigous_gradients"])] = True
    elif fault == "typo_bf16":
        config["bf16"] = {"enable": True}
    elif fault == "typo_activation":
        config["activation_checkpointing"] = {"partition_activation": True}
        ignored.append("activation_checkpointing.partition_activation")
    elif fault == "both_precisions":
        config["bf16"] = {"enabled": True}
        config["fp16"] = {"enabled": True}
    elif fault == "no_optimizer":
        config.pop("optimizer", None)
        client = False
    elif fault == "unknown_optimizer":
        config["optimizer"] = {"type": rng.choice(["FusedAdam", "AdamWeightDecay", "adamw_torch"]),
                               "params": {"lr": 1e-5}}
        client = False
    elif fault == "untested_optimizer":
        config["optimizer"] = {"type": rng.choice(["SGD", "RMSprop"]), "params": {"lr": 1e-3}}
        config.setdefault("zero_optimization", {})["stage"] = rng.choice([1, 2, 3])
        client = False
    elif fault == "decay_without_total":
        config["scheduler"] = {"type": rng.choice(["WarmupDecayLR", "WarmupCosineLR"]),
                               "params": {"warmup_num_steps": 10}}
    elif fault == "warmup_zero":
        config["scheduler"] = {"type": "WarmupLR", "params": {"warmup_num_steps": rng.choice([0, -5, 2.5])}}
    elif fault == "unknown_scheduler":
        config["scheduler"] = {"type": rng.choice(["CosineWarmup", "warmuplr", "LinearWarmup"]), "params": {}}
    elif fault == "scheduler_typo_param":
        config["scheduler"] = {"type": "WarmupLR", "params": {"warmup_num_step": 10}}
    elif fault == "stage_4":
        zero["stage"] = 4
    elif fault == "deprecated_beside_new":
        zero.update(cpu_offload=True, offload_optimizer={"device": "cpu"})
    elif fault == "deprecated_alone":
        zero["stage3_gather_fp16_weights_on_model_save"] = True
    elif fault == "offload_client":
        zero = config.setdefault("zero_optimization", {})
        zero["stage"] = rng.choice([1, 2])
        zero["offload_optimizer"] = {"device": "cpu"}
        config.pop("optimizer", None)
        client = True
    elif fault == "auto_batch":
        config[rng.choice(_batch_keys(config) or ["train_micro_batch_size_per_gpu"])] = "auto"
    elif fault == "auto_in_zero":
        zero[rng.choice(["reduce_bucket_size", "allgather_bucket_size"])] = "auto"
    elif fault == "zero_wrong_type":
        zero[rng.choice(["reduce_bucket_size", "overlap_comm"])] = rng.choice(["big", "maybe", -1])
    elif fault == "max_grad_norm":
        config["optimizer"] = {"type": "AdamW", "params": {"lr": 1e-5, "torch_adam": True, "max_grad_norm": 1.0}}
        client = False
    elif fault == "removed_key":
        config[rng.choice(["amp", "sparse_attention", "elasticity"])] = {"enabled": False}
    elif fault == "clipping_string":
        config["gradient_clipping"] = "1.0"
    elif fault == "lr_string":
        config["optimizer"] = {"type": "AdamW", "params": {"lr": "2e-5", "torch_adam": True}}
        client = False
    elif fault == "section_null":
        section = rng.choice(["zero_optimization", "fp16", "activation_checkpointing", "optimizer"])
        config[section] = None
        ignored[:] = [k for k in ignored if not k.startswith(section + ".")]
    elif fault == "steps_per_print_zero":
        config["steps_per_print"] = 0
    elif fault == "predivide":
        config["gradient_predivide_factor"] = rng.choice([1.0, 2.0])
    elif fault == "auto_precision":  # an HF template's "auto" under the engine: DeepSpeed reads false (fp32)
        for section in rng.choice([["fp16"], ["bf16"], ["fp16", "bf16"]]):
            config[section] = {"enabled": "auto"}
    elif fault == "typo_precision":  # a misspelled section DeepSpeed ignores: fp32, and --fix turns it on
        name = rng.choice(["fp_16", "bf_16", "bfloat_16"])
        config[name] = {"enabled": True}
        ignored.append(name)
    elif fault == "flag_string":
        config[rng.choice(["wall_clock_breakdown", "prescale_gradients"])] = "false"
    return client, fault


def generate(rng: random.Random) -> tuple[dict, bool, list[str], list[str]]:
    """A config, whether a client optimizer is passed, the faults applied (possibly none), the ignored keys."""
    config, client = valid(rng)
    faults: list[str] = []
    ignored: list[str] = []
    n = rng.choice([0, 0, 1, 2])  # half valid, half with one or two faults
    for _ in range(n):
        client, fault = break_one(config, client, rng, ignored)
        faults.append(fault)
    return config, client, faults, ignored


# ---------------------------------------------------------------------------------------------- hostile shapes
_BASE = '"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 2e-5}}'


def _keys(n: int, value: str = "0", prefix: str = "k") -> str:
    return ", ".join(f'"{prefix}{i}": {value}' for i in range(n))


#: each shape as a function of a count n; :func:`hostile_shapes` picks the largest n that fits the size
SHAPES = {
    "top-level unknown keys": lambda n: "{" + _BASE + ", " + _keys(n) + "}",
    "top-level auto keys": lambda n: "{" + _BASE + ", " + _keys(n, '"auto"') + "}",
    "unknown keys in zero_optimization": lambda n: "{" + _BASE + ', "zero_optimization": {"stage": 2, ' + _keys(n)
                                                   + "}}",
    "unknown keys in offload_param": lambda n: "{" + _BASE + ', "zero_optimization": {"stage": 3, "offload_param": '
                                               '{"device": "cpu", ' + _keys(n) + "}}}",
    "unknown keys in activation_checkpointing": lambda n: "{" + _BASE + ', "activation_checkpointing": {'
                                                          + _keys(n) + "}}",
    "AdamW params unknown": lambda n: '{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", '
                                      '"params": {' + _keys(n) + "}}}",
    "SGD params unknown": lambda n: '{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "SGD", "params": {'
                                    + _keys(n) + "}}}",
    "optimizer params auto": lambda n: '{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", '
                                       '"params": {' + _keys(n, '"auto"') + "}}}",
    "scheduler params unknown": lambda n: "{" + _BASE + ', "scheduler": {"type": "WarmupLR", "params": {'
                                          + _keys(n) + "}}}",
    "scheduler params auto": lambda n: "{" + _BASE + ', "scheduler": {"type": "WarmupLR", "params": {'
                                       + _keys(n, '"auto"') + "}}}",
    "auto in a long list": lambda n: '{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", '
                                     '"params": {"lr": 1e-5, "betas": [' + ",".join(['"auto"'] * n) + "]}}}",
    "duplicate keys": lambda n: "{" + _BASE + ", " + ", ".join(f'"d{i}": 0, "d{i}": 1' for i in range(n)) + "}",
    "control characters in keys": lambda n: "{" + _BASE + ", " + ", ".join(f'"k\\n\\u0007\\u001b[31m{i}": 0'
                                                                             for i in range(n)) + "}",
    "one long key": lambda n: "{" + _BASE + ', "' + "z" * n + '": 1}',
    "long optimizer type": lambda n: '{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "'
                                     + "adam" * n + '"}}',
    "long scheduler type": lambda n: "{" + _BASE + ', "scheduler": {"type": "' + "W" * n + '"}}',
    "long number string": lambda n: "{" + _BASE + ', "gradient_clipping": "' + "9" * n + '"}',
    "wide array": lambda n: "{" + _BASE + ', "a": [' + ",".join(["0"] * n) + "]}",
    "arrays nested 60 deep": lambda n: "{" + _BASE + ', "a": [' + ",".join(["[" * 60 + "0" + "]" * 60] * n) + "]}",
    "objects nested 30 deep, auto inside": lambda n: "{" + _BASE + ', "x": [' + ",".join(
        ['{"p": ' * 30 + '"auto"' + "}" * 30] * n) + "]}",
}
#: --hf-args shapes (JSON), for the Trainer path
HF_SHAPES = {
    "near-miss TrainingArguments keys": lambda n: "{" + ", ".join(f'"per_device_train_batch_sizee{i}": 1'
                                                                  for i in range(n)) + "}",
    "many short keys": lambda n: "{" + ", ".join(f'"x{i}": 1' for i in range(n)) + "}",
    "long number string": lambda n: '{"learning_rate": "' + "1" * n + '"}',
}


def _fit(build, max_bytes: int) -> str:
    low, high = 1, max_bytes
    while low < high:
        mid = (low + high + 1) // 2
        if len(build(mid).encode()) <= max_bytes:
            low = mid
        else:
            high = mid - 1
    return build(low)


def hostile_shapes(max_bytes: int = (1 << 20) - 64, shapes: dict | None = None) -> dict[str, str]:
    """The worst config shapes we know for the check's time, each as large as fits in ``max_bytes`` (the reader's
    cap is 1 MiB): name -> JSON text. ``shapes``: :data:`SHAPES` (default) or :data:`HF_SHAPES`."""
    return {name: _fit(build, max_bytes) for name, build in (shapes or SHAPES).items()}
