"""HF Trainer integration checks (``HF2xx``): what the Trainer fills for each "auto", which explicit values
contradict TrainingArguments, and which "auto" values nothing fills.

Mirrors ``transformers/integrations/deepspeed.py`` (``HfTrainerDeepSpeedConfig.trainer_config_process``,
``trainer_config_finalize``, ``deepspeed_optim_sched``) and accelerate's ``Accelerator._prepare_deepspeed`` /
``DeepSpeedPlugin.deepspeed_config_process`` (``accelerate/utils/dataclasses.py``), read in transformers 5.24 and
accelerate 1.15. Nothing here imports them.
"""

from __future__ import annotations

import math
from typing import Any

from dsdoctor.rules import rule

_HF = "transformers/integrations/deepspeed.py"

HF201 = rule(
    "HF201", "error", "ds_config contradicts TrainingArguments",
    what="A value written in the ds_config differs from the TrainingArguments value the Trainer derives it from.",
    why="The Trainer refuses to start, listing every mismatch: \"Please correct the following DeepSpeed config "
        "values that mismatch TrainingArguments values\".",
    fix='Set these ds_config values to "auto" (the Trainer fills them), or make the two agree.',
    source=f"{_HF} HfTrainerDeepSpeedConfig.fill_match / trainer_config_finalize",
    example="ds train_batch_size=32 vs hf train_batch_size (calculated)=4")
HF202 = rule(
    "HF202", "info", 'what the Trainer fills for "auto"',
    what='Each "auto" value and the TrainingArguments value (or model fact) the Trainer puts there.',
    why="Knowing the filled values shows the effective batch, learning rate and precision before the run.",
    fix="Nothing to fix.",
    source=f"{_HF} trainer_config_process, trainer_config_finalize; accelerate Accelerator._prepare_deepspeed")
HF203 = rule(
    "HF203", "error", '"auto" that nothing fills',
    what='An "auto" value that neither the Trainer nor accelerate replaces.',
    why="accelerate walks the whole config and raises ValueError \"`<key>` not found in kwargs. Please specify "
        "`<key>` without `auto`\" when the engine is prepared, after the model has loaded.",
    fix="Write a concrete value (the evidence shows DeepSpeed's default).",
    source="accelerate/utils/dataclasses.py DeepSpeedPlugin.fill_match")
HF204 = rule(
    "HF204", "warning", "the ds_config scheduler replaces the Trainer's",
    what="The ds_config has a scheduler block, so the Trainer's lr_scheduler_type and warmup are not used.",
    why="With a scheduler block the Trainer hands DeepSpeed a DummyScheduler and DeepSpeed builds its own "
        "(WarmupLR keeps the rate constant after warmup): lr_scheduler_type=cosine silently does nothing.",
    fix="Remove the scheduler block to get the Trainer's lr_scheduler_type and warmup; keep it only if you want "
        "DeepSpeed's schedule.",
    source=f"{_HF} deepspeed_optim_sched")
HF208 = rule(
    "HF208", "warning", "misspelled TrainingArguments field",
    what="--hf-args has a key that is not a TrainingArguments field but is close to one.",
    why="LLaMA-Factory refuses unknown keys; a plain script's own parser may drop it: the value you meant "
        "(a learning rate, a batch size) silently stays at its default.",
    fix="Spell it as TrainingArguments does (the suggestion shown).",
    source="transformers/training_args.py TrainingArguments fields")
HF205 = rule(
    "HF205", "warning", "a TrainingArguments field or value that depends on the transformers version",
    what="--hf-args has a field that some transformers versions have and others do not (warmup_ratio: 4.x and "
         "5.0-5.1 have it, 5.2 and later do not; eval_strategy, activation_checkpointing: only later versions), or a "
         "value one version reads differently (a fractional warmup_steps is a ratio in 5.x, a ValueError in 4.x); or "
         "a warmup the Trainer fills differently per version.",
    why="TrainingArguments(...) raises TypeError \"unexpected keyword argument\" for a field its version lacks; "
        "LLaMA-Factory's parser refuses unused keys. The check runs with the transformers installed here, which need "
        "not be the one of the training machine: without --transformers both behaviours are named (a warning); with "
        "it, a field that version refuses is an error.",
    fix="Give --transformers X.Y (the version the run uses) and use the field that version has (the finding names "
        "it); for warmup, warmup_steps as a whole number of steps works on every version.",
    source="transformers/training_args.py TrainingArguments fields and __post_init__ (4.36.2, 4.57.6, 5.0.0, 5.18.0, "
           "5.24.0); integrations/deepspeed.py trainer_config_finalize",
    example="warmup_ratio: 0.1 in train.yaml, checked with transformers 5.24 for a run on transformers 4.57")
HF206 = rule(
    "HF206", "error", "a number that YAML reads as a string",
    what="A numeric TrainingArguments value is a string, e.g. learning_rate: 1e-4 in YAML.",
    why="YAML 1.1 reads 1e-4 (no dot) as the string \"1e-4\"; HfArgumentParser keeps it, and the optimizer "
        "fails with TypeError \"'<=' not supported between instances of 'float' and 'str'\" (or the string "
        'lands in the ds_config\'s "auto").',
    fix="Write 1.0e-4 (with a dot) or 0.0001.",
    source="yaml.safe_load; transformers/hf_argparser.py parse_dict")
HF207 = rule(
    "HF207", "info", "TrainingArguments not given",
    what="--launch trainer without --hf-args: the values the Trainer will fill are unknown here.",
    why="Batch math, precision and mismatches against TrainingArguments need its values.",
    fix="Pass --hf-args args.json (or LLaMA-Factory's train.yaml) with per_device_train_batch_size, "
        "gradient_accumulation_steps, learning_rate, bf16/fp16, max_steps or num_train_epochs.",
    source=f"{_HF} trainer_config_process")
