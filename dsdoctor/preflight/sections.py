"""Each section of ``dsdoctor preflight`` run as its own command runs it, with the values the plan found: ``check``
(the DeepSpeed config, for the loop the script runs), ``estimate`` (memory and step time), ``env`` (versions,
toolchain, GPUs, host RAM for the config's offload, the network and the master port), and the ETA."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from dsdoctor.preflight.plan import Plan
from dsdoctor.preflight.settings import as_bool
from dsdoctor.report import DsdoctorError, Finding

#: dsdoctor's name -> the TrainingArguments field it is (for a tool that names it otherwise: axolotl's
#: micro_batch_size and num_epochs)
TRAINING_FIELD = {"micro_batch": "per_device_train_batch_size", "grad_accum": "gradient_accumulation_steps",
                  "epochs": "num_train_epochs", "max_steps": "max_steps", "bf16": "bf16", "fp16": "fp16",
                  "grad_ckpt": "gradient_checkpointing", "deepspeed": "deepspeed", "ddp_timeout": "ddp_timeout"}


def training_arguments(plan: Plan, fields: set[str], bf16_gpu: bool | None = None) -> dict:
    """The TrainingArguments the run builds, as far as the plan knows them: every name given that is a field
    (the script's declared defaults included, as estimate takes them), and the tools' other names for them
    (:data:`TRAINING_FIELD`). axolotl's ``bf16: auto`` is bf16 where the GPU has it (axolotl's config
    normalisation: ``is_torch_bf16_gpu_available()``): ``bf16_gpu``, the run's GPU (True when unknown: compute
    capability 8.0+ is what these runs use). Other values that are not the field's type are left out."""
    values = {name: s.value for name, s in plan.settings.given.items() if name in fields}
    for key, field_name in TRAINING_FIELD.items():
        found = plan.settings.get(key)
        if found is None:
            continue
        value = found.value
        if field_name == "bf16" and plan.launch.tool == "axolotl" and str(value).strip().lower() == "auto":
            value = True if bf16_gpu is None else bf16_gpu
        if field_name in ("bf16", "fp16", "gradient_checkpointing"):
            value = as_bool(value)
            if value is None:
                values.pop(field_name, None)
                continue
        values[field_name] = value
    if plan.deepspeed:
        values["deepspeed"] = plan.deepspeed
    return values


def trainer_defaults() -> dict:
    """TrainingArguments' defaults of the installed transformers, as the shipped schema read them
    (``dsdoctor/schemas``, generated from transformers' source)."""
    from dsdoctor.checks.deepspeed_config import load_schema

    return (load_schema()[0].get("training_arguments") or {}).get("defaults") or {}


def padding_of(plan: Plan) -> tuple[str | None, str]:
    """How the run pads its batches, and what says so: "dynamic" (each micro batch to its longest sample) or
    "max_length" (every sample to the sequence length), or None when nothing says. The script's collator or tokenizer
    call (:data:`dsdoctor.preflight.script.DYNAMIC_COLLATORS`); LLaMA-Factory pads dynamically (its
    SFTDataCollatorWith4DAttentionMask, a DataCollatorForSeq2Seq); axolotl only with ``pad_to_sequence_len: false``."""
    said = plan.settings.get("padding")
    if said is not None and said.value in ("dynamic", "max_length"):
        return said.value, said.source
    if plan.launch.tool == "llamafactory":
        return "dynamic", "LLaMA-Factory's collator (DataCollatorForSeq2Seq)"
    if plan.launch.tool == "axolotl":
        pad = plan.settings.get("pad_to_sequence_len")
        if pad is not None and as_bool(pad.value) is not None:
            return ("max_length" if as_bool(pad.value) else "dynamic"), pad.source
    return None, ""


def quantized_base(plan: Plan) -> str:
    """What says the base model is loaded in 4 or 8 bits (QLoRA), or "": axolotl's ``adapter: qlora`` /
    ``load_in_4bit``, LLaMA-Factory's ``quantization_bit``, ``from_pretrained(load_in_4bit=True)``."""
    s = plan.settings
    for key in ("load_in_4bit", "load_in_8bit"):
        if as_bool(s.value(key)):
            return f"{key} ({s.get(key).source})"
    bits = s.value("quantization_bit")
    if isinstance(bits, int) and bits in (2, 3, 4, 5, 6, 8):
        return f"quantization_bit {bits} ({s.get('quantization_bit').source})"
    if str(s.value("adapter", "")).lower() == "qlora":
        return f"adapter: qlora ({s.get('adapter').source})"
    return ""


