"""DeepSpeed config checks (``DS1xx``) that need no model and no DeepSpeed import."""

from __future__ import annotations

from typing import Any, Iterator

from dsdoctor.rules import rule

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


def auto_paths(config: Any, prefix: str = "") -> Iterator[str]:
    """Dotted paths of every value equal to "auto" in a ds_config (nested dicts and lists)."""
    if isinstance(config, dict):
        for key, value in config.items():
            yield from auto_paths(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(config, list):
        for i, value in enumerate(config):
            yield from auto_paths(value, f"{prefix}[{i}]")
    elif isinstance(config, str) and config.strip().lower() == "auto":
        yield prefix


def auto_finding(config: dict):
    """DS101 naming every "auto" value, or None when there is none."""
    paths = list(auto_paths(config))
    if not paths:
        return None
    return DS101.finding(f'{len(paths)} value(s) are "auto": ' + ", ".join(paths))
