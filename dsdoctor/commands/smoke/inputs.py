"""What ``dsdoctor smoke`` checks before any rank starts: the model directory, the data, the ds_config, the options
and their combinations, and how many ranks this host can run. Everything here fails in a second with one line (exit
2) or a finding, instead of ten seconds later from inside a rank."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from dsdoctor.report import DsdoctorError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json", "vocab.txt")
#: the largest --data file read before launch (the trainer reads it again, whole, on every rank)
MAX_DATA_BYTES = 2 * 2 ** 30
#: config.json keys that hold the number of decoder layers, by family (transformers' attribute_map names them)
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_decoder_layers")


@dataclass
class SmokeOptions:
    steps: int = 100
    model: str | None = None
    deepspeed: str | None = None
    method: str = "lora"
    nproc: int | None = None
    data: str | None = None
    seq_len: int = 256
    out: str = "dsdoctor-smoke"
    launcher: str = "torchrun"
    timeout_s: float = 1800.0
    learning_rate: float | None = None
    zero: int | None = None
    micro_batch: int | None = None
    lora_targets: str | None = None
    freeze_last: int | None = None
    trust_remote_code: bool = False
    verify: bool = True
    check: bool = True


def trainer_script() -> Path:
    """The installed reference trainer (``dsdoctor/reference_train/train.py`` in site-packages)."""
    from dsdoctor import reference_train

    return Path(reference_train.__file__).resolve().parent / "train.py"


def bundled_model() -> Path:
    return trainer_script().parent / "assets" / "tiny-model"


def resolve_model(model: str | None) -> Path:
    """A local model directory with config.json and a tokenizer. Raises DsdoctorError otherwise."""
    from dsdoctor.files import shown

    if model in (None, "tiny", "default"):
        return bundled_model()
    path = Path(model).expanduser()
    try:
        if path.is_file() and path.name == "config.json":
            path = path.parent
        if not path.is_dir():
            raise DsdoctorError(f"--model {shown(model)}: no such directory (smoke needs a local model directory "
                                f"with config.json and a tokenizer; nothing is downloaded)")
        if not (path / "config.json").is_file():
            raise DsdoctorError(f"--model {shown(model)}: no config.json in {shown(str(path))}")
        if not any((path / name).is_file() for name in TOKENIZER_FILES):
            raise DsdoctorError(f"--model {shown(model)}: no tokenizer files in {shown(str(path))} (expected one of "
                                f"{', '.join(TOKENIZER_FILES)})")
    except OSError as exc:
        raise DsdoctorError(f"--model {shown(model)}: {exc.strerror or exc}") from None
    return path


def model_config(model: Path) -> dict:
    """The model's config.json as a dict. Raises DsdoctorError when it is not a JSON object."""
    from dsdoctor.files import read_input, shown

    try:
        config = json.loads(read_input(str(model / "config.json"), "--model", 16 * 2 ** 20, what="config.json"))
    except (ValueError, RecursionError):
        raise DsdoctorError(f"--model {shown(str(model))}: config.json is not valid JSON") from None
    if not isinstance(config, dict):
        raise DsdoctorError(f"--model {shown(str(model))}: config.json is not a JSON object")
    return config


def layer_count(config: dict) -> int | None:
    """The number of decoder layers a config.json declares (its own key, or its ``text_config``'s), or None."""
    for source in (config, config.get("text_config") if isinstance(config.get("text_config"), dict) else {}):
        for key in LAYER_KEYS:
            value = source.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def read_ds_config(path: str) -> dict:
    """Parse a ds_config (JSON, or HJSON as DeepSpeed accepts). Raises DsdoctorError on a missing file,
    broken syntax, or a top level that is not an object."""
    from dsdoctor import configfile

    return configfile.read_ds_config(path, "--deepspeed")[0]


