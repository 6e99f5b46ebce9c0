"""Exact parameter counts of a local model whose architecture transformers implements: the model is built on the
meta device (no memory, no weights read) and, for the adapter methods, peft is applied to it, so the counts are what
``model.parameters()`` gives in the real run.

The meta device is torch's own ``torch.device("meta")`` context rather than accelerate's ``init_empty_weights``:
for a 7B config the latter took 1.6 s against 0.03 s here (it creates each parameter and then moves it), which
breaks the 3 s budget of ``estimate --model PATH``, and under transformers 5.24 it builds a tied ``lm_head`` as a
separate tensor, so tied models were counted twice (seen on Qwen2.5-0.5B).

Imports torch, transformers and peft: used for ``--model PATH`` only, never for a registry name.
No remote code runs: a config whose ``model_type`` transformers does not know is left to the analytic count of
:mod:`dsdoctor.models`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from dsdoctor.report import DsdoctorError


def disk_cached(name: str, parts: list, compute, valid):
    """``compute()``, remembered in ``$XDG_CACHE_HOME/dsdoctor/<name>`` (one JSON object) under the SHA-256 of
    ``parts`` (sorted JSON): for what costs the 4.5 s import of transformers' modeling code once per config.json.
    A hit is returned when ``valid(hit)``; an unreadable or unwritable cache is ignored (the value is computed), and
    it is replaced atomically, so two processes never leave it half written."""
    key = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = Path(base) / "dsdoctor" / name
    try:
        cache = json.loads(path.read_text())
        if not isinstance(cache, dict):
            cache = {}
    except (OSError, ValueError):
        cache = {}
    hit = cache.get(key)
    if hit is not None and valid(hit):
        return hit
    value = compute()
    cache[key] = value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache))
        os.replace(tmp, path)
    except OSError:
        pass
    return value


def versions(*names: str) -> list[str]:
    """The installed versions of ``names`` ("?" for one not installed), read from package metadata (no import)."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in names:
        try:
            out.append(version(name))
        except PackageNotFoundError:
            out.append("?")
    return out


def cached_meta_counts(config: dict, method: str, **kw) -> tuple[int, int]:
    """:func:`meta_counts`, remembered per (config.json content, transformers version, method and its options) in
    ``$XDG_CACHE_HOME/dsdoctor/param-counts.json`` (:func:`disk_cached`): importing transformers' modeling code alone
    takes about 4.5 s on a 2-core machine, the arithmetic after it 0.1 s."""
    counts = disk_cached("param-counts.json", [config, method, kw, versions("transformers")[0]],
                         lambda: list(meta_counts(config, method, **kw)),
                         lambda hit: isinstance(hit, list) and len(hit) == 2 and all(isinstance(x, int) for x in hit))
    return counts[0], counts[1]


def transformers_knows(model_type: str) -> bool:
    """Whether transformers has its own modeling code for ``model_type`` (no ``trust_remote_code`` needed).

    Looks for ``transformers/models/<model_type>/modeling_<model_type>.py`` without importing transformers
    (importing its auto-configuration table alone took 3 s here)."""
    from dsdoctor.files import installed_package_dir

    root = installed_package_dir("transformers")
    if root is None or not model_type.isidentifier():
        return False
    return (root / "models" / model_type / f"modeling_{model_type}.py").is_file()


def meta_counts(config: dict, method: str, *, lora_r: int = 8, lora_targets: tuple[str, ...] = (),
                freeze_last: int = 2, prefix_tokens: int = 16) -> tuple[int, int]:
    """(base model parameters, trainable parameters of ``method``), counted on the meta device.

    The base count is ``sum(p.numel() for p in model.parameters())`` of ``AutoModelForCausalLM.from_config``
    (tied weights once); trainable counts follow the reference trainer (``reference_train/train.py``
    ``build_model``): peft LoRA on ``lora_targets``, the last ``freeze_last`` blocks of the longest
    ``nn.ModuleList``, peft prefix tuning with ``prefix_tokens`` virtual tokens, or everything.

    Raises:
        DsdoctorError: transformers cannot build the architecture from this config.
    """
    with _quiet():
        return _meta_counts(config, method, lora_r=lora_r, lora_targets=lora_targets, freeze_last=freeze_last,
                            prefix_tokens=prefix_tokens)