def method_of(plan: Plan) -> tuple[str, str]:
    """(full|lora|freeze|ptuning, where it came from)."""
    s = plan.settings
    for key in ("finetuning_type", "adapter"):
        found = s.get(key)
        if found is not None:
            value = str(found.value).lower()
            if value in ("lora", "qlora", "dora", "true"):
                return "lora", f"{found.name}: {found.value} ({found.source})"
            if value in ("full", "freeze", "ptuning"):
                return value, f"{found.name}: {found.value} ({found.source})"
            if value in ("p-tuning", "p_tuning", "prefix"):
                return "ptuning", f"{found.name}: {found.value} ({found.source})"
    if s.get("pre_seq_len") is not None and isinstance(s.value("pre_seq_len"), int):
        return "ptuning", f"pre_seq_len ({s.get('pre_seq_len').source})"
    if s.get("method") is not None:  # the script's own peft config (LoraConfig)
        return str(s.value("method")), s.get("method").source
    if plan.launch.tool == "llamafactory":
        return "lora", "LLaMA-Factory's default finetuning_type (lora)"
    return "full", "no adapter named: full fine-tuning assumed"


def seq_len_of(plan: Plan) -> tuple[int | None, str]:
    s = plan.settings
    found = s.get("seq_len")
    if found is not None and isinstance(found.value, int) and found.value > 0:
        return found.value, f"{found.name} ({found.source})"
    source, target = s.value("max_source_length"), s.value("max_target_length")
    if isinstance(source, int) and isinstance(target, int):
        return source + target, "max_source_length + max_target_length"
    return None, ""


def _int_setting(plan: Plan, key: str) -> tuple[int | None, str]:
    found = plan.settings.get(key)
    if found is not None and isinstance(found.value, int) and not isinstance(found.value, bool) and found.value > 0:
        return found.value, f"{found.name} ({found.source})"
    return None, ""


#: another command's flags that a section's fix may name, as preflight says them
_FLAGS = {"(then say --client-optimizer)": "(preflight sees it in the script's deepspeed.initialize(optimizer=...))",
          # a script's line runs here, with the transformers installed here (HF205 judges its TrainingArguments by
          # it); a tool (LLaMA-Factory, axolotl) may pin another: the version stays unknown there
          "--transformers installed": "installed here, where the line runs",
          "Give --transformers X.Y": "Check which transformers the tool installs (preflight judges a script's line "
                                     "by the one installed here; a tool pins its own)",
          "give --transformers X.Y": "check which transformers the tool installs",
          "--transformers": "a tool pins its own transformers",
          "--world-size": "the launcher's process count", "--micro-batch": "the micro batch (--set "
          "per_device_train_batch_size=N)", "--seq-len": "the sequence length (--set cutoff_len=N)"}


def _titled(finding: Finding, section: str) -> Finding:
    """``finding`` under its section's name, with the fixes and evidence that name the section command's own flags
    said for preflight (:data:`_FLAGS`)."""
    fix, evidence = finding.fix, finding.evidence
    for flag, said in _FLAGS.items():
        fix, evidence = fix.replace(flag, said), evidence.replace(f"({flag})", f"({said})")
    return Finding(finding.id, finding.severity, f"[{section}] {finding.title}", evidence, fix, finding.source)


def check_section(plan: Plan, gpu: str | None, model: str | None, rules,
                  gpu_cc: str | None = None) -> tuple[list[Finding], dict | None]:
    """``dsdoctor check`` on the run's DeepSpeed config, for its loop and world size."""
    from dsdoctor.checks.deepspeed_config import load_schema
    from dsdoctor.commands.check import run_check

    ds = plan.settings.get("deepspeed")
    config_path = plan.deepspeed  # a dict literal of the script's too: build_plan wrote it to a file
    if config_path is None:
        why = ("the config file is missing (see PRE014)" if ds is not None and isinstance(ds.value, str) and
               ds.value.strip() else f"{ds.name} is {ds.value!r} ({ds.source}): the script builds its config in code"
               if ds is not None else "the line, its config file and the script's literals name no DeepSpeed config")
        return [rules.PRE002.finding(f"check: not run: {why}", title="[check] not run")], None
    hf = None
    if plan.kind == "trainer":
        from dsdoctor.checks.hf_trainer import FIELD_VERSIONS

        # the installed transformers' fields, and those of the other versions mined (HF205: warmup_ratio, gone in 5.2)
        fields = set((load_schema()[0].get("training_arguments") or {}).get("fields", [])) | set(FIELD_VERSIONS)
        hf = training_arguments(plan, fields, _bf16_gpu(gpu, gpu_cc))
    client = bool(plan.script and plan.script.client_optimizer) and plan.kind == "engine"
    try:
        report = run_check(config_path, world_size=plan.world_size, launch=plan.kind, gpu=gpu, model=model,
                           hf_values=hf, hf_label="the launch line's TrainingArguments", client_optimizer=client,
                           gpu_cc=gpu_cc, transformers="installed" if hf and plan.launch.tool is None and
                           _installed("transformers") else None)
    except DsdoctorError as exc:
        if Path(config_path).name in str(exc):  # the config file itself
            return [rules.PRE019.finding(f"check: {exc}", title="[check] the DeepSpeed config cannot be read")], None
        # another input check takes (the model's config.json, a model name): named as it is, not as the config
        return [rules.PRE002.finding(f"check: not run: {exc}", title="[check] not run",
                                     fix="Correct what the evidence names (the [estimate] section says the same of "
                                         "the model).")], None
    return [_titled(f, "check") for f in report.findings], report.result


