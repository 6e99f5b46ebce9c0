"""Exact parameter counts of a local model whose architecture transformers implements: the model is built on the
meta device (accelerate's ``init_empty_weights``: no memory, no weights read) and, for the adapter methods, peft is
applied to it, so the counts are what ``model.parameters()`` gives in the real run.

Imports torch, transformers, accelerate and peft: used for ``--model PATH`` only, never for a registry name.
No remote code runs: a config whose ``model_type`` transformers does not know is left to the analytic count of
:mod:`dsdoctor.models`.
"""

from __future__ import annotations

from dsdoctor.report import DsdoctorError


def transformers_knows(model_type: str) -> bool:
    """Whether transformers has its own modeling code for ``model_type`` (no ``trust_remote_code`` needed)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return model_type in CONFIG_MAPPING_NAMES


def meta_counts(config: dict, method: str, *, lora_r: int = 8, lora_targets: tuple[str, ...] = (),
                freeze_last: int = 2, prefix_tokens: int = 16) -> tuple[int, int]:
    """(base model parameters, trainable parameters of ``method``), counted on the meta device.

    The base count is ``sum(p.numel() for p in model.parameters())`` of ``AutoModelForCausalLM.from_config``
    (tied weights once: ``tie_weights()`` is called again, because under ``init_empty_weights`` transformers 5.24
    builds a tied ``lm_head`` as a separate meta tensor and would count it twice); trainable counts follow the reference trainer (``reference_train/train.py``
    ``build_model``): peft LoRA on ``lora_targets``, the last ``freeze_last`` blocks of the longest
    ``nn.ModuleList``, peft prefix tuning with ``prefix_tokens`` virtual tokens, or everything.

    Raises:
        DsdoctorError: transformers cannot build the architecture from this config.
    """
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    values = {k: v for k, v in config.items() if k not in ("auto_map", "_name_or_path", "transformers_version")}
    model_type = values.pop("model_type")
    try:
        hf_config = AutoConfig.for_model(model_type, **values)
        with init_empty_weights():
            model = AutoModelForCausalLM.from_config(hf_config)
        model.tie_weights()  # transformers 5.24 under init_empty_weights leaves tied weights untied (seen)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds here; the user gets one line
        raise DsdoctorError(f"transformers cannot build {model_type!r} from this config.json: "
                            f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}") from None
    base = sum(p.numel() for p in model.parameters())
    if method == "full":
        return base, base
    if method == "freeze":
        lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
        layers = max(lists, key=len)
        return base, sum(p.numel() for layer in layers[len(layers) - freeze_last:] for p in layer.parameters())
    with init_empty_weights():
        from peft import LoraConfig, PrefixTuningConfig, get_peft_model

        if method == "lora":
            peft_config = LoraConfig(task_type="CAUSAL_LM", r=lora_r, target_modules=list(lora_targets) or None)
        else:
            peft_config = PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=prefix_tokens)
        try:
            model = get_peft_model(model, peft_config)
        except ValueError as exc:
            raise DsdoctorError(f"peft: {str(exc).splitlines()[0][:200]}") from None
    return base, sum(p.numel() for p in model.parameters() if p.requires_grad)
