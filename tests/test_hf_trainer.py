"""`dsdoctor check --launch trainer --hf-args`: TrainingArguments fields and values that depend on the transformers
version of the training run (HF205), read from the transformers sources themselves, and the precision that
TrainingArguments set against the GPU (DS111).

``python tests/test_hf_trainer.py`` prints ``FIELD_VERSIONS`` as generated from the transformers wheels it finds
(``DSDOCTOR_TRANSFORMERS_WHEELS``, a folder list, or the local package mirror) and the installed transformers."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsdoctor.checks import hf_trainer
from dsdoctor.checks.deepspeed_config import CheckContext, check_config
from dsdoctor.cli import cli
from dsdoctor.hardware import gpu_from_name

# (looked up from the module when used, so that the behaviour tests run, and fail, on a dsdoctor without them)
SAMPLED_VERSIONS = getattr(hf_trainer, "SAMPLED_VERSIONS", ("4.36.2", "4.57.6", "5.0.0", "5.18.0", "5.24.0"))
FIELD_VERSIONS = getattr(hf_trainer, "FIELD_VERSIONS", {})


def field_accepted(field, version):
    return hf_trainer.field_accepted(field, version)


def parse_version(text):
    return hf_trainer.parse_version(text)


def training_argument_fields(text):
    return hf_trainer.training_argument_fields(text)

WHEEL_DIRS = [d for d in os.environ.get("DSDOCTOR_TRANSFORMERS_WHEELS", "").split(os.pathsep) if d] + [
    "/opt/pypi-more/files", "/tmp/tfw"]
AUTO_SCHEDULER = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                  "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
                  "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                               "warmup_num_steps": "auto"}}}


def installed_source() -> tuple[str, str]:
    import transformers

    return transformers.__version__, (Path(transformers.__file__).parent / "training_args.py").read_text()


def sources() -> dict[str, str] | None:
    """``training_args.py`` of every sampled version (wheels, or the installed one), or None when one is missing."""
    found = {}
    installed, text = installed_source()
    for version in SAMPLED_VERSIONS:
        if version == installed:
            found[version] = text
            continue
        for folder in WHEEL_DIRS:
            wheel = Path(folder) / f"transformers-{version}-py3-none-any.whl"
            if wheel.is_file():
                found[version] = zipfile.ZipFile(wheel).read("transformers/training_args.py").decode()
                break
        else:
            return None
    return found


def generate_field_versions(texts: dict[str, str]) -> dict[str, tuple[str, str, str]]:
    """What checks/hf_trainer.py FIELD_VERSIONS holds, from the sources: the fields that not every version has."""
    fields = {v: training_argument_fields(texts[v]) for v in SAMPLED_VERSIONS}
    table = {}
    for name in sorted(set().union(*fields.values())):
        have = [v for v in SAMPLED_VERSIONS if name in fields[v]]
        if len(have) == len(SAMPLED_VERSIONS):
            continue
        removed = re.search(r"removed in (?:v|version )?(\d+(?:\.\d+)?)", fields[have[-1]][name])
        meaning = fields[have[0]][name]
        meaning = meaning if len(meaning) <= 100 else meaning[:97].rsplit(" ", 1)[0] + " ..."
        table[name] = (" ".join(have), removed.group(1) if removed else "", meaning)
    return table


def trainer(config, hf_args, **ctx):
    """check_config under the Trainer on 4 GPUs, with transformers 5.24.0 installed (the evidence names it)."""
    context = CheckContext(launch="trainer", hf_args=hf_args, world_size=ctx.pop("world_size", 4))
    context.transformers_installed = ctx.pop("installed", "5.24.0")
    for key, value in ctx.items():
        setattr(context, key, value)
    return check_config(config, context)


def found(result, rule_id):
    return [f for f in result.findings if f.id == rule_id]


# ------------------------------------------------------------------------------ the table is the sources'
def test_field_versions_are_the_transformers_sources():
    """FIELD_VERSIONS is exactly what the five releases' training_args.py say (skipped where their wheels are not at
    hand; the installed version is checked by the next test everywhere)."""
    texts = sources()
    if texts is None:
        pytest.skip("transformers wheels of the sampled versions not found (DSDOCTOR_TRANSFORMERS_WHEELS)")
    assert generate_field_versions(texts) == FIELD_VERSIONS


def test_the_installed_transformers_agrees_with_the_table():
    """Read from the installed transformers itself, its signature and its source: every field the table says it
    lacks makes TrainingArguments raise TypeError "unexpected keyword argument", and every field it has is one of
    its dataclass fields; every field the last 4.x (4.57.6) had that it lacks is in the table."""
    from transformers import TrainingArguments

    version, text = installed_source()
    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    assert set(training_argument_fields(text)) == {n for n in names if not n.startswith("_")}
    lacks = [f for f in FIELD_VERSIONS if field_accepted(f, version) is False]
    assert ("warmup_ratio" in lacks) == (parse_version(version) >= (5, 2, 0))
    for name in FIELD_VERSIONS:
        verdict = field_accepted(name, version)
        if verdict is not None:
            assert verdict == (name in names), name
    for name in lacks[:6]:
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
            TrainingArguments(output_dir="/nonexistent-dsdoctor", **{name: None})
    gone = {n for n, (have, _, _) in FIELD_VERSIONS.items() if "4.57.6" in have.split()} - names
    assert gone >= {"warmup_ratio", "per_gpu_train_batch_size", "no_cuda"} or parse_version(version) < (5, 2, 0)


@pytest.mark.parametrize("field, version, expected", [
    ("warmup_ratio", "4.57.6", True), ("warmup_ratio", "4.20", None), ("warmup_ratio", "5.1.3", True),
    ("warmup_ratio", "5.2.0", False), ("warmup_ratio", "5.24.0", False), ("warmup_ratio", "6.0", False),
    ("evaluation_strategy", "4.36.2", True), ("evaluation_strategy", "4.50", None),
    ("evaluation_strategy", "5.0", False), ("eval_strategy", "4.57.6", True), ("eval_strategy", "4.30", False),
    ("group_by_length", "5.0.0", True), ("group_by_length", "5.10", None), ("group_by_length", "5.18.0", False),
    ("activation_checkpointing", "4.57.6", False), ("activation_checkpointing", "5.20", None),
    ("learning_rate", "4.0", True), ("warmup_ratio", "not a version", None),
])
def test_field_accepted_by_version(field, version, expected):
    assert field_accepted(field, version) is expected


# ------------------------------------------------------------------------------ item 1: warmup_ratio and friends
def test_warmup_ratio_without_the_runs_version_is_a_warning_naming_both():
    """Issue 12: HF205 judged warmup_ratio against the transformers installed with dsdoctor (5.24: an error), while
    the training machine's 4.x accepts it. Without --transformers: a warning that names both behaviours."""
    result = trainer({"train_micro_batch_size_per_gpu": "auto"}, {"warmup_ratio": 0.1, "max_steps": 1000})
    (f,) = found(result, "HF205")
    assert f.severity == "warning"
    assert "transformers 4.36.2 to 5.0.0 have it (\"Linear warmup over warmup_ratio fraction of total steps.\"; its " \
           "note in 5.0.0: removed in 5.2)" in f.evidence
    assert "5.18.0 and 5.24.0 (installed here) do not: TrainingArguments.__init__() got an unexpected keyword " \
           "argument 'warmup_ratio'" in f.evidence
    # the fix keeps the warmup: a fraction for 5.2+, warmup_ratio on 4.x, or 100 whole steps for every version
    assert "replace warmup_ratio: 0.1 by warmup_steps: 0.1" in f.fix and "keep warmup_ratio there" in f.fix
    assert "write warmup_steps: 100 instead: ceil(0.1 x max_steps 1000)" in f.fix
    assert "drops the warmup" in f.fix