HF209 = rule(
    "HF209", "error", "ZeRO-3 with device_map or low_cpu_mem_usage",
    what="The model is loaded with from_pretrained(device_map=...) or low_cpu_mem_usage=True while the DeepSpeed "
         "config is ZeRO-3 (HfDeepSpeedConfig or the Trainer's deepspeed= is active).",
    why="ZeRO-3 partitions the weights as they are created (zero.Init); a device map places them itself. transformers "
        "refuses the pair: 'DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` or with passing a "
        "`device_map`'.",
    fix="Drop device_map and low_cpu_mem_usage from from_pretrained under ZeRO-3 (ZeRO-3 already loads without a "
        "full copy per GPU), or use ZeRO-2.",
    source="transformers/modeling_utils.py from_pretrained (is_deepspeed_zero3_enabled)")

#: TrainingArguments fields the integration reads, and their types (transformers/training_args.py)
NUMERIC = {"per_device_train_batch_size": int, "gradient_accumulation_steps": int, "learning_rate": float,
           "weight_decay": float, "adam_beta1": float, "adam_beta2": float, "adam_epsilon": float,
           "max_grad_norm": float, "warmup_steps": float, "max_steps": int, "num_train_epochs": float,
           "warmup_ratio": float}
FLAGS = ("fp16", "bf16", "fp16_full_eval", "bf16_full_eval", "save_on_each_node", "auto_find_batch_size", "tf32")
#: --hf-args keys that are not fields matched against the fields for "did you mean" (HF208): a real file has
#: tens of keys; matching 80,000 of them against 150 fields took a minute
MAX_KEYS_MATCHED = 200
#: the transformers releases whose ``training_args.py`` :data:`FIELD_VERSIONS` is read from (the wheels on PyPI)
SAMPLED_VERSIONS = ("4.36.2", "4.57.6", "5.0.0", "5.18.0", "5.24.0")
#: TrainingArguments fields that some of :data:`SAMPLED_VERSIONS` have and others do not, generated from their
#: ``training_args.py`` (:func:`training_argument_fields`; ``python tests/test_hf_trainer.py`` prints it again and
#: the tests compare): field -> (the versions that have it, the version its own deprecation note says removes it,
#: its help text in the first version that has it)
FIELD_VERSIONS: dict[str, tuple[str, str, str]] = {
    'accelerator_config': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'Config to be used with the internal Accelerator object initialization. The value is either a ...'),
    'activation_checkpointing': ('5.24.0', '',
        'Enable activation checkpointing to trade compute for memory. Reduces memory at the cost of ~20%% ...'),
    'activation_checkpointing_kwargs': ('5.24.0', '',
        'Keyword arguments passed to `activation_checkpointing_enable()`. `every_n_layers` checkpoints ...'),
    'adafactor': ('4.36.2 4.57.6', '',
        'Whether or not to replace AdamW by Adafactor.'),
    'average_tokens_across_devices': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'Whether or not to average tokens across devices. If enabled, will use all_reduce to synchronize ...'),
    'batch_eval_metrics': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'Break eval metrics calculation into batches to save memory.'),
    'dataloader_in_order': ('5.18.0 5.24.0', '',
        'If True (default), the data loader yields batches in the order workers were dispatched. Set to ...'),
    'dataloader_multiprocessing_context': ('5.18.0 5.24.0', '',
        "The multiprocessing start method to use for data loading workers ('fork', 'spawn', or ..."),
    'dataloader_prefetch_factor': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'Number of batches loaded in advance by each worker. 2 means there will be a total of 2 * ...'),
    'ddp_static_graph': ('5.18.0 5.24.0', '',
        'When using distributed training, the value of the flag `static_graph` passed to ...'),
    'dispatch_batches': ('4.36.2', '',
        'Whether to dispatch batches across devices in distributed training. If set to `True`, the ...'),
    'enable_jit_checkpoint': ('5.0.0 5.18.0 5.24.0', '',
        'Whether to enable Just-In-Time (JIT) checkpointing on SIGTERM signal. When enabled, training ...'),
    'eval_do_concat_batches': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'Whether to recursively concat inputs/losses/labels/predictions across batches. If `False`, will ...'),
    'eval_on_start': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'Whether to run through the entire `evaluation` step at the very beginning of training as a ...'),
    'eval_strategy': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'The evaluation strategy to use.'),
    'eval_use_gather_object': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'Whether to run recursively gather object in a nested list/tuple/dictionary of objects from all ...'),
    'evaluation_strategy': ('4.36.2', '',
        'The evaluation strategy to use.'),
    'fp16_backend': ('4.36.2 4.57.6', '',
        'Deprecated. Use half_precision_backend instead'),
    'fp16_opt_level': ('4.36.2 4.57.6', '',
        "For fp16: Apex AMP optimization level selected in ['O0', 'O1', 'O2', and 'O3']. See details at ..."),
    'fsdp_min_num_params': ('4.36.2 4.57.6', '',
        "This parameter is deprecated. FSDP's minimum number of parameters for Default Auto Wrapping. ..."),
    'fsdp_transformer_layer_cls_to_wrap': ('4.36.2 4.57.6', '',
        'This parameter is deprecated. Transformer layer class name (case-sensitive) to wrap, e.g, ...'),
    'group_by_length': ('4.36.2 4.57.6 5.0.0', '',
        'Whether or not to group samples of roughly the same length together when batching.'),
    'half_precision_backend': ('4.36.2 4.57.6', '',
        'The backend to be used for half precision.'),
    'hub_revision': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'The revision to use when pushing to the Hub. Can be a branch name, a tag, or a commit hash.'),
    'include_for_metrics': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'List of strings to specify additional data to include in the `compute_metrics` function.Options: ...'),
    'include_inputs_for_metrics': ('4.36.2 4.57.6', '5',
        'Whether or not the inputs will be passed to the `compute_metrics` function.'),
    'include_tokens_per_second': ('4.36.2 4.57.6', '',
        'If set to `True`, the speed metrics will include `tgs` (tokens per second per device).'),
    'jit_mode_eval': ('4.36.2 4.57.6', '',
        'Whether or not to use PyTorch jit trace for inference'),
    'liger_kernel_config': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'Configuration to be used for Liger Kernel. When use_liger_kernel=True, this dict is passed as ...'),
    'logging_dir': ('4.36.2 4.57.6 5.0.0', '5.2',
        'Tensorboard log dir.'),
    'mp_parameters': ('4.36.2 4.57.6', '',
        'Used by the SageMaker launcher to send mp-specific args. Ignored in Trainer'),
    'no_cuda': ('4.36.2 4.57.6', '5.0',
        'This argument is deprecated. It will be removed in version 5.0 of 🤗 Transformers.'),
    'optim_target_modules': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'Target modules for the optimizer defined in the `optim` argument. Only used for the GaLore ...'),
    'overwrite_output_dir': ('4.36.2 4.57.6', '',
        'Overwrite the content of the output directory. Use this to continue training if output_dir ...'),
    'parallelism_config': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'Parallelism configuration for the training run. Requires Accelerate `1.10.1`'),
    'past_index': ('4.36.2 4.57.6', '',
        'If >=0, uses the corresponding part of the output as the past state for next step.'),
    'per_gpu_eval_batch_size': ('4.36.2 4.57.6', '',
        'Deprecated, the use of `--per_device_eval_batch_size` is preferred. Batch size per GPU/TPU ...'),
    'per_gpu_train_batch_size': ('4.36.2 4.57.6', '',
        'Deprecated, the use of `--per_device_train_batch_size` is preferred. Batch size per GPU/TPU ...'),
    'project': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'The name of the project to use for logging. Currenly, only used by Trackio.'),
    'push_to_hub_model_id': ('4.36.2 4.57.6', '',
        'The name of the repository to which push the `Trainer`.'),
    'push_to_hub_organization': ('4.36.2 4.57.6', '',
        'The name of the organization in with to which push the `Trainer`.'),
    'push_to_hub_token': ('4.36.2 4.57.6', '',
        'The token to use to push to the Model Hub.'),
    'ray_scope': ('4.36.2 4.57.6', '',
        'The scope to use when doing hyperparameter search with Ray. By default, `"last"` will be used. ...'),
    'restore_callback_states_from_checkpoint': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'Whether to restore the callback states from the checkpoint. If `True`, will override callbacks ...'),
    'save_safetensors': ('4.36.2 4.57.6', '',
        'Use safetensors saving and loading for state dicts instead of default torch.load and torch.save.'),
    'split_batches': ('4.36.2', '',
        'Whether or not the accelerator should split the batches yielded by the dataloaders across the ...'),
    'torch_empty_cache_steps': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'Number of steps to wait before calling `torch.<device>.empty_cache()`.This can help avoid CUDA ...'),
    'torchdynamo': ('4.36.2 4.57.6', '',
        'This argument is deprecated, use `--torch_compile_backend` instead.'),
    'tpu_metrics_debug': ('4.36.2 4.57.6', '',
        'Deprecated, the use of `--debug tpu_metrics_debug` is preferred. TPU: Whether to print debug metrics'),
    'tpu_num_cores': ('4.36.2 4.57.6', '',
        'TPU: Number of TPU cores (automatically passed by launcher script)'),
    'trackio_bucket_id': ('5.18.0 5.24.0', '',
        'Optional HF Bucket id when using a Trackio Space; if unset, Trackio picks a default.'),
    'trackio_space_id': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'The Hugging Face Space ID to deploy to when using Trackio. Should be a complete Space name like ...'),
    'trackio_static_space_id': ('5.18.0 5.24.0', '',
        'Static read-only Trackio Space over the Bucket (stable model-card links). False: no static sync ...'),
    'train_sampling_strategy': ('5.18.0 5.24.0', '',
        "Sampler for training: 'random' (default), 'sequential', 'group_by_length', or 'batch_rebalance'."),
    'use_cache': ('5.0.0 5.18.0 5.24.0', '',
        'Whether or not to use cache for the model For training, this is usually not needed apart from ...'),
    'use_ipex': ('4.36.2', '',
        'Use Intel extension for PyTorch when it is available, installation: ...'),
    'use_legacy_prediction_loop': ('4.36.2 4.57.6', '',
        'Whether or not to use the legacy prediction_loop in the Trainer.'),
    'use_liger_kernel': ('4.57.6 5.0.0 5.18.0 5.24.0', '',
        'Whether or not to enable the Liger Kernel for model training.'),
    'use_mps_device': ('4.36.2 4.57.6', '5.0',
        'This argument is deprecated. `mps` device will be used if available similar to `cuda` device. It ...'),
    'warmup_ratio': ('4.36.2 4.57.6 5.0.0', '5.2',
        'Linear warmup over warmup_ratio fraction of total steps.'),
}
#: what the other versions use instead, from the help texts above and the fields that took their place in the same
#: releases (each checked in the later training_args.py); absent: nothing replaces it (remove the key)
INSTEAD = {
    "warmup_ratio": "warmup_steps with the same fraction (5.x reads a warmup_steps below 1 as that fraction of the "
                    "total steps: TrainingArguments.get_warmup_steps)",
    "logging_dir": "the environment variable TENSORBOARD_LOGGING_DIR",
    "group_by_length": 'train_sampling_strategy: "group_by_length"',
    "evaluation_strategy": "eval_strategy",
    "eval_strategy": "evaluation_strategy (before eval_strategy existed)",
    "per_gpu_train_batch_size": "per_device_train_batch_size",
    "per_gpu_eval_batch_size": "per_device_eval_batch_size",
    "no_cuda": "use_cpu",
    "include_inputs_for_metrics": 'include_for_metrics: ["inputs"]',
    "torchdynamo": "torch_compile_backend",
    "tpu_metrics_debug": 'debug: "tpu_metrics_debug"',
    "push_to_hub_model_id": "hub_model_id",
    "push_to_hub_organization": 'hub_model_id: "organization/name"',
    "push_to_hub_token": "hub_token",
    "fsdp_min_num_params": "fsdp_config: {min_num_params: N}",
    "fsdp_transformer_layer_cls_to_wrap": "fsdp_config: {transformer_layer_cls_to_wrap: [...]}",
    "adafactor": 'optim: "adafactor"',
    "dispatch_batches": "accelerator_config: {dispatch_batches: ...}",
    "split_batches": "accelerator_config: {split_batches: ...}",
    "activation_checkpointing": "gradient_checkpointing (its older name)",
    "activation_checkpointing_kwargs": "gradient_checkpointing_kwargs (its older name)",
    "train_sampling_strategy": "group_by_length: true (for \"group_by_length\")",
    "include_for_metrics": "include_inputs_for_metrics",
}
#: transformers that reads a fractional warmup_steps (5.0.0's ``warmup_steps: float``; 4.57.6's __post_init__ raises
#: ValueError "warmup_steps must be of type int and must be 0 or a positive integer.")
FRACTIONAL_WARMUP_FROM = (5, 0)
#: trainer_config_finalize fills warmup_num_steps with max(1, get_warmup_steps(...)) in 5.18.0 and 5.24.0, with
#: get_warmup_steps(...) (0 without warmup) in 4.57.6 and 5.0.0; DeepSpeed 0.19.6 and later refuse 0 (WarmupLR:
#: "warmup_num_steps must be a positive integer, got 0", deepspeed/runtime/lr_schedules.py)
WARMUP_AT_LEAST_ONE = ((5, 0, 0), (5, 18, 0))
FALLBACK_DEFAULTS = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "learning_rate": 5e-05,
                     "weight_decay": 0.0, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-08,
                     "max_grad_norm": 1.0, "fp16": False, "bf16": False, "fp16_full_eval": False,
                     "bf16_full_eval": False, "warmup_steps": 0, "max_steps": -1, "num_train_epochs": 3.0,
                     "lr_scheduler_type": "linear", "save_on_each_node": False, "auto_find_batch_size": False}


