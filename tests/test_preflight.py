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
    for name in ("CUDA_VISIBLE_DEVICES", "MASTER_PORT", "MASTER_ADDR", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
        environ.pop(name, None)  # another test's distributed variables are not this line's
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "preflight", "--json", "-", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, env=environ)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        report = None
    return proc.returncode, report, proc.stderr


def ids(report: dict, at_least=("error", "warning")) -> list[str]:
    return [f["id"] for f in report["findings"] if f["severity"] in at_least]


def machine_free(report: dict) -> list[dict]:
    """The warnings and errors that do not depend on this machine's state at the moment (the [env] section: RAM
    available now, a port another job holds, the verdict that counts them): what the line and its files decide."""
    return [f for f in report["findings"] if f["severity"] in ("error", "warning") and f["id"] != "PRE001"
            and not f["title"].startswith("[env]")]


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
    assert [f["id"] for f in machine_free(report)][:2] == ["DS120", "DS125"]
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
    code, report, _ = preflight("--", "CUDA_VISIBLE_DEVICES=2,3 deepspeed --num_gpus 2 t.py --deepspeed x", cwd=tmp_path)
    found = [f for f in report["findings"] if f["id"] == "PRE013"][0]
    assert "--include localhost:2,3" in found["fix"] and "--deepspeed" not in found["evidence"]


def test_plain_python_running_deepspeed_without_the_rank_variables_is_pre023(tmp_path):
    """deepspeed.initialize under plain python, none of RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT set: DeepSpeed
    falls back to MPI discovery (PRE023). The five on the line, or a launcher, silence it."""
    (tmp_path / "t.py").write_text("import deepspeed, torch\nm = torch.nn.Linear(2, 2)\n"
                                   "deepspeed.initialize(model=m, model_parameters=m.parameters(), config='ds.json')\n")
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": 1}')
    _, report, _ = preflight("--", "python t.py", cwd=tmp_path)
    found = [f for f in report["findings"] if f["id"] == "PRE023"]
    assert len(found) == 1 and "no RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK" in found[0]["evidence"]
    _, report, _ = preflight("--", "RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 "
                                   "python t.py", cwd=tmp_path)
    assert "PRE023" not in [f["id"] for f in report["findings"]]
    _, report, _ = preflight("--", "deepspeed --num_gpus 1 t.py", cwd=tmp_path)
    assert "PRE023" not in [f["id"] for f in report["findings"]]


def test_a_checkpoint_saved_under_a_rank_0_branch_is_trn614(tmp_path):
    """engine.save_checkpoint inside `if engine.global_rank == 0:` (or `if args.local_rank in [-1, 0]`) is collective
    and would wait for ranks that never call it: TRN614. Outside the branch, or under `if not is_main_process`, no."""
    body = ("import deepspeed, torch\nm = torch.nn.Linear(2, 2)\n"
            "engine, _, _, _ = deepspeed.initialize(model=m, model_parameters=m.parameters(), config='ds.json')\n")
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": 1}')
    for guard, flagged in (("if engine.global_rank == 0:", True), ("if args.local_rank in [-1, 0]:", True),
                           ("if accelerator.is_main_process:", True), ("if not accelerator.is_main_process:", False),
                           ("if True:", False)):
        (tmp_path / "t.py").write_text(body + f"{guard}\n    engine.save_checkpoint('ckpt')\n")
        _, report, _ = preflight("--", "deepspeed --num_gpus 2 t.py", cwd=tmp_path)
        found = [f for f in report["findings"] if f["id"] == "TRN614"]
        assert bool(found) == flagged, guard
        if flagged:
            assert "t.py:5 engine.save_checkpoint(...) under a rank-0 branch" in found[0]["evidence"]