@pytest.mark.parametrize("version, severity", [("4.57.6", "info"), ("5.1", "info"), ("5.24.0", "error"),
                                               ("5.10", "error")])
def test_warmup_ratio_for_the_runs_version(version, severity):
    result = trainer({"train_micro_batch_size_per_gpu": "auto"}, {"warmup_ratio": 0.1},
                     transformers_version=version, transformers_source="--transformers")
    (f,) = found(result, "HF205")
    assert f.severity == severity
    if severity == "error":
        assert f"with transformers {version} (--transformers): TrainingArguments.__init__() got an unexpected " \
               "keyword argument 'warmup_ratio'" in f.evidence


def test_other_fields_the_versions_disagree_on():
    """The rest of the class, from the sources: fields removed in 5.0 (per_gpu_train_batch_size, no_cuda), removed in
    4.x (evaluation_strategy), and new in 5.x (activation_checkpointing: a 4.x run refuses it)."""
    args = {"per_gpu_train_batch_size": 4, "no_cuda": False, "evaluation_strategy": "steps",
            "activation_checkpointing": True, "eval_strategy": "steps", "learning_rate": 2e-5}
    unknown = {f.evidence.split(":")[0]: f for f in found(trainer({}, args), "HF205")}
    assert sorted(unknown) == ["activation_checkpointing", "evaluation_strategy", "no_cuda",
                               "per_gpu_train_batch_size"]  # eval_strategy: 4.57.6 and 5.x have it
    assert {f.severity for f in unknown.values()} == {"warning"}
    assert "use per_device_train_batch_size" in unknown["per_gpu_train_batch_size"].fix
    assert "use eval_strategy" in unknown["evaluation_strategy"].fix
    assert "use use_cpu" in unknown["no_cuda"].fix
    assert "use gradient_checkpointing" in unknown["activation_checkpointing"].fix
    old = {f.evidence.split(":")[0]: f.severity
           for f in found(trainer({}, args, transformers_version="4.57.6"), "HF205")}
    # (no_cuda: 4.57.6 accepts it, and its own note says 5.0 removes it)
    assert old == {"evaluation_strategy": "error", "activation_checkpointing": "error", "no_cuda": "info"}
    new = {f.evidence.split(":")[0]: f.severity
           for f in found(trainer({}, args, transformers_version="5.24.0"), "HF205")}
    assert new == {"per_gpu_train_batch_size": "error", "no_cuda": "error", "evaluation_strategy": "error"}
    # and HF208 no longer calls evaluation_strategy a misspelling of eval_strategy
    assert not found(trainer({}, {"evaluation_strategy": "steps"}), "HF208")


