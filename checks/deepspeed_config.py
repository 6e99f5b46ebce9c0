"""DeepSpeed config checks (``DS1xx``): what ``deepspeed.initialize`` will refuse, and what it silently ignores,
found statically, without importing torch or DeepSpeed.

The checks mirror DeepSpeed 0.19.8 as read from its source (each rule's ``source`` names the file) and from a key
schema generated from the installed DeepSpeed's own pydantic models (``dsdoctor/schemas/generate.py``):

* batch math: ``deepspeed/runtime/config.py`` ``_set_batch_related_parameters`` and ``_batch_assertion``;
* keys: pydantic sub-configs with ``extra="forbid"`` (``zero_optimization``, ``fp16``, ``bf16``, ...) refuse
  unknown keys, while unknown top-level keys and keys of the ``get_scalar_param`` sections are ignored;
  ``DeepSpeedConfigModel.__init__`` (``deepspeed/runtime/config_utils.py``) drops ``"auto"`` values, so they
  become the default;
* optimizer and scheduler: ``deepspeed/runtime/engine.py`` ``_do_sanity_check``, ``_configure_optimizer``,
  ``_configure_basic_optimizer``, ``_do_optimizer_sanity_check``, ``_scheduler_from_config`` and
  ``deepspeed/runtime/lr_schedules.py``.

The entry point is :func:`check_config`; the Trainer's side (``HF2xx``) is in ``checks/hf_trainer.py``.
"""

from __future__ import annotations

import copy
import difflib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import dsdoctor.schemas
from dsdoctor.report import Finding
from dsdoctor.rules import Rule, rule

#: where the generated key schemas are installed (an empty package; package-data ``*.json``)
SCHEMA_DIR = Path(dsdoctor.schemas.__file__).resolve().parent
MISSING = object()
BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
#: read by deepspeed/__init__.py ``initialize`` (mesh device), not by DeepSpeedConfig's getters
EXTRA_TOP_LEVEL = ("sequence_parallel_size", "data_parallel_size")

_DS = "deepspeed/runtime/config.py"
_ENGINE = "deepspeed/runtime/engine.py"

DS101 = rule(
    "DS101", "error", '"auto" outside the HF Trainer',
    what='A ds_config value is "auto" but the config goes to deepspeed.initialize directly (your own engine '
         "loop, the reference trainer), where nothing fills it.",
    why='Only transformers\' Trainer replaces "auto" (transformers/integrations/deepspeed.py '
        "trainer_config_process). DeepSpeed itself fails after the model has loaded with a TypeError such as "
        "\"'>' not supported between instances of 'str' and 'int'\".",
    fix='Replace each "auto" with a number: the micro batch, gradient accumulation steps, learning rate, '
        "warmup and total steps your loop uses.",
    source="deepspeed/runtime/config.py _set_batch_related_parameters; transformers/integrations/deepspeed.py",
    example='"train_micro_batch_size_per_gpu": "auto" with deepspeed --num_gpus 2 train.py')
DS102 = rule(
    "DS102", "error", "train_batch_size != micro batch x gradient accumulation x world size",
    what="The batch triple does not satisfy train_batch_size = train_micro_batch_size_per_gpu x "
         "gradient_accumulation_steps x world size for the world size it will run on.",
    why='DeepSpeed asserts it at initialize: "Check batch related parameters. train_batch_size is not equal to '
        'micro_batch_per_gpu * gradient_acc_step * world_size". A config written for 8 GPUs and launched on 7 '
        "fails this way.",
    fix="Set the corrected triple shown, or drop train_batch_size and let DeepSpeed derive it (under the HF "
        'Trainer: "auto").',
    source=f"{_DS} _set_batch_related_parameters, _batch_assertion",
    example='{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1} on 4 GPUs')
DS103 = rule(
    "DS103", "error", "batch value is not a positive integer",
    what="train_batch_size, train_micro_batch_size_per_gpu or gradient_accumulation_steps is zero, negative, "
         "fractional, a string or a boolean, or DeepSpeed's integer division derives 0 from it.",
    why='DeepSpeed asserts "... has to be greater than 0", or fails with a TypeError comparing a string; a '
        "fractional batch breaks the data loader.",
    fix="Use positive integers (JSON numbers without quotes).",
    source=f"{_DS} _batch_assertion")
DS104 = rule(
    "DS104", "error", "no batch size given",
    what="Neither train_batch_size nor train_micro_batch_size_per_gpu is set.",
    why='DeepSpeed asserts "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided".',
    fix="Set train_micro_batch_size_per_gpu (and gradient_accumulation_steps); DeepSpeed derives the rest.",
    source=f"{_DS} _set_batch_related_parameters")
DS105 = rule(
    "DS105", "info", "train_batch_size pins the world size",
    what="An explicit train_batch_size holds for this world size only; the same file on another GPU count fails.",
    why="DeepSpeed derives gradient accumulation or the micro batch from train_batch_size by integer division "
        "per world size, then asserts the product.",
    fix="Leave train_batch_size out and give train_micro_batch_size_per_gpu and gradient_accumulation_steps.",
    source=f"{_DS} _set_batch_related_parameters")
DS110 = rule(
    "DS110", "error", "fp16 and bf16 both enabled",
    what="fp16.enabled and bf16.enabled are both true.",
    why='DeepSpeed asserts "bfloat16 and fp16 modes cannot be simultaneously enabled".',
    fix="Keep one: bf16 on compute capability 8.0 or newer (A100, H100, RTX 30xx/40xx), fp16 on V100/T4.",
    source=f"{_DS} _initialize_params")
DS111 = rule(
    "DS111", "error", "bf16 on a GPU without bf16",
    what="bf16 is enabled but the GPU's compute capability is below 8.0 (V100, T4, RTX 20xx).",
    why='DeepSpeed raises "Type bf16 is not supported on your device"; transformers "Your setup doesn\'t '
        'support bf16/gpu".',
    fix='Use "fp16": {"enabled": true} (with dynamic loss scaling) and drop bf16 in the config and in '
        "TrainingArguments.",
    source=f"{_ENGINE} _do_sanity_check (accelerator.is_bf16_supported)")
DS112 = rule(
    "DS112", "warning", "fp16 on a GPU below compute capability 7.0",
    what="fp16 is enabled on a GPU without tensor cores (Pascal P100/P40, compute capability below 7.0).",
    why="fp16 runs there without tensor cores: often slower than fp32, with the overflow risk of fp16.",
    fix="Train in fp32 (drop fp16) on this GPU, or use a GPU of compute capability 7.0 or newer.",
    source="NVIDIA CUDA compute capabilities (tensor cores from 7.0)")
DS113 = rule(
    "DS113", "warning", "training precision differs from the model's weights",
    what="fp16 is enabled for a model whose weights are bf16 (or bf16 for an fp16 model).",
    why="Weights trained in bf16 hold values beyond fp16's range (65504): activations overflow to inf, the "
        'loss becomes NaN or the loss scale falls to its minimum ("Current loss scale already at minimum"). '
        "bf16 on an fp16 model works but drops 3 bits of mantissa.",
    fix="Match the config to the weights: bf16 for a bf16 model (on compute capability 8.0+), fp16 for an "
        "fp16 one.",
    source="the model's config.json torch_dtype; IEEE fp16/bf16 ranges")
DS114 = rule(
    "DS114", "warning", "fp16 loss-scale settings likely to overflow",
    what="fp16 with a static loss scale, a high initial scale, a short loss_scale_window or a high "
         "min_loss_scale.",
    why="A static scale never backs off, so overflowing steps are skipped forever; a short window raises the "
        "scale again too soon; a high minimum makes DeepSpeed exit with \"Current loss scale already at "
        'minimum - cannot decrease scale anymore".',
    fix='Use dynamic scaling with the defaults ("loss_scale": 0, "initial_scale_power": 16, '
        '"loss_scale_window": 1000, "min_loss_scale": 1), lower initial_scale_power (12) if it still '
        "overflows, or switch to bf16 on compute capability 8.0+.",
    source="deepspeed/runtime/fp16/loss_scaler.py DynamicLossScaler")
DS116 = rule(
    "DS116", "warning", "warmup_min_lr above warmup_max_lr",
    what="scheduler.params.warmup_min_lr is larger than warmup_max_lr.",
    why="The warmup then lowers the learning rate instead of raising it; DeepSpeed does not check.",
    fix="Swap them: warmup_min_lr is where warmup starts (often 0), warmup_max_lr the peak.",
    source="deepspeed/runtime/lr_schedules.py WarmupLR")
DS118 = rule(
    "DS118", "error", "optimizer parameter the optimizer does not take",
    what="optimizer.params has a key that the optimizer class DeepSpeed builds does not accept (a misspelling "
         "such as weight_decy, or a parameter of another optimizer).",
    why="DeepSpeed calls the class with **params: TypeError \"__init__() got an unexpected keyword argument\" at "
        "initialize.",
    fix="Use the parameter names the class takes (shown in the evidence).",
    source="deepspeed/runtime/engine.py _configure_basic_optimizer, get_optimizer_configuration")
DS117 = rule(
    "DS117", "warning", "optimizer block ignored: a client optimizer is passed",
    what="The config has an optimizer block, but your script passes its own optimizer to deepspeed.initialize.",
    why="DeepSpeed uses the client optimizer and does not build or check the one in the config: its "
        "learning rate and betas have no effect.",
    fix="Remove the optimizer block, or stop passing optimizer= to deepspeed.initialize.",
    source=f"{_ENGINE} _configure_optimizer")
DS120 = rule(
    "DS120", "error", "no optimizer",
    what="The config has no optimizer block and the script passes no optimizer to deepspeed.initialize.",
    why='DeepSpeed fails: ZeRO 1/2 at initialize with "zero stage N requires an optimizer", ZeRO 3 at the '
        "first step (\"'DeepSpeedZeRoOffload' object has no attribute 'set_gradient_accumulation_boundary'\"), "
        'ZeRO 0 at backward ("must provide optimizer during init in order to use backward").',
    fix='Add an optimizer block, e.g. "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, '
        '"weight_decay": 0.0}}, or pass optimizer= to deepspeed.initialize (then say --client-optimizer).',
    source=f"{_ENGINE} _configure_zero_optimizer",
    example="the DeepSpeed ChatGLM tutorial's ds_config with its own train script")
