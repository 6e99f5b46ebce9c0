"""Fuzz `dsdoctor estimate` (issue 12): generated config.json files of every family dsdoctor counts (valid shapes,
near-valid ones, wrong types, huge / negative / zero / float / string / bool values, missing keys, unknown model types,
a nested text_config), every numeric flag (0, negatives, huge, nan, inf, strings), GPU names and capabilities, and
--deepspeed configs with odd precision, ZeRO and offload blocks. The promises are tests/fuzzing.py's: no traceback,
no internal error, exit 0/1/2, exit 2 is one clean line, no input changed.

The meta-device path (a transformers family with a key the formulas do not model) imports transformers' modeling
code, seconds on a cold process: the main test keeps to modelled keys, and a separate small test covers that path.

    DSDOCTOR_FUZZ_EXAMPLES=2000 python -m pytest -q tests/test_fuzz_estimate.py   # a long run
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from dsdoctor.hardware import known_names
from dsdoctor.models import NEUTRAL_KEYS, REGISTRY, SHAPE_KEYS
from fuzzing import EXAMPLES, budget, run

#: One registry config.json per model type (the shapes the formulas count), from dsdoctor.models.REGISTRY.
TEMPLATES = {}
for _name, (_repo, _config) in REGISTRY.items():
    TEMPLATES.setdefault(_config["model_type"], dict(_config))
TEMPLATES["chatglm-6b"] = dict(REGISTRY["chatglm-6b"][1])  # the GLM-130B-style ChatGLM-6B has its own branch

#: Values that break something somewhere: huge, negative, zero, fractional, non-finite-looking, wrong types.
HOSTILE = st.one_of(
    st.sampled_from([0, -1, -4096, 1, 2, 3, 7, 10 ** 6, 10 ** 9, 2 ** 63, 10 ** 30, 0.5, 1.0, 4096.0, 1e308, -1e308,
                     True, False, None, "", "4096", "auto", "none", "cpu", "true", "nan", "Infinity", [], [1], {},
                     {"enabled": True}]),
    st.integers(-2 ** 70, 2 ** 70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
SIZE = st.one_of(st.integers(1, 8192), HOSTILE)


@st.composite
def model_configs(draw) -> dict:
    """A config.json: a family's template with keys changed, dropped or added, an unknown type, or a text_config."""
    family = draw(st.sampled_from(sorted(TEMPLATES)))
    config = dict(TEMPLATES[family])
    modelled = SHAPE_KEYS.get(config["model_type"])
    keys = sorted(set(config) - {"model_type"})
    for key in draw(st.lists(st.sampled_from(keys), max_size=3, unique=True)):
        config[key] = draw(SIZE)
    for key in draw(st.lists(st.sampled_from(keys), max_size=2, unique=True)):
        config.pop(key, None)
    if modelled is None:  # families counted analytically only: any extra key is fine (no meta device)
        extra = draw(st.dictionaries(st.text(min_size=1, max_size=10), HOSTILE, max_size=2))
        config.update(extra)
    else:  # stay on the analytic path: only keys the formulas model or proved neutral
        pool = sorted((modelled | NEUTRAL_KEYS) - {"model_type"})
        for key in draw(st.lists(st.sampled_from(pool), max_size=2, unique=True)):
            config[key] = draw(SIZE)
    shape = draw(st.sampled_from(["plain", "plain", "plain", "text_config", "unknown_type", "no_type", "not_object"]))
    if shape == "text_config":
        text = {k: v for k, v in config.items() if k != "torch_dtype"}
        if draw(st.booleans()):  # a text_config may leave sizes to its config class (LLaVA-1.5's does)
            for key in draw(st.lists(st.sampled_from(sorted(text)), max_size=2, unique=True)):
                if key != "model_type":
                    text.pop(key)
        return {"model_type": draw(st.sampled_from(["llava", config["model_type"], 7])), "text_config": text}
    if shape == "unknown_type":
        config["model_type"] = draw(st.sampled_from(["mamba", "t5", "", "../etc", "qwen3", "LLAMA"]))
    elif shape == "no_type":
        config.pop("model_type", None)
    elif shape == "not_object":
        return draw(st.sampled_from([[], [config], "llama", 42, None]))
    return config


