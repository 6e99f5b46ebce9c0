"""The click entry point (dsdoctor/cli.py): version, the rules command, output formats, exit codes, and
smoke's input validation (which must exit 2 before anything is launched)."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from dsdoctor import __version__
from dsdoctor.cli import cli

DS_IDS = ["DS101", "DS102", "DS103", "DS104", "DS105", "DS106", "DS110", "DS111", "DS112", "DS113", "DS114", "DS116", "DS117", "DS118",
          "DS120", "DS121", "DS122", "DS123", "DS124", "DS125", "DS126", "DS127", "DS128", "DS129", "DS130",
          "DS131", "DS132", "DS133", "DS134", "DS135", "DS136", "DS137", "DS138", "DS139", "DS140", "DS141", "DS142",
          "DS143", "DS144", "DS145", "DS146", "DS199"]
HF_IDS = [f"HF20{i}" for i in range(1, 10)]
ALL_IDS = ([f"TRN6{i:02d}" for i in range(15)] + [f"DATA7{i:02d}" for i in range(1, 9)] + [f"MEM5{i:02d}" for i in range(14)]
           + [f"ENV3{i:02d}" for i in range(37)] + ["NET401", "NET402", "NET403", "NET404", "NET405", "NET406", "NET407", "NET408", "NET409", "NET410", "NET411", "NET412", "NET413", "NET414", "NET415", "NET416"]
           + [f"LOG8{i:02d}" for i in range(13)] + [f"HANG9{i:02d}" for i in range(10)]
           + ["PRE001", "PRE002", "PRE010", "PRE011", "PRE012", "PRE013", "PRE014", "PRE015", "PRE016", "PRE017",
              "PRE018", "PRE019", "PRE020", "PRE021", "PRE022", "PRE023"]
           + DS_IDS + HF_IDS)
STABLE_KEYS = {"command", "dsdoctor_version", "findings", "result"}
FINDING_KEYS = {"id", "severity", "title", "evidence", "fix", "source"}


@pytest.fixture
def runner() -> CliRunner:
    # click < 8.2 mixes stderr into stdout unless asked not to; 8.2+ always keeps result.stderr apart
    if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters:
        return CliRunner(mix_stderr=False)
    return CliRunner()


def one_error_line(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return lines[0]


# ------------------------------------------------------------------------------------------- version
def test_version(runner):
    result = runner.invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"dsdoctor, version {__version__}"


def test_help_lists_commands(runner):
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "rules" in result.stdout and "smoke" in result.stdout and "check" in result.stdout


# ------------------------------------------------------------------------------------------- rules
def test_rules_table_is_a_catalogue_of_id_severity_title(runner):
    result = runner.invoke(cli, ["rules"])
    assert result.exit_code == 0, result.output
    found = set(re.findall(r"\b(?:TRN6\d\d|DATA7\d\d|NET4\d\d|DS1\d\d|HF2\d\d|MEM5\d\d|ENV3\d\d|LOG8\d\d|HANG9\d\d|PRE0\d\d)\b",
                           result.stdout))
    assert found == set(ALL_IDS)
    # each row: the ID, its default severity in words, its title (not a status of INFO for every rule)
    assert re.search(r"TRN601\s*│\s*error\s*│\s*Loss did not go down", result.stdout)
    assert re.search(r"TRN603\s*│\s*warning\s*│\s*Too few steps", result.stdout)
    assert re.search(r"TRN600\s*│\s*info\s*│\s*Run environment", result.stdout)
    assert "INFO" not in result.stdout and "no findings" not in result.stdout


def test_rules_json_lists_every_id_in_order(runner):
    result = runner.invoke(cli, ["rules", "--format", "json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["findings"] == []
    assert [r["id"] for r in data["result"]["rules"]] == sorted(ALL_IDS)
    severities = {r["id"]: r["severity"] for r in data["result"]["rules"]}
    assert severities["TRN601"] == "error" and severities["TRN603"] == "warning" and severities["TRN600"] == "info"


@pytest.mark.parametrize("arg", ["TRN601", "trn601"])
def test_rules_documents_one_rule(runner, arg):
    result = runner.invoke(cli, ["rules", arg, "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    (rule,) = data["result"]["rules"]
    assert rule["id"] == "TRN601" and rule["severity"] == "error"
    assert rule["title"] == "Loss did not go down"
    assert set(rule) == {"id", "severity", "title", "what", "why", "fix", "source", "example"}
    assert "deepspeed.initialize(model_parameters=...)" in rule["fix"]


def test_rules_one_rule_table(runner):
    result = runner.invoke(cli, ["rules", "TRN601"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "TRN601 (error by default): Loss did not go down"
    assert "TRN602" not in result.stdout
    assert any(line.startswith("- what: The mean loss of the last 10") for line in lines)
    assert any(line.startswith("- example: loss 7.46 -> 7.45") for line in lines)


def test_rules_unknown_id_exits_2_with_one_line(runner):
    result = runner.invoke(cli, ["rules", "NOPE"])
    line = one_error_line(result)
    assert line.startswith("dsdoctor: error: unknown rule 'NOPE'")
    assert f"lists {len(ALL_IDS)} rules" in line
    assert result.stdout == ""
    close = one_error_line(runner.invoke(cli, ["rules", "TRN6O1"]))  # a letter O for the zero
    assert "did you mean" in close and "TRN601" in close.split("did you mean")[1]


def test_a_misspelled_command_gets_did_you_mean(runner):
    line = one_error_line(runner.invoke(cli, ["chek", "x.json"]))
    assert "no such command 'chek'; did you mean `dsdoctor check`?" in line
    assert "commands: check, data, env" in one_error_line(runner.invoke(cli, ["zzzzzz"]))


def test_bare_dsdoctor_prints_help_and_exits_0(runner):
    result = runner.invoke(cli, [])
    assert result.exit_code == 0 and "Commands:" in result.stdout


@pytest.mark.parametrize("fail_on, code", [("error", 0), ("warning", 0), ("info", 0)])
def test_fail_on_sets_exit_code(runner, fail_on, code):
    # the catalogue holds no findings: it exits 0 whatever --fail-on says
    assert runner.invoke(cli, ["rules", "--fail-on", fail_on, "--format", "json"]).exit_code == code


def test_fail_on_rejects_unknown_level(runner):
    assert runner.invoke(cli, ["rules", "--fail-on", "fatal"]).exit_code == 2


# ------------------------------------------------------------------------------------------- output formats
def check_stable(data: dict) -> None:
    assert set(data) == STABLE_KEYS
    assert data["command"] == "rules"
    assert data["dsdoctor_version"] == __version__
    assert data["result"]["rules"] and all(set(f) == FINDING_KEYS for f in data["findings"])


def test_format_json_is_valid_json(runner):
    result = runner.invoke(cli, ["rules", "--format", "json"])
    check_stable(json.loads(result.stdout))


def test_json_dash_prints_only_json(runner):
    result = runner.invoke(cli, ["rules", "--json", "-"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)  # fails if the table were printed too
    check_stable(data)
    # also with another --format: stdout still carries the JSON alone
    other = runner.invoke(cli, ["rules", "--json", "-", "--format", "markdown"])
    assert json.loads(other.stdout) == data


def test_format_markdown(runner):
    result = runner.invoke(cli, ["rules", "--format", "markdown"])
    assert result.exit_code == 0
    assert result.stdout.startswith("## dsdoctor rules\n")
    assert "| NET401 | error | MASTER_PORT is busy |" in result.stdout


def test_json_path_writes_file(runner, tmp_path):
    target = tmp_path / "report.json"
    result = runner.invoke(cli, ["rules", "NET401", "--json", str(target)])
    assert result.exit_code == 0, result.output
    data = json.loads(target.read_text(encoding="utf-8"))
    check_stable(data)
    assert [r["id"] for r in data["result"]["rules"]] == ["NET401"]
    assert "NET401" in result.stdout  # the table still goes to stdout
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temporary file left beside it


def test_json_path_in_missing_directory_exits_2(runner):
    result = runner.invoke(cli, ["rules", "--json", "/nonexistent/dir/x.json"])
    line = one_error_line(result)
    assert line.startswith("dsdoctor: error: cannot write --json /nonexistent/dir/x.json")


# ------------------------------------------------------------------------------------------- smoke validation
@pytest.fixture
def no_launch(monkeypatch):
    """Bad input must be rejected before any rank is launched: fail loudly if smoke gets that far."""
    from dsdoctor.commands import smoke

    def boom(*args, **kwargs):
        raise AssertionError("smoke launched a run despite bad input")

    monkeypatch.setattr(smoke, "supervise", boom)
    monkeypatch.setenv("DSDOCTOR_DEBUG", "1")  # an internal error would raise here, not exit 2


def smoke_error(runner, tmp_path, *args: str) -> str:
    result = runner.invoke(cli, ["smoke", "--out", str(tmp_path / "out"), "--timeout", "5", *args])
    line = one_error_line(result)
    assert line.startswith("dsdoctor: error: "), line
    return line


def test_smoke_missing_model(runner, tmp_path, no_launch):
    line = smoke_error(runner, tmp_path, "--model", "/does/not/exist")
    assert "--model /does/not/exist: no such directory" in line


def test_smoke_model_without_config(runner, tmp_path, no_launch):
    (tmp_path / "m").mkdir()
    assert "no config.json" in smoke_error(runner, tmp_path, "--model", str(tmp_path / "m"))


def test_smoke_broken_deepspeed_config(runner, tmp_path, no_launch):
    broken = tmp_path / "broken.json"
    broken.write_text('{"zero_optimization": {"stage": 2}\n', encoding="utf-8")  # unclosed, also bad HJSON
    line = smoke_error(runner, tmp_path, "--deepspeed", str(broken))
    assert f"--deepspeed {broken}: not valid JSON" in line


def test_smoke_deepspeed_config_not_an_object(runner, tmp_path, no_launch):
    cfg = tmp_path / "list.json"
    cfg.write_text("[1, 2]", encoding="utf-8")
    assert "top level must be a JSON object, not an array" in smoke_error(runner, tmp_path, "--deepspeed", str(cfg))


def test_smoke_missing_deepspeed_config(runner, tmp_path, no_launch):
    line = smoke_error(runner, tmp_path, "--deepspeed", str(tmp_path / "nope.json"))
    assert "no such file" in line


def test_smoke_missing_data(runner, tmp_path, no_launch):
    line = smoke_error(runner, tmp_path, "--data", str(tmp_path / "missing.jsonl"))
    assert f"--data {tmp_path / 'missing.jsonl'}: no such file" in line


@pytest.mark.parametrize("steps", ["0", "-3"])
def test_smoke_steps_below_one(runner, tmp_path, no_launch, steps):
    line = smoke_error(runner, tmp_path, "--steps", steps)
    assert line == (f"dsdoctor: error: Invalid value for '--steps': {steps} is not in the range 1<=x<=10000000. "
                    f"(see `cli smoke --help`)")


# issue 12: what smoke used to accept silently or refuse only after the ranks launched (about 10 s later)
@pytest.mark.parametrize("args, message", [
    (["--timeout", "nan"], "'--timeout': 'nan' is not a finite number"),
    (["--timeout", "inf"], "'--timeout': 'inf' is not a finite number"),
    (["--lr", "1e30"], "'--lr': 1e+30 is above 1"),
    (["--lr", "nan"], "'--lr': 'nan' is not a finite number"),
    (["--lr", "-1e-4"], "'--lr': -0.0001 is below 0"),
    (["--nproc", "10" + "0" * 400], "'--nproc'"),
    (["--method", "lora", "--freeze-last", "3"], "--freeze-last goes with --method freeze (--method lora would ignore it)"),
    (["--method", "full", "--lora-targets", "q_proj"], "--lora-targets goes with --method lora"),
    (["--method", "freeze", "--freeze-last", "1000"], "--freeze-last 1000: the model has 4 layers"),
    (["--method", "freeze", "--freeze-last", "0"], "--freeze-last 0 leaves nothing to train"),
    (["--lora-targets", " , "], "--lora-targets is empty"),
    (["--nproc", "999"], "--nproc 999 is more CPU ranks than this host can run"),
])
def test_smoke_refuses_before_launch(runner, tmp_path, no_launch, args, message, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # CPU ranks, whatever this machine has
    assert message in smoke_error(runner, tmp_path, *args)


def test_smoke_shaping_flags_do_not_go_with_a_users_config(runner, tmp_path, no_launch):
    cfg = tmp_path / "ds.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": 2}')
    line = smoke_error(runner, tmp_path, "--deepspeed", str(cfg), "--lr", "2e-4", "--zero", "3")
    assert ("--lr and --zero set smoke's default config only; with --deepspeed your file decides: set "
            "optimizer.params.lr and zero_optimization.stage there") in line


def test_smoke_names_the_cores_and_the_ram_when_refusing_ranks(runner, tmp_path, no_launch, monkeypatch):
    import os as _os

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    line = smoke_error(runner, tmp_path, "--nproc", "999")
    assert f"{_os.cpu_count()} core(s) allow {8 * _os.cpu_count()} (8 per core)" in line
    from dsdoctor.commands.smoke import bundled_model, cpu_rank_bytes
    from dsdoctor.commands.smoke.inputs import model_config

    each = cpu_rank_bytes(model_config(bundled_model()), "lora", 999, bundled_model())
    assert 0.75 * 2 ** 30 < each < 0.8 * 2 ** 30  # the trainer's footprint and 3.8 M parameters in fp32
    assert f"999 ranks need about {999 * each / 2 ** 30:.1f} GiB of RAM ({each / 2 ** 30:.2f} GiB each)" in line
    assert "GiB is available" in line


def test_smoke_refuses_misspelled_lora_targets_before_launch_naming_the_layers(runner, tmp_path, no_launch):
    line = smoke_error(runner, tmp_path, "--lora-targets", "q_projj,v_proj")
    assert "--lora-targets q_projj,v_proj:" in line and "q_projj" in line
    assert "linear layers here:" in line and "q_proj" in line.split("linear layers here:")[1]


@pytest.mark.parametrize("lines, rule, says", [
    (['{"instruction": "a", "output": "b"}', '{"instruction": "a", "input": 0, "output": "b"}'], "DATA702",
     "line 2: 'input' is a JSON number, not a string"),
    (['{"instruction": "a", "output": "b"}', "not json"], "DATA702", "line 2: not JSON"),
    (['{"prompt": "a", "response": ""}'], "DATA701", "1 sample(s) have no answer token (an empty answer): line(s) 1"),
    (['{"messages": [{"role": "user", "content": "hi"}]}'], "DATA702", "'messages' has no assistant turn"),
])
def test_smoke_reads_the_data_before_launch(runner, tmp_path, no_launch, lines, rule, says):
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = runner.invoke(cli, ["smoke", "--out", str(tmp_path / "out"), "--data", str(data), "--format", "json"])
    assert result.exit_code == 1, result.output
    finding = json.loads(result.stdout)["findings"][0]
    assert finding["id"] == rule and says in finding["evidence"] and "checked before launch" in finding["evidence"]
    assert not (tmp_path / "out").exists()


def test_smoke_accepts_prompt_response_and_messages_data(runner, tmp_path, monkeypatch):
    """Both shapes pass the pre-launch read and reach the launch (stopped there)."""
    from dsdoctor.commands import smoke

    monkeypatch.delenv("MASTER_PORT", raising=False)
    launched = []
    monkeypatch.setattr(smoke, "supervise", lambda *a, **k: launched.append(a) or (_ for _ in ()).throw(KeyboardInterrupt))
    for name, row in (("pr", {"prompt": "hi", "response": "hello", "history": [["a", "b"]]}),
                      ("msg", {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                                            {"role": "assistant", "content": "hello"}]}),
                      ("sharegpt", {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]})):
        data = tmp_path / f"{name}.jsonl"
        data.write_text(json.dumps(row) + "\n", encoding="utf-8")
        result = runner.invoke(cli, ["smoke", "--out", str(tmp_path / name), "--data", str(data)])
        assert result.exit_code == 130, result.output
    assert len(launched) == 3


def test_smoke_runs_a_config_on_the_world_size_it_was_written_for(runner, tmp_path, monkeypatch):
    """issue 12: a config written for 4 GPUs failed with 'world size 2 (--nproc)' and a proposal to edit the config,
    although --nproc was not given: our default rank count, not the user's config, was wrong."""
    from dsdoctor.commands import smoke

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("MASTER_PORT", raising=False)
    seen = []
    monkeypatch.setattr(smoke, "supervise", lambda cmd, *a, **k: seen.append(cmd) or (_ for _ in ()).throw(
        KeyboardInterrupt))
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2,
                               "gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2},
                               "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}}}))
    result = runner.invoke(cli, ["smoke", "--out", str(tmp_path / "out"), "--deepspeed", str(cfg)])
    assert result.exit_code == 130, result.output
    assert seen and seen[0][seen[0].index("--nproc_per_node") + 1] == "4"
    # an explicit --nproc that contradicts the file is the user's choice: DeepSpeed's batch assertion, before launch
    result = runner.invoke(cli, ["smoke", "--out", str(tmp_path / "out2"), "--deepspeed", str(cfg), "--nproc", "2",
                                 "--format", "json"])
    assert result.exit_code == 1 and [f["id"] for f in json.loads(result.stdout)["findings"]
                                      if f["severity"] == "error"] == ["DS102"]