DS121 = rule(
    "DS121", "error", "ZeRO-Offload with a client optimizer",
    what="offload_optimizer (or cpu_offload) is on and the optimizer comes from your code or the HF Trainer, "
         "not from the config.",
    why='DeepSpeed raises ZeRORuntimeException "You are using ZeRO-Offload with a client provided optimizer" '
        "unless zero_force_ds_cpu_optimizer is false.",
    fix='Add "optimizer": {"type": "AdamW", "params": {...}} so DeepSpeed builds DeepSpeedCPUAdam, or set '
        '"zero_force_ds_cpu_optimizer": false (slow: the client optimizer steps on the CPU in Python).',
    source=f"{_ENGINE} _configure_optimizer",
    example="ChatGLM-6B ptuning with offload_optimizer and the Trainer's AdamW")
DS122 = rule(
    "DS122", "error", "unknown optimizer type",
    what="optimizer.type is neither a DeepSpeed optimizer nor a torch.optim class.",
    why='DeepSpeed asserts "<type> is not a supported DeepSpeed Optimizer" at initialize.',
    fix='Use "Adam" or "AdamW" (DeepSpeed picks FusedAdam on the GPU and DeepSpeedCPUAdam with offload), '
        '"Lamb", "Lion", "Adagrad", or a torch.optim class name spelled exactly.',
    source=f"{_ENGINE} _do_sanity_check, _is_supported_optimizer")
DS123 = rule(
    "DS123", "error", "optimizer ZeRO has not tested",
    what="ZeRO is on and the optimizer is not one ZeRO supports (e.g. SGD, Lamb, RMSprop).",
    why='DeepSpeed asserts "You are using an untested ZeRO Optimizer. Please add '
        '<"zero_allow_untested_optimizer": true>".',
    fix='Use Adam/AdamW/Adagrad/Lion, or add "zero_allow_untested_optimizer": true and verify convergence.',
    source="deepspeed/runtime/zero/utils.py ZERO_SUPPORTED_OPTIMIZERS; engine.py _do_optimizer_sanity_check")
DS124 = rule(
    "DS124", "error", "unknown scheduler type",
    what="scheduler.type is neither a DeepSpeed scheduler nor a torch.optim.lr_scheduler class.",
    why='DeepSpeed asserts "DeepSpeed does not recognize LR scheduler <type>".',
    fix="Use WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle or LRRangeTest (spelled exactly).",
    source=f"{_ENGINE} _scheduler_from_config; deepspeed/runtime/lr_schedules.py")
DS125 = rule(
    "DS125", "error", "scheduler without a required parameter",
    what="WarmupDecayLR / WarmupCosineLR without total_num_steps (OneCycle without cycle_min_lr/cycle_max_lr).",
    why="DeepSpeed fails at initialize with TypeError: __init__() missing 1 required positional argument: "
        "'total_num_steps'.",
    fix="Add total_num_steps = optimizer steps of the whole run (samples x epochs / train_batch_size); "
        'under the HF Trainer "auto".',
    source="deepspeed/runtime/lr_schedules.py")
DS126 = rule(
    "DS126", "error", "unknown scheduler parameter",
    what="scheduler.params has a key the scheduler's constructor does not take.",
    why="DeepSpeed calls scheduler(optimizer, **params): TypeError \"got an unexpected keyword argument\".",
    fix="Use the parameter names of the scheduler (shown in the evidence).",
    source="deepspeed/runtime/lr_schedules.py")
DS127 = rule(
    "DS127", "error", "warmup_num_steps not a positive integer, or not below total_num_steps",
    what="scheduler.params.warmup_num_steps is 0, negative, fractional or a string; or it is at least "
         "total_num_steps.",
    why='DeepSpeed 0.19.6+ raises "warmup_num_steps must be a positive integer"; warmup as long as the run '
        "means the learning rate never reaches its peak or decays (DeepSpeed only logs a warning).",
    fix="A positive integer well below total_num_steps (commonly 3-10% of it).",
    source="deepspeed/runtime/lr_schedules.py WarmupLR.__init__, WarmupDecayLR.__init__")
DS128 = rule(
    "DS128", "warning", "learning rate far above what full fine-tuning tolerates",
    what="The learning rate is 5e-4 or more.",
    why="Full fine-tuning of a multi-billion-parameter model diverges above about 1e-4 (typical 1e-5 to 5e-5); "
        "in fp16 it shows as overflow after overflow until the loss scale hits its minimum. LoRA and "
        "P-Tuning tolerate more (1e-4 to 2e-2).",
    fix="For full fine-tuning use 1e-5 to 5e-5 with warmup; keep a higher rate only for LoRA / P-Tuning.",
    source="DeepSpeedExamples issue 531 (GPT-J 6B fp16 at lr 1e-3); LLaMA-Factory examples")
DS129 = rule(
    "DS129", "error", "max_grad_norm in optimizer params",
    what="optimizer.params has max_grad_norm.",
    why="DeepSpeed raises ValueError \"'max_grad_norm' is not supported as an optimizer parameter\".",
    fix='Move it to the top level as "gradient_clipping".',
    source=f"{_ENGINE} _configure_basic_optimizer")
DS130 = rule(
    "DS130", "warning", "unknown top-level key (silently ignored)",
    what="A top-level key DeepSpeed does not read: a misspelling or a key of another tool.",
    why="DeepSpeed ignores unknown top-level keys without a word: a misspelled zero_optimization runs at "
        'ZeRO 0, a "model_parallel_size" splits nothing.',
    fix="Spell it as DeepSpeed does (the suggestion shown) or remove it.",
    source=f"{_DS} DeepSpeedConfig._initialize_params (getters read known keys only)",
    example='"zero_optimisation": {"stage": 3}')
DS131 = rule(
    "DS131", "error", "unknown key in a sub-config DeepSpeed validates",
    what="A key inside zero_optimization, fp16, bf16, offload_* or another pydantic sub-config that is not "
         "one of its fields.",
    why='DeepSpeed\'s pydantic models forbid extra keys: ValidationError "Extra inputs are not permitted" at '
        "initialize.",
    fix="Spell it as DeepSpeed does (the suggestion shown) or remove it.",
    source="deepspeed/runtime/config_utils.py DeepSpeedConfigModel (extra='forbid')")
DS132 = rule(
    "DS132", "warning", "unknown key in a sub-config (silently ignored)",
    what="A key inside activation_checkpointing, flops_profiler, optimizer, scheduler, aio or another "
         "sub-config read with get_scalar_param that DeepSpeed does not read.",
    why="These sub-configs read known keys only: a misspelled key keeps its default without a word.",
    fix="Spell it as DeepSpeed does (the suggestion shown) or remove it.",
    source=f"{_DS} get_scalar_param")
DS133 = rule(
    "DS133", "warning", "deprecated key",
    what="A key DeepSpeed still accepts but has replaced.",
    why="It works with a warning today and is removed in a later release.",
    fix="Use the replacement shown.",
    source="deepspeed/runtime/config_utils.py DeepSpeedConfigModel._process_deprecated_field")
DS134 = rule(
    "DS134", "error", "deprecated key beside its replacement",
    what="A deprecated key and the key replacing it are both set.",
    why="DeepSpeed asserts \"Cannot provide deprecated parameter '<old>' and replacing parameter '<new>' "
        'together".',
    fix="Remove the deprecated key.",
    source="deepspeed/runtime/config_utils.py DeepSpeedConfigModel._process_deprecated_field")
DS135 = rule(
    "DS135", "error", "key of a removed feature",
    what="A key of a feature DeepSpeed has removed (amp, sparse_attention, elasticity, ...).",
    why="DeepSpeed 0.19.8 refuses it with DeepSpeedConfigError rather than silently ignoring it.",
    fix="Remove the key (the evidence says what replaces the feature, if anything).",
    source=f"{_DS} _reject_removed_config_keys")
DS136 = rule(
    "DS136", "warning", '"auto" inside a sub-config silently becomes the default',
    what='A value inside zero_optimization, fp16, bf16 or another validated sub-config is "auto", and the '
         "config goes to deepspeed.initialize directly.",
    why="DeepSpeedConfigModel drops every \"auto\" value before validation, so the field takes its default: "
        '"fp16": {"enabled": "auto"} trains in fp32, "stage": "auto" runs ZeRO 0.',
    fix="Write the value you want.",
    source="deepspeed/runtime/config_utils.py DeepSpeedConfigModel.__init__")
DS137 = rule(
    "DS137", "error", "value of the wrong type",
    what="A value whose type or range DeepSpeed refuses (a string where a number belongs, a section that is "
         "not an object, a negative bucket size).",
    why="Validated sub-configs raise a pydantic ValidationError; top-level numbers given as strings fail later "
        "with a TypeError; a string \"false\" for a flag is true in Python.",
    fix="Use the JSON type shown (numbers and booleans without quotes, sections as objects).",
    source="deepspeed/runtime/config_utils.py; deepspeed/runtime/config.py getters")
DS138 = rule(
    "DS138", "error", "key repeated in one object",
    what="The same key appears twice in one JSON object.",
    why="DeepSpeed's loader refuses the file (dict_raise_error_on_duplicate_keys) when it reads the path "
        "itself (error under --launch engine); json.load (the HF Trainer) silently keeps the last value (warning).",
    fix="Keep one.",
    source="deepspeed/runtime/config_utils.py dict_raise_error_on_duplicate_keys")
DS140 = rule(
    "DS140", "error", "ZeRO stage not 0 to 3",
    what="zero_optimization.stage is not 0, 1, 2 or 3.",
    why="DeepSpeed's ZeroStageEnum refuses it (pydantic ValidationError on 'stage').",
    fix="Use 0, 1, 2 or 3.",
    source="deepspeed/runtime/zero/config.py ZeroStageEnum")
DS141 = rule(
    "DS141", "warning", "offload_param below ZeRO-3 (ignored)",
    what="offload_param is set with ZeRO stage 0, 1 or 2.",
    why="Only ZeRO-3 partitions and offloads parameters; below it the block has no effect and each GPU "
        "still holds all 16-bit weights.",
    fix="Use stage 3 to offload parameters, or remove offload_param (offload_optimizer works from stage 1).",
    source="deepspeed/runtime/zero/offload_config.py (\"Valid only with stage 3\")")