@pytest.mark.parametrize("line,message", [
    ("deepspeed --num_gpus 4", "names no script"),
    ("deepspeed --num_gpus abc train.py", "invalid int value: 'abc'"),
    ("torchrun --nproc_per_node=-1 train.py", "starts no process"),
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


EXAMPLES = Path(__file__).resolve().parents[1] / "cases" / "launch-lines" / "examples"


def _llamafactory_tree(root: Path) -> None:
    """LLaMA-Factory's own example files (cases/launch-lines/examples, copied from hiyouga/LLaMA-Factory at the
    commits in SOURCES.tsv) laid out as in its repository."""
    lf = EXAMPLES / "llamafactory"
    for name, target in (("examples__train_lora__qwen3_lora_sft_ds3.yaml", "examples/train_lora/qwen3_lora_sft_ds3.yaml"),
                         ("examples__deepspeed__ds_z3_config.json", "examples/deepspeed/ds_z3_config.json"),
                         ("data__alpaca_en_demo.json.first20", "data/alpaca_en_demo.json")):
        (root / target).parent.mkdir(parents=True, exist_ok=True)
        (root / target).write_bytes((lf / name).read_bytes())
    (root / "data" / "dataset_info.json").write_text(json.dumps(
        {"alpaca_en_demo": {"file_name": "alpaca_en_demo.json"}, "identity": {"file_name": "identity.json"}}))
    (root / "data" / "identity.json").write_text(json.dumps(
        [{"instruction": f"who are you {i}", "input": "", "output": "I am {{name}}."} for i in range(10)]))


def test_llamafactory_qwen3_lora_ds3_example(tmp_path):
    _llamafactory_tree(tmp_path)
    code, report, err = preflight("--gpus", "4", "--gpu", "A100-80GB", "--", "llamafactory-cli", "train",
                                  "examples/train_lora/qwen3_lora_sft_ds3.yaml", cwd=tmp_path)
    assert report is not None, err
    result = report["result"]
    assert not [f for f in machine_free(report) if f["severity"] == "error"]
    plan, inputs = result["plan"], result["estimate_inputs"]
    assert (plan["loop"], plan["world_size"], result["method"]) == ("trainer", 4, "lora")
    assert plan["deepspeed"].endswith("examples/deepspeed/ds_z3_config.json")
    assert (inputs["model"]["value"], inputs["seq_len"]["value"], inputs["micro_batch"]["value"],
            inputs["grad_accum"]["value"]) == ("Qwen/Qwen3-4B-Instruct-2507", 2048, 1, 2)
    assert result["estimate"]["setup"]["zero_stage"] == 3  # from the config, not estimate's default
    assert inputs["grad_ckpt"]["value"] is True  # LLaMA-Factory's own default (disable_gradient_checkpointing)
    assert result["estimate"]["setup"]["lora_targets"] == ["all-linear"]
    # the "auto" values are the Trainer's to fill (HF202), not an error of the engine loop
    ids = [f["id"] for f in report["findings"]]
    assert "HF202" in ids and not [f for f in report["findings"] if f["id"].startswith("DS")
                                   and f["severity"] in ("error", "warning")]
    # the YAML's warmup_ratio goes to TrainingArguments, which transformers 5.2 and later lack: which transformers
    # LLaMA-Factory runs with is its own pin, so a warning (a plain script's line is judged by the installed one)
    hf205 = [f for f in report["findings"] if f["id"] == "HF205" and f["evidence"].startswith("warmup_ratio: 0.1;")]
    assert len(hf205) == 1 and hf205[0]["severity"] == "warning"
    # 20 + 10 samples (max_samples 1000 caps neither) / (4 x 1) = 8 batches a rank, // 2 = 4 steps, x 3 epochs
    assert result["data"]["samples"] == 30 and result["eta"]["steps"] == 12


def test_axolotl_llama3_lora_example_with_deepspeed_on_the_line(tmp_path):
    ax = EXAMPLES / "axolotl"
    (tmp_path / "examples" / "llama-3").mkdir(parents=True)
    (tmp_path / "deepspeed_configs").mkdir()
    (tmp_path / "examples/llama-3/lora-8b.yml").write_bytes((ax / "examples__llama-3__lora-8b.yml.dd66fb16").read_bytes())
    (tmp_path / "deepspeed_configs/zero2.json").write_bytes((ax / "deepspeed_configs__zero2.json").read_bytes())
    code, report, err = preflight("--gpu", "A100-80GB", "--", "accelerate launch --num_processes 2 -m axolotl.cli.train "
                                  "examples/llama-3/lora-8b.yml --deepspeed deepspeed_configs/zero2.json", cwd=tmp_path)
    result = report["result"]
    plan, inputs = result["plan"], result["estimate_inputs"]
    assert (plan["launch"]["tool"], plan["loop"], plan["world_size"], result["method"]) == ("axolotl", "trainer", 2, "lora")
    assert plan["deepspeed"].endswith("deepspeed_configs/zero2.json")  # the line's --deepspeed over the YAML's empty key
    assert (inputs["model"]["value"], inputs["seq_len"]["value"], inputs["micro_batch"]["value"],
            inputs["grad_accum"]["value"]) == ("NousResearch/Meta-Llama-3-8B", 4096, 2, 4)
    assert result["estimate"]["setup"]["lora_targets"] == ["all-linear"]  # lora_target_linear: true
    assert result["estimate"]["setup"]["offload_optimizer"] == "cpu"
    assert code in (0, 1), err
    # its `bf16: auto` is bf16 where the GPU has it (axolotl's normalisation), not false (a new user's trial)
    filled = [f["evidence"] for f in report["findings"] if f["id"] == "HF202"]
    assert filled and "bf16.enabled <- bf16|bf16_full_eval = true" in filled[0]
    code, report, err = preflight("--gpu", "V100-32GB", "--", "accelerate launch --num_processes 2 -m axolotl.cli.train "
                                  "examples/llama-3/lora-8b.yml --deepspeed deepspeed_configs/zero2.json", cwd=tmp_path)
    filled = [f["evidence"] for f in report["findings"] if f["id"] == "HF202"]
    assert filled and "bf16.enabled <- bf16|bf16_full_eval = false" in filled[0]


def test_pasted_block_with_prompt_fence_and_comment_inside_the_continuation(tmp_path):
    text = ("```bash\n(venv) user@host:~/work$ deepspeed --num_gpus 2 train.py \\\n    --deepspeed ds.json \\\n"
            "#    --bf16 \\\n    --per_device_train_batch_size 4\n```\n")
    launch = parse_launch([text])
    assert (launch.launcher, launch.script, launch.script_args) == ("deepspeed", "train.py", ["--deepspeed", "ds.json"])
    assert launch.dangling == "--per_device_train_batch_size 4"  # bash ends the command at the comment line


def test_launch_line_in_a_shell_script_with_its_variables(tmp_path):
    (tmp_path / "finetune.sh").write_text("#!/bin/bash\nNPROC=4\nMODEL=/data/qwen\nPORT=$(shuf -i 20000-30000 -n 1)\n"
                                          "torchrun --nproc_per_node $NPROC --master_port $PORT train.py \\\n"
                                          "  --model_name_or_path $MODEL --bf16 True\n")
    launch = parse_launch(["bash", str(tmp_path / "finetune.sh")])
    assert launch.options == {"nproc_per_node": "4", "master_port": "$PORT"}
    assert launch.script_args == ["--model_name_or_path", "/data/qwen", "--bf16", "True"]
    assert launch.source.endswith("line 5")


def test_probe_on_the_bundled_model_gives_go_with_a_measured_eta(tmp_path):
    from dsdoctor.reference_train import train as reference

    (tmp_path / "ds.json").write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 2},
        "optimizer": {"type": "AdamW", "params": {"lr": 2e-4, "torch_adam": True}}, "bf16": {"enabled": True}}))
    code, report, err = preflight("--probe", "--probe-steps", "12", "--out", str(tmp_path / "probe"), "--",
                                  "deepspeed", "--num_gpus", "2", reference.__file__, "--deepspeed", "ds.json",
                                  "--seq-len", "64", "--max-steps", "300", "--model", str(reference.DEFAULT_MODEL),
                                  cwd=tmp_path)
    assert report is not None, err[-2000:]
    result = report["result"]
    assert not machine_free(report), machine_free(report)
    assert result["verdict"] == "GO" or all(f["title"].startswith("[env]") for f in report["findings"]
                                            if f["severity"] in ("error", "warning") and f["id"] != "PRE001")
    assert result["probe"]["nproc"] == 2 and result["probe"]["step_time_s"] > 0
    assert result["eta"]["steps"] == 300
    assert result["eta"]["step_time_from"].startswith("measured by --probe")
    assert result["eta"]["total_s"] == pytest.approx(300 * result["probe"]["step_time_s"], rel=0.01)