def training_argument_fields(source: str) -> dict[str, str]:
    """The fields of ``TrainingArguments`` in a ``transformers/training_args.py`` source text, read without importing
    it (``ast``): field name -> its help text (``metadata={"help": ...}``, whitespace collapsed; "" when none).
    Private fields (``_n_gpu``) are left out. Used to generate :data:`FIELD_VERSIONS`."""
    import ast

    for node in ast.parse(source).body:
        if not (isinstance(node, ast.ClassDef) and node.name == "TrainingArguments"):
            continue
        out = {}
        for statement in node.body:
            if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)) or \
                    statement.target.id.startswith("_"):
                continue
            text = ""
            if isinstance(statement.value, ast.Call):
                for keyword in statement.value.keywords:
                    if keyword.arg == "metadata" and isinstance(keyword.value, ast.Dict):
                        for k, v in zip(keyword.value.keys, keyword.value.values):
                            if isinstance(k, ast.Constant) and k.value == "help":
                                try:
                                    text = str(ast.literal_eval(v))
                                except ValueError:
                                    text = ""
            out[statement.target.id] = " ".join(text.split())
        return out
    return {}


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """``"4.57.6"`` -> ``(4, 57, 6)``; ``"5.2"`` -> ``(5, 2, 0)``; a suffix (``rc1``, ``.dev0``) is ignored; None
    for text that does not start with a version."""
    import re

    match = re.match(r"\s*v?(\d{1,4})\.(\d{1,4})(?:\.(\d{1,4}))?", text or "")
    return None if match is None else tuple(int(g or 0) for g in match.groups())