DS142 = rule(
    "DS142", "warning", "ZeRO-3 saves without gathering the weights",
    what="Stage 3 without stage3_gather_16bit_weights_on_model_save: true, and weights or an adapter will "
         "be saved.",
    why="Each rank holds only a shard: the HF Trainer's save_model / save_pretrained write empty or "
        "partitioned tensors (a few hundred MB for a 33B model, an adapter of empty tensors); only "
        "zero_to_fp32.py on the checkpoint recovers them.",
    fix='Set "stage3_gather_16bit_weights_on_model_save": true; or gather with '
        "engine._zero3_consolidated_16bit_state_dict() on every rank before save_pretrained.",
    source="deepspeed/runtime/engine.py save_16bit_model; transformers PR 25817")
DS143 = rule(
    "DS143", "warning", 'offload device "auto" (silently no offload)',
    what='offload_optimizer.device or offload_param.device is "auto" and the config goes to '
         "deepspeed.initialize directly.",
    why='DeepSpeedConfigModel drops "auto", so the device is its default "none": nothing is offloaded and the '
        "run OOMs where the offload was meant to save it.",
    fix='Write "cpu" (or "nvme" with nvme_path), or remove the block.',
    source="deepspeed/runtime/config_utils.py; deepspeed/runtime/zero/offload_config.py")
DS144 = rule(
    "DS144", "warning", "communication buckets take much GPU memory",
    what="reduce_bucket_size and allgather_bucket_size (elements) with overlap_comm cost about 4.5 x their sum "
         "x 2 bytes of GPU memory.",
    why="With the 5e8 defaults and overlap_comm that is about 8.4 GiB per GPU before the model: a 24 GiB card "
        "OOMs for buckets alone.",
    fix="Lower both to 2e8 (or to hidden_size^2, what the HF Trainer's \"auto\" uses), or set "
        '"overlap_comm": false.',
    source="transformers docs main_classes/deepspeed (ZeRO-2 config: overlap_comm uses 4.5x the bucket sizes)")
DS145 = rule(
    "DS145", "error", "gradient pre-scaling with ZeRO's reduce scatter",
    what="prescale_gradients is true (a string such as \"false\" counts as true) or gradient_predivide_factor "
         "is not 1.0, with ZeRO stage 2 or 3 and reduce_scatter on (the default).",
    why='ZeRO asserts "pre-scale gradients is not yet supported with ZeRO-N with reduce scatter enabled" '
        '("gradient_predivide_factor != 1.0 is not yet supported ...") when the engine is built.',
    fix='Remove prescale_gradients (or write false without quotes) and gradient_predivide_factor, or set '
        '"reduce_scatter": false in zero_optimization.',
    source="deepspeed/runtime/zero/stage_1_and_2.py and stage3.py __init__")
DS199 = rule(
    "DS199", "error", "DeepSpeed's own config parser (--deep)",
    what="With --deep, DeepSpeed's DeepSpeedConfig is built from the file: this is what it raised, or that it "
         "accepted the file.",
    why="The static checks mirror DeepSpeed; --deep asks the installed DeepSpeed itself.",
    fix="Fix what the message names; the static findings above usually say how.",
    source=f"{_DS} DeepSpeedConfig")


# ---------------------------------------------------------------------------------------------- schema

def installed_version(package: str) -> str | None:
    """The installed version of ``package``, or None: the name of its ``<package>-<version>.dist-info`` folder on
    ``sys.path`` (no import of the package, and not importlib.metadata, whose import alone costs 17 ms of the
    check's 0.3 s budget); importlib.metadata only when no such folder is found (eggs, odd layouts)."""
    import os
    import sys

    prefix = package.replace("-", "_").lower() + "-"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info") and name.lower().startswith(prefix):
                return name[len(prefix):-len(".dist-info")]
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _version_key(version: str) -> tuple:
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def load_schema(version: str | None = None) -> tuple[dict, str]:
    """The key schema for DeepSpeed ``version`` (default: the installed one).

    Returns ``(schema, note)``: the exact version's schema when bundled, else the newest bundled one not newer
    than it (or the oldest), with a note saying which was used.
    """
    bundled = {p.stem.removeprefix("deepspeed-"): p for p in SCHEMA_DIR.glob("deepspeed-*.json")}
    if not bundled:
        raise FileNotFoundError(f"no DeepSpeed key schema in {SCHEMA_DIR}")
    wanted = version or installed_version("deepspeed")
    ordered = sorted(bundled, key=_version_key)
    if wanted in bundled:
        chosen, note = wanted, f"DeepSpeed {wanted} (installed)" if version is None else f"DeepSpeed {wanted}"
    else:
        older = [v for v in ordered if wanted and _version_key(v) <= _version_key(wanted)]
        chosen = older[-1] if older else ordered[0]
        note = (f"DeepSpeed {chosen} schema (DeepSpeed {wanted} is installed; no schema for it is bundled)"
                if wanted else f"DeepSpeed {chosen} schema (DeepSpeed is not installed here)")
    return json.loads(bundled[chosen].read_text()), note


# ---------------------------------------------------------------------------------------------- helpers

def auto_paths(config: Any, prefix: str = "") -> Iterator[str]:
    """Dotted paths of every value equal to "auto" in a ds_config (nested dicts and lists)."""
    if isinstance(config, dict):
        for key, value in config.items():
            yield from auto_paths(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(config, list):
        for i, value in enumerate(config):
            yield from auto_paths(value, f"{prefix}[{i}]")
    elif config == "auto":
        yield prefix


def is_auto(value: Any) -> bool:
    """Exactly the string "auto", as transformers (``config.get(key) == "auto"``) and DeepSpeedConfigModel
    (``v != "auto"``) compare: "AUTO" or " auto" is just a string to both."""
    return isinstance(value, str) and value == "auto"


def get_path(config: Any, path: str, default: Any = MISSING) -> Any:
    """``config["a"]["b"]`` for ``"a.b"``; ``default`` when a step is missing or not an object."""
    node = config
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def set_path(config: dict, path: str, value: Any) -> None:
    node = config
    parts = path.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def delete_path(config: dict, path: str) -> None:
    parts = path.split(".")
    node = get_path(config, ".".join(parts[:-1])) if len(parts) > 1 else config
    if isinstance(node, dict):
        node.pop(parts[-1], None)


def show(value: Any) -> str:
    """A value as JSON would write it (``true``, ``"auto"``, ``5e-05``)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def suggest(name: str, known: list[str]) -> str | None:
    """The closest known key to a misspelled one (difflib ratio >= 0.75), or None."""
    matches = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    if not matches:
        lowered = {k.lower().replace("-", "_"): k for k in known}
        return lowered.get(name.lower().replace("-", "_"))
    return matches[0]


_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}


def as_bool(value: Any) -> bool | None:
    """What pydantic's lax bool makes of ``value`` (None when it refuses it)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, float) and value in (0.0, 1.0):
        return bool(value)
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    return None


def positive_int(value: Any) -> int | None:
    """``value`` as DeepSpeed's batch math can use it: an int (or an integral float) above 0; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and value > 0:
        return int(value)
    return None


def is_number(value: Any) -> bool:
    """An int or a finite float, not a bool (ints are exact: no float conversion, which overflows)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


# ---------------------------------------------------------------------------------------------- results

@dataclass
class Change:
    """One edit of ``--fix``: set ``path`` to ``new`` (``new is MISSING``: delete it), and why."""

    path: str
    old: Any
    new: Any
    rule: str
    why: str

    def to_dict(self) -> dict:
        return {"path": self.path, "old": None if self.old is MISSING else self.old,
                "new": None if self.new is MISSING else self.new, "action": "delete" if self.new is MISSING
                else ("add" if self.old is MISSING else "set"), "rule": self.rule, "why": self.why}


@dataclass
class CheckContext:
    """What ``check`` knows about the run besides the config.

    Attributes:
        world_size: data-parallel ranks the run will have; ``world_size_source`` says where it came from.
        launch: ``"engine"`` (your loop calls deepspeed.initialize) or ``"trainer"`` (HF Trainer).
        client_optimizer: the script passes ``optimizer=`` to deepspeed.initialize (engine only).
        hf_args: TrainingArguments values (already read), or None.
        gpu: a :class:`dsdoctor.hardware.Gpu`, or None when unknown.
        model: a :class:`dsdoctor.models.ModelInfo`, or None.
        duplicates: keys repeated in one object of the file.
    """

    world_size: int = 1
    world_size_source: str = "default"
    launch: str = "engine"
    client_optimizer: bool = False
    hf_args: dict | None = None
    gpu: Any = None
    model: Any = None
    duplicates: list[str] = field(default_factory=list)
    schema: dict | None = None
    schema_note: str = ""


@dataclass
class CheckResult:
    """Findings, the effective config (after the Trainer's fills and DeepSpeed's derivation), where each batch
    value came from, and the edits ``--fix`` makes."""

    findings: list[Finding] = field(default_factory=list)
    effective: dict = field(default_factory=dict)
    provenance: dict[str, str] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    batch: dict = field(default_factory=dict)
    #: values --fix cannot choose (a micro batch, the run's total steps): (path, what to write there)
    unfixed: list[tuple[str, str]] = field(default_factory=list)
    #: the config as given, and after the Trainer's fills (``launch == "trainer"``; else the config as given)
    original: dict = field(default_factory=dict)
    filled: dict = field(default_factory=dict)
    launch: str = "engine"
    _changed: set = field(default_factory=set, repr=False)
    _unfixable: set = field(default_factory=set, repr=False)

    def add(self, finding: Finding | None) -> None:
        if finding is not None:
            self.findings.append(finding)

    def change(self, path: str, old: Any, new: Any, rule_id: str, why: str) -> None:
        """Record an edit for --fix (the first edit of a path wins). Under the Trainer a value that is "auto"
        in the file is left alone: the Trainer fills it from TrainingArguments, which is where to change it."""
        if self.original and is_auto(get_path(self.original, path)) and not is_auto(new) and \
                self.launch == "trainer":
            return
        key = (path, new is MISSING)  # a delete and a set of one path can both stand (a dotted key, nested)
        if key not in self._changed:
            self._changed.add(key)
            self.changes.append(Change(path, old, new, rule_id, why))

    def cannot_fix(self, path: str, what: str) -> None:
        if path not in self._unfixable:
            self._unfixable.add(path)
            self.unfixed.append((path, what))

    def fixed_config(self, config: dict) -> dict:
        """A corrected copy of ``config`` with every change applied (the input is not modified)."""
        fixed = copy.deepcopy(config)
        for c in self.changes:
            if c.new is MISSING:
                if c.path in fixed:  # a top-level key, even one with dots in its name
                    del fixed[c.path]
                else:
                    delete_path(fixed, c.path)
            else:
                set_path(fixed, c.path, copy.deepcopy(c.new))
        return fixed


# ---------------------------------------------------------------------------------------------- keys

def _field_index(section: dict) -> dict[str, str]:
    """Every accepted spelling of a section's fields (names and aliases) -> the field name."""
    index = {}
    for name, spec in section.get("fields", {}).items():
        index[name] = name
        for alias in spec.get("aliases", []):
            index[alias] = name
    return index


def _type_problem(value: Any, spec: dict) -> str | None:
    """Why pydantic (lax mode) refuses ``value`` for a field of ``spec``, or None when it accepts it."""
    if value is None:
        return None if spec.get("nullable") or spec.get("kind") == "any" else "null is not allowed"
    kind = spec.get("kind", "any")
    number = None
    if kind == "bool":
        return None if as_bool(value) is not None else f"expected a boolean, got {show(value)}"
    if kind in ("int", "float"):
        if isinstance(value, bool):
            number = int(value)
        elif is_number(value):
            number = value
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                return f"expected a number, got {show(value)}"
        else:
            return f"expected a number, got {show(value)}"
        if kind == "int" and not float(number).is_integer():
            return f"expected an integer, got {show(value)}"
        for bound, test in (("gt", lambda a, b: a > b), ("ge", lambda a, b: a >= b),
                            ("lt", lambda a, b: a < b), ("le", lambda a, b: a <= b)):
            if bound in spec and is_number(spec[bound]) and not test(float(number), float(spec[bound])):
                sign = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}[bound]
                return f"must be {sign} {spec[bound]}, got {show(value)}"
        return None
    if kind == "enum":
        values = spec.get("values", [])
        if value in values and not isinstance(value, bool):
            return None
        if isinstance(value, str) and value.strip().isdigit() and int(value) in values:
            return None
        return f"must be one of {', '.join(show(v) for v in dict.fromkeys(values))}, got {show(value)}"
    if kind == "str":
        return None if isinstance(value, str) else f"expected a string, got {show(value)}"
    if kind in ("model", "dict"):
        return None if isinstance(value, dict) else f"expected an object, got {show(value)}"
    if kind == "list":
        return None if isinstance(value, (list, tuple)) else f"expected a list, got {show(value)}"
    return None


