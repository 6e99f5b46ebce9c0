"""``dsdoctor preflight -- CMD``: the tutorials' launch lines as printed, the tools' configs, and what each gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsdoctor.preflight.cmdline import parse_launch, words_of
from dsdoctor.preflight.settings import parse_script_args
from dsdoctor.report import DsdoctorError

HERE = Path(__file__).resolve().parent / "preflight"
TUTORIALS = Path(__file__).resolve().parents[2] / "shared" / "tutorials"


def preflight(*args: str, cwd: Path | None = None, env: dict | None = None) -> tuple[int, dict | None, str]:
    """(exit code, the JSON report or None, stderr) of ``dsdoctor preflight ARGS``."""
    environ = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    environ.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "preflight", "--json", "-", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, env=environ)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        report = None
    return proc.returncode, report, proc.stderr


def ids(report: dict, at_least=("error", "warning")) -> list[str]:
    return [f["id"] for f in report["findings"] if f["severity"] in at_least]


def test_launchers_json_is_what_the_installed_launchers_parse():
    from dsdoctor.preflight.generate import OUT, generate

    shipped = json.loads(OUT.read_text())
    fresh = json.loads(json.dumps(generate()))
    for launcher in ("deepspeed", "torchrun", "accelerate"):
        assert {o["dest"]: o for o in shipped[launcher]["options"]} == \
            {o["dest"]: o for o in fresh[launcher]["options"]}, launcher
        assert shipped[launcher]["positionals"] == fresh[launcher]["positionals"]


# the launch lines exactly as the tutorials print them (their pages lost the line breaks of multi-line blocks:
# the second tutorial's section 2.4 block holds two commands and a comment on one line)
TUTORIAL_LINES = [
    ("deepspeed --num_gpus 4 --master_port 29500 train_chatglm_lora.py",
     "deepspeed", {"num_gpus": "4", "master_port": "29500"}, "train_chatglm_lora.py", {}),
    ("deepspeed --num_nodes 2 --num_gpus 8 --node_rank 0 \\\n --master_addr 192.168.1.10 --master_port 29500 "
     "train_chatglm_lora.py", "deepspeed",
     {"num_nodes": "2", "num_gpus": "8", "node_rank": "0", "master_addr": "192.168.1.10", "master_port": "29500"},
     "train_chatglm_lora.py", {}),
    ("torchrun --nproc_per_node=4 train.py", "torchrun", {"nproc_per_node": "4"}, "train.py", {}),
    ("CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --nproc_per_node=4 train.py", "torchrun", {"nproc_per_node": "4"},
     "train.py", {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}),
    ("deepspeed --num_gpus=4 train.py", "deepspeed", {"num_gpus": "4"}, "train.py", {}),
    ("NCCL_DEBUG=INFO torchrun --nproc_per_node=4 train.py 2>&1 | head -50", "torchrun", {"nproc_per_node": "4"},
     "train.py", {"NCCL_DEBUG": "INFO"}),
    ("torchrun --nproc_per_node=4 train.py --resume_from_checkpoint ./output/checkpoint-1500", "torchrun",
     {"nproc_per_node": "4"}, "train.py", {}),
]


@pytest.mark.parametrize("line,launcher,options,script,env", TUTORIAL_LINES)
def test_the_tutorials_launch_lines_as_printed(line, launcher, options, script, env):
    assert line.replace("\\\n", "").split()[-1] in (script, "-50", "./output/checkpoint-1500")
    launch = parse_launch([line])
    assert (launch.launcher, launch.options, launch.script, launch.env) == (launcher, options, script, env)


def test_the_tutorials_lines_are_in_the_tutorials():
    if not TUTORIALS.is_dir():
        pytest.skip("shared/tutorials not beside this checkout")
    text = " ".join(p.read_text() for p in TUTORIALS.glob("*.txt"))
    for line, *_ in TUTORIAL_LINES:
        assert " ".join(line.replace("\\\n", "\\").split()) in " ".join(text.split()), line


def test_words_stop_at_the_shell_operators_and_keep_quotes():
    assert words_of("deepspeed train.py --x 'a b' > log.txt 2>&1 &") == ["deepspeed", "train.py", "--x", "a b"]
    assert words_of("torchrun train.py && echo done  # comment") == ["torchrun", "train.py"]
    with pytest.raises(DsdoctorError, match="unbalanced"):
        words_of("deepspeed train.py --x 'a b")


def test_script_arguments_as_hf_argument_parser_reads_them():
    pairs, loose = parse_script_args(["--bf16", "--lora_target", "q_proj", "v_proj", "--per_device_train_batch_size=4",
                                      "--fp16", "False", "--learning_rate", "1e-4", "extra"])
    assert pairs == [("bf16", True), ("lora_target", ["q_proj", "v_proj"]), ("per_device_train_batch_size", 4),
                     ("fp16", False), ("learning_rate", 1e-4)]
    assert loose == ["extra"]


def test_tools_and_module_launches():
    launch = parse_launch(["FORCE_TORCHRUN=1 llamafactory-cli train examples/x.yaml learning_rate=1e-5"])
    assert (launch.launcher, launch.tool, launch.tool_config, launch.overrides, launch.env) == \
        ("llamafactory", "llamafactory", "examples/x.yaml", ["learning_rate=1e-5"], {"FORCE_TORCHRUN": "1"})
    launch = parse_launch(["accelerate", "launch", "--num_processes", "2", "-m", "axolotl.cli.train", "cfg.yml"])
    assert (launch.launcher, launch.tool, launch.tool_config, launch.options["num_processes"]) == \
        ("accelerate", "axolotl", "cfg.yml", "2")
    launch = parse_launch(["python", "-m", "torch.distributed.launch", "--nproc_per_node", "8", "--use_env", "ft.py"])
    assert (launch.launcher, launch.options["nproc_per_node"], launch.options["use_env"], launch.script) == \
        ("torchrun", "8", True, "ft.py")
    # deepspeed's parser allows abbreviations, as argparse does by default
    assert parse_launch(["deepspeed", "--num_gpu", "2", "t.py"]).options == {"num_gpus": "2"}


def test_tutorial_a_on_4_gpus_is_no_go_with_both_crashes_first():
    code, report, err = preflight("--", "deepspeed", "--num_gpus", "4", "--master_port", "29500",
                                  "train_chatglm_lora.py", cwd=HERE / "tutorial_a")
    assert code == 1, err
    assert report["result"]["verdict"] == "NO-GO"
    findings = report["findings"]
    assert findings[0]["id"] == "PRE001" and findings[0]["title"] == "NO-GO"
    assert [f["id"] for f in findings[1:3]] == ["DS120", "DS125"]
    plan = report["result"]["plan"]
    assert (plan["world_size"], plan["loop"], report["result"]["method"]) == (4, "engine", "lora")
    assert plan["settings"]["lora_target"]["value"] == ["query_key_value"]
    assert plan["settings"]["deepspeed"]["source"].startswith("train_chatglm_lora.py:31")


def test_tutorial_a_multi_node_line_without_a_hostfile_is_refused_as_deepspeed_does():
    code, report, _ = preflight("--", "deepspeed --num_nodes 2 --num_gpus 8 --node_rank 0 --master_addr 192.168.1.10 "
                                "--master_port 29500 train_chatglm_lora.py", cwd=HERE / "tutorial_a")
    assert code == 1
    assert ids(report)[:2] == ["PRE001", "PRE011"]
    assert report["result"]["plan"]["world_size"] == 16


def test_tutorial_b_trainer_script_read_from_its_literals():
    code, report, _ = preflight("--gpu", "A100-80GB", "--", "torchrun --nproc_per_node=4 train.py",
                                cwd=HERE / "tutorial_b")
    plan = report["result"]["plan"]
    assert plan["loop"] == "trainer" and plan["world_size"] == 4
    inputs = report["result"]["estimate_inputs"]
    assert (inputs["micro_batch"]["value"], inputs["grad_accum"]["value"], inputs["seq_len"]["value"]) == (4, 4, 2048)
    assert inputs["model"]["value"] == "Qwen/Qwen2-7B" and inputs["method"]["value"] == "full"
    # the fp16 template under a bf16 TrainingArguments: the Trainer refuses the mismatch (HF2xx) -> NO-GO
    assert code == 1 and report["result"]["verdict"] == "NO-GO"
    assert any(i.startswith("HF") for i in ids(report, ("error",))), ids(report)


def test_cuda_visible_devices_ignored_by_the_deepspeed_launcher(tmp_path):
    (tmp_path / "t.py").write_text("import deepspeed\n")
    code, report, _ = preflight("--", "CUDA_VISIBLE_DEVICES=2,3 deepspeed --num_gpus 2 t.py", cwd=tmp_path)
    assert "PRE013" in ids(report)


@pytest.mark.parametrize("line,message", [
    ("deepspeed --num_gpus 4", "names no script"),
    ("llamafactory-cli train", "names no config file"),
    ("deepspeed --num_gpus 4 --nonsense_flag 1 train.py", "would refuse"),
    ("ls -la", "not a launcher"),
])
def test_bad_lines_one_error_line_exit_2(line, message, tmp_path):
    code, _, err = preflight("--", line, cwd=tmp_path)
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_yaml_that_is_not_the_tools_is_refused(tmp_path):
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2}, "train_batch_size": 8}')
    code, _, err = preflight("--", "llamafactory-cli", "train", "ds.json", cwd=tmp_path)
    assert code == 2 and "a DeepSpeed config" in err and "Traceback" not in err
    code, _, err = preflight("--", "axolotl", "train", "ds.json", cwd=tmp_path)
    assert code == 2 and "a DeepSpeed config" in err


def test_files_that_do_not_exist_are_findings_and_nothing_runs(tmp_path):
    code, report, err = preflight("--", "deepspeed", "--num_gpus", "2", "missing.py", "--deepspeed", "nope.json",
                                  cwd=tmp_path)
    assert code == 1, err
    assert ids(report)[:3] == ["PRE001", "PRE014", "PRE014"]
    assert not list(tmp_path.iterdir())  # nothing written, nothing launched