def _bf16_gpu(gpu: str | None, gpu_cc: str | None) -> bool | None:
    """Whether the run's GPU computes in bf16 (compute capability 8.0+): --gpu's, else the first one here, else
    None."""
    from dsdoctor.hardware import gpu_from_name, visible_gpus

    try:
        card = gpu_from_name(gpu, gpu_cc) if gpu else next(iter(visible_gpus()), None)
    except DsdoctorError:
        return None
    return None if card is None else card.capability >= (8, 0)


def _installed(package: str) -> bool:
    from dsdoctor.checks.deepspeed_config import installed_version

    return bool(installed_version(package))


def estimate_section(plan: Plan, gpu: str | None, rules, gpu_cc: str | None = None,
                     gpu_mem: str | None = None) -> tuple[list[Finding], dict | None, dict]:
    """``dsdoctor estimate`` for the run's model, method, batch, sequence, checkpointing, world size and config.
    Returns (findings, the estimate's result, the inputs it was given with their sources)."""
    from dsdoctor.commands.estimate.report import run_estimate

    s = plan.settings
    model = s.get("model")
    if model is None or not isinstance(model.value, str):
        return [rules.PRE002.finding("estimate: not run: no model on the line, in its config file or in the "
                                     "script's from_pretrained(...)", title="[estimate] not run",
                                     fix="Give it: --set model_name_or_path=PATH|NAME")], None, {}
    method, method_source = method_of(plan)
    seq_len, seq_source = seq_len_of(plan)
    micro, micro_source = _int_setting(plan, "micro_batch")
    accum, accum_source = _int_setting(plan, "grad_accum")
    if plan.kind == "trainer" and not plan.deepspeed_has("train_micro_batch_size_per_gpu"):
        # the Trainer fills the config's micro batch and accumulation from TrainingArguments, whose defaults apply
        # when nothing sets them (transformers' own defaults, in the shipped schema)
        defaults = trainer_defaults()
        if micro is None and isinstance(defaults.get("per_device_train_batch_size"), int):
            micro, micro_source = defaults["per_device_train_batch_size"], "TrainingArguments' default"
        if accum is None and isinstance(defaults.get("gradient_accumulation_steps"), int):
            accum, accum_source = defaults["gradient_accumulation_steps"], "TrainingArguments' default"
    rank, _ = _int_setting(plan, "lora_rank")
    ckpt = as_bool(s.value("grad_ckpt"))
    ckpt_source = s.get("grad_ckpt").source if s.get("grad_ckpt") and ckpt is not None else ""
    if ckpt is None:
        if plan.script is not None and "gradient_checkpointing" in plan.script.conditional:
            # the script turns it on in a branch (the reference trainer: on unless ptuning): estimate's own rule
            ckpt, ckpt_source = method != "ptuning", ("set in a branch of the script "
                                                      f"({plan.script.conditional['gradient_checkpointing'][1]}): "
                                                      "assumed on unless P-Tuning")
        elif plan.launch.tool == "llamafactory":
            ckpt = not as_bool(s.value("disable_gradient_checkpointing", False))
            ckpt_source = ("LLaMA-Factory's default: on unless disable_gradient_checkpointing (its "
                           "ModelArguments; model_utils/checkpointing.py)")
        else:
            ckpt, ckpt_source = False, "not given: off (TrainingArguments' default; no gradient_checkpointing_enable())"
    targets = s.value("lora_target")
    targets_source = s.get("lora_target").source if s.get("lora_target") is not None else "the LoRA targets"
    if as_bool(s.value("lora_target_linear")):
        targets = "all-linear"
    if isinstance(targets, (list, tuple)):
        targets = ",".join(map(str, targets))
    if isinstance(targets, str) and targets.strip().lower() == "all":
        targets = "all-linear"
    precision = "bf16" if as_bool(s.value("bf16")) else "fp16" if as_bool(s.value("fp16")) else None
    if precision is None and str(s.value("bf16", "")).lower() == "auto":  # axolotl: bf16 where the GPU has it
        precision = "bf16"
    dtype = s.value("torch_dtype")
    if precision is None and isinstance(dtype, str):
        precision = "bf16" if "bfloat16" in dtype or dtype == "bf16" else "fp16" if "float16" in dtype else None
    explicit = set()
    if micro and not micro_source.split("(", 1)[-1].startswith("default "):
        explicit.add("micro_batch")
    elif micro and plan.deepspeed:  # a script's default under a config that sets it: the config's value counts
        micro, micro_source = None, ""
    if accum and not accum_source.split("(", 1)[-1].startswith("default "):
        explicit.add("grad_accum")
    elif accum and plan.deepspeed:
        accum, accum_source = None, ""
    if precision:
        explicit.add("precision")
    inputs = {"model": (model.value, model.source), "method": (method, method_source),
              "seq_len": (seq_len or 1024, seq_source or "not given: estimate's default 1024"),
              "micro_batch": (micro or 1, micro_source or "not given: 1 (or the DeepSpeed config's)"),
              "grad_accum": (accum or 1, accum_source or "not given: 1 (or the DeepSpeed config's)"),
              "grad_ckpt": (ckpt, ckpt_source),
              "launch": (plan.kind, plan.kind_source)}
    zero = s.value("zero_stage") if not plan.deepspeed else None  # a config's own stage wins (estimate reads it)
    zero = zero if isinstance(zero, int) and not isinstance(zero, bool) else None
    if zero is not None:
        explicit.add("zero")
        inputs["zero_stage"] = (zero, s.get("zero_stage").source)
    if plan.world_size is None:
        return [rules.PRE002.finding(f"estimate: not run: the world size is unknown ({plan.world_source})",
                                     title="[estimate] not run", fix="Give --gpus N (GPUs per node).")], None, inputs
    def estimate_with(lora_targets):
        return run_estimate(
            model.value, zero if zero is not None and 0 <= zero <= 3 else 2, "none", "none", method, rank or 8,
            lora_targets, 0.05,
            _int_setting(plan, "freeze_trainable_layers")[0] or 2, _int_setting(plan, "pre_seq_len")[0] or 16,
            plan.gpus_per_node, plan.nodes, micro or 1, seq_len or 1024, bool(ckpt), precision or "bf16",
            plan.deepspeed, gpu_mem, None, False, explicit, grad_accum=accum or 1, gpu=gpu, gpu_cc=gpu_cc,
            launch="trainer" if plan.kind == "trainer" else "engine")

    from dsdoctor.models.methods import UnknownLoraTargets

    skipped: list[Finding] = []
    try:
        try:
            report = estimate_with(targets if isinstance(targets, str) else None)
        except UnknownLoraTargets as exc:
            # a LoRA target beside others that match: peft skips it silently (tuners_utils.py refuses only when
            # none matches), so the run trains the others: said, and the memory estimated for what peft wraps
            if not exc.known:
                raise
            from dsdoctor.checks.logs.rules import LOG803

            skipped.append(LOG803.finding(
                f"{targets_source}: {exc}", severity="warning",
                title="[estimate] a LoRA target matches no module: peft skips it and trains the others",
                fix=f"Correct or remove {','.join(exc.unknown)} (the model's modules are in the evidence); the "
                    f"memory below is for {','.join(exc.known)}."))
            report = estimate_with(",".join(exc.known))
    except DsdoctorError as exc:
        local = (plan.workdir / Path(model.value).expanduser())
        if local.exists() and "remote code" not in str(exc):
            # a model directory that is there but cannot be read (its config.json broken or missing, a model_type
            # the installed transformers does not know): from_pretrained stops the run there too
            return [rules.PRE019.finding(f"estimate: {exc}", title="[estimate] the model cannot be read",
                                         fix="Fix the model directory: from_pretrained reads its config.json the "
                                             "same way (python -m json.tool MODEL/config.json).")], None, inputs
        return [rules.PRE002.finding(f"estimate: {exc}", title="[estimate] not run")], None, inputs
    findings = skipped + [_titled(f, "estimate") for f in report.findings]
    quantized = quantized_base(plan)
    if quantized:  # the estimate counts a 16-bit base: an upper bound, not a verdict
        findings = [Finding(f.id, "info" if f.severity in ("error", "warning") and f.id.startswith("MEM")
                            else f.severity,
                            f.title + (" (upper bound: the base counted at 16 bits)" if f.id.startswith("MEM") else ""),
                            f.evidence, f.fix, f.source) for f in findings]
        findings.append(rules.PRE002.finding(
            f"estimate: the base model is quantized ({quantized}); estimate counts its weights at 16 bits, so its "
            "memory is an upper bound here, not a verdict", title="[estimate] a 4/8-bit base is not modelled",
            fix="Judge the memory with --probe (a real smoke on this machine), or dsdoctor smoke on the GPU."))
    return findings, report.result, inputs