BLOCK = st.one_of(st.none(), HOSTILE, st.fixed_dictionaries({}, optional={
    "enabled": HOSTILE, "loss_scale": HOSTILE, "immediate_grad_update": HOSTILE, "device": HOSTILE}))
OFFLOAD = st.one_of(HOSTILE, st.fixed_dictionaries({}, optional={
    "device": st.one_of(st.sampled_from(["cpu", "nvme", "none", "auto", "CPU", "gpu"]), HOSTILE),
    "pin_memory": HOSTILE, "nvme_path": HOSTILE}))
ZERO = st.one_of(HOSTILE, st.fixed_dictionaries({}, optional={
    "stage": st.one_of(st.integers(-1, 4), HOSTILE), "offload_optimizer": OFFLOAD, "offload_param": OFFLOAD,
    "cpu_offload": HOSTILE, "cpu_offload_param": HOSTILE, "reduce_bucket_size": HOSTILE, "overlap_comm": HOSTILE,
    "contiguous_gradients": HOSTILE, "stage3_prefetch_bucket_size": HOSTILE, "stage3_max_live_parameters": HOSTILE,
    "sub_group_size": HOSTILE}))


@st.composite
def ds_configs(draw) -> dict:
    config = draw(st.fixed_dictionaries({}, optional={
        "train_micro_batch_size_per_gpu": st.one_of(st.integers(1, 64), HOSTILE),
        "gradient_accumulation_steps": st.one_of(st.integers(1, 64), HOSTILE),
        "train_batch_size": st.one_of(st.integers(1, 4096), HOSTILE),
        "bf16": BLOCK, "fp16": BLOCK, "bfloat16": BLOCK, "zero_optimization": ZERO}))
    return config


#: What breaks a numeric flag: 0, negatives, huge, non-finite, fractional, not a number.
BAD_NUMBER = st.one_of(st.integers(-3, 0).map(str), st.sampled_from(
    ["1" + "0" * 400, "-" + "9" * 30, "1e400", "nan", "inf", "-inf", "1.5", "abc", "", " 2", "0x10", "2" * 19,
     "1_000", "10000000000"]))


def number(low, high, real: bool = False):
    """A flag value: mostly a realistic one (so that the config files behind the flags get fuzzed too), else bad."""
    good = (st.floats(low, high).map(lambda x: f"{x:.3g}") if real else st.integers(low, high).map(str))
    return st.one_of(good, good, good, BAD_NUMBER)


FLAGS = {"--micro-batch": number(1, 16), "--grad-accum": number(1, 8), "--seq-len": number(16, 4096),
         "--gpus": number(1, 8), "--nodes": number(1, 2), "--lora-r": number(1, 64), "--freeze-last": number(0, 4),
         "--prefix-tokens": number(1, 64), "--zero": number(0, 3), "--lora-dropout": number(0, 0.99, real=True),
         "--host-mem": number(8, 1024, real=True),
         "--gpu-mem": st.one_of(number(4, 200, real=True), st.sampled_from(["auto", "1e-9", "139.8"])),
         "--gpu": st.one_of(st.sampled_from(known_names()), st.sampled_from(
             ["NVIDIA A100-SXM4-80GB", "NVIDIA TITAN X (Pascal)", "A100", "Titan X", "Voodoo 5", "", " ", "NVIDIA",
              "Tesla V100-SXM2-32GB", "GH200 480GB"]), st.text(max_size=16)),
         "--gpu-cc": st.one_of(st.sampled_from(["6.1", "8.0", "9.0", "9.0a", "3.0", "12.0", "0.0", "99.9", "x"]),
                               st.text(max_size=5)),
         "--method": st.sampled_from(["full", "lora", "freeze", "ptuning"]),
         "--lora-targets": st.one_of(st.sampled_from(["q_proj,v_proj", "all-linear", "query_key_value", "lm_head",
                                                       "nope", ",", ""]), st.text(max_size=10)),
         "--offload-optimizer": st.sampled_from(["none", "cpu", "nvme"]),
         "--offload-param": st.sampled_from(["none", "cpu", "nvme"]),
         "--precision": st.sampled_from(["bf16", "fp16", "fp32"])}