def test_dataset_whose_answers_are_cut_away_is_no_go_with_line_numbers(tmp_path):
    rows = [{"instruction": "short question", "output": "short answer"}] * 3
    rows[1] = {"instruction": "a long prompt " * 60, "output": "never trained"}
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "t.py").write_text("import deepspeed\nmodel = None\nengine = deepspeed.initialize(model=model)\n")
    code, report, _ = preflight("--", "deepspeed", "--num_gpus", "2", "t.py", "--data_path", "d.jsonl",
                                "--model_max_length", "64", cwd=tmp_path)
    assert code == 1 and report["result"]["verdict"] == "NO-GO"
    cut = [f for f in report["findings"] if f["id"] == "DATA701"]
    assert cut and "lines 2" in cut[0]["evidence"] and cut[0]["severity"] == "error"


def test_the_real_launch_lines_are_read_as_their_truth_says(monkeypatch):
    """cases/launch-lines: 68 lines pasted in public issues (not written by us), each read to its launcher, script or
    config, and world size (benchmarks/preflight_lines.py reports the tuning and held-out halves apart)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from preflight_lines import CORPUS, read

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    truth = json.loads((CORPUS / "truth.json").read_text())["items"]
    wrong = {}
    for path in sorted((CORPUS / "lines").glob("*.txt")):
        got = read(path.read_text().split("\n", 1)[1])
        if got != truth[path.name[:2]]:
            wrong[path.name] = (got, truth[path.name[:2]])
    assert not wrong and len(truth) == 68


def test_a_client_optimizer_in_the_script_is_seen(tmp_path):
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2},
                                                  "bf16": {"enabled": True}}))
    (tmp_path / "t.py").write_text("import torch, deepspeed\nopt = torch.optim.AdamW(model.parameters())\n"
                                   "engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config='ds.json')\n")
    code, report, _ = preflight("--", "deepspeed --num_gpus 2 t.py", cwd=tmp_path)
    assert "DS120" not in ids(report) and report["result"]["check"]["client_optimizer"] is True


def test_broken_files_are_blocking_findings(tmp_path):
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2')
    (tmp_path / "t.py").write_text("def broken(:\n    pass\n")
    code, report, _ = preflight("--", "deepspeed --num_gpus 2 t.py --deepspeed ds.json", cwd=tmp_path)
    assert code == 1 and report["result"]["verdict"] == "NO-GO"
    broken = [f for f in report["findings"] if f["id"] == "PRE019"]
    assert len(broken) == 2 and "line 1" in broken[0]["evidence"] + broken[1]["evidence"]


def test_a_llamafactory_dataset_not_in_dataset_info_is_blocking(tmp_path):
    _llamafactory_tree(tmp_path)
    code, report, _ = preflight("--gpus", "2", "--", "llamafactory-cli", "train",
                                "examples/train_lora/qwen3_lora_sft_ds3.yaml", "dataset=nope", cwd=tmp_path)
    missing = [f for f in report["findings"] if f["id"] == "PRE014"]
    assert code == 1 and missing and "Undefined dataset nope" in missing[0]["evidence"]


@pytest.mark.parametrize("args,message", [
    (["--gpu-ccc", "8.0", "--", "deepspeed", "t.py"], "no such option"),
    (["--set", "per_device_train_batch_size=-4", "--", "deepspeed", "t.py"], "must be a positive number"),
])
def test_bad_preflight_options_one_line_exit_2(args, message, tmp_path):
    code, _, err = preflight(*args, cwd=tmp_path)
    assert code == 2 and message in err and err.count("\n") == 1


# --- a second new user's trial (2026-12-05) ----------------------------------------------------------------------

TRAINER_SCRIPT = ("from transformers import Trainer, TrainingArguments, HfArgumentParser\n"
                  "parser = HfArgumentParser(TrainingArguments)\nargs, = parser.parse_args_into_dataclasses()\n"
                  "trainer = Trainer(model=None, args=args)\ntrainer.train()\n")


def test_the_trainers_default_micro_batch_and_rounded_up_steps(tmp_path):
    (tmp_path / "train.py").write_text(TRAINER_SCRIPT)
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"},
                                                  "train_micro_batch_size_per_gpu": "auto",
                                                  "gradient_accumulation_steps": "auto"}))
    code, report, err = preflight("--gpu", "A100-80GB", "--samples", "1000", "--", "torchrun", "--nproc_per_node", "8",
                                  "train.py", "--model_name_or_path", "Qwen/Qwen2.5-7B", "--deepspeed", "ds.json",
                                  "--gradient_accumulation_steps", "2", "--num_train_epochs", "1", cwd=tmp_path)
    inputs, eta = report["result"]["estimate_inputs"], report["result"]["eta"]
    assert inputs["micro_batch"]["value"] == 8 and inputs["micro_batch"]["source"] == "TrainingArguments' default"
    # 1000 / 8 ranks = 125 a rank, / micro 8 = 16 batches, / 2 accumulation = 8 steps an epoch (transformers 5)
    assert eta["steps"] == 8


def test_a_config_beside_the_script_but_not_where_the_launch_runs(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "train.py").write_text(TRAINER_SCRIPT)
    (tmp_path / "hf" / "ds.json").write_text('{"zero_optimization": {"stage": 2}}')
    code, report, _ = preflight("--", "deepspeed --num_gpus 2 hf/train.py --deepspeed ds.json", cwd=tmp_path)
    found = [f for f in report["findings"] if f["id"] == "PRE014"]
    assert code == 1 and found and "where the launch runs" in found[0]["evidence"]


def test_a_cd_before_the_launch_moves_where_it_runs(tmp_path):
    (tmp_path / "eng").mkdir()
    (tmp_path / "eng" / "t.py").write_text("import deepspeed\nengine = deepspeed.initialize(config='ds.json')\n")
    (tmp_path / "eng" / "ds.json").write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 0}}')
    (tmp_path / "run.sh").write_text("#!/bin/bash\ncd eng\ndeepspeed --num_gpus 2 t.py\n")
    code, report, _ = preflight("--", "bash", "run.sh", cwd=tmp_path)
    assert report["result"]["plan"]["workdir"].endswith("eng") and "PRE014" not in ids(report)


def test_qlora_memory_is_an_upper_bound_not_a_no_go(tmp_path):
    (tmp_path / "q.yml").write_text("base_model: Qwen/Qwen2.5-7B\nadapter: qlora\nload_in_4bit: true\n"
                                    "sequence_len: 4096\nmicro_batch_size: 4\ngradient_accumulation_steps: 1\n"
                                    "num_epochs: 1\nbf16: auto\n")
    code, report, _ = preflight("--gpus", "2", "--gpu", "RTX-4090", "--", "axolotl", "train", "q.yml", cwd=tmp_path)
    assert not [f for f in report["findings"] if f["id"].startswith("MEM") and f["severity"] == "error"]
    assert any(f["id"] == "PRE002" and "quantized" in f["evidence"] for f in report["findings"])


def test_a_scripts_trainingarguments_are_judged_by_the_transformers_installed_where_the_line_runs(tmp_path):
    """A new user's trial: the Trainer tutorial's script with TrainingArguments(warmup_ratio=0.1) was GO although
    TrainingArguments() refuses warmup_ratio on transformers 5.2 and later. A plain script's line runs here, so
    check's HF205 judges it by the installed transformers: an error where that version lacks the field."""
    from dsdoctor.checks.deepspeed_config import installed_version
    from dsdoctor.checks.hf_trainer import field_accepted

    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"},
                                                  "zero_optimization": {"stage": 2}}))
    (tmp_path / "train.py").write_text(
        "from transformers import Trainer, TrainingArguments\n"
        "args = TrainingArguments(output_dir='out', per_device_train_batch_size=2, warmup_ratio=0.1, bf16=True,\n"
        "                         deepspeed='ds.json')\n"
        "Trainer(model=None, args=args).train()\n")
    code, report, err = preflight("--gpus", "2", "--gpu", "A100-80GB", "--", "torchrun", "--nproc_per_node", "2",
                                  "train.py", cwd=tmp_path)
    assert report is not None, err
    version = installed_version("transformers")
    hf205 = [f for f in report["findings"] if f["id"] == "HF205" and f["evidence"].startswith("warmup_ratio: 0.1")]
    accepted = field_accepted("warmup_ratio", version)
    if accepted is False:
        assert len(hf205) == 1 and hf205[0]["severity"] == "error" and code == 1
        assert f"with transformers {version} (installed here, where the line runs)" in hf205[0]["evidence"]
        assert report["result"]["verdict"] == "NO-GO"
    else:
        assert all(f["severity"] != "error" for f in hf205)
    assert "warmup_ratio" not in " ".join(f["evidence"] for f in report["findings"] if f["id"] == "PRE015")


