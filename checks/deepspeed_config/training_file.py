"""A training tool's own file given where a DeepSpeed config is expected: a LLaMA-Factory ``train.yaml``, an axolotl
YAML, an accelerate config or a TrainingArguments JSON. Each names its DeepSpeed config under a key of its own; HJSON
(which DeepSpeed's loader is) reads a flat ``key: value`` YAML as an object, so without this the file is checked as a
ds_config and every key is "unknown"."""

from __future__ import annotations

import os
import shlex
from typing import Any

#: keys of LLaMA-Factory's argument dataclasses (src/llamafactory/hparams/: model_args.py ``model_name_or_path``,
#: finetuning_args.py ``stage``, ``finetuning_type``, ``lora_target``, data_args.py ``template``, ``dataset``,
#: ``cutoff_len``): ``model_name_or_path`` and one of the others
LLAMA_FACTORY_KEYS = frozenset({"stage", "finetuning_type", "template", "dataset", "lora_target", "cutoff_len",
                                "dataset_dir"})
#: keys of an axolotl config (axolotl's config schema: ``base_model``, ``datasets``, ``micro_batch_size``,
#: ``sequence_len``, ``adapter``, ``num_epochs``): ``base_model`` and one of the others
AXOLOTL_KEYS = frozenset({"datasets", "micro_batch_size", "sequence_len", "adapter", "num_epochs", "lora_r"})
#: keys of an ``accelerate config`` file (accelerate/commands/config/config_args.py ``ClusterConfig``)
ACCELERATE_KEYS = frozenset({"compute_environment", "distributed_type", "num_processes", "mixed_precision",
                             "deepspeed_config", "machine_rank"})
#: top-level keys that make a file worth reading as YAML to tell which tool's it is
MARKERS = LLAMA_FACTORY_KEYS | AXOLOTL_KEYS | ACCELERATE_KEYS | {"model_name_or_path", "base_model", "output_dir"}
#: top-level keys only a DeepSpeed config has (deepspeed/runtime/config.py), never a TrainingArguments field
DEEPSPEED_ONLY = frozenset({"train_batch_size", "train_micro_batch_size_per_gpu", "zero_optimization", "optimizer",
                            "scheduler", "gradient_clipping", "steps_per_print", "wall_clock_breakdown",
                            "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "communication_data_type",
                            "prescale_gradients", "activation_checkpointing", "flops_profiler", "bfloat16"})


def _quote(path: str) -> str:
    return shlex.quote(path) if path else "''"


def _where(value: str, config_path: str) -> str:
    """The DeepSpeed config's path as the user can pass it from here: as written when it exists from the current
    directory, else relative to the training file's folder when it exists there, else as written."""
    if os.path.isfile(value):
        return value
    beside = os.path.join(os.path.dirname(config_path), value)
    return beside if os.path.isfile(beside) else value


def _deepspeed_text(value: Any, key: str, config_path: str, tool: str, hf_args: str) -> str:
    """What to say about the file's ``key`` (its DeepSpeed config): the command to run, or why there is none."""
    from dsdoctor.files import shown

    this = _quote(shown(config_path))
    if isinstance(value, str) and value.strip():
        ds = _where(value.strip(), config_path)
        found = "" if os.path.isfile(ds) else " (not found from here: give its path as the training sees it)"
        return f"its DeepSpeed config is {shown(ds)}{found}: dsdoctor check {_quote(shown(ds))} --launch trainer" + \
            (f" --hf-args {this}{hf_args}" if hf_args is not None else "")
    if isinstance(value, dict):
        return (f"its DeepSpeed config is written inline under {key}: save that object as ds.json and run dsdoctor "
                "check ds.json --launch trainer" + (f" --hf-args {this}{hf_args}" if hf_args is not None else ""))
    return f"it names no DeepSpeed config ({key} is {'absent' if value is None else 'not a path'}): {tool} then " \
           "trains without DeepSpeed"


