"""Generate the key schema that ``dsdoctor check`` reads instead of importing DeepSpeed.

Run it where DeepSpeed (and transformers) are installed; it writes ``deepspeed-<version>.json`` beside this file::

    python -m dsdoctor.schemas.generate

What it records, and from where (all read from the installed packages, nothing typed by hand):

* top-level keys and their defaults: every key that ``deepspeed.runtime.config.DeepSpeedConfig`` looks up,
  recorded by handing it a dict that logs each ``get`` / ``[]`` / ``in`` (with the default passed to ``get``);
* the sub-configs that are pydantic models (``zero_optimization``, ``fp16``, ``bf16``, the monitors, ...): their
  fields, aliases, defaults, bounds and deprecations (``json_schema_extra``: ``deprecated``, ``new_param``), and
  whether unknown keys are refused (``extra="forbid"``) or ignored;
* the sub-configs read with ``get_scalar_param`` (``activation_checkpointing``, ``flops_profiler``, ...): the keys
  looked up, by the same recording dict (unknown keys there are silently ignored);
* removed keys DeepSpeed refuses (``_REMOVED_TOP_LEVEL_CONFIG_KEYS``, ``_REMOVED_ZERO_CONFIG_KEYS``);
* optimizer names (``DEEPSPEED_OPTIMIZERS``, ``torch.optim``), which of them ZeRO has tested
  (``deepspeed/runtime/zero/utils.py`` ``ZERO_SUPPORTED_OPTIMIZERS``), the LR schedulers and their constructor
  parameters (``deepspeed/runtime/lr_schedules.py``);
* ``TrainingArguments`` defaults that ``transformers/integrations/deepspeed.py`` ``trainer_config_process`` reads.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import logging
import math
import os
import typing
from pathlib import Path

os.environ.setdefault("DS_ACCELERATOR", "cpu")


class RecordingDict(dict):
    """A dict that logs every key looked up in it (and the default given to ``get``)."""

    log: dict[str, object] = {}

    def __init__(self, path: str = "", *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.path = path

    def _note(self, key, default=None):
        name = f"{self.path}.{key}" if self.path else str(key)
        if name not in RecordingDict.log or RecordingDict.log[name] is None:
            RecordingDict.log[name] = default

    def get(self, key, default=None):
        self._note(key, default)
        return super().get(key, default)

    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self._note(key)
        return super().__contains__(key)

    def keys(self):
        outer = self

        class Keys:
            def __contains__(self, key):
                outer._note(key)
                return dict.__contains__(outer, key)

            def __iter__(self):
                return iter(dict.keys(outer))

            def __len__(self):
                return len(dict.keys(outer))

        return Keys()


def jsonable(value):
    """A JSON value for a default (enums by value, paths and other objects as strings, inf as a string)."""
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return str(value)


def kind_of(annotation) -> dict:
    """The value kind a pydantic annotation accepts: bool, int, float, str, enum (with its values), dict, list,
    model, or any. ``Optional[X]`` also accepts null."""
    from pydantic import BaseModel

    nullable = False
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation)]
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        nullable = type(None) in args
        args = [a for a in args if a is not type(None)]
        if len(args) == 1:
            inner = kind_of(args[0])
            inner["nullable"] = True
            return inner
        return {"kind": "any", "nullable": nullable}
    if inspect.isclass(annotation):
        if issubclass(annotation, enum.Enum):
            return {"kind": "enum", "values": [jsonable(m.value) for m in annotation], "nullable": False}
        if issubclass(annotation, bool):
            return {"kind": "bool", "nullable": False}
        if issubclass(annotation, int):
            return {"kind": "int", "nullable": False}
        if issubclass(annotation, float):
            return {"kind": "float", "nullable": False}
        if issubclass(annotation, str):
            return {"kind": "str", "nullable": False}
        if issubclass(annotation, BaseModel):
            return {"kind": "model", "model": annotation.__name__, "nullable": False}
        if issubclass(annotation, (dict,)):
            return {"kind": "dict", "nullable": False}
        if issubclass(annotation, (list, tuple)):
            return {"kind": "list", "nullable": False}
    if origin in (dict,):
        return {"kind": "dict", "nullable": False}
    if origin in (list, tuple):
        return {"kind": "list", "nullable": False}
    if origin is typing.Literal:
        return {"kind": "enum", "values": [jsonable(a) for a in args], "nullable": False}
    return {"kind": "any", "nullable": False}


def model_schema(model) -> dict:
    """Fields of a DeepSpeed pydantic config model: aliases, default, kind, bounds, deprecation."""
    from pydantic_core import PydanticUndefined

    fields = {}
    nested = {}
    for name, info in model.model_fields.items():
        entry = kind_of(info.annotation)
        default = info.default
        if default is PydanticUndefined:
            default = info.default_factory() if info.default_factory else None
            if hasattr(default, "model_dump"):
                default = None
        entry["default"] = jsonable(default)
        entry["required"] = info.is_required()
        aliases = []
        if info.alias and info.alias != name:
            aliases.append(info.alias)
        if isinstance(info.validation_alias, str) and info.validation_alias not in aliases:
            aliases.append(info.validation_alias)
        elif info.validation_alias is not None and hasattr(info.validation_alias, "choices"):
            aliases += [c for c in info.validation_alias.choices if isinstance(c, str) and c != name]
        entry["aliases"] = aliases
        for meta in info.metadata:
            for bound in ("gt", "ge", "lt", "le"):
                if getattr(meta, bound, None) is not None:
                    entry[bound] = jsonable(getattr(meta, bound))
        extra = info.json_schema_extra or {}
        if isinstance(extra, dict) and extra.get("deprecated"):
            entry["deprecated"] = True
            entry["new_param"] = extra.get("new_param", "")
            entry["deprecated_msg"] = extra.get("deprecated_msg", "")
        fields[name] = entry
        sub = info.annotation
        for candidate in [sub, *typing.get_args(sub)]:
            if inspect.isclass(candidate) and hasattr(candidate, "model_fields"):
                nested[name] = candidate
    return {"strict": model.model_config.get("extra") == "forbid", "model": f"{model.__module__}.{model.__name__}",
            "fields": fields}, nested


def generate() -> dict:
    logging.disable(logging.WARNING)
    import deepspeed
    import torch
    from deepspeed.runtime import config as ds_config_module
    from deepspeed.runtime import lr_schedules
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.zero import utils as zero_utils

    # 1. Top-level keys (and the keys of the scalar-param sections) by recording lookups.
    RecordingDict.log = {}
    DeepSpeedConfig(RecordingDict("", {"train_batch_size": 1}))
    top_level = {k: v for k, v in RecordingDict.log.items() if "." not in k}
    scalar_sections = {}
    for section in ("activation_checkpointing", "flops_profiler", "aio", "checkpoint", "data_types", "autotuning",
                    "pipeline", "torch_autocast", "data_efficiency", "datastates_ckpt", "optimizer", "scheduler",
                    "expert_parallel"):
        RecordingDict.log = {}
        probe = RecordingDict("", {"train_batch_size": 1, section: RecordingDict(section, {})})
        try:
            DeepSpeedConfig(probe)
        except Exception:  # a section that needs keys to be present: the keys seen so far still count
            pass
        keys = {k[len(section) + 1:]: jsonable(v) for k, v in RecordingDict.log.items()
                if k.startswith(section + ".") and "." not in k[len(section) + 1:]}
        if section in ("optimizer", "scheduler"):  # get_optimizer_params / get_scheduler_params read "params"
            keys.setdefault("params", None)           # only when "type" is set, so the probe misses it
        scalar_sections[section] = {"strict": False, "fields": {k: {"kind": "any", "default": v, "aliases": []}
                                                               for k, v in sorted(keys.items())}}

    # 2. Sub-configs that are pydantic models.
    from deepspeed.comm.config import CommsLoggerConfig
    from deepspeed.compile.config import CompileConfig
    from deepspeed.monitor.config import CometConfig, CSVConfig, TensorBoardConfig, WandbConfig
    from deepspeed.runtime.config import HybridEngineConfig
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.runtime.tensor_parallel.config import TPTrainingConfig
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    roots = {"zero_optimization": DeepSpeedZeroConfig, "fp16": DeepSpeedFP16Config, "bf16": DeepSpeedBF16Config,
             "bfloat16": DeepSpeedBF16Config, "tensorboard": TensorBoardConfig, "wandb": WandbConfig,
             "csv_monitor": CSVConfig, "comet": CometConfig, "comms_logger": CommsLoggerConfig,
             "compile": CompileConfig, "hybrid_engine": HybridEngineConfig, "tensor_parallel": TPTrainingConfig}
    sections = {}
    queue = list(roots.items())
    while queue:
        path, model = queue.pop(0)
        schema, nested = model_schema(model)
        sections[path] = schema
        queue += [(f"{path}.{name}", sub) for name, sub in nested.items()]
    for path, schema in scalar_sections.items():
        if path not in sections:
            sections[path] = schema

    # 3. Optimizers and schedulers.
    from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS
    tested_classes = {cls.__name__ for cls in zero_utils.ZERO_SUPPORTED_OPTIMIZERS}
    torch_optimizers = sorted(n for n in dir(torch.optim) if inspect.isclass(getattr(torch.optim, n))
                              and issubclass(getattr(torch.optim, n), torch.optim.Optimizer)
                              and n != "Optimizer")
    # engine.py _configure_basic_optimizer: which class each DeepSpeed name builds (GPU / CPU offload / torch_adam)
    builds = {"adam": ["FusedAdam", "DeepSpeedCPUAdam", "Adam", "AdamW"],
              "adamw": ["FusedAdam", "DeepSpeedCPUAdam", "AdamW"],
              "adagrad": ["Adagrad", "DeepSpeedCPUAdagrad"], "lion": ["FusedLion", "DeepSpeedCPULion"],
              "lamb": ["FusedLamb"], "muadam": ["MuAdam"], "muadamw": ["MuAdamW"], "musgd": ["MuSGD"],
              "muon": ["MuonWithAuxAdam"]}
    zero_tested = sorted({n for n in DEEPSPEED_OPTIMIZERS if all(c in tested_classes for c in builds.get(n, [n]))}
                         | {n for n in torch_optimizers if n in tested_classes} | {"muon"})
    schedulers = {}
    for name in lr_schedules.VALID_LR_SCHEDULES:
        sig = inspect.signature(getattr(lr_schedules, name).__init__)
        params = [p for p in sig.parameters.values() if p.name not in ("self", "optimizer")]
        schedulers[name] = {"params": {p.name: jsonable(None if p.default is inspect.Parameter.empty else p.default)
                                       for p in params},
                            "required": [p.name for p in params if p.default is inspect.Parameter.empty]}
    # the keyword arguments of each class an optimizer name can build (engine.py _configure_basic_optimizer)
    from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad
    from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam
    from deepspeed.ops.lamb import FusedLamb
    from deepspeed.ops.lion import DeepSpeedCPULion, FusedLion

    def kwargs_of(cls) -> list[str]:
        return [p.name for p in list(inspect.signature(cls.__init__).parameters.values())[2:]
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    optimizer_classes = {cls.__name__: kwargs_of(cls) for cls in (FusedAdam, DeepSpeedCPUAdam, FusedLion,
                                                                   DeepSpeedCPULion, FusedLamb, DeepSpeedCPUAdagrad)}
    optimizer_classes.update({f"torch.optim.{n}": kwargs_of(getattr(torch.optim, n)) for n in torch_optimizers})
    torch_schedulers = sorted(n for n in dir(torch.optim.lr_scheduler)
                              if inspect.isclass(getattr(torch.optim.lr_scheduler, n)) and n[0].isupper())

    # 4. The TrainingArguments defaults that the HF integration reads.
    hf = {}
    try:
        import transformers
        from transformers import TrainingArguments
        fields = {f.name: f for f in dataclasses.fields(TrainingArguments)}
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate",
                     "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "fp16", "bf16",
                     "fp16_full_eval", "bf16_full_eval", "warmup_steps", "max_steps", "num_train_epochs",
                     "lr_scheduler_type", "optim", "save_on_each_node", "auto_find_batch_size",
                     "gradient_checkpointing", "warmup_ratio"):
            if name in fields:
                hf[name] = jsonable(fields[name].default)
        hf = {"transformers_version": transformers.__version__, "defaults": hf, "fields": sorted(fields)}
    except ImportError:
        pass

    return {
        "deepspeed_version": deepspeed.__version__,
        "torch_version": torch.__version__,
        "generated_by": "python -m dsdoctor.schemas.generate",
        "top_level": {k: jsonable(v) for k, v in sorted(top_level.items())},
        "top_level_aliases": {"bfloat16": "bf16"},
        "removed_top_level": dict(getattr(ds_config_module, "_REMOVED_TOP_LEVEL_CONFIG_KEYS", {})),
        "removed_zero": dict(getattr(ds_config_module, "_REMOVED_ZERO_CONFIG_KEYS", {})),
        "sections": sections,
        "optimizers": {"deepspeed": list(DEEPSPEED_OPTIMIZERS), "torch": torch_optimizers,
                       "zero_tested": zero_tested, "classes": optimizer_classes,
                       # popped by engine.py before the class is built (get_optimizer_configuration)
                       "engine_params": ["torch_adam", "adam_w_mode", "fp32_optimizer_states", "foreach"]},
        "schedulers": schedulers,
        "torch_schedulers": torch_schedulers,
        "training_arguments": hf,
    }


def main() -> None:
    schema = generate()
    out = Path(__file__).with_name(f"deepspeed-{schema['deepspeed_version']}.json")
    out.write_text(json.dumps(schema, indent=1, sort_keys=False) + "\n")
    print(f"wrote {out}: {len(schema['top_level'])} top-level keys, {len(schema['sections'])} sections")


if __name__ == "__main__":
    main()