def test_preflights_own_bad_options_are_usage_errors_and_a_broken_model_directory_blocks(tmp_path):
    """A new user's trial: --gpu FooGPU, --gpu-mem -5 became a warning ("[check] the DeepSpeed config cannot be
    read"); a model directory whose config.json is broken was GO. Now: exit 2 with one line for the options, as
    estimate does; PRE019 (blocking) for the model, named as the model, not as the DeepSpeed config."""
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization":
                                                  {"stage": 2}, "bf16": {"enabled": True}}))
    (tmp_path / "train.py").write_text("import deepspeed\n")
    line = ["--", "deepspeed", "--num_gpus", "2", "train.py", "--deepspeed", "ds.json"]
    for option in (["--gpu", "FooGPU"], ["--gpu-mem", "-5"], ["--gpu-mem", "abc"]):
        proc = subprocess.run([sys.executable, "-m", "dsdoctor", "preflight", *option, *line], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and option[0] in proc.stderr, (option, proc.stderr)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"model_type": "llama", "hidden_size": ')
    code, report, err = preflight("--gpu", "A100-80GB", *line, "--model_name_or_path", "model", cwd=tmp_path)
    assert report is not None, err
    assert code == 1 and report["result"]["verdict"] == "NO-GO"
    blocking = [f for f in report["findings"] if f["id"] == "PRE019"]
    assert [f["title"] for f in blocking] == ["[estimate] the model cannot be read"]
    assert not [f for f in report["findings"] if "DeepSpeed config cannot be read" in f["title"]]


def test_a_script_that_pads_each_batch_dynamically_is_not_told_to_pad_dynamically(tmp_path):
    """A new user's trial: the Trainer tutorial's script pads with DataCollatorForSeq2Seq(padding=True), yet DATA706
    warned that padding every sample to the sequence length wastes most tokens. The collator is read off the script;
    a tokenizer call with padding='max_length' still gets DATA706."""
    from dsdoctor.preflight.script import read_script

    rows = [{"instruction": "q" * (i % 7 + 1), "input": "", "output": "a"} for i in range(40)]
    (tmp_path / "train.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization":
                                                  {"stage": 2}}))
    body = ("from transformers import Trainer, TrainingArguments, DataCollatorForSeq2Seq\n"
            "from datasets import load_dataset\n"
            "data = load_dataset('json', data_files='train.json')\n"
            "args = TrainingArguments(output_dir='o', per_device_train_batch_size=4, deepspeed='ds.json')\n"
            "{call}\n"
            "Trainer(model=None, args=args, data_collator=collator).train()\n")
    verdicts = {}
    for name, call in (("dynamic", "collator = DataCollatorForSeq2Seq(tok, padding=True)"),
                       ("fixed", "collator = None\nids = tok('x', truncation=True, max_length=512, "
                                 "padding='max_length')")):
        (tmp_path / "train.py").write_text(body.format(call=call))
        assert read_script(tmp_path / "train.py").values["padding"][0] == ("dynamic" if name == "dynamic"
                                                                           else "max_length")
        code, report, err = preflight("--gpus", "2", "--gpu", "A100-80GB", "--set", "model_name_or_path=qwen3-0.6b",
                                      "--set", "max_seq_length=512", "--", "torchrun", "--nproc_per_node", "2",
                                      "train.py", cwd=tmp_path)
        assert report is not None, err
        verdicts[name] = [f for f in report["findings"] if f["id"] == "DATA706"]
    assert verdicts["dynamic"] == [] and len(verdicts["fixed"]) == 1