#: top-level scalars whose wrong type fails later (numbers) or silently flips (flags)
_TOP_NUMBERS = ("gradient_clipping", "steps_per_print", "gradient_predivide_factor")
_TOP_FLAGS = ("prescale_gradients", "wall_clock_breakdown", "memory_breakdown", "zero_allow_untested_optimizer",
              "zero_force_ds_cpu_optimizer", "dump_state", "disable_allgather", "dataloader_drop_last")


def check_keys(config: dict, ctx: CheckContext, out: CheckResult) -> None:
    """DS130-DS138: unknown, deprecated, removed and mistyped keys at every level."""
    schema = ctx.schema
    top = list(schema["top_level"]) + list(EXTRA_TOP_LEVEL)
    removed = schema.get("removed_top_level", {})
    sections = schema["sections"]

    for key in sorted(set(ctx.duplicates)):
        if ctx.launch == "engine":
            out.add(DS138.finding(f'"{key}" appears twice in one object: DeepSpeed refuses the file when given its '
                                  "path (ValueError: Duplicate keys in DeepSpeed config); json.load keeps the last "
                                  "value", severity="error"))
        else:
            out.add(DS138.finding(f'"{key}" appears twice in one object; the Trainer\'s json.load keeps the last '
                                  "value silently", severity="warning"))

    unknown_shown = 0
    for key, value in config.items():
        if key not in top and key not in removed and unknown_shown >= MAX_UNKNOWN_SHOWN:
            unknown_shown += 1
            out.change(key, value, MISSING, "DS130", "DeepSpeed ignores it")
            continue
        if key in removed:
            out.add(DS135.finding(f'"{key}": {removed[key]}'))
            out.change(key, value, MISSING, "DS135", f'"{key}" is a removed feature DeepSpeed refuses')
            continue
        if key not in top and "." in key and key.split(".")[0] in top:
            out.add(DS130.finding(f'"{key}" is not a DeepSpeed key and is ignored: DeepSpeed does not read dotted '
                                  "paths", fix=f"Nest it: {_nested_text(key, value)}."))
            out.change(key, value, MISSING, "DS130", "a dotted path DeepSpeed does not read")
            if get_path(config, key) is MISSING:
                out.change(key, MISSING, value, "DS130", f'nested under "{key.split(".")[0]}"')
            continue
        if key not in top:
            unknown_shown += 1
            guess = suggest(key, [k for k in top if k not in removed])
            hint = f'; did you mean "{guess}"?' if guess else ""
            out.add(DS130.finding(f'"{key}" is not a DeepSpeed key and is ignored{hint}',
                                  fix=f'Rename it to "{guess}".' if guess else DS130.fix))
            if guess and guess not in config:
                out.change(key, value, MISSING, "DS130", f'misspelled; its value moves to "{guess}"')
                out.change(guess, MISSING, value, "DS130", f'the value of misspelled "{key}"')
            else:
                out.change(key, value, MISSING, "DS130", "DeepSpeed ignores it")
            continue
        if key == "bfloat16":
            if "bf16" in config:
                out.add(DS133.finding('"bfloat16" and "bf16" are both set: DeepSpeed reads "bf16" and ignores '
                                      '"bfloat16"', fix='Remove "bfloat16".'))
                out.change("bfloat16", value, MISSING, "DS133", 'ignored beside "bf16"')
            else:
                out.add(DS133.finding('"bfloat16" is the old name of "bf16"', fix='Rename it to "bf16".'))
                out.change("bfloat16", value, MISSING, "DS133", 'old name of "bf16"')
                out.change("bf16", MISSING, value, "DS133", 'the value of "bfloat16"')
        if key in sections:
            if key == "zero_optimization" and isinstance(value, bool):
                out.add(DS133.finding(f'"zero_optimization": {show(value)} is the old boolean form (stage '
                                      f'{1 if value else 0})', fix='Write "zero_optimization": {"stage": 1}.'))
                continue
            if not isinstance(value, dict):
                if value is None and key == "bf16":
                    continue  # deepspeed/runtime/precision_config.py: a null "bf16" falls back to "bfloat16"
                if not sections[key].get("fields") and key not in ("optimizer", "scheduler"):
                    continue  # a section DeepSpeed passes through whole
                out.add(DS137.finding(f'"{key}" must be an object, got {show(value)}'))
                if value is None:
                    out.change(key, value, MISSING, "DS137", "a null section crashes DeepSpeed's parser")
                continue
            _check_section(key, value, ctx, out)
        elif key in _TOP_NUMBERS:
            if value is None and key == "steps_per_print" or is_auto(value):
                continue
            if not is_number(value):
                out.add(DS137.finding(f'"{key}" must be a number, got {show(value)}'))
                if isinstance(value, str):
                    try:
                        out.change(key, value, float(value), "DS137", "a number, not a string")
                    except ValueError:
                        pass
            elif key == "steps_per_print" and value < 1:
                out.add(DS137.finding(f'"steps_per_print" is {show(value)}: DeepSpeed computes step % '
                                      "steps_per_print (ZeroDivisionError for 0)"))
                out.change(key, value, 10, "DS137", "a positive print interval")
            elif key == "gradient_clipping" and value < 0:
                out.add(DS137.finding(f'"gradient_clipping" is {show(value)}: negative means no clipping at all',
                                      severity="warning"))
        elif key in _TOP_FLAGS and not isinstance(value, bool) and not is_auto(value):
            flag = as_bool(value)
            crashes = key == "wall_clock_breakdown"  # config.py ORs it with a bool: TypeError for a string
            out.add(DS137.finding(f'"{key}" must be true or false, got {show(value)}'
                                  + (" (TypeError: DeepSpeed ORs it with a boolean)" if crashes else
                                     " (Python reads any non-empty string as true)" if isinstance(value, str)
                                     else ""),
                                  severity="error" if crashes else "warning"))
            if flag is not None:
                out.change(key, value, flag, "DS137", "a boolean, not a string")
    _report_more_unknown("at the top level", unknown_shown, DS130, out)


#: unknown keys reported one by one per object; the rest are counted in one finding (a generated file with
#: 20,000 stray keys must not give 20,000 rows)
MAX_UNKNOWN_SHOWN = 20


def _report_more_unknown(where: str, count: int, rule_: Rule, out: CheckResult) -> None:
    if count > MAX_UNKNOWN_SHOWN:
        out.add(rule_.finding(f"... and {count - MAX_UNKNOWN_SHOWN:,} more unknown keys {where}"))


def _nested_text(dotted: str, value: Any) -> str:
    text = show(value)
    for part in reversed(dotted.split(".")):
        text = f'{{"{part}": {text}}}'
    return text