def test_smoke_refuses_a_7b_model_this_hosts_ram_cannot_hold_before_launch(runner, tmp_path, no_launch, monkeypatch):
    """newcomer trial: a 7.6B model (about 29 GiB in fp32) on a 24 GiB host was launched and killed by the OOM killer
    100 s later (the parameter count was read as 0: a property called as a method)."""
    import shutil

    from dsdoctor.reference_train import train

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    model = tmp_path / "qwen2.5-7b"
    shutil.copytree(train.DEFAULT_MODEL, model)
    (model / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "intermediate_size": 18944,
        "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
        "max_position_embeddings": 32768, "tie_word_embeddings": False, "rms_norm_eps": 1e-6, "rope_theta": 1e6}))
    from dsdoctor.launch import available_ram_bytes

    if available_ram_bytes() and available_ram_bytes() > 40 * 2 ** 30:
        pytest.skip("this host could hold a 7B model in fp32")
    line = smoke_error(runner, tmp_path, "--model", str(model), "--nproc", "1")
    assert "one CPU rank of this model needs about 29.1 GiB of RAM" in line and "GiB is available here" in line


def _chatglm3_dir(tmp_path, with_code: bool):
    import shutil

    from dsdoctor.reference_train import train

    model = tmp_path / "chatglm3-6b"
    shutil.copytree(train.DEFAULT_MODEL, model)
    (model / "config.json").write_text(json.dumps({  # THUDM/chatglm3-6b config.json (the shape fields)
        "model_type": "chatglm", "architectures": ["ChatGLMModel"], "num_layers": 28, "hidden_size": 4096,
        "ffn_hidden_size": 13696, "kv_channels": 128, "num_attention_heads": 32, "multi_query_attention": True,
        "multi_query_group_num": 2, "padded_vocab_size": 65024, "seq_length": 8192,
        "auto_map": {"AutoConfig": "configuration_chatglm.ChatGLMConfig",
                     "AutoModel": "modeling_chatglm.ChatGLMForConditionalGeneration",
                     "AutoModelForCausalLM": "modeling_chatglm.ChatGLMForConditionalGeneration"}}))
    if with_code:
        (model / "configuration_chatglm.py").write_text("# the repository's code\n")
    return model