def test_a_value_the_scripts_argparse_refuses_blocks_the_run(tmp_path):
    """A new user's trial: `--max_len abc` for add_argument('--max_len', type=int) was GO. argparse exits 2 at once
    on every rank: PRE021, with the add_argument line; a value outside choices too; good values pass."""
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization":
                                                  {"stage": 2}}))
    (tmp_path / "train.py").write_text(
        "import argparse\nimport deepspeed\np = argparse.ArgumentParser()\n"
        "p.add_argument('--max_len', type=int, default=4096)\n"
        "p.add_argument('--lr', type=float, default=1e-5)\n"
        "p.add_argument('--method', choices=['lora', 'full'], default='lora')\n"
        "p.add_argument('--deepspeed', default='ds.json')\n")
    base = ["--gpu", "A100-80GB", "--no-data", "--", "deepspeed", "--num_gpus", "2", "train.py"]
    code, report, err = preflight(*base, "--max_len", "abc", "--lr", "3e-4", "--method", "qlora", cwd=tmp_path)
    assert report is not None, err
    found = sorted(f["evidence"] for f in report["findings"] if f["id"] == "PRE021")
    assert len(found) == 2 and report["result"]["verdict"] == "NO-GO" and code == 1
    assert found[0].startswith("line --max_len abc: invalid int value: 'abc' (train.py:4 add_argument('--max_len'))")
    assert found[1].startswith("line --method qlora: invalid choice: 'qlora' (choose from 'lora', 'full')")
    code, report, err = preflight(*base, "--max_len", "2048", "--lr", "3e-4", "--method", "full", cwd=tmp_path)
    assert report is not None and not [f for f in report["findings"] if f["id"] == "PRE021"]