def field_accepted(field: str, version: str) -> bool | None:
    """Whether ``TrainingArguments`` of transformers ``version`` has ``field`` (a key of :data:`FIELD_VERSIONS`; any
    other field every sampled version has: True). From the sampled versions around ``version``: when they agree,
    their answer; when the older has it and the newer not, the field's own deprecation note ("removed in v5.2")
    decides; else None (not known). Older than every sampled version: False only when the oldest lacks it; newer
    than every one: as the newest."""
    entry = FIELD_VERSIONS.get(field)
    wanted = parse_version(version)
    if entry is None:
        return True
    if wanted is None:
        return None
    have = {parse_version(v) for v in entry[0].split()}
    sampled = sorted(parse_version(v) for v in SAMPLED_VERSIONS)
    older = [v for v in sampled if v <= wanted]
    newer = [v for v in sampled if v > wanted]
    if older and older[-1] == wanted:
        return wanted in have
    if not older:
        return False if newer[0] not in have else None
    if not newer:
        return older[-1] in have
    before, after = older[-1] in have, newer[0] in have
    if before == after:
        return before
    removed = parse_version(entry[1])
    if before and removed is not None and older[-1] < removed <= newer[0]:
        return wanted < removed
    return None


def _span(versions: list[str]) -> str:
    return versions[0] if len(versions) == 1 else (" and ".join(versions) if len(versions) == 2 else
                                                   f"{versions[0]} to {versions[-1]}")