def env_section(plan: Plan, model: str | None, method: str, rules, other_machine: bool = False
                ) -> tuple[list[Finding], dict]:
    """``dsdoctor env`` (versions, toolchain, GPUs, host, network) with the config's host-RAM check; the master
    port on the node that binds it; the DeepSpeed ops the config's optimizer builds."""
    from dsdoctor.checks.network import master_port_finding
    from dsdoctor.commands.env import run_env

    findings: list[Finding] = []
    try:
        # the host-RAM check judges this machine: not when --gpu names the machine the run is for and none is here
        report = run_env(None, None, ".", deepspeed=plan.deepspeed if model and not other_machine else None,
                         model=model if plan.deepspeed and not other_machine else None, method=method,
                         ranks_per_node=plan.gpus_per_node)
    except DsdoctorError as exc:
        return [rules.PRE002.finding(f"env: {exc}", title="[env] not run")], {}
    findings += [_titled(f, "env") for f in report.findings if f.id != "ENV300"]
    opts = plan.launch.options
    port = opts.get("master_port") or opts.get("main_process_port") or plan.launch.env.get("MASTER_PORT")
    addr = opts.get("master_addr") or opts.get("main_process_ip") or plan.launch.env.get("MASTER_ADDR")
    node_rank = str(opts.get("node_rank") or opts.get("machine_rank") or plan.launch.env.get("NODE_RANK")
                    or plan.launch.env.get("RANK") or "0")
    from dsdoctor.preflight.cmdline import _SUBSTITUTION, _VAR, _substitute

    if port and _VAR.fullmatch(str(port)):  # left by the text's own assignments: as bash passes it from this shell
        port = _substitute(str(port), dict(os.environ))  # (its value, else the ${VAR:-default})
    unset = _VAR.fullmatch(str(port)) if port else None
    if port and _SUBSTITUTION.search(str(port)):  # bash computes it when the line runs: nothing to check here
        findings.append(rules.PRE002.finding(f"env: the master port {port} is computed when the line runs: not "
                                             "checked", title="[env] master port not checked", severity="info",
                                             fix="Nothing to do; a port another job holds would show as NET401 "
                                                 "when it is a number."))
    elif unset:  # neither the text, this shell nor a default sets it
        from dsdoctor.checks.network import NET401

        name = unset.group(1) or unset.group(3)
        findings.append(NET401.finding(
            f"--master_port {port}: the line and its script never set {name}, so bash passes an empty word and the "
            f"launcher takes the next word as the port", title="[env] the master port's variable is unset",
            fix=f"Set {name} before the line (export {name}=29501), or give the port itself."))
    elif port and node_rank == "0":  # the first node binds the rendezvous port
        found = master_port_finding({"MASTER_PORT": str(port)})
        if found is not None:
            findings.append(_titled(found, "env"))
    # the NCCL variables the line sets, and (on a node other than the first) whether the master is reachable
    line_env = {k: v for k, v in plan.launch.env.items() if k.startswith(("NCCL_", "TORCH_NCCL", "GLOO_"))}
    if line_env or (addr and node_rank != "0"):
        from dsdoctor.checks.network import network_findings

        net = dict((report.result.get("facts") or {}).get("network") or {})
        net.update(line_env)
        net.pop("MASTER_PORT", None)
        net["MASTER_ADDR"] = addr if node_rank != "0" else None
        if addr and node_rank != "0" and port:
            net["MASTER_PORT"] = str(port)
        seen = {(f.id, f.evidence) for f in report.findings}
        for finding in network_findings(net, os.geteuid(), live=bool(net.get("MASTER_ADDR"))):
            if (finding.id, finding.evidence) not in seen and finding.id != "NET401":
                findings.append(_titled(finding, "env"))
    ops = []
    if plan.deepspeed:
        from dsdoctor.checks.environment import ops_for_config
        from dsdoctor.preflight.plan import loaded_json

        config = loaded_json(plan.deepspeed)
        ops = ops_for_config(config) if config else []
    if ops:
        findings.append(rules.PRE018.finding(
            f"{Path(plan.deepspeed).name} builds {', '.join(ops)} at the first step (JIT, unless DeepSpeed was "
            "installed with them prebuilt)"))
    return findings, {"ops_needed": ops, "paste_block": report.block}


