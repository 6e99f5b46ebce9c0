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
    "HF205", "error", "TrainingArguments field that this transformers no longer has",
    what="--hf-args has a field that the installed transformers removed (warmup_ratio in 5.x).",
    why="TrainingArguments(...) raises TypeError \"unexpected keyword argument\"; LLaMA-Factory's parser refuses "
        "unused keys.",
    fix="Use warmup_steps with a fraction (warmup_steps: 0.1 = 10% of the steps) in transformers 5.",
    source="transformers/training_args.py (5.x); get_warmup_steps")
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

#: TrainingArguments fields the integration reads, and their types (transformers/training_args.py)
NUMERIC = {"per_device_train_batch_size": int, "gradient_accumulation_steps": int, "learning_rate": float,
           "weight_decay": float, "adam_beta1": float, "adam_beta2": float, "adam_epsilon": float,
           "max_grad_norm": float, "warmup_steps": float, "max_steps": int, "num_train_epochs": float,
           "warmup_ratio": float}
FLAGS = ("fp16", "bf16", "fp16_full_eval", "bf16_full_eval", "save_on_each_node", "auto_find_batch_size")
#: --hf-args keys that are not fields matched against the fields for "did you mean" (HF208): a real file has
#: tens of keys; matching 80,000 of them against 150 fields took a minute
MAX_KEYS_MATCHED = 200
#: removed in transformers 5 (accepted by 4.x)
REMOVED_IN_5 = {"warmup_ratio": "warmup_steps (a fraction below 1 is a ratio)"}
FALLBACK_DEFAULTS = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "learning_rate": 5e-05,
                     "weight_decay": 0.0, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-08,
                     "max_grad_norm": 1.0, "fp16": False, "bf16": False, "fp16_full_eval": False,
                     "bf16_full_eval": False, "warmup_steps": 0, "max_steps": -1, "num_train_epochs": 3.0,
                     "lr_scheduler_type": "linear", "save_on_each_node": False, "auto_find_batch_size": False}


def training_arguments(hf_args: dict, ctx, out) -> dict:
    """TrainingArguments values: the installed transformers' defaults (from the schema) updated with ``hf_args``.
    Strings in numeric fields are reported (HF206) and read as numbers so the remaining checks can go on."""
    from dsdoctor.checks.deepspeed_config import installed_version
    from dsdoctor.checks.deepspeed_config.values import finite_float

    defaults = dict(FALLBACK_DEFAULTS)
    defaults.update((ctx.schema.get("training_arguments") or {}).get("defaults", {}))
    args = {**defaults, **{k: v for k, v in hf_args.items() if v is not None}}
    version = installed_version("transformers") or (ctx.schema.get("training_arguments") or {}).get(
        "transformers_version", "")
    major = int(version.split(".")[0]) if version and version.split(".")[0].isdecimal() else 0
    for key, replacement in REMOVED_IN_5.items():
        if key in hf_args and major >= 5:
            out.add(HF205.finding(f"{key}: {hf_args[key]!r} with transformers {version}: TrainingArguments.__init__() "
                                  f"got an unexpected keyword argument '{key}'", fix=f"Use {replacement}."))
    fields = (ctx.schema.get("training_arguments") or {}).get("fields", [])
    if fields:
        import difflib

        looked = 0
        for key in hf_args:
            if key in fields or key in REMOVED_IN_5:
                continue
            looked += 1
            if looked > MAX_KEYS_MATCHED:
                break
            close = difflib.get_close_matches(key, fields, n=1, cutoff=0.85)
            if close:
                out.add(HF208.finding(f'"{key}" is not a TrainingArguments field; did you mean "{close[0]}"? '
                                      f"({close[0]} stays {defaults.get(close[0], 'at its default')!r})",
                                      fix=f"Rename it to {close[0]}."))
    if args.get("warmup_ratio") is not None and "warmup_steps" not in hf_args:
        args["warmup_steps"] = args["warmup_ratio"]
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
    warmup_steps = None
    if isinstance(warmup, (int, float)) and (warmup >= 1 or warmup <= 0):
        warmup_steps = max(1, int(warmup))  # TrainingArguments.get_warmup_steps; 0 -> max(1, 0) = 1
    elif isinstance(warmup, (int, float)) and total:
        warmup_steps = max(1, math.ceil(total * warmup))
    node, key = _find_node(filled, "scheduler.params.warmup_num_steps")
    if node is not None:
        if is_auto(node.get(key)):
            node[key] = warmup_steps if warmup_steps is not None and known else "__filled__"
            origin["scheduler.params.warmup_num_steps"] = "auto <- warmup_steps"
            fills.append("scheduler.params.warmup_num_steps <- max(1, warmup_steps)"
                         + (f" = {warmup_steps}" if warmup_steps is not None and known else ""))
        elif known and warmup_steps is not None and node.get(key) is not None and node.get(key) != warmup_steps:
            mismatches.append(f"- ds scheduler.params.warmup_num_steps={_py(node.get(key))} vs hf warmup_steps="
                              f"{warmup_steps}")
            out.change("scheduler.params.warmup_num_steps", node.get(key), "auto", "HF201",
                       "the Trainer fills it from warmup_steps")

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