def check_versions(hf_args: dict, args: dict, ctx, out) -> None:
    """HF205: the fields of ``hf_args`` that some transformers versions lack (:data:`FIELD_VERSIONS`), a fractional
    warmup_steps (a ratio from 5.0, a ValueError before), judged for the transformers of the run
    (``ctx.transformers_version``: an error where that version refuses it). Unknown version: a warning naming what
    each side does, for the fields the last 4.x (4.57.6) or the installed transformers lacks."""
    run = getattr(ctx, "transformers_version", None)
    installed = getattr(ctx, "transformers_installed", None) or ""
    said = f"transformers {run} ({getattr(ctx, 'transformers_source', '') or '--transformers'})" if run else ""
    for key in hf_args:
        entry = FIELD_VERSIONS.get(key)
        if entry is None:
            continue
        have, removed, meaning = entry
        has = have.split()
        lacks = [v for v in SAMPLED_VERSIONS if v not in has]
        value = show_value(hf_args[key])
        note = f"; its note in {has[-1]}: removed in {removed}" if removed else ""
        accept_text = f'transformers {_span(has)} {"has" if len(has) == 1 else "have"} it ("{meaning}"{note})'
        refuse_text = (f"{_span(lacks)}{' (installed here)' if installed in lacks else ''} "
                       f"{'does' if len(lacks) == 1 else 'do'} not: "
                       f"TrainingArguments.__init__() got an unexpected keyword argument '{key}'")
        fix = _instead_text(key, hf_args, args)
        if run:
            ok = field_accepted(key, run)
            if ok:
                if removed:
                    out.add(HF205.finding(f"{key}: {value} with {said}: accepted there; removed in {removed} "
                                          f"(its note in {has[-1]})",
                                          severity="info", fix=fix))
                continue
            if ok is False:
                out.add(HF205.finding(f"{key}: {value} with {said}: {refuse_text.split(': ', 1)[1]} ({accept_text})",
                                      severity="error", fix=fix))
            else:
                out.add(HF205.finding(f"{key}: {value} with {said}: not known whether it has it ({accept_text}; "
                                      f"{refuse_text})", fix=fix))
            continue
        if "4.57.6" in has and (not installed or field_accepted(key, installed) is not False) and "5.24.0" in has:
            continue  # both sides of 5.0 and the installed one have it: an older 4.x only would refuse it
        out.add(HF205.finding(f"{key}: {value}; which transformers the run uses is not given (--transformers): "
                              f"{accept_text}; {refuse_text}", fix=fix))
    warmup = hf_args.get("warmup_steps")
    if isinstance(warmup, float):  # YAML 0.1 and 100.0 alike: 4.x wants an int
        wanted = parse_version(run) if run else None
        text = (f"warmup_steps: {show_value(warmup)} (a float): transformers 5.0 and later read it (a warmup_steps "
                "below 1 as that fraction of the total steps: get_warmup_steps); 4.x refuses a float: ValueError "
                '"warmup_steps must be of type int and must be 0 or a positive integer."')
        fix = _whole_warmup_fix(warmup, args)
        if wanted is None:
            out.add(HF205.finding(f"{text} (which transformers the run uses is not given: --transformers)", fix=fix))
        elif wanted[:2] < FRACTIONAL_WARMUP_FROM:
            out.add(HF205.finding(f"{text}; the run uses {said}", severity="error", fix=fix))


def show_value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def _whole_warmup_fix(fraction: float, args: dict) -> str:
    """A warmup every transformers version reads the same: a whole number of steps (from max_steps when known)."""
    steps = args.get("max_steps")
    if fraction >= 1:
        return f"For any transformers version write warmup_steps: {int(fraction)} (an integer, without the .0)."
    if isinstance(steps, int) and steps > 0 and 0 < fraction < 1:
        whole = max(1, math.ceil(steps * fraction))
        return (f"For any transformers version write warmup_steps: {whole}: ceil({show_value(fraction)} x max_steps "
                f"{steps}), the same warmup as a whole number of steps.")
    return ("For any transformers version write warmup_steps as a whole number of steps (the fraction x the run's "
            "total steps); or give --transformers X.Y of the run.")


def _instead_text(key: str, hf_args: dict, args: dict) -> str:
    """The fix for a version-dependent field: what the other versions use, keeping its meaning; never dropping it."""
    value = hf_args[key]
    if key == "warmup_ratio" and isinstance(value, (int, float)) and not isinstance(value, bool):
        steps = args.get("max_steps")
        whole = ""
        if isinstance(steps, int) and steps > 0 and 0 < value <= 1:
            whole = (f"; for every version write warmup_steps: {max(1, math.ceil(steps * value))} instead: ceil("
                     f"{show_value(value)} x max_steps {steps}), the same warmup as a whole number of steps")
        return (f"On transformers 5.2 and later replace warmup_ratio: {show_value(value)} by warmup_steps: "
                f"{show_value(value)} (a warmup_steps below 1 is that fraction of the total steps); 4.x refuses a "
                f"fractional warmup_steps (ValueError), so keep warmup_ratio there{whole}. Removing it without a "
                "replacement drops the warmup.")
    instead = INSTEAD.get(key)
    if instead:
        return f"Where the run's transformers lacks {key}, use {instead}; give --transformers X.Y to know which."
    return f"Where the run's transformers lacks {key}, remove it (nothing replaces it); give --transformers X.Y."