def steps_of(plan: Plan, samples: int | None, world_size: int, micro: int, accum: int) -> tuple[int | None, str]:
    """Optimizer steps of the run, as the HF Trainer counts them (``trainer.py`` ``set_initial_training_values``:
    ``len(dataloader) / gradient_accumulation_steps`` updates an epoch rounded up, at least 1, times the epochs,
    rounded up;
    ``max_steps`` > 0 wins). The dataloader of one rank has ceil(samples / world_size / micro) batches
    (``DistributedSampler`` pads to a multiple of the world size)."""
    max_steps, source = _int_setting(plan, "max_steps")
    if max_steps:
        return max_steps, f"max_steps {max_steps} ({source})"
    if not samples:
        return None, "no sample count (the data file is not readable here, and no max_steps): give --samples N"
    epochs = plan.settings.value("epochs", trainer_defaults().get("num_train_epochs", 3.0))
    if not isinstance(epochs, (int, float)) or isinstance(epochs, bool) or epochs <= 0:
        epochs = 3.0
    batches = math.ceil(math.ceil(samples / world_size) / micro)
    per_epoch = max(math.ceil(batches / accum), 1)  # transformers/trainer.py set_initial_training_values (5.x)
    steps = math.ceil(per_epoch * epochs)
    packed = next((k for k in ("packing", "sample_packing", "neat_packing") if as_bool(plan.settings.value(k))), None)
    note = (f"; {packed} on: samples are packed into sequences, so the real count of steps is lower"
            if packed else "")
    return steps, (f"{samples:,} samples / ({world_size} ranks x micro batch {micro}) = {batches:,} batches a rank, "
                   f"/ {accum} accumulation = {per_epoch:,} steps an epoch (rounded up), x {epochs:g} epochs{note}")


