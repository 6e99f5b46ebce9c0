"""What a log says about the run itself, for the commands explain suggests: the DeepSpeed config file it was launched
with, its world size and nodes, DeepSpeed's effective settings, and whether the model runs its own (remote) code. A
suggested command then names the user's own file and values instead of placeholders (``dsdoctor estimate ...
--deepspeed ds_z3.json --gpus 8`` rather than ``ds_config.json``), and every suggestion is a command that runs
(:func:`localize`).

Where each comes from:

- the config file: the launch command (``--deepspeed ds.json``, ``--deepspeed_config ds.json``: DeepSpeedExamples and
  the Trainer's argument), DeepSpeed's launcher (``runner.py`` ``cmd = ...``; ``launch.py``'s
  ``['python', '-u', 'train.py', '--deepspeed', 'ds.json'] exits with ...``), the Trainer's ``TrainingArguments(...
  deepspeed=ds.json, ...)`` and a LLaMA-Factory YAML's ``deepspeed: ds.json`` echoed in the log;
- the world size and nodes: ``deepspeed/launcher/launch.py`` ``main`` (``nnodes=1, num_local_procs=2, node_rank=0``,
  ``dist_world_size=2``), torchrun's flags on the echoed command line (``--nnodes 2 --nproc_per_node 8``), DeepSpeed's
  config print (``deepspeed/runtime/config.py`` ``DeepSpeedConfig.print``: ``world_size ...... 2``, the data-parallel
  size);
- the settings: the same config print (``zero_optimization_stage``, ``train_micro_batch_size_per_gpu``,
  ``gradient_accumulation_steps``, ``fp16_enabled``, ``bfloat16_enabled``, the ``zero_config`` line's offload devices)
  and ``print_user_config``'s ``json = {...}``;
- remote code: transformers' prompt or error (``dynamic_module_utils.py`` ``resolve_trust_remote_code``: "The
  repository PATH contains custom code"), ``trust_remote_code=True`` / ``--trust_remote_code`` on the log's lines, or
  a traceback frame in transformers' dynamic-module cache (``.../transformers_modules/...``, ``get_class_from_dynamic_
  module``), which only remote code runs from.

Every pattern is bounded (no unbounded repetition) and only the first :data:`HEAD_LINES` lines are read for what is
printed at start-up.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from .lines import Line

#: start-up prints come in the first lines of a log
HEAD_LINES = 20_000
#: a path as a suggested command may name it: no shell metacharacters, no spaces
_PATH = r"[\w./][\w./+@%-]{0,299}"
#: the DeepSpeed config a run was launched with, in the forms a log echoes it
CONFIG_PATH = re.compile(
    r"--deepspeed(?:_config)?(?:=|\s{1,4}|', ')['\"]?(?P<a>" + _PATH + r"\.json)(?![\w.])|"
    r"(?<![\w.])deepspeed=['\"]?(?P<b>" + _PATH + r"\.json)(?![\w.])|"
    r"^\s{0,8}deepspeed:\s{1,8}['\"]?(?P<c>" + _PATH + r"\.json)(?![\w.])")
#: DeepSpeed's start-up print of its config (``DeepSpeedConfig.print``: ``"  {} {} {}".format(arg, "." * (29 -
#: len(arg)), value)``, so ``zero_optimization_stage ...... 2``, ``gradient_accumulation_steps .. 1`` and, for a name
#: of 29 characters or more, ``train_micro_batch_size_per_gpu  4``) and its config as JSON lines
DS_SETTING = re.compile(r"(?<![\w.])(\w{1,64}) \.{0,64} (\S{1,64})|\"(\w{1,64})\":\s{0,4}(\d{1,12}|true|false)")
#: the offload devices in DeepSpeed's 'zero_config ...' print and in a JSON config
OFFLOAD = re.compile(r"offload_(?P<what>optimizer|param)=DeepSpeedZeroOffload\w{1,40}Config\(device='(?P<d1>\w{1,8})'|"
                     r"\"offload_(?P<what2>optimizer|param)\":\s{0,4}\{\s{0,4}\"device\":\s{0,4}\"(?P<d2>\w{1,8})\"")
#: deepspeed/launcher/launch.py main(): 'nnodes=1, num_local_procs=2, node_rank=0' and 'dist_world_size=2'
LAUNCH_SHAPE = re.compile(r"nnodes=(?P<nodes>\d{1,6}), num_local_procs=(?P<local>\d{1,6})(?!\d)")
DIST_WORLD = re.compile(r"(?<!\w)dist_world_size=(?P<world>\d{1,8})(?!\d)")
#: torchrun's (and the deepspeed launcher's) flags on an echoed command line
TORCHRUN_NODES = re.compile(r"--nnodes[= ](?P<nodes>\d{1,6})(?![\d:])")
TORCHRUN_LOCAL = re.compile(r"--nproc[_-]per[_-]node[= ](?P<local>\d{1,6})(?!\d)|--num_gpus[= ](?P<gpus>\d{1,6})(?!\d)")
#: DeepSpeed's config print of the data-parallel world size
CONFIG_WORLD = re.compile(r"(?<!\w)world_size\s{0,8}\.{3,}\s{0,8}(?P<world>\d{1,8})(?!\d)")
#: the model and the training arguments file of the launch command (the Trainer's ``--model_name_or_path``, its
#: ``TrainingArguments``/``ModelArguments`` repr, a LLaMA-Factory YAML echoed; ``llamafactory-cli train x.yaml``)
MODEL_ARG = re.compile(r"(?<![\w-])-{0,2}model_name_or_path(?:=|:\s{0,4}|\s{1,4})['\"]?(?P<model>" + _PATH + r")")
HF_ARGS = re.compile(r"(?:llamafactory-cli|lmf)\s{1,4}train\s{1,4}(?P<args>" + _PATH + r"\.(?:ya?ml|json))(?![\w.])")
#: the sequence length the run pads or cuts to: Qwen's and Alpaca's --model_max_length, TRL's --max_seq_length,
#: LLaMA-Factory's cutoff_len; ChatGLM's ptuning scripts' --max_source_length + --max_target_length
SEQ_ARG = re.compile(r"(?<![\w-])-{0,2}(?P<key>model_max_length|max_seq_length|cutoff_len|max_source_length|"
                     r"max_target_length)(?:=|:\s{0,4}|\s{1,4})(?P<n>\d{1,8})(?!\d)")
#: transformers' remote-code prompt and error name the repository; the model's own code runs from the module cache
#: the Trainer's arguments as a command line or TrainingArguments(...) prints them
TRAINER_MICRO = re.compile(r"(?:--|\b)per_device_train_batch_size[= ](?P<n>\d{1,6})(?!\d)")
TRAINER_CKPT = re.compile(r"(?:--|\b)gradient_checkpointing(?:[= ](?P<v>True|true|False|false|1|0))?(?![\w=])")
TRAINER_FRAME = re.compile(r"transformers/trainer\.py\"|\btrainer\.train\(|TrainingArguments\(")
REMOTE_REPOSITORY = re.compile(r"The repository (?P<path>" + _PATH + r") contains custom code")
REMOTE_CODE = re.compile(r"trust_remote_code(?:=True|: true|\s{0,2}=\s{0,2}True)|--trust[_-]remote[_-]code\b|"
                         r"/transformers_modules/|get_class_from_dynamic_module")


@dataclass
class RunContext:
    """What the log says about its run (each None when the log does not say): ``config``, the DeepSpeed config path
    it was launched with; ``world_size``; ``nodes`` and ``per_node`` (ranks per node); ``settings`` (DeepSpeed's
    effective values, by estimate's option names: ``zero``, ``micro_batch``, ``grad_acc``, ``fp16``, ``bf16``,
    ``offload_optimizer``, ``offload_param``); ``remote_code``: the model runs its own code; ``model_path``: the
    repository transformers named when asking for trust_remote_code; ``model``: the launch's model_name_or_path;
    ``hf_args``: the training arguments file (LLaMA-Factory's YAML); ``seq_len``: the length samples are padded or
    cut to (tokens); ``grad_ckpt``: gradient checkpointing as the Trainer's arguments set it; ``launch``: "trainer"
    when the HF Trainer ran (its frames, its arguments)."""

    config: str | None = None
    world_size: int | None = None
    nodes: int | None = None
    per_node: int | None = None
    settings: dict[str, str] = field(default_factory=dict)
    remote_code: bool = False
    model_path: str | None = None
    model: str | None = None
    hf_args: str | None = None
    seq_len: int | None = None
    grad_ckpt: bool | None = None
    launch: str | None = None


def ds_settings(lines: list[Line]) -> dict[str, str]:
    """Values DeepSpeed prints at start-up ('  zero_optimization_stage ...... 2'; its config as JSON lines) and the
    Trainer's arguments, when the log has them: what ``dsdoctor estimate`` should be run with. Keys: ``zero``,
    ``micro_batch``, ``grad_acc``, ``bf16``, ``fp16``, ``world_size``, ``offload_optimizer``, ``offload_param``
    (their values as printed)."""
    wanted = {"train_micro_batch_size_per_gpu": "micro_batch", "zero_optimization_stage": "zero",
              "bfloat16_enabled": "bf16", "bf16_enabled": "bf16", "fp16_enabled": "fp16",
              "gradient_accumulation_steps": "grad_acc", "world_size": "world_size"}
    found: dict[str, str] = {}
    for line in lines[:HEAD_LINES]:
        text = line.text
        if not ("print]" in text or text.startswith("  ") or '": ' in text):
            continue  # DeepSpeedConfig.print's lines (logger.info: '[config.py:1003:print]   ...'), the JSON's
        if "offload_" in text:
            for m in OFFLOAD.finditer(text):
                what = "offload_" + (m.group("what") or m.group("what2"))
                device = (m.group("d1") or m.group("d2")).lower()
                if device in ("cpu", "nvme", "none"):
                    found.setdefault(what, device)
        for m in DS_SETTING.finditer(text):
            key, value = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            if key in wanted:
                found.setdefault(wanted[key], value)
                break
            if key == "stage":
                found.setdefault("zero", value)
                break
    return found


def config_path(lines: list[Line]) -> str | None:
    """The DeepSpeed config file the run was launched with, as the log names it (the first one), or None."""
    for line in lines[:HEAD_LINES]:
        text = line.text
        if "deepspeed" not in text or ".json" not in text:
            continue
        found = CONFIG_PATH.search(text)
        if found:
            return found.group("a") or found.group("b") or found.group("c")
    return None


def _small(text: str | None) -> int | None:
    return int(text) if text and text.isdecimal() and 0 < int(text) <= 1 << 20 else None


def run_context(lines: list[Line]) -> RunContext:
    """The :class:`RunContext` of a log's lines (its first :data:`HEAD_LINES` for start-up prints; all of them for
    remote code, which a traceback late in the log shows)."""
    ctx = RunContext(config=config_path(lines), settings=ds_settings(lines))
    lengths: dict[str, int] = {}
    for line in lines[:HEAD_LINES]:
        text = line.text
        if "model_name_or_path" in text and ctx.model is None and (m := MODEL_ARG.search(text)):
            ctx.model = m.group("model")
        if " train " in text and ctx.hf_args is None and (m := HF_ARGS.search(text)):
            ctx.hf_args = m.group("args")
        if ("_length" in text or "cutoff_len" in text) and "max" in text or "cutoff_len" in text:
            for m in SEQ_ARG.finditer(text):
                lengths.setdefault(m.group("key"), int(m.group("n")))
        if ctx.nodes is None and "nnodes=" in text and (m := LAUNCH_SHAPE.search(text)):
            ctx.nodes, ctx.per_node = _small(m.group("nodes")), _small(m.group("local"))
        if ctx.world_size is None and "dist_world_size=" in text and (m := DIST_WORLD.search(text)):
            ctx.world_size = _small(m.group("world"))
        if "--nnodes" in text or "--nproc" in text or "--num_gpus" in text:
            nodes, local = TORCHRUN_NODES.search(text), TORCHRUN_LOCAL.search(text)
            if ctx.nodes is None and nodes:
                ctx.nodes = _small(nodes.group("nodes"))
            if ctx.per_node is None and local:
                ctx.per_node = _small(local.group("local") or local.group("gpus"))
        if ctx.world_size is None and "world_size" in text and "..." in text and (m := CONFIG_WORLD.search(text)):
            ctx.world_size = _small(m.group("world"))
        if "per_device_train_batch_size" in text and (m := TRAINER_MICRO.search(text)):
            ctx.settings.setdefault("micro_batch", m.group("n"))
            ctx.launch = "trainer"
        if "gradient_checkpointing" in text and ctx.grad_ckpt is None and (m := TRAINER_CKPT.search(text)):
            ctx.grad_ckpt = (m.group("v") or "True") in ("True", "true", "1")
    if ctx.world_size is None and ctx.per_node:
        ctx.world_size = ctx.per_node * (ctx.nodes or 1)
    if "max_source_length" in lengths and "max_target_length" in lengths:
        ctx.seq_len = lengths["max_source_length"] + lengths["max_target_length"]
    else:
        ctx.seq_len = next((lengths[k] for k in ("model_max_length", "max_seq_length", "cutoff_len") if k in lengths),
                           None)
    if ctx.seq_len is not None and not 0 < ctx.seq_len <= 10_000_000:
        ctx.seq_len = None
    for line in lines:
        text = line.text
        if ctx.launch is None and ("trainer" in text or "TrainingArguments" in text) and TRAINER_FRAME.search(text):
            ctx.launch = "trainer"
        if not ("custom code" in text or "trust" in text or "_module" in text):
            continue
        if "custom code" in text and (m := REMOTE_REPOSITORY.search(text)):
            ctx.remote_code = True
            ctx.model_path = ctx.model_path or m.group("path")
        elif not ctx.remote_code and ("trust" in text or "transformers_modules" in text or "dynamic_module" in text) \
                and REMOTE_CODE.search(text):
            ctx.remote_code = True
    return ctx


def _local(spec: str) -> bool:
    return spec.startswith(("/", "./", "../"))


def _model_word(spec: str | None, smoke: bool) -> str | None:
    """What stands for MODEL/PATH in a suggested command: a local directory as the log names it; for ``check``,
    ``env`` and ``estimate`` (which take a registry name too) the registry name of a Hub id (``THUDM/chatglm-6b``:
    ``chatglm-6b``); else None (the placeholder stays: smoke needs a local directory)."""
    if not spec:
        return None
    if _local(spec):
        return spec
    if smoke:
        return None
    from dsdoctor.models import registry_key

    return registry_key(spec)


#: a command explain suggests, in backticks
SUGGESTED = re.compile(r"`(dsdoctor [^`\n]{0,600})`")


def localize(text: str, ctx: RunContext) -> str:
    """``text`` (a fix) with each suggested `` `dsdoctor ...` `` command made the run's own: ``ds_config.json`` is
    the config the log names, ``args.json`` its training arguments file, ``SEQ_LEN`` its sequence length, ``MODEL``
    and ``PATH`` its model (:func:`_model_word`); a ``dsdoctor smoke`` of a model that runs its own code gets
    ``--trust-remote-code`` (smoke refuses such a model without it, before launch: ``dsdoctor/commands/smoke/
    inputs.py`` ``check_remote_code``) and, when transformers named the repository, its path for ``PATH``."""

    def one(found: re.Match) -> str:
        command = found.group(1)
        try:
            words = shlex.split(command)
        except ValueError:
            return found.group(0)
        original = list(words)
        if ctx.config:
            words = [ctx.config if w == "ds_config.json" else w for w in words]
        if ctx.hf_args:
            words = [ctx.hf_args if w == "args.json" else w for w in words]
        if ctx.seq_len:
            words = [str(ctx.seq_len) if w == "SEQ_LEN" else w for w in words]
        model = _model_word(ctx.model, smoke=len(words) > 1 and words[1] == "smoke")
        if model:
            words = [model if w in ("MODEL", "PATH") else w for w in words]
        if len(words) > 1 and words[1] == "smoke" and ctx.remote_code:
            if "--model" in words and ctx.model_path and words.index("--model") + 1 < len(words) and \
                    words[words.index("--model") + 1] in ("PATH", "MODEL"):
                words[words.index("--model") + 1] = ctx.model_path
            if "--model" in words and "--trust-remote-code" not in words:
                words.append("--trust-remote-code")
        if words == original:
            return found.group(0)
        return "`" + shlex.join(words) + "`"

    return SUGGESTED.sub(one, text) if "`dsdoctor " in text else text