@contextlib.contextmanager
def _quiet():
    """No output from transformers, peft or torch while the model is built: their logging (transformers' own handler,
    ``[transformers] Model config: pad_token_id must be ...``), their warnings and anything printed go nowhere, so
    that the user sees our one line (a count, or ``dsdoctor: error: ...``) and nothing before it. The loggers'
    levels and the warning filters are restored afterwards."""
    import importlib
    import io
    import logging
    import warnings

    names = ("transformers", "peft", "torch", "accelerate", "huggingface_hub")
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        importlib.import_module("transformers")  # it configures its logging at import: set the levels after it

        loggers = [logging.getLogger(name) for name in names]
        levels = [logger.level for logger in loggers]
        for logger in loggers:
            logger.setLevel(logging.CRITICAL + 1)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)


def _meta_counts(config: dict, method: str, *, lora_r: int, lora_targets: tuple[str, ...], freeze_last: int,
                 prefix_tokens: int) -> tuple[int, int]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    values = {k: v for k, v in config.items() if k not in ("auto_map", "_name_or_path", "transformers_version")}
    model_type = values.pop("model_type")
    try:
        hf_config = AutoConfig.for_model(model_type, **values)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds here; the user gets one line
        raise DsdoctorError(f"transformers cannot build {model_type!r} from this config.json: "
                            f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}") from None
    base = sum(p.numel() for p in model.parameters())
    model = apply_method(model, method, lora_r=lora_r, lora_targets=lora_targets, freeze_last=freeze_last,
                         prefix_tokens=prefix_tokens)
    return base, sum(p.numel() for p in model.parameters() if p.requires_grad)


def apply_method(model, method: str, *, lora_r: int = 8, lora_targets: tuple[str, ...] = (), lora_dropout: float = 0.0,
                 freeze_last: int = 2, prefix_tokens: int = 16):
    """``model`` (on the meta device) as ``method`` trains it: ``full`` as is; ``freeze``: only the last
    ``freeze_last`` layers of its decoder layer list (the longest ``nn.ModuleList``) require grad; ``lora`` /
    ``ptuning``: wrapped by peft (``LoraConfig``: ``lora_targets`` by name, ``("all-linear",)``, or peft's default
    for the model type; ``PrefixTuningConfig``), built on the meta device. Returns the model to train (peft's wrapper
    for LoRA and P-Tuning).

    Raises:
        DsdoctorError: peft refuses the config (no default targets for the model type, a target not found)."""
    import torch

    if method == "freeze":
        layers = max((m for m in model.modules() if isinstance(m, torch.nn.ModuleList)), key=len)
        model.requires_grad_(False)
        for layer in layers[len(layers) - freeze_last:]:
            layer.requires_grad_(True)
        return model
    if method not in ("lora", "ptuning"):
        return model
    with torch.device("meta"):
        from peft import LoraConfig, PrefixTuningConfig, get_peft_model

        if method == "lora":
            targets = "all-linear" if tuple(lora_targets) == ("all-linear",) else (list(lora_targets) or None)
            peft_config = LoraConfig(task_type="CAUSAL_LM", r=lora_r, lora_alpha=16, lora_dropout=lora_dropout,
                                     target_modules=targets)
        else:
            peft_config = PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=prefix_tokens)
        try:
            return get_peft_model(model, peft_config)
        except ValueError as exc:  # peft's NoMatchingPeftModuleError is one too
            raise DsdoctorError(f"peft: {str(exc).splitlines()[0][:200]}") from None