def human_seconds(seconds: float) -> str:
    if seconds > 365 * 86400:
        return f"more than a year ({seconds / 86400 / 365:,.0f} years)" if seconds < 1e6 * 365 * 86400 \
            else "more than a million years"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def data_section(plan: Plan, files: list[Path], rules) -> tuple[list[Finding], dict]:
    """The data audit (:mod:`dsdoctor.data_audit`) of each local data file, with the run's sequence length, micro
    batch, world size, tokenizing workers and collective timeout (``ddp_timeout``), through the model's tokenizer
    when the model is a local directory (else the bundled one, said in the evidence)."""
    from dsdoctor import data_audit

    if not files:
        return [], {}
    stage = plan.settings.value("stage")
    if isinstance(stage, str) and stage.lower() not in ("sft", ""):  # LLaMA-Factory's pt, rm, ppo, dpo, kto
        return [rules.PRE002.finding(f"data: not audited: stage {stage} ({plan.settings.get('stage').source}); the "
                                     "audit reads instruction/answer (SFT) records", severity="info",
                                     title="[data] not run for this stage")], {}
    seq_len, _ = seq_len_of(plan)
    if seq_len is None:
        return [rules.PRE002.finding("data: not audited: no sequence length on the line, in its config or in the "
                                     "script's literals", title="[data] not run",
                                     fix="Give it: --set cutoff_len=N (or max_seq_length=N)")], {}
    micro, _ = _int_setting(plan, "micro_batch")
    if plan.deepspeed_has("train_micro_batch_size_per_gpu"):
        from dsdoctor.preflight.plan import loaded_json

        micro = loaded_json(plan.deepspeed)["train_micro_batch_size_per_gpu"]
    workers, _ = _int_setting(plan, "preprocessing_num_workers")
    limit, _ = _int_setting(plan, "max_samples")  # LLaMA-Factory keeps the first max_samples of each dataset
    timeout, _ = _int_setting(plan, "ddp_timeout")
    model = plan.settings.value("model")
    template = plan.settings.value("template")
    template = template if template in ("chat", "chatglm", "alpaca") else "auto"
    findings, results, tokenizer = [], {}, None
    # how the run truncates: LLaMA-Factory shares the length between prompt and answer (data/processor/
    # processor_utils.py infer_seqlen), axolotl drops the samples that are too long; else the reference trainer's way
    truncation = {"llamafactory": "llamafactory", "axolotl": "axolotl"}.get(plan.launch.tool or "", "reference")
    packed = any(as_bool(plan.settings.value(k)) for k in ("packing", "sample_packing", "neat_packing"))
    dynamic = padding_of(plan)[0] == "dynamic"
    if isinstance(plan.settings.value("template"), str) and template == "auto" and plan.launch.tool:
        findings.append(rules.PRE002.finding(
            f"data: {plan.launch.tool}'s template {plan.settings.value('template')!r} is not modelled: tokens counted "
            "with the tokenizer's chat template (or ChatGLM's)", severity="info", title="[data] template approximated"))
    for path in files:
        try:
            if tokenizer is None:
                tokenizer, what = data_audit.load_tokenizer(model if isinstance(model, str) else None)
            result = data_audit.audit(path, None, seq_len, template, micro or 1, tokenizer=tokenizer,
                                      truncation=truncation, limit=limit)
            result.tokenizer = what
        except DsdoctorError as exc:
            findings.append(rules.PRE002.finding(f"data: {exc}", title="[data] not run"))
            continue
        findings += [_titled(f, "data") for f in data_audit.findings(
            result, path.name, seq_len, plan.world_size or 1, micro or 1, timeout, workers or 1)
            if f.severity != "ok" and not ((packed or dynamic) and f.id == "DATA706")]  # no fixed padding to waste
        results[str(path)] = {"records": result.records, "token_percentiles": result.percentiles,
                              "truncated_share": round(result.truncated_share, 4), "cut_away": result.cut_away[:200],
                              "tokenizer": result.tokenizer, "template": result.template, "padding": result.padding}
    return findings, results


