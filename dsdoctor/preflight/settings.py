"""The run's settings, from every place a launch line spreads them over, each with where it came from.

Precedence, lowest first (a later source replaces an earlier one, as the tools themselves merge them):

1. the script's declared defaults (``argparse`` ``add_argument(default=...)``, ``HfArgumentParser`` dataclass
   fields), for names the line does not give;
2. the script's literal calls (``TrainingArguments(...)``, ``LoraConfig(...)``, ``from_pretrained(...)``,
   ``deepspeed.initialize(config=...)``);
3. the tool's config file (LLaMA-Factory's or axolotl's YAML, a YAML or JSON given to ``HfArgumentParser``), and
   accelerate's ``--config_file``;
4. the script's arguments on the line (``--per_device_train_batch_size 4``, ``--bf16 True``, ``--fp16``);
5. ``key=value`` after a LLaMA-Factory YAML (``llamafactory-cli train x.yaml learning_rate=1e-5``);
6. ``dsdoctor preflight --set key=value``.

Names are read as given (dashes as underscores) and mapped to what dsdoctor needs through :data:`ALIASES`: the
names the issue lists for the tutorials, HF ``TrainingArguments``, LLaMA-Factory and axolotl. A name that is neither
an alias nor a TrainingArguments field (the shipped schema's list, read from transformers' source) is listed as not
read, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: what dsdoctor needs -> the names scripts and tools give it (first found in precedence order wins)
ALIASES = {
    "model": ("model_name_or_path", "base_model", "model", "model_name", "model_path", "pretrained_model_name_or_path",
              "model_dir"),
    "data": ("dataset", "datasets", "data_path", "train_file", "data", "train_data", "dataset_path", "data_files",
             "train_data_path"),
    "dataset_dir": ("dataset_dir",),
    "seq_len": ("cutoff_len", "max_seq_length", "sequence_len", "model_max_length", "max_seq_len", "seq_len",
                "max_len", "max_length"),
    "lora_rank": ("lora_rank", "lora_r"),
    "lora_target": ("lora_target", "lora_target_modules", "lora_targets", "target_modules"),
    "lora_target_linear": ("lora_target_linear",),
    "finetuning_type": ("finetuning_type", "method", "train_type", "finetune_type"),
    "adapter": ("adapter", "use_lora", "peft"),
    "pre_seq_len": ("pre_seq_len",),
    "deepspeed": ("deepspeed", "deepspeed_config", "ds_config", "deepspeed_config_file"),
    "micro_batch": ("per_device_train_batch_size", "micro_batch_size", "train_micro_batch_size_per_gpu",
                    "per_gpu_train_batch_size"),
    "grad_accum": ("gradient_accumulation_steps",),
    "epochs": ("num_train_epochs", "num_epochs", "epochs"),
    "max_steps": ("max_steps",),
    "max_samples": ("max_samples",),
    "bf16": ("bf16",),
    "fp16": ("fp16",),
    "grad_ckpt": ("gradient_checkpointing",),
    "ddp_timeout": ("ddp_timeout",),
    "preprocessing_num_workers": ("preprocessing_num_workers", "dataset_processes"),
    "zero_stage": ("zero_stage",),
    "quantization_bit": ("quantization_bit",),
    "load_in_4bit": ("load_in_4bit",),
    "load_in_8bit": ("load_in_8bit",),
    "max_source_length": ("max_source_length",),
    "max_target_length": ("max_target_length",),
    "template": ("template", "chat_template"),
    "freeze_trainable_layers": ("freeze_trainable_layers", "num_layer_trainable", "freeze_last"),
    "output_dir": ("output_dir",),
}
_ALIAS_OF = {name: key for key, names in ALIASES.items() for name in names}
#: names :mod:`dsdoctor.preflight.script` gives what it reads off the script's calls
SCRIPT_KEYS = {"torch_dtype", "lora_dropout", "method", "load_in_4bit", "load_in_8bit", "max_length", "lora_alpha",
               "padding"}
#: names tools take that set nothing dsdoctor models (read, shown, never "unknown"): LLaMA-Factory's and axolotl's
#: run keys that change neither the batch, the memory nor the time
TOOL_KEYS = {
    "llamafactory": {"stage", "do_train", "do_eval", "do_predict", "overwrite_cache", "overwrite_output_dir",
                     "plot_loss", "val_size", "eval_strategy", "eval_steps", "lora_alpha", "lora_dropout",
                     "trust_remote_code", "flash_attn", "report_to", "resume_from_checkpoint", "save_only_model",
                     "packing", "neat_packing", "enable_liger_kernel", "use_unsloth", "image_max_pixels",
                     "video_max_pixels", "tokenized_path", "streaming", "mix_strategy", "new_special_tokens",
                     "additional_target", "lora_alpha", "pref_beta", "pref_loss", "rope_scaling", "booster",
                     "create_new_adapter", "adapter_name_or_path", "export_dir", "print_param_status",
                     "train_on_prompt", "mask_history", "use_dora", "use_rslora", "pissa_init", "loraplus_lr_ratio",
                     "moe_aux_loss_coef", "disable_gradient_checkpointing", "upcast_layernorm",
                     "predict_with_generate", "freeze_trainable_modules", "freeze_extra_modules", "quantization_method",
                     "infer_backend", "max_new_tokens", "top_p", "temperature", "do_sample", "model_revision",
                     "cache_dir", "use_fast_tokenizer", "hf_hub_token", "split", "buffer_size", "ignore_pad_token_for_loss",
                     "val_size", "interleave_probs", "include_num_input_tokens_seen"},
    "axolotl": {"model_type", "tokenizer_type", "base_model_config", "is_llama_derived_model", "strict",
                "dataset_prepared_path", "val_set_size", "sample_packing", "pad_to_sequence_len",
                "eval_sample_packing", "lora_alpha", "lora_dropout", "lora_fan_in_fan_out", "lora_modules_to_save",
                "wandb_project", "wandb_entity", "wandb_watch", "wandb_name", "wandb_log_model", "optimizer",
                "lr_scheduler", "train_on_inputs", "group_by_length", "tf32", "early_stopping_patience",
                "local_rank", "logging_steps", "xformers_attention", "flash_attention", "sdp_attention",
                "warmup_steps", "warmup_ratio", "evals_per_epoch", "eval_table_size", "saves_per_epoch",
                "debug", "weight_decay", "fsdp", "fsdp_config", "special_tokens", "tokens", "chat_template",
                "hub_model_id", "resume_from_checkpoint", "auto_resume_from_checkpoints", "save_safetensors",
                "plugins", "liger_rope", "liger_rms_norm", "liger_glu_activation", "liger_fused_linear_cross_entropy",
                "eval_max_new_tokens", "loss_watchdog_threshold", "loss_watchdog_patience", "gradient_checkpointing_kwargs",
                "peft_use_dora", "peft_use_rslora", "unfrozen_parameters", "trust_remote_code", "save_strategy",
                "eval_strategy", "lr_scheduler_kwargs", "shuffle_merged_datasets", "test_datasets",
                "saves_per_epoch", "save_total_limit", "seed", "bf16", "fp16", "gptq", "lora_model_dir",
                "learning_rate"},
}
_BOOL = {"true": True, "false": False, "yes": True, "no": False, "1": True, "0": False}


def coerce(text):
    """A value as given on a command line (always text) as the scripts' parsers would read it: an int, a float,
    a boolean (``True``/``false``, as ``HfArgumentParser``'s ``string_to_bool``), else the text itself."""
    if not isinstance(text, str):
        return text
    lowered = text.strip().lower()
    if re.fullmatch(r"[+-]?\d+", lowered):
        return int(lowered)
    if re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?", lowered):
        return float(lowered)
    if lowered in ("true", "false"):
        return _BOOL[lowered]
    return text


def as_bool(value) -> bool | None:
    """``value`` as a flag, or None when it is not one (axolotl's ``bf16: auto``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        return _BOOL.get(value.strip().lower())
    return None


@dataclass
class Setting:
    value: object
    source: str  # "line --per_device_train_batch_size", "qwen.yaml cutoff_len", "train.py:43 TrainingArguments(...)"
    name: str    # the name as given (per_device_train_batch_size, micro_batch_size)


@dataclass
class Settings:
    """Every name given, with its value and source (``given``), and the names read as dsdoctor's settings."""

    given: dict[str, Setting] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)  # names neither an alias, a TrainingArguments field nor a tool key

    def put(self, name: str, value, source: str) -> None:
        name = name.lstrip("-").replace("-", "_")
        self.given[name] = Setting(value, source, name)

    def get(self, key: str) -> Setting | None:
        """The highest-precedence setting for dsdoctor's ``key`` (an :data:`ALIASES` key): of the names mapped to
        it, the one given last (sources are put in precedence order)."""
        best, best_rank = None, -1
        order = list(self.given)
        for name in ALIASES.get(key, (key,)):
            if name in self.given:
                rank = order.index(name)
                if rank > best_rank:
                    best, best_rank = self.given[name], rank
        return best

    def value(self, key: str, default=None):
        found = self.get(key)
        return default if found is None else found.value


