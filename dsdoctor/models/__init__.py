"""Models by name or local directory: the architecture facts that the config checks and the memory estimate need.

A registry name stands for the values of that Hugging Face repository's ``config.json`` (kept here as data, in
the repository's own key names, so that a user's local ``config.json`` goes through exactly the same code).
Nothing here imports torch or transformers, and no remote code ever runs: a local directory is read as data.

Parameter counts are analytic, per architecture family, from the modules the modeling code builds. For the
families transformers implements itself (llama, mistral, qwen2, gptj) ``tests/test_models.py`` checks the formulas
against the model instantiated on the meta device (and peft applied) for random configs, and checks that every other
config key changes no count; a local config.json with a key outside both sets (:func:`unmodeled_keys`) is counted by
``dsdoctor.meta_count`` on the meta device instead.
"""


from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from dsdoctor.models.analytic import (
    _DTYPES,
    ANALYTIC_TYPES,
    CONFIG_DEFAULTS,
    KV_HEADS_DEFAULT,
    NEUTRAL_KEYS,
    SHAPE_KEYS,
    SIZE_LIMITS,
    TRANSFORMERS_FAMILIES,
    arch_from_config,
    check_sizes,
    is_analytic,
    unmodeled_keys,
)
from dsdoctor.models.arch import Arch, Linear
from dsdoctor.models.methods import (
    DEFAULT_LORA_TARGETS,
    default_lora_targets,
    trainable_params,
)
from dsdoctor.models.registry import ALIASES, REGISTRY
from dsdoctor.report import DsdoctorError

__all__ = [
    "ALIASES",
    "CONFIG_DEFAULTS",
    "DEFAULT_LORA_TARGETS",
    "KV_HEADS_DEFAULT",
    "NEUTRAL_KEYS",
    "REGISTRY",
    "SHAPE_KEYS",
    "SIZE_LIMITS",
    "TRANSFORMERS_FAMILIES",
    "Arch",
    "Linear",
    "ModelInfo",
    "arch_from_config",
    "default_lora_targets",
    "is_local",
    "model_info",
    "read_config_json",
    "registry_key",
    "resolve_arch",
    "trainable_params",
    "unmodeled_keys",
]


def read_config_json(spec: str) -> tuple[dict, str]:
    """A local ``config.json`` (the file, or a model directory holding one), read as data.

    Raises:
        DsdoctorError: no such file, a directory without ``config.json``, unreadable or not a JSON object.
    """
    path = Path(spec).expanduser()
    config_path = path / "config.json" if path.is_dir() else path
    if path.is_dir() and not config_path.is_file():
        raise DsdoctorError(f"--model {spec}: no config.json in {path}")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise DsdoctorError(f"--model {spec}: {config_path} is not valid JSON") from None
    except OSError as exc:
        raise DsdoctorError(f"--model {spec}: cannot read {config_path} ({exc.strerror})") from None
    if not isinstance(config, dict):
        raise DsdoctorError(f"--model {spec}: {config_path} is not a JSON object")
    from dsdoctor.configfile import validate_values

    validate_values(config, "--model", str(config_path))
    return config, str(config_path)


def registry_key(spec: str) -> str | None:
    """The registry name for ``spec`` (case-insensitive; ``THUDM/chatglm-6b`` and common aliases work)."""
    key = spec.strip().lower().rstrip("/").split("/")[-1]
    key = ALIASES.get(key, key)
    if key in REGISTRY:
        return key
    # a post-trained variant has its base's shapes: Llama-3.1-8B-Instruct, Qwen3-30B-A3B-Instruct-2507, gemma-2-9b-it.
    # A date is stripped only after a post-training word: GLM-4-9B-0414 is another architecture (glm4) than
    # glm-4-9b (chatglm), and must not be counted as it
    base = key
    while True:
        stripped = re.sub(r"-(?:instruct|chat|it|base|thinking)$|(?<=-instruct|-thinking)-\d{4}$|(?<=-chat)-\d{4}$",
                          "", base)
        if stripped == base:
            break
        base = ALIASES.get(stripped, stripped)
        if base in REGISTRY:
            return base
    return None


def is_local(spec: str) -> bool:
    path = Path(spec).expanduser()
    return path.is_dir() or (path.is_file() and path.suffix == ".json")