def _probe_config(plan: Plan, check_result: dict | None, out: Path) -> tuple[str | None, str]:
    """The DeepSpeed config the probe's engine loop runs, written beside its output: the user's for an engine loop;
    for a Trainer run, the config as the Trainer fills its "auto" values (check's ``filled``), with the optimizer the
    Trainer would create stood in by DeepSpeed's AdamW with ``torch_adam`` (the same ``torch.optim.AdamW``;
    transformers/integrations/deepspeed.py deepspeed_optim_sched) when the config has none. ``train_batch_size`` is
    left out where the micro batch is given: the probe runs this machine's ranks. (path, note)."""
    from dsdoctor.preflight.plan import loaded_json

    if not plan.deepspeed:
        return None, ""
    filled = (check_result or {}).get("filled") if plan.kind == "trainer" else loaded_json(plan.deepspeed)
    if not isinstance(filled, dict):
        return plan.deepspeed, ""
    config = json.loads(json.dumps(filled))
    note = "the config as the Trainer fills its \"auto\" values" if plan.kind == "trainer" else "the run's config"
    if isinstance(config.get("train_micro_batch_size_per_gpu"), int) and "train_batch_size" in config:
        # the probe runs on this machine's ranks, not the run's world size: DeepSpeed derives the global batch
        del config["train_batch_size"]
        note += ", without train_batch_size (the probe's world size is this machine's)"
    if plan.kind == "trainer" and not isinstance(config.get("optimizer"), dict):
        try:
            lr = float(plan.settings.value("learning_rate", 1e-4))
        except (TypeError, ValueError):
            lr = 1e-4
        config["optimizer"] = {"type": "AdamW", "params": {"lr": lr, "torch_adam": True}}
        note += "; the Trainer's torch AdamW as DeepSpeed's AdamW with torch_adam"
    path = out.parent / f"{out.name}_ds_config.json"
    path.write_text(json.dumps(config, indent=2))
    return str(path), note