def visible_gpus() -> int:
    """GPUs this process may use: NVML's count, narrowed by CUDA_VISIBLE_DEVICES; 0 without NVML."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        return 0
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception:
        return 0
    if visible is not None:
        count = min(count, len([v for v in visible.split(",") if v.strip()]))
    return count


def validate_options(opts: SmokeOptions, model: Path, config: dict) -> None:
    """Refuse option combinations that would be silently ignored, and values the model cannot take. Raises
    DsdoctorError naming the options."""
    shaping = [name for name, value in (("--lr", opts.learning_rate), ("--zero", opts.zero),
                                        ("--micro-batch", opts.micro_batch)) if value is not None]
    if opts.deepspeed is not None and shaping:
        where = {"--lr": "optimizer.params.lr", "--zero": "zero_optimization.stage",
                 "--micro-batch": "train_micro_batch_size_per_gpu"}
        raise DsdoctorError(f"{' and '.join(shaping)} {'sets' if len(shaping) == 1 else 'set'} smoke's default config "
                            f"only; with --deepspeed your file decides: set "
                            f"{' and '.join(where[name] for name in shaping)} there")
    if opts.freeze_last is not None and opts.method != "freeze":
        raise DsdoctorError(f"--freeze-last goes with --method freeze (--method {opts.method} would ignore it)")
    if opts.lora_targets is not None and opts.method != "lora":
        raise DsdoctorError(f"--lora-targets goes with --method lora (--method {opts.method} would ignore it)")
    check_remote_code(model, config, opts.trust_remote_code)
    layers = layer_count(config)
    if opts.freeze_last is not None:
        if opts.freeze_last < 1:
            raise DsdoctorError("--freeze-last 0 leaves nothing to train; give 1 or more layers")
        if layers is not None and opts.freeze_last > layers:
            raise DsdoctorError(f"--freeze-last {opts.freeze_last}: the model has {layers} layers "
                                f"({model / 'config.json'})")
    if opts.lora_targets is not None:
        targets = [t.strip() for t in opts.lora_targets.split(",") if t.strip()]
        if not targets:
            raise DsdoctorError("--lora-targets is empty; give module names like q_proj,v_proj")
        check_lora_targets(config, targets, model, opts.trust_remote_code)


def remote_code_files(model: Path, config: dict) -> list[str] | None:
    """The Python files a model directory's ``auto_map`` (config.json, and tokenizer_config.json) points at, when
    transformers needs them: ``auto_map`` present and the ``model_type`` not one transformers implements itself
    (``transformers/dynamic_module_utils.py`` ``resolve_trust_remote_code``: local code wins when it exists). None
    when no remote code is needed."""
    from dsdoctor import meta_count

    model_type = config.get("model_type")
    if isinstance(model_type, str) and meta_count.transformers_knows(model_type):
        return None
    maps = [config.get("auto_map")]
    try:
        tokenizer = json.loads((model / "tokenizer_config.json").read_text(encoding="utf-8"))
        maps.append(tokenizer.get("auto_map") if isinstance(tokenizer, dict) else None)
    except (OSError, ValueError):
        pass
    files = []
    for auto_map in maps:
        if not isinstance(auto_map, dict):
            continue
        for value in auto_map.values():
            for ref in value if isinstance(value, list) else [value]:
                if isinstance(ref, str) and "." in ref:  # "repo--modeling_chatglm.ChatGLMModel" or "modeling_x.Cls"
                    files.append(ref.split("--")[-1].rsplit(".", 1)[0] + ".py")
    return sorted(set(files)) or None


def check_remote_code(model: Path, config: dict, trust_remote_code: bool) -> None:
    """A model that needs its own code (ChatGLM, Baichuan, InternLM2's original repositories) is refused before launch
    without --trust-remote-code (the ranks would fail or wait for transformers' prompt: LOG802), and with it when the
    files its ``auto_map`` names are not in the directory (nothing is downloaded). Raises DsdoctorError."""
    from dsdoctor.files import shown

    files = remote_code_files(model, config)
    if not files:
        return
    if not trust_remote_code:
        raise DsdoctorError(f"--model {shown(str(model))}: its auto_map runs the model's own code "
                            f"({', '.join(files[:4])}), which transformers runs only when trusted: read it, then add "
                            f"--trust-remote-code")
    missing = [f for f in files if not (model / f).is_file()]
    if missing:
        raise DsdoctorError(f"--model {shown(str(model))}: auto_map names {', '.join(missing[:4])}, which "
                            f"{'is' if len(missing) == 1 else 'are'} not in the directory (nothing is downloaded): "
                            f"copy the model repository's .py files into it")


def check_lora_targets(config: dict, targets: list[str], model: Path, trust_remote_code: bool) -> None:
    """Refuse a LoRA target that matches no module of the model, listing its linear layers. peft itself refuses only
    when no target at all matches, so ``q_projj,v_proj`` silently trains ``v_proj`` alone; each name is checked here as
    peft matches it (``peft/tuners/tuners_utils.py`` ``check_target_module_exists``: the module's full name, or a name
    ending in ``.<target>``). The module names come from the model built on the meta device (no weights; a few
    seconds, for importing transformers). Skipped for remote-code models (their code never runs here) and where
    transformers cannot build the config (the trainer says why)."""
    from dsdoctor import meta_count

    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not meta_count.transformers_knows(model_type) or trust_remote_code:
        return
    names = meta_module_names(config)
    if names is None:
        return
    full, linear = names
    if targets == ["all-linear"]:
        return
    missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in full)]
    if missing:
        leaves = sorted({n.rsplit(".", 1)[-1] for n in linear})
        raise DsdoctorError(f"--lora-targets {','.join(targets)}: {', '.join(missing)} match(es) no module of "
                            f"{model / 'config.json'} (peft would {'refuse the run' if len(missing) == len(targets) else 'silently skip it'}); "
                            f"linear layers here: {', '.join(leaves[:16])}")


def meta_module_names(config: dict) -> tuple[list[str], list[str]] | None:
    """(every module's full name, the names of the ``nn.Linear`` ones) of ``AutoModelForCausalLM.from_config`` built
    on the meta device, or None when transformers cannot build it. Imports torch and transformers."""
    import contextlib
    import io
    import warnings

    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            import torch
            from transformers import AutoConfig, AutoModelForCausalLM
            from transformers.utils import logging as hf_logging

            hf_logging.set_verbosity_error()
            values = {k: v for k, v in config.items()
                      if k not in ("auto_map", "_name_or_path", "transformers_version")}
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(AutoConfig.for_model(values.pop("model_type"), **values))
    except Exception:  # noqa: BLE001 - transformers raises many kinds here; the trainer reports them
        return None
    modules = list(model.named_modules())
    return [n for n, _ in modules if n], [n for n, m in modules if isinstance(m, torch.nn.Linear)]


def validate_data(path: str):
    """Read ``--data`` as the trainer will (``reference_train/sft_data.py``): every malformed line (DATA702) and every
    sample with an empty answer (DATA701) before any rank starts. Returns None when the data is usable, else
    ``(rule ID, message)``. Raises DsdoctorError for a file that cannot be read (missing, not a regular file, not
    UTF-8)."""
    from dsdoctor.files import read_input, shown
    from dsdoctor.reference_train.sft_data import DataProblems, read_records

    data = read_input(path, "--data", MAX_DATA_BYTES, what="dataset")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DsdoctorError(f"--data {shown(path)}: not UTF-8 text (byte {exc.start}): expected JSON lines") from None
    try:
        read_records(text, path)
    except DataProblems as exc:
        return exc.rule, str(exc)
    return None


def trainer_args(opts: SmokeOptions, model: Path, out: Path) -> list[str]:
    args = ["--model", str(model), "--method", opts.method, "--max-steps", str(opts.steps),
            "--seq-len", str(opts.seq_len), "--output-dir", str(out), "--eval-every", str(max(opts.steps // 2, 1))]
    for flag, value in (("--data", opts.data), ("--deepspeed", opts.deepspeed),
                        ("--learning-rate", opts.learning_rate), ("--zero-stage", opts.zero),
                        ("--per-device-train-batch-size", opts.micro_batch), ("--lora-targets", opts.lora_targets),
                        ("--freeze-last", opts.freeze_last)):
        if value is not None:
            args += [flag, str(value)]
    if opts.trust_remote_code:
        args.append("--trust-remote-code")
    if not opts.verify:
        args.append("--no-verify")
    return args