def test_an_engine_loop_whose_line_and_config_give_two_micro_batches_is_told(tmp_path):
    """A new user's trial: --per_device_train_batch_size 4 on the line of an engine loop whose ds.json says
    train_micro_batch_size_per_gpu 2 was read as 4 without a word (PRE022); the script's own default is not a
    disagreement, nor the same value twice."""
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                                                  "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}))
    (tmp_path / "train.py").write_text(
        "import argparse\nimport deepspeed\np = argparse.ArgumentParser()\n"
        "p.add_argument('--per_device_train_batch_size', type=int, default=8)\n"
        "p.add_argument('--deepspeed', default='ds.json')\nargs = p.parse_args()\n"
        "engine, *_ = deepspeed.initialize(model=None, config=args.deepspeed)\n")
    base = ["--gpu", "A100-80GB", "--no-data", "--", "deepspeed", "--num_gpus", "2", "train.py", "--deepspeed",
            "ds.json", "--model_name_or_path", "qwen3-0.6b"]
    seen = {}
    for given in ("4", "2", None):
        code, report, err = preflight(*base, *(["--per_device_train_batch_size", given] if given else []),
                                      cwd=tmp_path)
        assert report is not None, err
        seen[given] = [f["evidence"] for f in report["findings"] if f["id"] == "PRE022"]
    assert seen["4"] == ["per_device_train_batch_size (line --per_device_train_batch_size): 4; ds.json "
                         "train_micro_batch_size_per_gpu: 2; the memory estimate uses 4"]
    assert seen["2"] == [] and seen[None] == []