SWITCHES = ["--compare", "--no-grad-ckpt", "--grad-ckpt"]


@st.composite
def flags(draw, allowed=tuple(FLAGS)) -> list[str]:
    out: list[str] = []
    for name in draw(st.lists(st.sampled_from(sorted(allowed)), max_size=5, unique=True)):
        out += [name, draw(FLAGS[name])]
    for switch in draw(st.lists(st.sampled_from(SWITCHES), max_size=2, unique=True)):
        out.append(switch)
    return out


def _write(folder: Path, name: str, value, raw: bool) -> Path:
    path = folder / name
    text = json.dumps(value)
    if raw:  # a file cut short (an interrupted download)
        text = text[:-1]
    path.write_text(text)
    return path


#: A few flags that leave a config file to decide (the file is the surface under test there).
PLAIN = st.sampled_from([[], [], ["--gpu-mem", "80", "--gpus", "2"], ["--method", "lora"], ["--method", "ptuning",
                         "--no-grad-ckpt"], ["--method", "freeze", "--freeze-last", "1"], ["--gpu-mem", "24"]])


# a third of the budget: a config.json of an architecture read off transformers' model builds it on the meta device
# (about 0.2 s each), so the default stays within CI's minute for all the fuzz tests; long runs scale with
# DSDOCTOR_FUZZ_EXAMPLES as the others do
@budget(max(20, EXAMPLES // 3))
@given(config=model_configs(), truncated=st.sampled_from([False] * 9 + [True]), options=PLAIN)
def test_config_json_never_breaks_the_promises(config, truncated, options):
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        model.mkdir()
        _write(model, "config.json", config, raw=truncated)
        run(["estimate", "--model", str(model), *options], inputs=[model],
            env={"XDG_CACHE_HOME": str(Path(tmp) / "cache")})


@budget()
@given(options=flags(), model=st.sampled_from(["chatglm-6b", "qwen2.5-7b", "gpt-j-6b", "llama-2-13b",
                                               "qwen2.5-0.5b"]))
def test_every_flag_never_breaks_the_promises(options, model):
    run(["estimate", "--model", model, *options])


@budget()
@given(deepspeed=ds_configs(), options=PLAIN | flags(), model=st.sampled_from(["chatglm-6b", "qwen2.5-1.5b"]))
def test_deepspeed_config_never_breaks_the_promises(deepspeed, options, model):
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp), "ds.json", deepspeed, raw=False)
        run(["estimate", "--model", model, "--deepspeed", str(path), *options], inputs=[path])


@budget(max(2, EXAMPLES // 30))
@given(extra=st.dictionaries(st.sampled_from(["num_experts", "attention_bias", "pad_token_id", "mlp_bias",
                                              "rope_scaling", "head_dim", "bos_token_id", "unknown_key"]),
                             HOSTILE, min_size=1, max_size=3),
       family=st.sampled_from(["qwen2", "llama", "mistral", "gptj"]),
       method=st.sampled_from(["full", "lora", "ptuning", "freeze"]))
def test_meta_device_path_keeps_its_promises(extra, family, method):
    """Keys the formulas do not model send a transformers family to the meta device: transformers' own errors and
    log lines must come out as our one line (or a count)."""
    config = {**TEMPLATES[family], **extra}
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        model.mkdir()
        _write(model, "config.json", config, raw=False)
        run(["estimate", "--model", str(model), "--method", method, "--gpu-mem", "80", "--gpus", "2"],
            inputs=[model], env={"XDG_CACHE_HOME": str(Path(tmp) / "cache")})