def test_a_fractional_warmup_steps_is_a_ratio_in_5_and_a_value_error_in_4():
    """The replacement itself is version-dependent: transformers 4.57.6's __post_init__ refuses a float warmup_steps."""
    unknown = found(trainer({}, {"warmup_steps": 0.1, "max_steps": 500}), "HF205")
    assert [f.severity for f in unknown] == ["warning"]
    assert "4.x refuses a float" in unknown[0].evidence and "warmup_steps: 50" in unknown[0].fix
    assert [f.severity for f in found(trainer({}, {"warmup_steps": 0.1}, transformers_version="4.57.6"),
                                      "HF205")] == ["error"]
    assert not found(trainer({}, {"warmup_steps": 0.1}, transformers_version="5.24.0"), "HF205")
    assert not found(trainer({}, {"warmup_steps": 100}), "HF205")


def test_the_warmup_filled_for_auto_follows_the_runs_version():
    """trainer_config_finalize: 5.18+ fill max(1, 0) = 1; 4.57.6 and 5.0.0 fill 0, which DeepSpeed 0.19.8 refuses."""
    args = {"per_device_train_batch_size": 2, "max_steps": 100, "learning_rate": 1e-4}
    new = trainer(AUTO_SCHEDULER, args, transformers_version="5.24.0")
    assert not found(new, "HF205") and new.filled["scheduler"]["params"]["warmup_num_steps"] == 1
    old = trainer(AUTO_SCHEDULER, args, transformers_version="4.57.6")
    (f,) = found(old, "HF205")
    assert f.severity == "error" and "warmup_num_steps must be a positive integer, got 0" in f.evidence
    assert old.filled["scheduler"]["params"]["warmup_num_steps"] == 0
    assert [f.severity for f in found(trainer(AUTO_SCHEDULER, args), "HF205")] == ["warning"]
    assert not found(trainer(AUTO_SCHEDULER, {**args, "warmup_steps": 10}), "HF205")


def test_fix_of_a_warmup_mismatch_says_it_changes_the_warmup():
    """--fix sets a mismatching warmup_num_steps to "auto"; with no warmup in TrainingArguments that turns 100 warmup
    steps into 1: said on the edit, with the TrainingArguments value that would keep the warmup."""
    config = {**AUTO_SCHEDULER, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100}}}
    result = trainer(config, {"per_device_train_batch_size": 2, "max_steps": 1000})
    (change,) = [c for c in result.changes if c.path == "scheduler.params.warmup_num_steps"]
    assert change.new == "auto" and change.training == "warmup 100 -> 1 steps (TrainingArguments warmup)"
    assert ("TrainingArguments warmup_steps", "warmup_steps: 100 to keep the config's warmup of 100 steps (then "
            '"auto" fills it with that)') in result.unfixed
    # with the same warmup in TrainingArguments (a ratio of max_steps) nothing mismatches
    same = trainer(config, {"per_device_train_batch_size": 2, "max_steps": 1000, "warmup_ratio": 0.1},
                   transformers_version="4.57.6")
    assert not found(same, "HF201")