def _check_section(path: str, body: dict, ctx: CheckContext, out: CheckResult) -> None:
    schema = ctx.schema
    section = schema["sections"][path]
    fields = section.get("fields", {})
    if not fields:  # a section DeepSpeed passes through as a whole (pipeline, ...): nothing to check
        return
    index = _field_index(section)
    strict = section.get("strict", False)
    removed_zero = schema.get("removed_zero", {}) if path == "zero_optimization" else {}
    unknown = 0
    for key, value in body.items():
        where = f"{path}.{key}"
        if key not in index and key not in removed_zero:
            unknown += 1
            if unknown > MAX_UNKNOWN_SHOWN:
                out.change(where, value, MISSING, (DS131 if strict else DS132).id, "not a field DeepSpeed knows")
                continue
        if key in removed_zero:
            out.add(DS135.finding(f'"{where}": {removed_zero[key]}'))
            out.change(where, value, MISSING, "DS135", "a removed feature DeepSpeed refuses")
            continue
        if key not in index:
            guess = suggest(key, list(index))
            hint = f'; did you mean "{guess}"?' if guess else ""
            rule_ = DS131 if strict else DS132
            verb = "is refused (Extra inputs are not permitted)" if strict else "is ignored"
            out.add(rule_.finding(f'"{where}" {verb}{hint}',
                                  fix=f'Rename it to "{guess}".' if guess else rule_.fix))
            if guess and guess not in body:
                out.change(where, value, MISSING, rule_.id, f'misspelled; its value moves to "{path}.{guess}"')
                out.change(f"{path}.{guess}", MISSING, value, rule_.id, f'the value of misspelled "{key}"')
            else:
                out.change(where, value, MISSING, rule_.id, "not a field DeepSpeed knows")
            continue
        name = index[key]
        spec = fields[name]
        if spec.get("deprecated"):
            new = spec.get("new_param", "")
            replacements = [n.strip() for n in new.split(" or ") if n.strip()]
            present = [r for r in replacements if any(index.get(k) == r for k in body)]
            if present:
                out.add(DS134.finding(f'"{where}" is deprecated and "{path}.{present[0]}" is also set: '
                                      f"Cannot provide deprecated parameter '{key}' and replacing parameter "
                                      f"'{new}' together"))
                out.change(where, value, MISSING, "DS134", f'deprecated; "{present[0]}" is set')
            else:
                out.add(DS133.finding(f'"{where}" is deprecated' + (f'; use "{new}"' if new else ""),
                                      fix=_deprecated_fix(key, value, new)))
                _deprecated_change(path, key, value, new, out)
        if is_auto(value):
            continue  # the "auto" pass reports it
        if strict:
            problem = _type_problem(value, spec)
            if problem:
                if path == "zero_optimization" and name == "stage":
                    out.add(DS140.finding(f'"{where}": {problem}'))
                else:
                    out.add(DS137.finding(f'"{where}": {problem}'))
                continue
        sub = f"{path}.{name}"
        if sub in schema["sections"] and isinstance(value, dict):
            _check_section(sub, value, ctx, out)
    _report_more_unknown(f'in "{path}"', unknown, DS131 if strict else DS132, out)


def _deprecated_fix(key: str, value: Any, new: str) -> str:
    if key == "cpu_offload":
        return 'Replace it with "offload_optimizer": {"device": "cpu"}.'
    if key == "cpu_offload_param":
        return 'Replace it with "offload_param": {"device": "cpu"} (stage 3).'
    if key == "cpu_offload_use_pin_memory":
        return 'Replace it with "pin_memory": true inside offload_optimizer / offload_param.'
    return f'Rename it to "{new}".' if new else "Remove it."


def _deprecated_change(path: str, key: str, value: Any, new: str, out: CheckResult) -> None:
    where = f"{path}.{key}"
    if key in ("cpu_offload", "cpu_offload_param"):
        target = "offload_optimizer" if key == "cpu_offload" else "offload_param"
        out.change(where, value, MISSING, "DS133", f'deprecated; replaced by "{target}"')
        if as_bool(value):
            out.change(f"{path}.{target}", MISSING, {"device": "cpu"}, "DS133", f'replaces "{key}": true')
    elif key == "cpu_offload_use_pin_memory":
        out.change(where, value, MISSING, "DS133", "deprecated; pin_memory lives in the offload blocks")
    elif new and " " not in new:
        out.change(where, value, MISSING, "DS133", f'deprecated; renamed to "{new}"')
        out.change(f"{path}.{new}", MISSING, value, "DS133", f'the value of deprecated "{key}"')


# ---------------------------------------------------------------------------------------------- "auto"