def test_a_master_port_bash_computes_is_read_and_an_unset_one_is_named(tmp_path):
    """A new user's trial: `--master_port $((29500 + RANDOM % 100))` (and `$(shuf ...)`) made preflight exit 2 ("deepspeed
    would refuse this line"); bash turns both into a number. Now: read as one word, not checked (info). A
    `$MASTER_PORT` that neither the line, the script nor this shell sets is NET401, named as unset; with a default
    (`${MASTER_PORT:-29531}`) bash passes the default."""
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization":
                                                  {"stage": 2}}))
    (tmp_path / "train.py").write_text("import deepspeed\n")
    seen = {}
    for port in ("$((29500 + RANDOM % 100))", "$(shuf -i 20000-30000 -n 1)", "$MASTER_PORT", "${MASTER_PORT:-29531}"):
        code, report, err = preflight("--gpu", "A100-80GB", "--no-data", "--",
                                      f"deepspeed --num_gpus 2 --master_port {port} train.py --deepspeed ds.json",
                                      cwd=tmp_path)
        assert report is not None, err
        assert report["result"]["plan"]["launch"]["options"]["master_port"] == port.replace("${MASTER_PORT:-29531}",
                                                                                         "29531")
        seen[port] = [(f["id"], f["title"]) for f in report["findings"]
                      if f["id"] == "NET401" or f["title"] == "[env] master port not checked"]
    assert seen["$((29500 + RANDOM % 100))"] == [("PRE002", "[env] master port not checked")]
    assert seen["$(shuf -i 20000-30000 -n 1)"] == [("PRE002", "[env] master port not checked")]
    assert seen["$MASTER_PORT"] == [("NET401", "[env] the master port's variable is unset")]
    assert seen["${MASTER_PORT:-29531}"] == []  # bash passes the default: a port like any other


def test_the_host_ram_check_counts_the_launch_lines_ranks_per_node(tmp_path):
    """A new user's trial: preflight's MEM504 counted one rank per node (NVML sees no GPU here) while its own estimate
    counted the line's 8: 14 GiB to load the model against 113 GiB. env's check now takes the line's ranks."""
    from dsdoctor.commands.env import host_ram_check

    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                                  "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"},
                                                                        "offload_optimizer": {"device": "cpu"}}}))
    facts = {"host": {"ram": 2048 * 2 ** 30}, "gpu": {"gpus": []}}
    _, one = host_ram_check(str(tmp_path / "ds.json"), "qwen2.5-7b", "full", facts, ranks_per_node=1)
    _, eight = host_ram_check(str(tmp_path / "ds.json"), "qwen2.5-7b", "full", facts, ranks_per_node=8)
    assert eight["model_load_per_node"] == 8 * one["model_load_per_node"]
    assert eight["offload_per_node"] == one["offload_per_node"]  # ZeRO partitions the offloaded states: a node's sum


def test_a_config_dict_in_the_script_is_the_config_of_every_section(tmp_path):
    """A new user's trial: `deepspeed.initialize(config=ds_config)` with a literal dict was checked (DS102) but the
    estimate ran with micro batch 1 x accumulation 1 and no config. Now the dict is the run's config everywhere."""
    (tmp_path / "lit.py").write_text(
        "import deepspeed\nfrom transformers import AutoModelForCausalLM\n"
        "ds_config = {'train_micro_batch_size_per_gpu': 2, 'gradient_accumulation_steps': 4,\n"
        "             'optimizer': {'type': 'AdamW', 'params': {'lr': 1e-4}}, 'zero_optimization': {'stage': 2}}\n"
        "model = AutoModelForCausalLM.from_pretrained('qwen3-0.6b')\n"
        "engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)\n")
    code, report, err = preflight("--no-data", "--gpu", "A100-80GB", "--", "deepspeed", "--num_gpus", "2", "lit.py",
                                  cwd=tmp_path)
    assert report is not None, err
    setup = report["result"]["estimate"]["setup"]
    assert (setup["micro_batch"], setup["gradient_accumulation_steps"], setup["zero_stage"]) == (2, 4, 2)
    assert "dsdoctor-preflight-" in report["result"]["plan"]["deepspeed"]


