"""Fuzz `dsdoctor check CONFIG` and its `--hf-args` (issue 12), through the real CLI in-process (tests/fuzzing.py).

Inputs mix valid, near-valid and hostile ones:

- configs from tests/config_generator.py (valid, and with one or two of the pitfalls users meet);
- objects with the wrong type everywhere: DeepSpeed's own keys (from the key schema) holding 1e308, -0.0, 2^63 - 1,
  booleans, "nan", "²", 50-digit strings, "auto", lists and objects; keys with newlines and control characters;
  dotted keys;
- nesting near the 64-level cap, on both sides of it;
- the same configs written as HJSON (trailing comma, comments, unquoted keys, single quotes, no root braces, BOM);
- text and bytes that are no JSON at all;

plus (issue 12's newcomer trial) --transformers of any text with the TrainingArguments fields some versions lack and
the precision flags against GPUs of every capability, --fix's output re-checked with the same TrainingArguments (a
precision error TrainingArguments cause is never fixed away silently), LLaMA-Factory / axolotl / accelerate /
TrainingArguments files given as CONFIG or as --hf-args with their DeepSpeed key set to anything, and DS102/DS103's
batch proposals for any triple and world size (each one DeepSpeed's derivation accepts);

under both --launch values, with --world-size huge, 0, negative or absent (and WORLD_SIZE garbage), --fix OUT
(the input must not change; the output must be JSON an object, with no NaN or Infinity), --json -, --gpu and
--model, and --hf-args files in YAML or JSON (aliases and anchors, YAML's odd types: dates, .inf, octal, binary,
tags safe_load refuses). The promises of tests/fuzzing.py hold for each: no traceback, no internal error, exit
0/1/2, one clean line on exit 2, inputs unchanged.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from config_generator import generate
from dsdoctor.checks.deepspeed_config import load_schema
from fuzzing import EXAMPLES, budget, run

_SCHEMA, _ = load_schema()
TOP_KEYS = sorted(_SCHEMA["top_level"])
FIELD_KEYS = sorted({name for section in _SCHEMA["sections"].values() for name in section.get("fields", {})})
ODD_KEYS = ["a\nb", "zero_optimization\n", "\x1b[31mred", "x\x00y", "k\u2028", "fp16\x7f", "c\x85",
            "zero_optimization.stage", "optimizer.params.lr", "", " ", "AUTO", "日本語"]

NUMBERS = st.sampled_from([1e308, -1e308, -0.0, 0, 0.0, -1, 1, 2, 7, 0.5, 1e-308, 5e-324, 2 ** 63 - 1, -(2 ** 63 - 1),
                           2 ** 31, 1e20])
STRINGS = st.sampled_from(["auto", "AUTO", " auto", "", "nan", "inf", "-inf", "1e999", "²", "9" * 50, "0x10", "1_000",
                           " 4 ", "true", "false", "cpu", "nvme", "none", "AdamW", "adamw", "SGD", "WarmupLR",
                           "WarmupDecayLR", "a\nb", "\x1b[31m", "\u2028"])
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, STRINGS, st.integers(-10, 10), st.text(max_size=8))
KEYS = st.one_of(st.sampled_from(TOP_KEYS), st.sampled_from(FIELD_KEYS), st.sampled_from(ODD_KEYS),
                 st.text(max_size=10))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(KEYS, inner, max_size=5)), max_leaves=25)
HOSTILE = st.dictionaries(st.one_of(st.sampled_from(TOP_KEYS), KEYS), VALUES, max_size=10)


def _nested(depth: int, leaf) -> dict:
    node = leaf
    for i in range(depth):
        node = {f"k{i}": node} if i % 2 else [node]
    return {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2, "x": node}}


@st.composite
def generated(draw) -> dict:
    config, _client, _faults, _ignored = generate(draw(st.randoms(use_true_random=False)))
    return config


@st.composite
def mutated(draw) -> dict:
    """A generated config with some values replaced by hostile ones, at the top or inside a section."""
    config = draw(generated())
    for _ in range(draw(st.integers(1, 4))):
        target = config
        section = draw(st.sampled_from([None] + [k for k, v in config.items() if isinstance(v, dict)]))
        if section is not None:
            target = config[section]
        target[draw(st.one_of(st.sampled_from(sorted(target) or ["x"]), KEYS))] = draw(VALUES)
    return config


#: every dotted value the checks read: each section's fields, the batch triple, optimizer and scheduler params
PATHS = sorted({f"{name}.{field}" for name, section in _SCHEMA["sections"].items()
                for field in section.get("fields", {})} | set(TOP_KEYS) | {
    "optimizer.type", "optimizer.params.lr", "optimizer.params.weight_decay", "optimizer.params.max_grad_norm",
    "optimizer.params.torch_adam", "scheduler.type", "scheduler.params.warmup_num_steps",
    "scheduler.params.total_num_steps", "scheduler.params.warmup_min_lr", "scheduler.params.warmup_max_lr"})
BASE = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "train_batch_size": 4,
        "optimizer": {"type": "AdamW", "params": {"lr": 2e-5}}, "fp16": {"enabled": True},
        "zero_optimization": {"stage": 2, "overlap_comm": True, "offload_optimizer": {"device": "cpu"}},
        "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10, "total_num_steps": 100}}}


@st.composite
def targeted(draw) -> dict:
    """A config every check runs on, with one to three of the values the checks read set to a hostile one (a
    bucket of 1e308 elements under overlap_comm, a stage of "²", a batch of 2^63 - 1, a "nan" learning rate)."""
    from dsdoctor.checks.deepspeed_config import set_path

    config = json.loads(json.dumps(BASE))
    for _ in range(draw(st.integers(1, 3))):
        set_path(config, draw(st.sampled_from(PATHS)), draw(st.one_of(NUMBERS, STRINGS, SCALARS, VALUES)))
    return config


CONFIGS = st.one_of(generated(), mutated(), targeted(), targeted(), HOSTILE,
                    st.builds(_nested, st.integers(55, 70), SCALARS))


def _hjson(text: str, form: str) -> str:
    """``text`` (JSON of an object, indented) in an HJSON form DeepSpeed reads and json.load refuses."""
    if form == "trailing comma":
        return text[:text.rstrip().rfind("}")].rstrip() + ",\n}"
    if form == "comment":
        return "# ds_config\n// written by hand\n" + text
    if form == "unquoted keys":
        return re.sub(r'"([A-Za-z_][A-Za-z0-9_]*)":', r"\1:", text)
    if form == "single quotes":
        return text.replace('"', "'")
    if form == "no root braces":
        lines = text.splitlines()
        return "\n".join(lines[1:-1]) if len(lines) > 2 else text
    if form == "bom":
        return "\ufeff" + text
    return text


TEXT_FORMS = st.sampled_from(["json", "json", "trailing comma", "comment", "unquoted keys", "single quotes",
                              "no root braces", "bom"])
WORLD_SIZES = st.sampled_from([None, None, "1", "2", "7", "8", "0", "-1", "-3", str(2 ** 20), str(2 ** 20 + 1),
                               "1" + "0" * 400, "abc", "1.5"])
ENV_WORLD = st.sampled_from([None, None, None, "4", "abc", "²", "-1", "9" * 30, " 2 "])
GPUS = st.sampled_from([None, None, "V100", "A100", "P100", "RTX 4090", "NVIDIA TITAN X (Pascal)", "Voodoo 5"])
MODELS = st.sampled_from([None, None, "qwen2-7b", "chatglm3-6b", "llama-2-7b", "gpt-99"])


#: what must never reach the terminal raw from a user's file (newlines between table rows are the table's own)
_RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def _check_outputs(result, fix: Path | None, json_out: bool) -> None:
    def refuse(constant):
        raise AssertionError(f"{constant} in a JSON output")

    if result.exit_code == 2:
        assert fix is None or not fix.exists(), "a failed check wrote --fix"
        return
    if json_out:
        json.loads(result.stdout, parse_constant=refuse)
    else:  # the table: a user's key with a newline or an escape sequence is shown escaped
        assert not _RAW.search(result.stdout), repr(_RAW.search(result.stdout).group(0))
    if fix is not None:
        assert isinstance(json.loads(fix.read_text(), parse_constant=refuse), dict)


def _invoke(config_bytes: bytes, launch: str, world_size, env_world, fix: bool, json_out: bool, gpu, model,
            client: bool, hf_args: bytes | None, hf_name: str = "args.yaml"):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "ds.json")
        path.write_bytes(config_bytes)
        args = ["check", path, "--launch", launch]
        inputs = [path]
        if world_size is not None:
            args += ["--world-size", world_size]
        out = Path(tmp, "out", "fixed.json") if fix else None
        if out is not None:
            out.parent.mkdir()
            args += ["--fix", out]
        if json_out:
            args += ["--json", "-"]
        if gpu:
            args += ["--gpu", gpu]
        if model:
            args += ["--model", model]
        if client:
            args.append("--client-optimizer")
        if hf_args is not None:
            hf = Path(tmp, hf_name)
            hf.write_bytes(hf_args)
            args += ["--hf-args", hf]
            inputs.append(hf)
        result = run(args, inputs=inputs, env={"WORLD_SIZE": env_world, "CUDA_VISIBLE_DEVICES": ""})
        _check_outputs(result, out, json_out)
        return result


@budget()
@given(config=CONFIGS, form=TEXT_FORMS, launch=st.sampled_from(["engine", "trainer"]), world_size=WORLD_SIZES,
       env_world=ENV_WORLD, fix=st.booleans(), json_out=st.booleans(), gpu=GPUS, model=MODELS,
       client=st.booleans())
def test_check_any_config(config, form, launch, world_size, env_world, fix, json_out, gpu, model, client):
    text = _hjson(json.dumps(config, indent=1, ensure_ascii=False), form)
    _invoke(text.encode("utf-8", "surrogatepass"), launch, world_size, env_world, fix, json_out, gpu, model,
            client and launch == "engine", None)


@budget(max(10, EXAMPLES // 3))
@given(raw=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
                     st.sampled_from([b"this is not json {", b"hello", b"42", b"[1, 2]", b"null", b'"text"',
                                      b"{", b"}", b"", b"   \n", b"\xef\xbb\xbf", b"{} {}", b"{a: 1, b: }",
                                      b"# only a comment\n"])),
       launch=st.sampled_from(["engine", "trainer"]), fix=st.booleans())
def test_check_any_bytes(raw, launch, fix):
    _invoke(raw, launch, "1", None, fix, True, None, None, False, None)


YAML_SCALARS = st.sampled_from(["2", "1e-4", "1.0e-4", ".inf", "-.inf", ".nan", "0x10", "0o17", "017", "2020-01-01",
                                "yes", "no", "on", "~", "null", "true", "'1e999'", "'nan'", "'²'", "!!binary aGVsbG8=",
                                "!!python/object:os.system x", "!!float '1e400'", "9" * 30, "-0.0", "[]", "{}",
                                "'auto'", "!!str 5", "&x 3", "*x"])
HF_FIELDS = st.sampled_from(["per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate",
                             "warmup_steps", "warmup_ratio", "max_steps", "num_train_epochs", "max_grad_norm",
                             "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "bf16", "fp16",
                             "fp16_full_eval", "auto_find_batch_size", "lr_scheduler_type", "deepspeed",
                             "per_device_train_batch_sizee", "a\nb"])


@st.composite
def yaml_args(draw) -> str:
    """A TrainingArguments YAML file: fields with YAML's odd scalars, anchors and aliases (a few levels of them),
    merge keys, flow collections."""
    lines = []
    if draw(st.booleans()):  # aliases, possibly a bomb that stays under or goes past the cap
        width, levels = draw(st.integers(1, 12)), draw(st.integers(0, 7))
        lines.append("a0: &a0 [" + ", ".join(["x"] * width) + "]")
        lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    if draw(st.booleans()):
        lines.append("base: &base {learning_rate: 2.0e-5, per_device_train_batch_size: 2}")
        lines.append("<<: *base")
    for _ in range(draw(st.integers(0, 8))):
        key = draw(HF_FIELDS)
        lines.append(f"{json.dumps(key) if not key.isidentifier() else key}: {draw(YAML_SCALARS)}")
    if draw(st.booleans()):
        lines.append("self: &s [1, *s]" if draw(st.booleans()) else "nested: " + "[" * 70 + "]" * 70)
    return "\n".join(lines) + "\n"


HF_DOCS = st.one_of(yaml_args(), st.builds(lambda d: json.dumps(d), st.dictionaries(HF_FIELDS, VALUES, max_size=8)),
                    st.text(max_size=100), st.sampled_from(["[1, 2]", "just text", "{", "- a\n- b\n", "---\n...\n"]))
TRAINER_CONFIGS = st.sampled_from([
    {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "train_batch_size": "auto",
     "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
     "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": "auto", "total_num_steps": "auto",
                                                        "warmup_max_lr": "auto"}},
     "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}, "gradient_clipping": "auto",
     "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}},
    {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW",
                                                                                "params": {"lr": 1e-4}}},
    {"train_micro_batch_size_per_gpu": "auto"},
])


@budget()
@given(doc=HF_DOCS, config=TRAINER_CONFIGS, launch=st.sampled_from(["trainer", "trainer", "engine"]),
       world_size=WORLD_SIZES, fix=st.booleans(), model=MODELS, as_json=st.booleans())
def test_check_any_hf_args(doc, config, launch, world_size, fix, model, as_json):
    _invoke(json.dumps(config).encode(), launch, world_size, None, fix, True, None, model, False,
            doc.encode("utf-8", "surrogatepass"), "args.json" if as_json else "args.yaml")


# --------------------------------------------------------------------- issue 12, newcomer trial: the check2 surfaces
from dsdoctor.checks.hf_trainer import FIELD_VERSIONS  # noqa: E402

VERSIONS = st.one_of(st.sampled_from(["4.57.6", "4.36.2", "5.0", "5.1.3", "5.2", "5.24.0", "6.0", "4.0", "installed",
                                      "INSTALLED", "v4.57", "5.", "five", "", " ", "4.57.6rc1", "9" * 50 + ".1",
                                      "1" + "0" * 400, "4.57\n", "\x1b[31m5.0", "5.0.0.0.0", "-1.0"]),
                     st.text(max_size=12))
VERSION_FIELDS = st.sampled_from(sorted(FIELD_VERSIONS) + ["warmup_steps", "warmup_ratio", "max_steps", "bf16",
                                                           "bf16_full_eval", "fp16", "fp16_full_eval", "tf32",
                                                           "per_device_train_batch_size"])
FLAG_VALUES = st.one_of(st.booleans(), st.sampled_from([0, 1, 0.1, 0.5, 1.0, 100.0, 1e308, -1, "true", "yes", "off",
                                                        "steps", None, [], {}]), SCALARS)
PRECISION_BLOCKS = st.sampled_from([None, {"enabled": "auto"}, {"enabled": True}, {"enabled": False},
                                    {"enabled": "true"}, {}, "auto", True, [], {"enabled": None}])


@st.composite
def precision_config(draw) -> dict:
    config = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
              "zero_optimization": {"stage": draw(st.sampled_from([0, 1, 2, 3])),
                                    "overlap_comm": draw(st.sampled_from([True, False, "auto", None]))},
              "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": draw(st.sampled_from(
                  ["auto", 0, 1, 100, -5, 1e308, "x"]))}}}
    for name in ("fp16", "bf16"):
        block = draw(PRECISION_BLOCKS)
        if block is not None:
            config[name] = block
    return config


@budget(max(10, EXAMPLES // 3))
@given(config=precision_config(), fields=st.dictionaries(VERSION_FIELDS, FLAG_VALUES, max_size=6),
       version=st.one_of(st.none(), VERSIONS), gpu=st.sampled_from([None, "V100", "T4", "P100", "A100", "H200"]),
       launch=st.sampled_from(["trainer", "trainer", "engine"]))
def test_check_versions_precision_and_fix_recheck(config, fields, version, gpu, launch):
    """--transformers X (any text), TrainingArguments fields some versions lack and precision flags, against GPUs of
    every capability; --fix's output re-checked with the same TrainingArguments: a precision error TrainingArguments
    cause (DS111 / DS110 from TrainingArguments) is never fixed away silently."""
    with tempfile.TemporaryDirectory() as tmp:
        path, hf, out = Path(tmp, "ds.json"), Path(tmp, "args.json"), Path(tmp, "fixed.json")
        path.write_text(json.dumps(config))
        hf.write_text(json.dumps(fields))
        args = ["check", path, "--launch", launch, "--world-size", "2", "--json", "-", "--fix", out]
        if launch == "trainer":
            args += ["--hf-args", hf]
        if version is not None:
            args += ["--transformers", version]
        if gpu:
            args += ["--gpu", gpu]
        first = run(args, inputs=[path, hf], env={"WORLD_SIZE": None, "CUDA_VISIBLE_DEVICES": ""})
        _check_outputs(first, out, True)
        if first.exit_code == 2 or launch != "trainer":
            return
        # (a bf16 written in the config is fixed by the config's "auto"; one TrainingArguments set is not)
        caused = [f for f in json.loads(first.stdout)["findings"] if f["id"] in ("DS110", "DS111")
                  and f["severity"] == "error" and re.search(
                      r"TrainingArguments (bf16|bf16_full_eval|tf32|fp16|fp16_full_eval)=True", f["evidence"])]
        again = run(["check", out, *args[2:args.index("--fix")], *args[args.index("--fix") + 2:]],
                    inputs=[out, hf], env={"WORLD_SIZE": None, "CUDA_VISIBLE_DEVICES": ""})
        if caused:
            assert again.exit_code == 1, (caused, again.stdout[-2000:])


LLAMA_FACTORY = {"model_name_or_path": "Qwen/Qwen2.5-7B", "stage": "sft", "finetuning_type": "lora",
                 "template": "qwen", "dataset": "alpaca_en_demo", "per_device_train_batch_size": 1,
                 "deepspeed": "examples/deepspeed/ds_z3_config.json"}
AXOLOTL = {"base_model": "NousResearch/Llama-2-7b-hf", "datasets": [{"path": "x", "type": "alpaca"}],
           "micro_batch_size": 2, "deepspeed": "deepspeed_configs/zero2.json"}
ACCELERATE = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED",
              "deepspeed_config": {"deepspeed_config_file": "ds.json"}, "num_processes": 2}
TRAINING_ARGS = {"output_dir": "out", "per_device_train_batch_size": 4, "learning_rate": 2e-5, "deepspeed": "ds.json"}
DEEPSPEED_VALUES = st.one_of(st.sampled_from(["ds.json", "", " ", "a b/ds z3.json", "../../ds.json", "x\ny.json",
                                              "\x1b[31mds.json", "d" * 5000, "ds.json; rm -rf /", "'q'.json",
                                              None, 3, True, [], {}, {"zero_optimization": {"stage": 3}}]),
                             VALUES)


@st.composite
def training_file(draw) -> tuple[bytes, str]:
    """A LLaMA-Factory / axolotl / accelerate / TrainingArguments file, with its DeepSpeed key set to anything and
    a few keys added or dropped, written as YAML or JSON."""
    import yaml

    doc = json.loads(json.dumps(draw(st.sampled_from([LLAMA_FACTORY, AXOLOTL, ACCELERATE, TRAINING_ARGS]))))
    if "deepspeed_config" in doc:
        doc["deepspeed_config"]["deepspeed_config_file"] = draw(DEEPSPEED_VALUES)
    else:
        doc["deepspeed"] = draw(DEEPSPEED_VALUES)
    for _ in range(draw(st.integers(0, 3))):
        if doc and draw(st.booleans()):
            doc.pop(draw(st.sampled_from(sorted(doc))))
        else:
            doc[draw(st.one_of(KEYS, st.sampled_from(sorted(TOP_KEYS))))] = draw(VALUES)
    as_yaml = draw(st.booleans())
    text = yaml.safe_dump(doc, allow_unicode=True) if as_yaml else json.dumps(doc)
    return text.encode("utf-8", "surrogatepass"), "train.yaml" if as_yaml else "args.json"


@budget(max(10, EXAMPLES // 3))
@given(doc=training_file(), launch=st.sampled_from(["engine", "trainer"]), as_hf_args=st.booleans())
def test_check_training_tool_files(doc, launch, as_hf_args):
    """A training tool's file given as CONFIG (or as --hf-args): one line naming its DeepSpeed config, or a check."""
    raw, name = doc
    if as_hf_args:
        _invoke(json.dumps({"train_micro_batch_size_per_gpu": "auto"}).encode(), "trainer", "2", None, False, True,
                None, None, False, raw, name)
    else:
        _invoke(raw, launch, "2", None, False, True, None, None, False, None)