def training_arguments(hf_args: dict, ctx, out) -> dict:
    """TrainingArguments values: the installed transformers' defaults (from the schema) updated with ``hf_args``.
    Strings in numeric fields are reported (HF206) and read as numbers so the remaining checks can go on."""
    from dsdoctor.checks.deepspeed_config import installed_version
    from dsdoctor.checks.deepspeed_config.values import finite_float

    defaults = dict(FALLBACK_DEFAULTS)
    defaults.update((ctx.schema.get("training_arguments") or {}).get("defaults", {}))
    args = {**defaults, **{k: v for k, v in hf_args.items() if v is not None}}
    if not getattr(ctx, "transformers_installed", None):
        ctx.transformers_installed = installed_version("transformers") or (
            ctx.schema.get("training_arguments") or {}).get("transformers_version", "")
    fields = (ctx.schema.get("training_arguments") or {}).get("fields", [])
    if fields:
        import difflib

        looked = 0
        for key in hf_args:
            if key in fields or key in FIELD_VERSIONS:
                continue
            looked += 1
            if looked > MAX_KEYS_MATCHED:
                break
            close = difflib.get_close_matches(key, fields, n=1, cutoff=0.85)
            if close:
                out.add(HF208.finding(f'"{key}" is not a TrainingArguments field; did you mean "{close[0]}"? '
                                      f"({close[0]} stays {defaults.get(close[0], 'at its default')!r})",
                                      fix=f"Rename it to {close[0]}."))
    # warmup_ratio: 4.x uses it when warmup_steps is 0 (get_warmup_steps); 5.0 and 5.1 copy it over warmup_steps
    run = parse_version(getattr(ctx, "transformers_version", None))
    ratio = args.get("warmup_ratio")
    if ratio is not None and ("warmup_steps" not in hf_args or not args.get("warmup_steps") or
                              (run is not None and (5, 0, 0) <= run < (5, 2, 0))):
        args["warmup_steps"] = ratio
    for key, kind in NUMERIC.items():
        value = args.get(key)
        if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            continue
        number = None
        if isinstance(value, str):  # HfArgumentParser's float()/int() of the string; NaN and inf count as no number
            number = finite_float(value)
            if number is not None and kind is int:
                number = int(number) if abs(number) < 2 ** 63 else None
        if number is not None:
            out.add(HF206.finding(f"{key} is the string {value!r}, not a number"))
        else:
            out.add(HF206.finding(f"{key} is {value!r}, not a number", title="a TrainingArguments number that "
                                  "is not a number"))
        args[key] = number if number is not None else defaults.get(key)
    for key in FLAGS:
        if isinstance(args.get(key), str):
            args[key] = args[key].strip().lower() in ("1", "true", "yes", "on")
    check_versions(hf_args, args, ctx, out)
    return args


def _find_node(config: dict, key_long: str):
    """``HfDeepSpeedConfig.find_config_node``: the dict holding the last part, or None."""
    node = config
    parts = key_long.split(".")
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return None, parts[-1]
    return (node if isinstance(node, dict) else None), parts[-1]