#: names whose value scripts declare as a list (``nargs="+"``): the words after them up to the next option
LIST_NAMES = {"lora_target", "lora_target_modules", "target_modules", "lora_targets", "dataset", "datasets",
              "data_files", "report_to", "modules_to_save"}


def parse_script_args(args: list[str]) -> tuple[list[tuple[str, object]], list[str]]:
    """(name, value) pairs from a script's arguments, as argparse and ``HfArgumentParser`` read them: ``--key
    value``, ``--key=value``, a bare ``--flag`` (True; HF's bool fields take ``nargs="?"``), and the positional
    words left over."""
    pairs, loose = [], []
    i = 0
    while i < len(args):
        word = args[i]
        if word.startswith("--") and len(word) > 2:
            if "=" in word:
                key, value = word[2:].split("=", 1)
                pairs.append((key, coerce(value)))
            elif i + 1 < len(args) and not (args[i + 1].startswith("--") and len(args[i + 1]) > 2):
                values = [args[i + 1]]
                j = i + 2  # nargs="+" lists (--lora_target q_proj v_proj) of the names that take lists
                while word[2:].replace("-", "_") in LIST_NAMES and j < len(args) and not args[j].startswith("-"):
                    values.append(args[j])
                    j += 1
                pairs.append((word[2:], coerce(values[0]) if len(values) == 1 else values))
                i = j
                continue
            else:
                pairs.append((word[2:], True))
        else:
            loose.append(word)
        i += 1
    return pairs, loose


def classify(settings: Settings, training_fields: set[str], tool: str | None) -> None:
    """Fill ``settings.unknown``: names given (not the script's own defaults) that are neither an alias nor a
    TrainingArguments field nor a key ``tool`` is known to take."""
    known = set(_ALIAS_OF) | SCRIPT_KEYS | training_fields | TOOL_KEYS.get(tool or "", set())
    settings.unknown = sorted(name for name, s in settings.given.items()
                              if name not in known and not s.source.startswith("default "))