@budget(max(50, EXAMPLES * 2))
@given(train=st.one_of(st.none(), st.integers(1, 10 ** 6)), micro=st.one_of(st.none(), st.integers(1, 4096)),
       acc=st.one_of(st.none(), st.integers(1, 4096)), ws=st.integers(1, 4096))
def test_every_batch_proposal_holds(train, micro, acc, ws):
    """DS102/DS103's proposals for any triple and world size: each one DeepSpeed's derivation accepts (derive_batch,
    differential-tested against DeepSpeedConfig in test_check.py), the global batch kept first when the world size
    divides it, and never "drop train_batch_size" without a micro batch in the file."""
    from dsdoctor.checks.deepspeed_config import batch_proposals, derive_batch

    proposals = batch_proposals(train, micro, acc, ws)
    error = derive_batch(train, micro, acc, ws)[4]
    assert bool(proposals) == (error is not None and not error.startswith("Either"))
    for text, values in proposals:
        assert derive_batch(*values.values(), ws)[4] is None, (text, values)
        assert not (values["train_micro_batch_size_per_gpu"] is None and values["train_batch_size"] is None)
        assert micro is not None or not text.startswith("drop")
    if proposals and train % ws == 0:
        first = proposals[0][1]
        assert derive_batch(*first.values(), ws)[0] == train