def test_smoke_refuses_a_remote_code_model_before_launch_naming_the_flag(runner, tmp_path, no_launch):
    """newcomer trial: a ChatGLM3 directory launched, then failed with LOG802 and a fix for other tools."""
    line = smoke_error(runner, tmp_path, "--model", str(_chatglm3_dir(tmp_path, with_code=False)))
    assert "its auto_map runs the model's own code (configuration_chatglm.py, modeling_chatglm.py)" in line
    assert line.endswith("add --trust-remote-code")
    (tmp_path / "chatglm3-6b" / "configuration_chatglm.py").write_text("# the repository's code\n")
    line = smoke_error(runner, tmp_path, "--model", str(tmp_path / "chatglm3-6b"), "--trust-remote-code")
    assert "auto_map names modeling_chatglm.py, which is not in the directory (nothing is downloaded)" in line


def test_smoke_says_before_launch_that_fp16_cannot_run_on_the_cpu(runner, tmp_path, no_launch, monkeypatch):
    """newcomer trial: an fp16 config failed only after launch (TRN610, about 10 s) on a machine without a GPU."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("MASTER_PORT", raising=False)
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": True},
                               "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "zero_optimization": {"stage": 2}}))
    result = runner.invoke(cli, ["smoke", "--out", str(tmp_path / "out"), "--deepspeed", str(cfg), "--format", "json"])
    errors = [f for f in json.loads(result.stdout)["findings"] if f["severity"] == "error"]
    assert result.exit_code == 1 and [f["id"] for f in errors] == ["TRN612"]
    assert "no GPU visible here" in errors[0]["evidence"] and not (tmp_path / "out").exists()


def test_smoke_does_not_crawl_a_config_for_8_gpus_onto_2_cores_but_names_the_nproc(runner, tmp_path, monkeypatch):
    import os as _os

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("MASTER_PORT", raising=False)
    if (_os.cpu_count() or 1) >= 4:
        pytest.skip("8 ranks are at most 2 a core here")
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
                               "gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2},
                               "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}}}))
    result = runner.invoke(cli, ["smoke", "--out", str(tmp_path / "out"), "--deepspeed", str(cfg), "--format", "json"])
    data = json.loads(result.stdout)
    (error,) = [f for f in data["findings"] if f["severity"] == "error"]
    assert result.exit_code == 1 and error["id"] == "DS102"
    assert "give --nproc 8 to run it on as many CPU ranks" in data["result"]["world_size_source"]


def test_json_never_writes_over_a_file_that_is_no_dsdoctor_report(tmp_path):
    """`dsdoctor explain --json logs/*.log` takes the first log as --json's PATH (a new user's trial): refused, the
    log untouched; a previous report is replaced."""
    log = tmp_path / "train.log"
    log.write_text("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    other = tmp_path / "other.log"
    other.write_text(log.read_text())
    result = CliRunner().invoke(cli, ["explain", "--json", str(log), str(other)])
    assert result.exit_code == 2 and "is not a dsdoctor report" in result.output
    assert log.read_text().startswith("RuntimeError")
    out = tmp_path / "out.json"
    assert CliRunner().invoke(cli, ["explain", "--json", str(out), str(other)]).exit_code == 1
    assert CliRunner().invoke(cli, ["explain", "--json", str(out), str(other)]).exit_code == 1  # its own report
    assert json.loads(out.read_text())["command"] == "explain"


def test_a_refused_option_with_json_dash_still_prints_a_json_document():
    """A new user's trial: `estimate --micro-batch 0 --json -` left stdout empty (click refuses the range before the
    command runs), where any other refused input prints {"error": ...}. Now the same document, exit 2, one line on
    stderr; a launch line's own `--json -` after `--` is not preflight's."""
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "estimate", "--model", "qwen3-8b", "--micro-batch", "0",
                           "--json", "-"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    doc = json.loads(proc.stdout)
    assert doc["findings"] == [] and "'--micro-batch': 0 is not in the range" in doc["error"]
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "preflight", "--probe-steps", "1", "--", "python",
                           "train.py", "--json", "-"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