@pytest.fixture
def runner():
    return CliRunner()


def write(tmp_path, name, data) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_cli_transformers_option(runner, tmp_path):
    ds = write(tmp_path, "ds.json", {"train_micro_batch_size_per_gpu": "auto"})
    args = write(tmp_path, "train.yaml", "warmup_ratio: 0.1\nper_device_train_batch_size: 2\n")
    base = ["check", ds, "--launch", "trainer", "--hf-args", args, "--world-size", "2", "--json", "-"]
    plain = runner.invoke(cli, base)
    assert plain.exit_code == 0, plain.output
    data = json.loads(plain.stdout)
    assert data["result"]["transformers"]["run"] is None
    assert [f["severity"] for f in data["findings"] if f["id"] == "HF205"] == ["warning"]
    old = runner.invoke(cli, base + ["--transformers", "4.57.6"])
    assert old.exit_code == 0 and json.loads(old.stdout)["result"]["transformers"] == {
        "run": "4.57.6", "source": "--transformers", "installed": data["result"]["transformers"]["installed"]}
    assert runner.invoke(cli, base + ["--transformers", "5.3"]).exit_code == 1
    for bad, message in (("five", "not a version"), ("x" * 5000, "not a version")):
        r = runner.invoke(cli, base + ["--transformers", bad])
        assert r.exit_code == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = runner.invoke(cli, ["check", ds, "--transformers", "4.57"])
    assert r.exit_code == 2 and "--transformers goes with --launch trainer" in r.stderr


# ------------------------------------------------------------------------------ item 2: TrainingArguments precision
V100 = "Tesla V100-SXM2-32GB"
BATCH_AUTO = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
              "zero_optimization": {"stage": 2}}


@pytest.mark.parametrize("config", [{**BATCH_AUTO, "bf16": {"enabled": "auto"}}, BATCH_AUTO],
                         ids=["ds-bf16-auto", "no-bf16-block"])
def test_trainingarguments_bf16_on_a_v100_is_an_error(config):
    """Issue 12: bf16 in TrainingArguments on a GPU below 8.0 was never checked when the ds_config had no bf16 block
    (accelerate adds one for it): "passes every check". Now DS111, from TrainingArguments, either way."""
    result = trainer(config, {"per_device_train_batch_size": 2, "bf16": True}, gpu=gpu_from_name(V100))
    (f,) = found(result, "DS111")
    assert f.severity == "error"
    assert f.evidence.startswith("bf16 on V100 32GB (compute capability 7.0 < 8.0): TrainingArguments bf16=True; ")
    assert result.filled["bf16"]["enabled"] is True
    assert ("TrainingArguments bf16 / fp16", "bf16: false, fp16: true (the config's \"auto\" follows them; fp16 is "
            "the 16-bit type V100 32GB has)") in result.unfixed
    # the fix writes "auto" for fp16 (the Trainer fills it), never an explicit value that mismatches TrainingArguments
    assert {c.path: c.new for c in result.changes} == {"fp16.enabled": "auto"}


@pytest.mark.parametrize("flags, rule_id, text", [
    ({"bf16_full_eval": True}, "DS111", "TrainingArguments bf16_full_eval=True"),
    ({"tf32": True}, "DS111", "--tf32 requires Ampere or a newer GPU arch"),
    ({"fp16": True, "bf16": True}, "DS110", "At most one of fp16 and bf16 can be True, but not both"),
    ({"fp16_full_eval": True, "bf16_full_eval": True}, "DS110", "can be True for full eval, but not both"),
])
def test_the_rest_of_trainingarguments_precision(flags, rule_id, text):
    result = trainer({**BATCH_AUTO, "bf16": {"enabled": False}, "fp16": {"enabled": "auto"}}, flags,
                     gpu=gpu_from_name("T4"))
    assert any(text in f.evidence and f.severity == "error" for f in found(result, rule_id)), result.findings