def training_file_message(values: Any, config_path: str, training_fields: Any = frozenset()) -> str | None:
    """One error line when ``values`` (the parsed CONFIG) is a training tool's file rather than a DeepSpeed config,
    naming the DeepSpeed config it points to and the command that checks both; None when it looks like a ds_config.

    ``training_fields``: the TrainingArguments field names (the schema's), or a function returning them (called
    only for a file no other key tells apart), to recognise a TrainingArguments JSON.
    Recognised: LLaMA-Factory (``model_name_or_path`` with ``stage``, ``template``, ``dataset``, ...; its
    ``deepspeed:`` key), axolotl (``base_model`` with ``datasets``, ``micro_batch_size``, ...; ``deepspeed:``),
    accelerate's config (``compute_environment``, ``distributed_type``; ``deepspeed_config.deepspeed_config_file``)
    and TrainingArguments JSON (two or more TrainingArguments fields that DeepSpeed does not read, no key only a
    DeepSpeed config has; ``deepspeed``)."""
    from dsdoctor.files import shown

    if not isinstance(values, dict):
        return None
    keys = {k for k in values if isinstance(k, str)}
    head = f"CONFIG {shown(config_path)}: this is"
    if "model_name_or_path" in keys and keys & LLAMA_FACTORY_KEYS:
        return (f"{head} a LLaMA-Factory training file, not a DeepSpeed config; "
                + _deepspeed_text(values.get("deepspeed"), "deepspeed", config_path, "LLaMA-Factory",
                                  " (--hf-args reads LLaMA-Factory's YAML: the TrainingArguments keys in it)"))
    if "base_model" in keys and keys & AXOLOTL_KEYS:
        return (f"{head} an axolotl config, not a DeepSpeed config; "
                + _deepspeed_text(values.get("deepspeed"), "deepspeed", config_path, "axolotl", None)
                + " (axolotl runs the HF Trainer; its keys are not TrainingArguments names, so give --hf-args a YAML "
                  "with per_device_train_batch_size: its micro_batch_size, gradient_accumulation_steps, "
                  "learning_rate, bf16)")
    if len(keys & ACCELERATE_KEYS) >= 2 and not keys & DEEPSPEED_ONLY:
        block = values.get("deepspeed_config")
        path = block.get("deepspeed_config_file") if isinstance(block, dict) else None
        if isinstance(path, str) and path.strip():
            return (f"{head} an accelerate config, not a DeepSpeed config; its DeepSpeed config is "
                    f"{shown(path)} (deepspeed_config.deepspeed_config_file): dsdoctor check {_quote(shown(path))}")
        return (f"{head} an accelerate config, not a DeepSpeed config; it names no DeepSpeed config file "
                "(deepspeed_config.deepspeed_config_file): accelerate builds one from its zero_stage, "
                "offload_*_device and gradient_accumulation_steps keys")
    if keys & DEEPSPEED_ONLY:
        return None
    fields = training_fields() if callable(training_fields) else training_fields
    trainer_only = {k for k in keys & set(fields)
                    if k not in DEEPSPEED_ONLY
                    and k not in ("gradient_accumulation_steps", "fp16", "bf16", "deepspeed")}
    half = any(isinstance(values.get(k), dict) for k in ("fp16", "bf16"))
    if len(trainer_only) >= 2 and not keys & DEEPSPEED_ONLY and not half:
        return (f"{head} a TrainingArguments file ({', '.join(sorted(trainer_only)[:3])}), not a DeepSpeed config; "
                + _deepspeed_text(values.get("deepspeed"), "deepspeed", config_path, "the Trainer", ""))
    return None


def hf_args_message(values: Any, path: str) -> str | None:
    """One error line when the ``--hf-args`` file is not TrainingArguments: a DeepSpeed config (CONFIG and
    --hf-args swapped) or an axolotl config (its keys are not TrainingArguments names: every value would silently
    stay at its default here). None otherwise (LLaMA-Factory's train.yaml is TrainingArguments plus its own keys)."""
    from dsdoctor.files import shown

    if not isinstance(values, dict):
        return None
    keys = {k for k in values if isinstance(k, str)}
    half = any(isinstance(values.get(k), dict) for k in ("fp16", "bf16"))
    if keys & DEEPSPEED_ONLY and not keys & {"output_dir", "per_device_train_batch_size", "learning_rate"} or half:
        named = ", ".join(sorted(keys & DEEPSPEED_ONLY)[:3]) or "fp16/bf16 blocks"
        return (f"--hf-args {shown(path)}: this is a DeepSpeed config ({named}), "
                "not TrainingArguments: give it as CONFIG and the TrainingArguments (JSON, or LLaMA-Factory's "
                "train.yaml) as --hf-args")
    if "base_model" in keys and keys & AXOLOTL_KEYS and "per_device_train_batch_size" not in keys:
        return (f"--hf-args {shown(path)}: this is an axolotl config; its keys are not TrainingArguments names "
                "(micro_batch_size is per_device_train_batch_size, num_epochs num_train_epochs): write those in a "
                "small YAML for --hf-args")
    return None