def probe_section(plan: Plan, files: list[Path], steps: int, out: Path, rules,
                  check_result: dict | None = None) -> tuple[list[Finding], dict]:
    """``--probe``: a short ``dsdoctor nccl`` (all-reduce of 1 and 16 MiB, 3 iterations) on the same ranks, then
    ``dsdoctor smoke`` for ``steps`` optimizer steps on this machine with the run's model, method, DeepSpeed config,
    data, sequence length and micro batch, on every local GPU (2 CPU ranks without one), each as a subprocess;
    their findings, and the median step time of the second half of the steps (rank 0's ``metrics/rank0.jsonl``;
    the first half warms the allocator and caches up), which the ETA then uses. A collective that fails stops the
    probe before the smoke."""
    import statistics
    import subprocess
    import sys

    model = plan.settings.value("model")
    if not isinstance(model, str) or not Path(model).expanduser().is_dir():
        return [rules.PRE002.finding(f"probe: not run: the model {model!r} is not a local directory here (no "
                                     "download at run time)", title="[probe] not run",
                                     fix="Give the local model directory: --set model_name_or_path=DIR")], {}
    method, _ = method_of(plan)
    seq_len, _ = seq_len_of(plan)
    micro, _ = _int_setting(plan, "micro_batch")
    from dsdoctor.hardware import visible_gpus

    here = len(visible_gpus()) or None
    nproc = min(plan.gpus_per_node or 1, here) if here else 2
    command = [sys.executable, "-m", "dsdoctor", "smoke", "--steps", str(steps), "--model", str(model), "--method", method,
         "--nproc", str(nproc), "--out", str(out), "--json", str(out.parent / f"{out.name}.json"), "--no-verify"]
    config, config_note = _probe_config(plan, check_result, out)
    if config:
        command += ["--deepspeed", config]
    if files:
        command += ["--data", str(files[0])]
    if seq_len:
        command += ["--seq-len", str(max(seq_len, 8))]
    if micro and not config:
        command += ["--micro-batch", str(micro)]
    if plan.launch.launcher == "deepspeed":
        command += ["--launcher", "deepspeed"]
    # the collectives first: a short all-reduce sweep on the same ranks (dsdoctor nccl); a rendezvous or a
    # collective that fails here would make the smoke hang until its timeout
    nccl_json = out.parent / f"{out.name}_nccl.json"
    nccl_command = [sys.executable, "-m", "dsdoctor", "nccl", "--nproc", str(nproc), "--sizes", "1M,16M", "--iters",
                    "3", "--timeout", "60", "--json", str(nccl_json)]
    subprocess.run(nccl_command, capture_output=True, text=True)
    findings: list[Finding] = []
    try:
        nccl = json.loads(nccl_json.read_text())
    except (OSError, ValueError):
        nccl = {}
    for f in nccl.get("findings", []):
        findings.append(_titled(Finding(**{k: f[k] for k in ("id", "severity", "title", "evidence", "fix", "source")}),
                                "probe nccl"))
    if any(f.severity == "error" for f in findings):
        return findings, {"command": nccl_command, "nproc": nproc, "steps": 0, "step_time_s": None,
                          "nccl": "failed: the smoke was not started"}
    proc = subprocess.run(command, capture_output=True, text=True)
    try:
        report = json.loads((out.parent / f"{out.name}.json").read_text())
    except (OSError, ValueError):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return findings + [rules.PRE002.finding(f"probe: smoke did not report (exit {proc.returncode}): "
                                                f"{tail[0][:300]}", title="[probe] smoke did not run")], \
            {"command": command}
    rows = []
    try:
        for line in (out / "metrics" / "rank0.jsonl").read_text().splitlines():
            row = json.loads(line)
            if isinstance(row.get("step_time_s"), (int, float)):
                rows.append(row["step_time_s"])
    except (OSError, ValueError):
        pass
    measured = rows[max(2, len(rows) // 2):] or rows  # the second half: the allocator and caches have settled
    result = {"command": command, "nproc": nproc, "steps": len(rows), "config": config_note or None,
              "step_time_s": round(statistics.median(measured), 4) if measured else None,
              "tokens_per_s": report.get("result", {}).get("tokens_per_s"),
              "peak_allocated_bytes": report.get("result", {}).get("peak_allocated_bytes"),
              "device": report.get("result", {}).get("device")}
    result["nccl"] = {"busbw_bytes_per_s": (nccl.get("result") or {}).get("busbw_bytes_per_s"),
                      "command": nccl_command}
    for f in report.get("findings", []):
        finding = Finding(**{k: f[k] for k in ("id", "severity", "title", "evidence", "fix", "source")})
        if finding.id in TREND_RULES and finding.severity == "warning":  # a trend needs a run, not a probe
            finding = Finding(finding.id, "info", finding.title + f" (a probe of {steps} steps is too short to "
                              "judge a trend)", finding.evidence, "Judge it with `dsdoctor smoke --steps 100`. "
                              + finding.fix, finding.source)
        findings.append(_titled(finding, "probe"))
    return findings, result


#: smoke's judgements of a trend over the run (the loss falls, memory stays flat): a probe of a few steps measures
#: step time and peak memory, and too few steps make these warnings about the probe, not the run
TREND_RULES = {"TRN601", "TRN603", "TRN604", "TRN611"}