def resolve_arch(spec: str) -> Arch:
    """The :class:`Arch` of a registry name or a local model directory / ``config.json``.

    A config of one of :data:`dsdoctor.models.analytic.ANALYTIC_TYPES` is counted from its keys; any other model
    type that the installed transformers implements is read off the model built on the meta device
    (:mod:`dsdoctor.models.structure`; for a registry name, from the structure shipped with dsdoctor, so no
    transformers import).

    Raises:
        DsdoctorError: an unknown name (the closest known names are listed), or a local config that is unreadable,
            of an architecture neither transformers nor the analytic families know (remote code is never run), or
            missing a size.
    """
    if not spec.strip():
        raise DsdoctorError("--model is empty: give a registry name (e.g. qwen3-8b) or a model directory")
    if is_local(spec):
        config, source = read_config_json(spec)
        return arch_of_config(config, name=spec, source=source)
    key = registry_key(spec)
    if key is None:
        wanted = spec.strip().lower().split("/")[-1]
        close = difflib.get_close_matches(wanted, list(REGISTRY) + list(ALIASES), n=4, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        looks_like_path = "/" in spec or spec.startswith((".", "~"))
        what = "no such directory or config.json, and not a known model name" if looks_like_path else \
            "unknown model name"
        raise DsdoctorError(f"--model {spec}: {what}; {hint}{len(REGISTRY)} known names are "
                            f"in README.md (or give a local model directory with a config.json)")
    repo, config = REGISTRY[key]
    source = f"{repo} config.json (registry)"
    if is_analytic(config):
        return arch_from_config(config, name=key, source=source)
    from dsdoctor.models import structure

    desc = structure.shipped_structures().get(key)
    if desc is None or desc.get("format") != structure.FORMAT:
        desc = structure.cached_structure(config)
    return structure.arch_from_structure(desc, name=key, source=source + ", structure read off transformers' "
                                         "model on the meta device", config=config)


def arch_of_config(config: dict, name: str, source: str) -> Arch:
    """The :class:`Arch` of a config.json read as data (see :func:`resolve_arch`).

    Raises:
        DsdoctorError: a size no model can have (:func:`dsdoctor.models.analytic.check_sizes`), an encoder
            (:mod:`dsdoctor.models.encoders`), no model type, a model type neither the analytic families nor the
            installed transformers know (with what to do), or transformers refusing the config."""
    check_sizes(config, source)
    from dsdoctor.models.encoders import encoder_class

    encoder = encoder_class(config)
    if encoder is not None:
        raise DsdoctorError(f"{source}: model_type {config['model_type']!r} is an encoder or encoder-decoder "
                            f"(transformers' {encoder}), not a decoder-only language model: dsdoctor estimates "
                            f"causal-LM fine-tuning (a {config['model_type']} decoder needs \"is_decoder\": true)")
    if is_analytic(config):
        return arch_from_config(config, name=name, source=source)
    from dsdoctor.models import matching, structure

    shipped = matching.shipped_for(config)
    if shipped is not None:  # a local copy of a registry model: its shipped structure, no transformers import
        return structure.arch_from_structure(shipped[1], name=name, source=f"{source} (= registry {shipped[0]}: "
                                             "its structure shipped with dsdoctor)", config=config)
    scaled = matching.scaled_for(config)
    if scaled is not None:  # a registry architecture at other sizes: its structure, rewritten
        return structure.arch_from_structure(scaled[1], name=name, source=f"{source} (the architecture of registry "
                                             f"{scaled[0]}: its structure shipped with dsdoctor, rewritten to this "
                                             "config's own sizes by the shape template; nothing built)", config=config)
    default = matching.default_for(config)
    if default is not None:  # any other architecture: transformers' class at its defaults, rewritten to the sizes
        return structure.arch_from_structure(default, name=name, source=f"{source} (transformers' "
                                             f"{default['class']} at its config class's defaults, shipped with "
                                             "dsdoctor and rewritten to this config's own sizes by its shape "
                                             "template; nothing built)",
                                             config=config)
    retied = matching.retied_for(config)
    if retied is not None:  # one of the above with the output projection tied the other way
        state = "tied to" if config["tie_word_embeddings"] else "untied from"
        return structure.arch_from_structure(retied[1], name=name, source=f"{source} (the structure of "
                                             f"{retied[0]}, shipped with dsdoctor and rewritten to this config's "
                                             f"sizes, with the output projection {state} the input embedding; "
                                             "nothing built)", config=config)
    from dsdoctor.meta_count import transformers_knows

    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        if isinstance(config.get("auto_map"), dict):  # a remote-code repository's config
            named = ", ".join(str(v) for v in list(config["auto_map"].values())[:2])
            raise DsdoctorError(f"{source}: config.json has no model_type; its auto_map names the repository's own "
                                f"modeling code ({named}), which dsdoctor never runs (remote code), so no "
                                "architecture can be built from it")
        raise DsdoctorError(f"{source}: config.json has no model_type, so no architecture can be built from it")
    if not transformers_knows(model_type):
        remote = isinstance(config.get("auto_map"), dict)
        try:
            from importlib.metadata import version

            installed = f"transformers {version('transformers')}"
        except Exception:  # noqa: BLE001 - not installed
            installed = "no transformers installed"
        if remote:
            why = ("its modeling code is the repository's own (auto_map), which dsdoctor never runs, and it is not "
                   f"one of the families dsdoctor counts from config keys ({', '.join(ANALYTIC_TYPES)})")
        else:
            why = (f"{installed} has no such architecture (a newer transformers may: pip install -U transformers), "
                   f"and it is not one of the families dsdoctor counts from config keys")
        raise DsdoctorError(f"{source}: model_type {model_type!r}: {why}")
    try:
        desc = structure.cached_structure(config)
    except DsdoctorError as exc:
        raise DsdoctorError(f"{source}: {exc}") from None
    return structure.arch_from_structure(desc, name=name, source=source, config=config)


@dataclass(frozen=True)
class ModelInfo:
    """``dtype`` is the weights' dtype as saved (``bfloat16``, ``float16``, ``float32``) or "" when unknown."""

    name: str
    dtype: str
    hidden_size: int | None
    source: str


def model_info(spec: str) -> ModelInfo:
    """Facts the config checks need about ``spec`` (a registry name or a local directory with a ``config.json``):
    the weights' dtype and the hidden size. Unlike :func:`resolve_arch`, a local config of an architecture that
    cannot be counted is fine here.

    Raises:
        DsdoctorError: an unknown name, a directory without ``config.json``, or a broken ``config.json``.
    """
    if is_local(spec):
        config, source = read_config_json(spec)
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
        dtype = config.get("torch_dtype") or config.get("dtype") or text.get("torch_dtype") or text.get("dtype")
        hidden = config.get("hidden_size") or config.get("n_embd") or text.get("hidden_size")
        return ModelInfo(name=spec, dtype=_DTYPES.get(str(dtype).lower(), "") if dtype else "",
                         hidden_size=hidden if isinstance(hidden, int) else None, source=source)
    arch = resolve_arch(spec)
    return ModelInfo(name=arch.name, dtype=arch.dtype, hidden_size=arch.hidden_size, source=arch.source)