def check_trainer(config: dict, ctx, out) -> tuple[dict, dict[str, str]]:
    """Simulate the Trainer's and accelerate's processing of ``config``.

    Returns ``(filled, origin)``: a filled copy (values the Trainer fills from unknown TrainingArguments stay
    "auto") and, per filled key, where its value came from. Adds HF201-HF207 findings to ``out``.
    """
    from dsdoctor.checks.deepspeed_config import (MISSING, auto_paths, is_auto, show)

    filled = _copy_objects(config)
    origin: dict[str, str] = {}
    fills: list[str] = []
    mismatches: list[str] = []
    known = ctx.hf_args is not None
    args = training_arguments(ctx.hf_args or {}, ctx, out)
    ws = ctx.world_size

    def fill_match(key_long: str, hf_val: Any, hf_key: str | None, must_match: bool = True) -> None:
        node, key = _find_node(filled, key_long)
        if node is None:
            return
        if is_auto(node.get(key)):
            if known or hf_key is None:
                node[key] = hf_val
                origin[key_long] = f"auto <- {hf_key or 'the Trainer'} = {show(hf_val)}"
                fills.append(f"{key_long} <- {hf_key or 'constant'} = {show(hf_val)}")
            else:
                origin[key_long] = f"auto <- {hf_key} (value not given)"
                fills.append(f"{key_long} <- {hf_key}")
                node[key] = "__filled__"
            return
        if not must_match or not known:
            return
        ds_val = node.get(key)
        if key_long == "train_batch_size" and ctx.world_size_assumed:
            return  # world size x micro x accumulation with a guessed world size: DS106 names the sizes it holds on
        if ds_val is not None and ds_val != hf_val:
            mismatches.append(f"- ds {key_long}={_py(ds_val)} vs hf {hf_key}={_py(hf_val)}")
            out.change(key_long, ds_val, "auto", "HF201", f"the Trainer fills it from {hf_key}")

    auto_find = bool(args.get("auto_find_batch_size"))
    micro, acc = args["per_device_train_batch_size"], args["gradient_accumulation_steps"]
    fill_match("train_micro_batch_size_per_gpu", micro, "per_device_train_batch_size", not auto_find)
    fill_match("gradient_accumulation_steps", acc, "gradient_accumulation_steps")
    fill_match("train_batch_size", ws * micro * acc if isinstance(micro, int) and isinstance(acc, int) else None,
               "train_batch_size (calculated)", not auto_find)
    fill_match("gradient_clipping", args["max_grad_norm"], "max_grad_norm")
    fill_match("optimizer.params.lr", args["learning_rate"], "learning_rate")
    fill_match("optimizer.params.betas", [args["adam_beta1"], args["adam_beta2"]], "adam_beta1+adam_beta2")
    fill_match("optimizer.params.eps", args["adam_epsilon"], "adam_epsilon")
    fill_match("optimizer.params.weight_decay", args["weight_decay"], "weight_decay")
    fill_match("scheduler.params.warmup_min_lr", 0, None, must_match=False)
    fill_match("scheduler.params.warmup_max_lr", args["learning_rate"], "learning_rate")
    fill_match("fp16.enabled", bool(args["fp16"] or args["fp16_full_eval"]), "fp16|fp16_full_eval")
    fill_match("bf16.enabled", bool(args["bf16"] or args["bf16_full_eval"]), "bf16|bf16_full_eval")

    # trainer_config_finalize: keys sized from the model's hidden size, then total and warmup steps
    hidden = ctx.model.hidden_size if ctx.model is not None else None
    for key_long, value, label in (
            ("zero_optimization.reduce_bucket_size", hidden * hidden if hidden else None, "hidden_size^2"),
            ("zero_optimization.stage3_prefetch_bucket_size", int(0.9 * hidden * hidden) if hidden else None,
             "0.9 x hidden_size^2"),
            ("zero_optimization.stage3_param_persistence_threshold", 10 * hidden if hidden else None,
             "10 x hidden_size")):
        node, key = _find_node(filled, key_long)
        if node is None or not is_auto(node.get(key)):
            continue
        # (accelerate's _prepare_deepspeed fills all three with the same formulas, ZeRO-3 or not)
        if hidden:
            node[key] = value
            origin[key_long] = f"auto <- {label} = {value}"
            fills.append(f"{key_long} <- {label} = {value} (hidden_size {hidden})")
        else:
            origin[key_long] = f"auto <- {label} (model hidden_size; give --model)"
            fills.append(f"{key_long} <- {label} (the model's hidden_size)")
            node[key] = "__filled__"
    steps = args.get("max_steps")
    total = steps if isinstance(steps, int) and steps > 0 and known else None
    node, key = _find_node(filled, "scheduler.params.total_num_steps")
    if node is not None and is_auto(node.get(key)):
        if total:
            node[key] = total
            fills.append(f"scheduler.params.total_num_steps <- num_training_steps = {total} (max_steps)")
        else:
            node[key] = "__filled__"
            fills.append("scheduler.params.total_num_steps <- num_training_steps (known when training starts)")
        origin["scheduler.params.total_num_steps"] = "auto <- num_training_steps"
    warmup = args.get("warmup_steps", 0)
    raw = None  # TrainingArguments.get_warmup_steps: int(w) from 1, else ceil(total x w) (0 without warmup)
    if isinstance(warmup, (int, float)) and (warmup >= 1 or warmup <= 0):
        raw = int(warmup) if warmup >= 1 else 0
    elif isinstance(warmup, (int, float)) and total:
        raw = math.ceil(total * warmup)
    run = parse_version(getattr(ctx, "transformers_version", None))
    lo, hi = WARMUP_AT_LEAST_ONE
    at_least_one = None if run is None or lo < run < hi else run >= hi  # None: not known (without --transformers)
    warmup_steps = None if raw is None else (raw if at_least_one is False else max(1, raw))
    node, key = _find_node(filled, "scheduler.params.warmup_num_steps")
    if node is not None:
        if is_auto(node.get(key)):
            node[key] = warmup_steps if warmup_steps is not None and known else "__filled__"
            origin["scheduler.params.warmup_num_steps"] = "auto <- warmup_steps"
            fills.append("scheduler.params.warmup_num_steps <- max(1, warmup_steps)"
                         + (f" = {warmup_steps}" if warmup_steps is not None and known else ""))
            if known and raw == 0 and at_least_one is not True:
                version = f"transformers {ctx.transformers_version}" if run else "a transformers before 5.18"
                out.add(HF205.finding(
                    '"scheduler.params.warmup_num_steps": "auto" with no warmup in TrainingArguments (warmup_steps 0): '
                    "transformers 5.18.0 and 5.24.0 fill max(1, 0) = 1; 4.57.6 and 5.0.0 fill 0, which DeepSpeed "
                    '0.19.6 and later refuse: ValueError "warmup_num_steps must be a positive integer, got 0" '
                    "(deepspeed/runtime/lr_schedules.py)" + ("" if run else
                                                              "; which transformers the run uses is not given"),
                    severity="error" if at_least_one is False else "warning",
                    title="a warmup fill that depends on the transformers version",
                    fix=f"Give TrainingArguments warmup_steps: 1 (or more) so {version} fills a positive value, or "
                        "use a scheduler without warmup (remove the scheduler block: the Trainer's own)."))
        elif known and warmup_steps is not None and node.get(key) is not None and node.get(key) != warmup_steps:
            written = node.get(key)
            mismatches.append(f"- ds scheduler.params.warmup_num_steps={_py(written)} vs hf warmup_steps="
                              f"{warmup_steps}")
            out.change("scheduler.params.warmup_num_steps", written, "auto", "HF201",
                       f"the Trainer fills it from warmup_steps: {warmup_steps} steps, not the {show(written)} "
                       "written here")
            for c in out.changes:
                if c.path == "scheduler.params.warmup_num_steps" and c.rule == "HF201":
                    c.training = f"warmup {show(written)} -> {warmup_steps} steps (TrainingArguments warmup)"
            out.cannot_fix("TrainingArguments warmup_steps",
                           f"warmup_steps: {show(written)} to keep the config's warmup of {show(written)} steps "
                           '(then "auto" fills it with that)')

    # accelerate's AcceleratorState (state.py) calls DeepSpeedPlugin.set_mixed_precision with the TrainingArguments'
    # mixed precision ("fp16" if fp16, else "bf16" if bf16): it adds the block the config lacks, and refuses the other
    # type enabled in the file (accelerate/utils/dataclasses.py)
    if known:
        out.training_args = args
        mixed = "fp16" if args.get("fp16") is True else "bf16" if args.get("bf16") is True else None
        if mixed is not None:
            other = "bf16" if mixed == "fp16" else "fp16"
            section = filled.get(other)
            if isinstance(section, dict) and str(section.get("enabled", "False")).lower() == "true":
                # the run stops here, when the Trainer builds its Accelerator (before HF201's list at train())
                out.add(HF201.finding(f"TrainingArguments {mixed}=True and the ds_config's {other}.enabled true: "
                                      f"accelerate raises ValueError \"`--mixed_precision` arg cannot be set to "
                                      f"`{mixed}` when `{other}` is set in the DeepSpeed config file.\"",
                                      fix=f'Set "{other}": {{"enabled": "auto"}} so the Trainer fills it from '
                                          f"TrainingArguments {other}, and keep one 16-bit type there."))
                out.change(f"{other}.enabled", section.get("enabled"), "auto", "HF201",
                           f"the Trainer fills it from TrainingArguments {other}")
            elif mixed not in filled:
                filled[mixed] = {"enabled": True, "auto_cast": True} if mixed == "fp16" else {"enabled": True}
                origin[f"{mixed}.enabled"] = f"accelerate: TrainingArguments {mixed}=True and no {mixed} block"
                fills.append(f"{mixed} <- {filled[mixed]} (accelerate set_mixed_precision: TrainingArguments "
                             f"{mixed}=True, no {mixed} block)")

    # accelerate's _prepare_deepspeed fills a few more, then refuses any "auto" left
    node, key = _find_node(filled, "zero_optimization.stage3_gather_16bit_weights_on_model_save")
    if node is not None and is_auto(node.get(key)):
        node[key] = False
        origin["zero_optimization.stage3_gather_16bit_weights_on_model_save"] = "auto <- accelerate: false"
        fills.append("zero_optimization.stage3_gather_16bit_weights_on_model_save <- false (accelerate)")
    for path, value in (("gradient_clipping", 1.0),):
        node, key = _find_node(filled, path)
        if node is not None and is_auto(node.get(key)):
            node[key] = value
    unfilled = [p for p in auto_paths(filled) if "[" not in p]  # accelerate walks dicts, not lists
    for path in unfilled:
        section_default = _default_for(path, ctx.schema)
        out.add(HF203.finding(f"\"{path}\" is \"auto\" and nothing fills it: `{path}` not found in kwargs. "
                              f"Please specify `{path}` without `auto`"
                              + (f" (DeepSpeed's default: {show(section_default)})"
                                 if section_default is not MISSING else "")))
        if section_default is not MISSING and section_default is not None:
            out.change(path, "auto", section_default, "HF203", "DeepSpeed's default; nothing fills \"auto\" here")
    _restore_placeholders(filled)

    if mismatches:
        out.add(HF201.finding("Please correct the following DeepSpeed config values that mismatch "
                              "TrainingArguments values: " + " ".join(mismatches)
                              + f" (world size {ws}, {ctx.world_size_source})"))
    if fills:
        out.add(HF202.finding("; ".join(fills)))
    if not known:
        out.add(HF207.finding("no --hf-args: \"auto\" values are shown by the TrainingArguments field that fills "
                              "them, and mismatches are not checked"))
    scheduler = config.get("scheduler")
    if isinstance(scheduler, dict) and scheduler.get("type") is not None:
        chosen = args.get("lr_scheduler_type", "linear")
        explicit = known and "lr_scheduler_type" in (ctx.hf_args or {})
        out.add(HF204.finding(f"scheduler {show(scheduler.get('type'))} in the ds_config; TrainingArguments "
                              f"lr_scheduler_type={chosen!r}" + ("" if explicit else " (the default)")
                              + " is not used", severity="warning" if explicit else "info"))
    return filled, origin