def _section_of(path: str, schema: dict) -> str | None:
    """The schema section a dotted value path lives in (``zero_optimization.offload_param.device`` ->
    ``zero_optimization.offload_param``), or None for a top-level value."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        candidate = ".".join(parts[:cut])
        if candidate in schema["sections"]:
            return candidate
    return None


def check_autos_engine(config: dict, ctx: CheckContext, out: CheckResult) -> None:
    """DS101 (crashes) and DS136/DS143 (silently the default) for "auto" values outside the Trainer."""
    crash, silent = [], []
    top = set(ctx.schema["top_level"]) - set(ctx.schema.get("removed_top_level", {}))
    for path in auto_paths(config):
        if path.split(".")[0].split("[")[0] not in top:
            continue  # under a key DeepSpeed ignores (DS130) or refuses (DS135): "auto" there does nothing
        section = _section_of(path, ctx.schema)
        if section and not ctx.schema["sections"][section].get("strict") and path.split(".")[-1] not in \
                _field_index(ctx.schema["sections"][section]) and section not in ("optimizer", "scheduler"):
            continue  # a key the section ignores (DS132)
        if section and ctx.schema["sections"][section].get("strict"):
            silent.append((path, section))
        else:
            crash.append(path)
    if crash:
        out.add(DS101.finding(f'{len(crash)} value(s) are "auto": ' + ", ".join(crash)))
        for path in crash:
            guess = _engine_value_for_auto(path, config)
            if guess is not MISSING:
                out.change(path, "auto", guess, "DS101", "nothing fills \"auto\" outside the HF Trainer")
            else:
                out.cannot_fix(path, _AUTO_NEEDS.get(path, "the value your loop uses"))
    precision = [p for p, _ in silent if p in ("fp16.enabled", "bf16.enabled")]
    if precision:
        gpu_bf16 = ctx.gpu is None or ctx.gpu.bf16
        chosen = "bf16" if gpu_bf16 and not (ctx.model and ctx.model.dtype == "float16" and ctx.gpu is None) \
            else "fp16"
        why = (f"one 16-bit type: {chosen}" + (f" ({ctx.gpu.name})" if ctx.gpu else "") +
               (f" ({ctx.model.name} weights are {ctx.model.dtype})" if ctx.model and ctx.model.dtype else ""))
        for path in precision:
            out.change(path, "auto", path.startswith(chosen), "DS136", why)
    for path, section in silent:
        name = path.split(".")[-1]
        index = _field_index(ctx.schema["sections"][section])
        default = ctx.schema["sections"][section]["fields"].get(index.get(name, name), {}).get("default")
        if name == "device" and "offload" in section:
            out.add(DS143.finding(f'"{path}" is "auto": DeepSpeed uses "none" (no offload)'))
        else:
            out.add(DS136.finding(f'"{path}" is "auto": DeepSpeed uses the default {show(default)}'))
        out.change(path, "auto", default, "DS136", 'what DeepSpeed makes of "auto" (the default); write the '
                                                   "value you want")


_AUTO_NEEDS = {
    "train_micro_batch_size_per_gpu": "the micro batch per GPU of your loop",
    "gradient_accumulation_steps": "the gradient accumulation steps of your loop",
    "train_batch_size": "micro batch x gradient accumulation x world size (or drop the key)",
    "optimizer.params.lr": "your learning rate", "scheduler.params.warmup_max_lr": "your peak learning rate",
    "scheduler.params.warmup_num_steps": "your warmup steps",
    "scheduler.params.total_num_steps": "the optimizer steps of the whole run",
}


def _engine_value_for_auto(path: str, config: dict) -> Any:
    """A concrete replacement for an "auto" under the engine where one is certain, else MISSING."""
    if path == "gradient_clipping":
        return 1.0
    if path == "scheduler.params.warmup_min_lr":
        return 0
    return MISSING


# ---------------------------------------------------------------------------------------------- batch

def derive_batch(train: int | None, micro: int | None, grad_acc: int | None, world_size: int
                 ) -> tuple[int | None, int | None, int | None, dict[str, str], str | None]:
    """DeepSpeed's batch derivation, exactly (deepspeed/runtime/config.py ``_set_batch_related_parameters``).

    Args: the three values as given (None when absent) and the data-parallel world size.
    Returns ``(train, micro, grad_acc, how, error)``: the values DeepSpeed ends with, for each derived one how it
    was derived, and the assertion message DeepSpeed raises (``_batch_assertion``), or None.
    """
    how: dict[str, str] = {}
    if train is not None and micro is not None and grad_acc is not None:
        pass
    elif train is not None and micro is not None:
        grad_acc = train // micro // world_size
        how["gradient_accumulation_steps"] = f"{train} // {micro} // {world_size}"
    elif train is not None and grad_acc is not None:
        micro = train // world_size // grad_acc
        how["train_micro_batch_size_per_gpu"] = f"{train} // {world_size} // {grad_acc}"
    elif micro is not None and grad_acc is not None:
        train = micro * grad_acc * world_size
        how["train_batch_size"] = f"{micro} x {grad_acc} x {world_size}"
    elif train is not None:
        grad_acc, micro = 1, train // world_size
        how["gradient_accumulation_steps"] = "1 (default)"
        how["train_micro_batch_size_per_gpu"] = f"{train} // {world_size}"
    elif micro is not None:
        train, grad_acc = micro * world_size, 1
        how["train_batch_size"] = f"{micro} x {world_size}"
        how["gradient_accumulation_steps"] = "1 (default)"
    else:
        return None, None, grad_acc, how, "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"
    for name, value in (("Train batch size", train), ("Micro batch size per gpu", micro),
                        ("Gradient accumulation steps", grad_acc)):
        if value <= 0:
            return train, micro, grad_acc, how, f"{name}: {value} has to be greater than 0"
    if train != micro * grad_acc * world_size:
        return train, micro, grad_acc, how, (
            "Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
            f"gradient_acc_step * world_size {train} != {micro} * {grad_acc} * {world_size}")
    return train, micro, grad_acc, how, None


def valid_world_sizes(train, micro, grad_acc, limit: int = 64) -> list[int]:
    """World sizes 1..limit on which DeepSpeed accepts the given (possibly partial) triple."""
    return [ws for ws in range(1, limit + 1) if derive_batch(train, micro, grad_acc, ws)[4] is None]


def check_batch(config: dict, ctx: CheckContext, out: CheckResult, origin: dict[str, str]) -> None:
    """DS102-DS105 on the batch triple of ``config`` (after the Trainer's fills, if any)."""
    given: dict[str, int | None] = {}
    usable = True
    for key in BATCH_KEYS:
        value = config.get(key, MISSING)
        if value is MISSING or value is None:
            given[key] = None
            out.provenance[key] = "default" if key == "gradient_accumulation_steps" else "unset"
            continue
        if is_auto(value):
            usable = False
            out.provenance[key] = origin.get(key, 'auto (unfilled)')
            continue
        n = positive_int(value)
        if n is None:
            usable = False
            kind = ("a string" if isinstance(value, str) else "a boolean" if isinstance(value, bool)
                    else "fractional" if is_number(value) and value > 0 else "not greater than 0")
            out.add(DS103.finding(f'"{key}" is {show(value)} ({kind})'))
            if isinstance(value, str) and value.strip().isdigit() and int(value) > 0:
                out.change(key, value, int(value), "DS103", "an integer, not a string")
            continue
        if isinstance(value, float):
            out.add(DS103.finding(f'"{key}" is {show(value)}: use the integer {n}', severity="warning"))
            out.change(key, value, n, "DS103", "an integer")
        given[key] = n
        out.provenance[key] = origin.get(key, "user")
    if not usable:
        return
    ws = ctx.world_size
    train, micro, grad_acc = (given[k] for k in BATCH_KEYS)
    d_train, d_micro, d_acc, how, error = derive_batch(train, micro, grad_acc, ws)
    for key, text in how.items():
        out.provenance[key] = f"derived: {text}" if "default" not in text else "default: 1"
    out.batch = {"train_batch_size": d_train, "train_micro_batch_size_per_gpu": d_micro,
                 "gradient_accumulation_steps": d_acc, "world_size": ws}
    if error and error.startswith("Either"):
        out.add(DS104.finding(f"train_batch_size and train_micro_batch_size_per_gpu are both unset: {error}"))
        return
    if error:
        fits = valid_world_sizes(train, micro, grad_acc)
        fits_text = (f"; this triple holds on world size {', '.join(map(str, fits[:8]))}"
                     if fits else "; it holds on no world size")
        fix_micro = micro if micro is not None else max(1, (train or 1) // max(1, ws * (grad_acc or 1)))
        fix_acc = grad_acc if grad_acc is not None else max(1, (train or 1) // max(1, ws * fix_micro))
        fixed_train = fix_micro * fix_acc * ws
        triple = (f"train_batch_size {fixed_train} = micro {fix_micro} x gradient_accumulation_steps {fix_acc} "
                  f"x world size {ws}")
        rule_ = DS103 if "greater than 0" in error else DS102
        out.add(rule_.finding(f"world size {ws} ({ctx.world_size_source}): {error}{fits_text}",
                              fix=f"Set {triple}; or drop train_batch_size so DeepSpeed derives it"
                                  + (' (under the HF Trainer: "auto")' if ctx.launch == "trainer" else "") + "."))
        if ctx.launch == "trainer":
            for key in BATCH_KEYS:
                if key in config and not is_auto(config[key]):
                    out.change(key, config[key], "auto", rule_.id, "the Trainer fills it from TrainingArguments")
        else:
            out.change("train_batch_size", config.get("train_batch_size", MISSING), fixed_train, rule_.id, triple)
            out.change("train_micro_batch_size_per_gpu", config.get("train_micro_batch_size_per_gpu", MISSING),
                       fix_micro, rule_.id, triple)
            out.change("gradient_accumulation_steps", config.get("gradient_accumulation_steps", MISSING),
                       fix_acc, rule_.id, triple)
        out.batch["error"] = error
        return
    if train is not None and ctx.launch == "engine":
        fits = valid_world_sizes(train, micro, grad_acc)
        if fits != list(range(1, 65)):
            out.add(DS105.finding(f"train_batch_size {train} holds on world size "
                                  f"{', '.join(map(str, fits[:8])) or 'none'} only; this run: {ws} "
                                  f"({ctx.world_size_source})"))


# ---------------------------------------------------------------------------------------------- precision

def precision_of(config: dict) -> tuple[bool, bool]:
    """``(fp16, bf16)`` as DeepSpeed reads them ("auto" counts as off: DeepSpeedConfigModel drops it)."""
    def enabled(section: Any) -> bool:
        if not isinstance(section, dict):
            return False
        value = section.get("enabled", False)
        return False if is_auto(value) else bool(as_bool(value))

    bf16_section = config.get("bf16") if config.get("bf16") is not None else config.get("bfloat16")
    return enabled(config.get("fp16")), enabled(bf16_section)


def check_precision(config: dict, ctx: CheckContext, out: CheckResult) -> None:
    """DS110-DS114."""
    fp16, bf16 = precision_of(config)
    if fp16 and bf16:
        out.add(DS110.finding("fp16.enabled and bf16.enabled are both true: bfloat16 and fp16 modes cannot be "
                              "simultaneously enabled"))
        keep_bf16 = (ctx.gpu is None or ctx.gpu.bf16) and not (ctx.model and ctx.model.dtype == "float16")
        drop = "fp16" if keep_bf16 else "bf16"
        out.change(f"{drop}.enabled", True, False, "DS110", f"keep {'bf16' if keep_bf16 else 'fp16'}"
                   + (f" ({ctx.model.name} weights are {ctx.model.dtype})" if ctx.model and ctx.model.dtype else ""))
    gpu = ctx.gpu
    if gpu is not None:
        cc = f"{gpu.capability[0]}.{gpu.capability[1]}"
        if bf16 and not gpu.bf16:
            out.add(DS111.finding(f"bf16 enabled on {gpu.name} (compute capability {cc} < 8.0)",
                                  fix=DS111.fix if ctx.launch == "trainer" else
                                  'Use "fp16": {"enabled": true} (dynamic loss scaling) and "bf16": {"enabled": false}.'))
            out.change("bf16.enabled", True, False, "DS111", f"{gpu.name} has no bf16")
            if ctx.launch == "trainer" and is_auto(get_path(out.original, "bf16.enabled")):
                out.cannot_fix("TrainingArguments bf16 / fp16", 'bf16=False, fp16=True (the config\'s "auto" '
                                                               "follows them)")
            if not fp16:
                out.change("fp16.enabled", get_path(config, "fp16.enabled"), True, "DS111",
                           f"fp16 is the 16-bit type {gpu.name} has")
        if fp16 and gpu.capability < (7, 0):
            out.add(DS112.finding(f"fp16 enabled on {gpu.name} (compute capability {cc} < 7.0)"))
    model = ctx.model
    if model is not None and model.dtype:
        if fp16 and model.dtype == "bfloat16" and not bf16:
            out.add(DS113.finding(f"fp16 enabled; {model.name} weights are bfloat16 ({model.source})"))
            if ctx.launch == "trainer" and is_auto(get_path(out.original, "fp16.enabled")):
                out.cannot_fix("TrainingArguments fp16 / bf16", 'fp16=False, bf16=True (the config\'s "auto" '
                                                               "follows them)")
            if gpu is None or gpu.bf16:
                out.change("fp16.enabled", True, False, "DS113", f"{model.name} is a bf16 model")
                out.change("bf16.enabled", get_path(config, "bf16.enabled"), True, "DS113",
                           f"{model.name} is a bf16 model")
        elif bf16 and model.dtype == "float16" and not fp16:
            out.add(DS113.finding(f"bf16 enabled; {model.name} weights are float16 ({model.source})",
                                  severity="info"))
    fp16_cfg = config.get("fp16") if isinstance(config.get("fp16"), dict) else {}
    if fp16:
        risky = []
        scale = fp16_cfg.get("loss_scale", 0)
        if is_number(scale) and scale > 0:
            risky.append(f"static loss_scale {show(scale)} (never backs off)")
        power = fp16_cfg.get("initial_scale_power", 16)
        if is_number(power) and power > 16:
            risky.append(f"initial_scale_power {show(power)} (> 16)")
        window = fp16_cfg.get("loss_scale_window", 1000)
        if is_number(window) and window < 1000:
            risky.append(f"loss_scale_window {show(window)} (< 1000: the scale is raised again every "
                         f"{show(window)} clean steps)")
        minimum = fp16_cfg.get("min_loss_scale", 1)
        if is_number(minimum) and minimum > 1:
            risky.append(f"min_loss_scale {show(minimum)} (> 1: the run exits sooner)")
        if risky:
            out.add(DS114.finding("fp16 with " + "; ".join(risky)))


# ---------------------------------------------------------------------------------------------- optimizer

def zero_stage(config: dict) -> int | None:
    """The ZeRO stage DeepSpeed will use (0 when unset; None when invalid)."""
    zero = config.get("zero_optimization", MISSING)
    if zero is MISSING or zero is None:
        return 0
    if isinstance(zero, bool):
        return 1 if zero else 0
    if not isinstance(zero, dict):
        return None
    stage = zero.get("stage", 0)
    if is_auto(stage):
        return 0
    if isinstance(stage, str) and stage.strip().isdigit():
        stage = int(stage)
    if isinstance(stage, float) and stage.is_integer():
        stage = int(stage)
    return stage if isinstance(stage, int) and not isinstance(stage, bool) and 0 <= stage <= 3 else None


def offload_device(config: dict, block: str) -> str:
    """The device of ``zero_optimization.<block>`` ("none" when absent or "auto"), deprecated flags included."""
    zero = config.get("zero_optimization")
    if not isinstance(zero, dict):
        return "none"
    section = zero.get(block)
    if isinstance(section, dict):
        device = section.get("device", "none")
        return device if isinstance(device, str) and not is_auto(device) else "none"
    legacy = "cpu_offload" if block == "offload_optimizer" else "cpu_offload_param"
    return "cpu" if as_bool(zero.get(legacy)) else "none"


def check_optimizer(config: dict, ctx: CheckContext, out: CheckResult) -> None:
    """DS117, DS120-DS129."""
    schema = ctx.schema
    stage = zero_stage(config)
    optimizer = config.get("optimizer")
    has_block = isinstance(optimizer, dict) and optimizer.get("type") is not None
    client = ctx.client_optimizer if ctx.launch == "engine" else not has_block
    if ctx.launch == "engine" and not has_block and not ctx.client_optimizer:
        if stage in (1, 2):
            msg = f"zero stage {stage} requires an optimizer (AssertionError at initialize)"
        elif stage == 3:
            msg = ("ZeRO 3 with no optimizer fails at the first step: 'DeepSpeedZeRoOffload' object has no "
                   "attribute 'set_gradient_accumulation_boundary'")
        else:
            msg = "no optimizer: engine.backward fails with 'must provide optimizer during init in order to use backward'"
        out.add(DS120.finding(f"no optimizer block, no client optimizer (--launch engine): {msg}"))
        peak = get_path(config, "scheduler.params.warmup_max_lr")
        lr = peak if is_number(peak) else 2e-5
        out.change("optimizer", MISSING, {"type": "AdamW", "params": {"lr": lr, "weight_decay": 0.0}}, "DS120",
                   f"DeepSpeed builds the optimizer from this block (lr {show(lr)}"
                   + (" = the scheduler's warmup_max_lr)" if is_number(peak) else ": choose yours)"))
    if ctx.launch == "engine" and has_block and ctx.client_optimizer:
        out.add(DS117.finding(f'optimizer block {show(optimizer.get("type"))} with --client-optimizer: '
                              "the block is not used"))
    offloading = offload_device(config, "offload_optimizer") in ("cpu", "nvme")
    if offloading and client and as_bool(config.get("zero_force_ds_cpu_optimizer", True)) is not False:
        who = "the HF Trainer's optimizer (no optimizer block)" if ctx.launch == "trainer" else "--client-optimizer"
        fix = None
        if ctx.launch == "engine" and has_block:
            fix = ("Stop passing optimizer= to deepspeed.initialize (DeepSpeed then builds DeepSpeedCPUAdam from "
                   "your optimizer block), pass a deepspeed.ops.adam.DeepSpeedCPUAdam instead, or set "
                   '"zero_force_ds_cpu_optimizer": false (slow).')
        elif ctx.launch == "engine":
            fix = ("Pass a deepspeed.ops.adam.DeepSpeedCPUAdam as optimizer=, or drop optimizer= and add an "
                   '"optimizer" block (DeepSpeed builds DeepSpeedCPUAdam), or set "zero_force_ds_cpu_optimizer": '
                   "false (slow).")
        out.add(DS121.finding(f"offload_optimizer device {offload_device(config, 'offload_optimizer')} with "
                              f"{who}: You are using ZeRO-Offload with a client provided optimizer", fix=fix))
        if not has_block:
            out.change("optimizer", MISSING, {"type": "AdamW", "params": {"lr": "auto" if ctx.launch == "trainer"
                                                                      else 2e-5, "weight_decay": "auto"
                                                                      if ctx.launch == "trainer" else 0.0}},
                       "DS121", "DeepSpeed then builds DeepSpeedCPUAdam for the offloaded optimizer")
    if has_block and not (ctx.launch == "engine" and ctx.client_optimizer):
        name = optimizer.get("type")
        if not isinstance(name, str):
            out.add(DS137.finding(f'"optimizer.type" must be a string, got {show(name)}'))
        else:
            known_ds = schema["optimizers"]["deepspeed"]
            known_torch = schema["optimizers"]["torch"]
            if name.lower() not in known_ds and name not in known_torch:
                guess = "AdamW" if "adam" in name.lower() else suggest(name, known_ds + known_torch)
                out.add(DS122.finding(f'"optimizer.type": "{name}": {name} is not a supported DeepSpeed Optimizer'
                                      + (f'; did you mean "{guess}"?' if guess else ""),
                                      fix=(f'Use "type": "{guess}". ' if guess else "") + DS122.fix))
                if guess:
                    out.change("optimizer.type", name, guess, "DS122", f"{name} is not a DeepSpeed optimizer name")
            elif stage and stage > 0 and (name.lower() if name.lower() in known_ds else name) not in \
                    schema["optimizers"]["zero_tested"] and \
                    as_bool(config.get("zero_allow_untested_optimizer", False)) is not True:
                out.add(DS123.finding(f'"optimizer.type": "{name}" with ZeRO stage {stage}: You are using an '
                                      "untested ZeRO Optimizer"))
                out.change("zero_allow_untested_optimizer", config.get("zero_allow_untested_optimizer", MISSING),
                           True, "DS123", f"accept {name} under ZeRO (verify convergence)")
        params = optimizer.get("params", {})
        if params is not None and not isinstance(params, dict):
            out.add(DS137.finding(f'"optimizer.params" must be an object, got {show(params)}'))
        elif isinstance(params, dict):
            if "max_grad_norm" in params:
                out.add(DS129.finding(f'"optimizer.params.max_grad_norm": {show(params["max_grad_norm"])}'))
                out.change("optimizer.params.max_grad_norm", params["max_grad_norm"], MISSING, "DS129",
                           "DeepSpeed refuses it in the optimizer")
                if "gradient_clipping" not in config and is_number(params["max_grad_norm"]):
                    out.change("gradient_clipping", MISSING, params["max_grad_norm"], "DS129",
                               "DeepSpeed clips gradients with this key")
            lr = params.get("lr")
            if lr is not None and not is_auto(lr) and not is_number(lr):
                out.add(DS137.finding(f'"optimizer.params.lr" must be a number, got {show(lr)}'))
            elif is_number(lr) and lr < 0:
                out.add(DS137.finding(f'"optimizer.params.lr" is {show(lr)}: Invalid learning rate (torch.optim '
                                      "refuses a negative one)"))
            _check_lr(lr, "optimizer.params.lr", out)
            if isinstance(name, str):
                _check_optimizer_params(name, params, config, ctx, out)
            scheduler = config.get("scheduler")
            peak = get_path(config, "scheduler.params.warmup_max_lr") if isinstance(scheduler, dict) else MISSING
            if "lr" not in params and (peak is MISSING or peak is None) and isinstance(name, str) and \
                    name.lower() in ("adam", "adamw", "lion", "lamb", "adagrad"):
                out.add(DS128.finding(f'optimizer {name} without "lr": DeepSpeed builds it with the class '
                                      "default 1e-3 (FusedAdam) and no scheduler sets it",
                                      fix='Write "lr" in optimizer.params (1e-5 to 5e-5 for full fine-tuning).'))
    check_scheduler(config, ctx, out)


def optimizer_class(name: str, config: dict) -> str | None:
    """The class DeepSpeed builds for ``optimizer.type`` ``name`` (engine.py ``_configure_basic_optimizer``):
    ``FusedAdam``, ``DeepSpeedCPUAdam`` with offload, ``torch.optim.AdamW`` with ``torch_adam``, ...; None when
    it cannot be told (MuAdam, Muon)."""
    low = name.lower()
    offload = offload_device(config, "offload_optimizer") in ("cpu", "nvme")
    torch_adam = bool(as_bool(get_path(config, "optimizer.params.torch_adam", False)))
    if low in ("adam", "adamw"):
        if torch_adam:
            return "torch.optim.AdamW" if low == "adamw" else "torch.optim.Adam"
        return "DeepSpeedCPUAdam" if offload else "FusedAdam"
    if low == "lion":
        return "DeepSpeedCPULion" if offload else "FusedLion"
    if low == "adagrad":
        return "DeepSpeedCPUAdagrad" if offload else "torch.optim.Adagrad"
    if low == "lamb":
        return "FusedLamb"
    if low in ("muadam", "muadamw", "musgd", "muon"):
        return None
    return f"torch.optim.{name}"


def _check_optimizer_params(name: str, params: dict, config: dict, ctx: CheckContext, out: CheckResult) -> None:
    """DS118: keys of optimizer.params the built class does not take."""
    cls = optimizer_class(name, config)
    accepted = ctx.schema["optimizers"].get("classes", {}).get(cls) if cls else None
    if accepted is None:
        return
    engine_keys = ctx.schema["optimizers"].get("engine_params", []) if name.lower() in ("adam", "adamw") else []
    for key in params:
        if key in accepted or key in engine_keys or key == "max_grad_norm" and cls != "FusedLamb":
            continue
        guess = suggest(key, accepted + engine_keys)
        out.add(DS118.finding(f'"optimizer.params.{key}": {cls} does not take it'
                              + (f'; did you mean "{guess}"?' if guess else "")
                              + f" ({cls} takes {', '.join(accepted)})",
                              fix=f'Rename it to "{guess}".' if guess else DS118.fix))
        if guess and guess not in params:
            out.change(f"optimizer.params.{key}", params[key], MISSING, "DS118", f'misspelled; moves to "{guess}"')
            out.change(f"optimizer.params.{guess}", MISSING, params[key], "DS118", f'the value of "{key}"')
        else:
            out.change(f"optimizer.params.{key}", params[key], MISSING, "DS118", f"{cls} does not take it")


def _check_lr(lr: Any, where: str, out: CheckResult) -> None:
    if is_number(lr) and lr >= 5e-4:
        out.add(DS128.finding(f'"{where}": {show(lr)}'))


def check_scheduler(config: dict, ctx: CheckContext, out: CheckResult) -> None:
    """DS124-DS127 (and DS128 on warmup_max_lr)."""
    scheduler = config.get("scheduler")
    if scheduler is None:
        return
    if not isinstance(scheduler, dict):
        out.add(DS137.finding(f'"scheduler" must be an object, got {show(scheduler)}'))
        return
    name = scheduler.get("type")
    if name is None:
        return
    if not isinstance(name, str):
        out.add(DS137.finding(f'"scheduler.type" must be a string, got {show(name)}'))
        return
    known = ctx.schema["schedulers"]
    params = scheduler.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        out.add(DS137.finding(f'"scheduler.params" must be an object, got {show(params)}'))
        return
    if name not in known:
        if name not in ctx.schema.get("torch_schedulers", []):
            guess = suggest(name, list(known) + ctx.schema.get("torch_schedulers", []))
            out.add(DS124.finding(f'"scheduler.type": "{name}": DeepSpeed does not recognize LR scheduler {name}'
                                  + (f'; did you mean "{guess}"?' if guess else "")))
            if guess:
                out.change("scheduler.type", name, guess, "DS124", "the scheduler's exact name")
        return
    spec = known[name]
    missing = [p for p in spec["required"] if p not in params]
    if missing:
        out.add(DS125.finding(f'{name} without {", ".join(missing)}: __init__() missing required positional '
                              f"argument(s): {', '.join(repr(m) for m in missing)}"))
        if ctx.launch == "trainer" and missing == ["total_num_steps"]:
            out.change("scheduler.params.total_num_steps", MISSING, "auto", "DS125",
                       "the Trainer fills it with the run's optimizer steps")
        else:
            for param in missing:
                out.cannot_fix(f"scheduler.params.{param}", _AUTO_NEEDS.get(f"scheduler.params.{param}",
                                                                            "the value of your run"))
    unknown = [p for p in params if p not in spec["params"]]
    if unknown:
        out.add(DS126.finding(f'{name} does not take {", ".join(unknown)}; it takes '
                              f'{", ".join(p for p in spec["params"] if p != "last_batch_iteration")}'))
    warmup = params.get("warmup_num_steps", MISSING)
    if warmup is not MISSING and "warmup_num_steps" in spec["params"] and not is_auto(warmup):
        if not (isinstance(warmup, int) and not isinstance(warmup, bool)) or warmup <= 0:
            out.add(DS127.finding(f'"scheduler.params.warmup_num_steps" is {show(warmup)}: warmup_num_steps must '
                                  "be a positive integer"))
            if is_number(warmup) and warmup > 0:
                out.change("scheduler.params.warmup_num_steps", warmup, max(1, int(warmup)), "DS127",
                           "an integer")
        else:
            total = params.get("total_num_steps")
            if is_number(total) and warmup >= total:
                out.add(DS127.finding(f"warmup_num_steps {warmup} >= total_num_steps {show(total)}: the learning "
                                      "rate never decays", severity="warning"))
    low, high = params.get("warmup_min_lr"), params.get("warmup_max_lr")
    if is_number(low) and is_number(high) and low > high:
        out.add(DS116.finding(f"warmup_min_lr {show(low)} > warmup_max_lr {show(high)}"))
        out.change("scheduler.params.warmup_min_lr", low, high, "DS116", "swapped with warmup_max_lr")
        out.change("scheduler.params.warmup_max_lr", high, low, "DS116", "swapped with warmup_min_lr")
    _check_lr(params.get("warmup_max_lr"), "scheduler.params.warmup_max_lr", out)


# ---------------------------------------------------------------------------------------------- ZeRO

def check_zero(config: dict, ctx: CheckContext, out: CheckResult) -> None:
    """DS141, DS142, DS144 (DS140 comes from the key pass)."""
    zero = config.get("zero_optimization")
    if not isinstance(zero, dict):
        return
    stage = zero_stage(config)
    if stage is None:
        return
    reduce_scatter = zero.get("reduce_scatter", True)
    # the assertion sits under `if self.reduce_scatter and self.partition_gradients`: stages 2 and 3
    if stage >= 2 and (is_auto(reduce_scatter) or as_bool(reduce_scatter) is not False):
        prescale = config.get("prescale_gradients", False)
        factor = config.get("gradient_predivide_factor", 1.0)
        if prescale and not is_auto(prescale):
            out.add(DS145.finding(f'"prescale_gradients": {show(prescale)} with ZeRO stage {stage} and '
                                  "reduce_scatter: pre-scale gradients is not yet supported"
                                  + (" (a non-empty string is true)" if isinstance(prescale, str) else "")))
            out.change("prescale_gradients", prescale, False, "DS145", "not supported with ZeRO reduce scatter")
        if is_number(factor) and factor != 1.0:
            out.add(DS145.finding(f'"gradient_predivide_factor": {show(factor)} with ZeRO stage {stage} and '
                                  "reduce_scatter: gradient_predivide_factor != 1.0 is not yet supported"))
            out.change("gradient_predivide_factor", factor, MISSING, "DS145", "not supported with ZeRO reduce scatter")
    if stage < 3 and offload_device(config, "offload_param") in ("cpu", "nvme"):
        out.add(DS141.finding(f"offload_param device {offload_device(config, 'offload_param')} with ZeRO stage "
                              f"{stage}"))
    if stage == 3:
        gather = None
        for key in ("stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
                    "stage3_gather_fp16_weights_on_model_save"):
            if key in zero:
                gather = zero[key]
        if gather is None or as_bool(gather) is False or (is_auto(gather) and ctx.launch == "engine"):
            trainer = ctx.launch == "trainer"
            out.add(DS142.finding(
                "ZeRO stage 3, stage3_gather_16bit_weights_on_model_save "
                + (show(gather) if gather is not None else "unset (default false)")
                + ("; the HF Trainer's save_model writes partitioned (empty) weights" if trainer else
                   "; your own save must gather on every rank first (the reference trainer does)"),
                severity="warning" if trainer else "info"))
            out.change("zero_optimization.stage3_gather_16bit_weights_on_model_save", MISSING if gather is None
                       else gather, True, "DS142", "save full 16-bit weights / a non-empty adapter")
    if stage in (1, 2):
        overlap = zero.get("overlap_comm")
        # default: None, then true for stage 3 only (deepspeed/runtime/zero/config.py overlap_comm_valid)
        overlap = as_bool(overlap) if overlap is not None and not is_auto(overlap) else False
        sizes, given = [], []
        for key in ("reduce_bucket_size", "allgather_bucket_size"):
            given.append(key in zero)
            value = zero.get(key, 5e8)
            if is_auto(value):
                value = (ctx.model.hidden_size ** 2) if ctx.model and ctx.model.hidden_size else None
            sizes.append(value if is_number(value) else None)
        if overlap and all(s is not None for s in sizes):
            bucket_bytes = int(4.5 * (sizes[0] + sizes[1]) * 2)
            gib = bucket_bytes / 2 ** 30
            budget = ctx.gpu.memory_bytes if ctx.gpu is not None and ctx.gpu.memory_bytes else None
            evidence = (f"overlap_comm with reduce_bucket_size {sizes[0]:,.0f}{'' if given[0] else ' (default)'} + "
                        f"allgather_bucket_size {sizes[1]:,.0f}{'' if given[1] else ' (default)'} elements: about "
                        f"{gib:.1f} GiB per GPU (4.5 x sum x 2 bytes)")
            target = int(min(2e8, (ctx.model.hidden_size ** 2) if ctx.model and ctx.model.hidden_size else 2e8))
            fix = (f"Lower reduce_bucket_size and allgather_bucket_size to {target:,}"
                   + (f" (hidden_size^2 of {ctx.model.name}, what the HF Trainer's \"auto\" uses)"
                      if ctx.model and ctx.model.hidden_size and target < 2e8 else "")
                   + ', or set "overlap_comm": false.')
            if max(sizes) <= target:
                fix = 'Set "overlap_comm": false, or use a GPU with more memory.'
            if budget and bucket_bytes > 0.1 * budget:
                out.add(DS144.finding(f"{evidence}, {100 * bucket_bytes / budget:.0f}% of {ctx.gpu.name}'s "
                                      f"{budget / 2 ** 30:.0f} GiB", fix=fix))
                for key, value in zip(("reduce_bucket_size", "allgather_bucket_size"), sizes):
                    if value > target:
                        out.change(f"zero_optimization.{key}", zero.get(key, MISSING), target, "DS144",
                                   f"{target:,} elements: smaller communication buffers")
            elif budget is None and gib >= 4:
                out.add(DS144.finding(f"{evidence} (give --gpu to compare with its memory)", severity="info",
                                      fix=fix))


# ---------------------------------------------------------------------------------------------- effective

def effective_config(config: dict, ctx: CheckContext, out: CheckResult) -> dict:
    """The config as DeepSpeed will see it: the batch triple derived, and the main sections with DeepSpeed's
    defaults for every field not given ("auto" in a validated section becomes the default, as
    DeepSpeedConfigModel does)."""
    schema = ctx.schema
    eff = copy.deepcopy(config)
    for key, value in out.batch.items():
        if key in BATCH_KEYS and value is not None:
            eff[key] = value
    for key in ("gradient_clipping", "steps_per_print", "prescale_gradients", "zero_allow_untested_optimizer",
                "zero_force_ds_cpu_optimizer"):
        if key not in eff:
            eff[key] = schema["top_level"].get(key)
    for section in ("zero_optimization", "fp16", "bf16"):
        body = eff.get(section)
        if body is None:
            body = {}
        if not isinstance(body, dict):
            continue
        spec = schema["sections"][section]
        index = _field_index(spec)
        filled = {}
        for key, value in body.items():
            name = index.get(key, key)
            if not is_auto(value) or ctx.launch == "trainer":
                filled[name] = value
        for name, field_spec in spec["fields"].items():
            if field_spec.get("deprecated") or name in filled:
                continue
            if section == "zero_optimization" and field_spec.get("kind") == "model":
                continue
            filled[name] = field_spec.get("default")
        eff[section] = filled
    return eff


# ---------------------------------------------------------------------------------------------- entry

def check_config(config: dict, ctx: CheckContext) -> CheckResult:
    """Run every DS1xx check (and, with ``ctx.launch == "trainer"``, the HF2xx ones) on a parsed ds_config.

    Args:
        config: the ds_config's top-level object (never modified).
        ctx: what is known about the run; ``ctx.schema`` defaults to the installed DeepSpeed's key schema.
    Returns:
        a :class:`CheckResult` whose ``changes`` make ``fixed_config`` and whose ``effective`` is the config
        after the Trainer's fills (trainer) and DeepSpeed's derivation and defaults.
    """
    if ctx.schema is None:
        ctx.schema, ctx.schema_note = load_schema()
    out = CheckResult(original=config, launch=ctx.launch)
    origin: dict[str, str] = {}
    working = config
    check_keys(config, ctx, out)
    if ctx.launch == "trainer":
        from dsdoctor.checks.hf_trainer import check_trainer

        working, origin = check_trainer(config, ctx, out)
    else:
        check_autos_engine(config, ctx, out)
    if any(c.rule == "HF201" and c.path in BATCH_KEYS for c in out.changes):
        pass  # the Trainer refuses the batch mismatch (HF201) before DeepSpeed sees the triple
    else:
        check_batch(working, ctx, out, origin)
    check_precision(working, ctx, out)
    check_optimizer(working, ctx, out)
    check_zero(working, ctx, out)
    for key in ("fp16.enabled", "bf16.enabled", "gradient_clipping", "optimizer.params.lr",
                "zero_optimization.stage"):
        value = get_path(config, key)
        if key in origin:
            out.provenance[key] = origin[key]
        elif value is MISSING:
            out.provenance[key] = "default"
        elif is_auto(value):
            section = _section_of(key, ctx.schema)
            if ctx.launch == "trainer":
                out.provenance[key] = "auto (unfilled)"
            elif section and ctx.schema["sections"][section].get("strict"):
                out.provenance[key] = "auto: DeepSpeed's default"
            else:
                out.provenance[key] = 'auto: DeepSpeed receives the string "auto" (TypeError)'
        else:
            out.provenance[key] = "user"
    out.filled = working
    out.effective = effective_config(working, ctx, out)
    for c in out.changes:  # "now" is what the file says, not a filled value
        c.old = get_path(config, c.path)
    return out