def test_trainingarguments_bf16_against_an_fp16_config_is_accelerates_error():
    result = trainer({**BATCH_AUTO, "fp16": {"enabled": True}}, {"bf16": True}, gpu=gpu_from_name("A100"))
    assert any("`--mixed_precision` arg cannot be set to `bf16` when `fp16` is set" in f.evidence
               for f in found(result, "HF201"))
    assert "bf16" not in result.filled  # accelerate stops there: no bf16 block, so no "both enabled" on top


def test_trainingarguments_precision_on_a_gpu_that_has_it_passes():
    for gpu, flags in (("A100", {"bf16": True, "tf32": True}), (V100, {"fp16": True}), ("H200", {"bf16": True})):
        result = trainer({**BATCH_AUTO, "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"}}, flags,
                         gpu=gpu_from_name(gpu))
        assert not [f for f in result.findings if f.severity in ("warning", "error")], (gpu, result.findings)


@pytest.mark.parametrize("config", [{**BATCH_AUTO, "bf16": {"enabled": "auto"}}, BATCH_AUTO],
                         ids=["ds-bf16-auto", "no-bf16-block"])
def test_fix_output_rechecked_does_not_pass_silently(runner, tmp_path, config):
    """check --fix on V100 + TrainingArguments bf16: the written config re-checked with the same TrainingArguments
    still fails (DS111: the fix is in TrainingArguments, listed under "--fix cannot choose these"); with
    TrainingArguments corrected as listed, it passes."""
    ds = write(tmp_path, "ds.json", config)
    bad = write(tmp_path, "bad.yaml", "per_device_train_batch_size: 2\nbf16: true\n")
    good = write(tmp_path, "good.yaml", "per_device_train_batch_size: 2\nbf16: false\nfp16: true\n")
    fixed = tmp_path / "fixed.json"
    base = ["--launch", "trainer", "--world-size", "2", "--gpu", V100, "--json", "-"]
    first = runner.invoke(cli, ["check", ds, "--hf-args", bad, "--fix", str(fixed), *base])
    assert first.exit_code == 1
    data = json.loads(first.stdout)
    assert [u["path"] for u in data["result"]["unfixed"]] == ["TrainingArguments bf16 / fp16"]
    again = runner.invoke(cli, ["check", str(fixed), "--hf-args", bad, *base])
    assert again.exit_code == 1 and "DS111" in [f["id"] for f in json.loads(again.stdout)["findings"]]
    corrected = runner.invoke(cli, ["check", str(fixed), "--hf-args", good, *base])
    assert corrected.exit_code == 0, corrected.stdout
    effective = json.loads(corrected.stdout)["result"]["effective"]
    assert effective["fp16"]["enabled"] is True and effective["bf16"]["enabled"] is False


def test_fp16_trainingarguments_on_a_bf16_model_is_fixed_in_trainingarguments():
    """DS113 under the Trainer with no fp16 block (accelerate adds it for TrainingArguments fp16): --fix wrote an
    explicit "fp16": {"enabled": false}, which silently drops the run to fp32 once TrainingArguments keep fp16=True
    (accelerate then adds no block and fills nothing). Now: "auto" for both, and the TrainingArguments to change."""
    from dsdoctor.models import model_info

    result = trainer(BATCH_AUTO, {"fp16": True}, gpu=gpu_from_name("A100"), model=model_info("qwen2-7b"))
    (f,) = found(result, "DS113")
    assert "(TrainingArguments fp16=True)" in f.evidence
    assert {c.path: c.new for c in result.changes} == {"fp16.enabled": "auto", "bf16.enabled": "auto"}
    assert ("TrainingArguments fp16 / bf16", "fp16=False, bf16=True (the config's \"auto\" follows them)") in \
        result.unfixed
    fixed = result.fixed_config(BATCH_AUTO)
    good = trainer(fixed, {"bf16": True}, gpu=gpu_from_name("A100"), model=model_info("qwen2-7b"))
    assert not [f for f in good.findings if f.severity in ("warning", "error")], good.findings
    assert good.filled["bf16"]["enabled"] is True and good.filled["fp16"]["enabled"] is False


if __name__ == "__main__":
    texts = sources()
    if texts is None:
        raise SystemExit("transformers wheels of " + ", ".join(SAMPLED_VERSIONS) + " not found")
    for key, (have, removed, meaning) in generate_field_versions(texts).items():
        print(f"    {key!r}: ({have!r}, {removed!r},\n        {meaning!r}),")