def _copy_objects(value: Any) -> Any:
    """A copy of every object (dict) in ``value``, sharing lists and leaves: the fills replace values in objects
    only (``find_config_node`` walks dicts; accelerate's walk skips lists), so nothing else needs copying, and a
    1 MiB file of nested arrays is not deep-copied twice."""
    if not isinstance(value, dict):
        return value
    return {key: _copy_objects(child) for key, child in value.items()}


def _py(value: Any) -> str:
    """A value as transformers' f-string shows it (Python's str: True, [0.9, 0.999])."""
    return str(value)


def _default_for(path: str, schema: dict):
    from dsdoctor.checks.deepspeed_config.autos import _section_of
    from dsdoctor.checks.deepspeed_config.keys import _field_index
    from dsdoctor.checks.deepspeed_config.values import MISSING

    section = _section_of(path, schema)
    if section is None:
        top = schema.get("top_level", {})
        return top.get(path, MISSING)
    spec = schema["sections"][section]
    name = _field_index(spec).get(path.split(".")[-1])
    if name is None:
        return MISSING
    return spec["fields"][name].get("default")


def _restore_placeholders(config: Any) -> None:
    """Values filled at train time (placeholder "__filled__") go back to "auto" in the filled copy: they count
    as filled, but their value is not known here."""
    if isinstance(config, dict):
        for key, value in config.items():
            if value == "__filled__":
                config[key] = "auto"
            else:
                _restore_placeholders(value)