def test_a_deepspeed_config_given_as_the_scripts_argument_and_read_from_sys_argv(tmp_path):
    """A new user's trial: `deepspeed --num_gpus 2 tiny.py c_batch.json` with `json.load(open(sys.argv[1]))` was GO:
    the JSON was read as a tool's config (its keys listed as unknown, check not run), and the deepspeed launcher's
    --local_rank=N, which comes before the script's own arguments (launcher/launch.py), was not seen. Both ranks died
    with FileNotFoundError: '--local_rank=0'. Now: the JSON is the DeepSpeed config (DS102 from it) and ENV331."""
    (tmp_path / "c.json").write_text(json.dumps({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2,
                                                 "gradient_accumulation_steps": 4,
                                                 "zero_optimization": {"stage": 2}}))
    (tmp_path / "tiny.py").write_text("import sys, json, deepspeed\ncfg = json.load(open(sys.argv[1]))\n"
                                      "engine, *_ = deepspeed.initialize(model=None, config=cfg)\n")
    code, report, err = preflight("--no-data", "--gpu", "A100-80GB", "--", "deepspeed", "--num_gpus", "2", "tiny.py",
                                  "c.json", cwd=tmp_path)
    assert report is not None, err
    ids = [f["id"] for f in report["findings"] if f["severity"] == "error"]
    assert "DS102" in ids and "ENV331" in ids and report["result"]["verdict"] == "NO-GO"
    assert report["result"]["plan"]["deepspeed"].endswith("c.json")
    env331 = [f for f in report["findings"] if f["id"] == "ENV331"][0]
    assert env331["evidence"].startswith("tiny.py:2 sys.argv[1], and the deepspeed launcher starts each rank as")
    # torchrun passes LOCAL_RANK in the environment: no ENV331
    code, report, err = preflight("--no-data", "--gpu", "A100-80GB", "--", "torchrun", "--nproc_per_node", "2",
                                  "tiny.py", "c.json", cwd=tmp_path)
    assert report is not None and "ENV331" not in [f["id"] for f in report["findings"]]


def test_a_misspelled_lora_target_in_the_script_is_named_and_the_memory_still_estimated(tmp_path):
    """A new user's trial: LoraConfig(target_modules=['q_proj', 'v_proj', 'gate_prj']) left only "[estimate] not run"
    with a generic fix. peft skips gate_prj silently and trains q_proj and v_proj: LOG803 (a warning) says so, and the
    memory is estimated for the targets peft wraps."""
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto",
                                                  "zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}}))
    (tmp_path / "sft.py").write_text(
        "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "from peft import LoraConfig, get_peft_model\n"
        "model = AutoModelForCausalLM.from_pretrained('qwen2.5-7b')\n"
        "model = get_peft_model(model, LoraConfig(r=8, target_modules=['q_proj', 'v_proj', 'gate_prj']))\n"
        "args = TrainingArguments(output_dir='o', per_device_train_batch_size=4, bf16=True, deepspeed='ds.json')\n"
        "Trainer(model=model, args=args).train()\n")
    code, report, err = preflight("--no-data", "--gpus", "4", "--gpu", "A100-80GB", "--", "torchrun",
                                  "--nproc_per_node", "4", "sft.py", cwd=tmp_path)
    assert report is not None, err
    (log803,) = [f for f in report["findings"] if f["id"] == "LOG803"]
    assert log803["severity"] == "warning" and "peft would silently skip it and train q_proj,v_proj alone" in \
        log803["evidence"] and log803["evidence"].startswith("sft.py:4 LoraConfig(target_modules=...)")
    assert report["result"]["estimate"]["setup"]["lora_targets"] == ["q_proj", "v_proj"]


def test_a_verdict_without_check_and_estimate_says_it_is_inconclusive(tmp_path):
    """A new user's trial: a line whose config and model preflight could not find was "GO with warnings", as if the
    config and the memory had been checked. The verdict now says it is inconclusive, and why."""
    (tmp_path / "train.py").write_text("print('hello')\n")
    code, report, err = preflight("--no-data", "--gpus", "2", "--", "torchrun", "--nproc_per_node", "2", "train.py",
                                  cwd=tmp_path)
    assert report is not None, err
    (verdict,) = [f for f in report["findings"] if f["id"] == "PRE001"]
    assert verdict["title"] == "GO with warnings (inconclusive)"
    assert "inconclusive: check and estimate did not run" in verdict["evidence"]
