"""`dsdoctor smoke` end to end: real torchrun / deepspeed launches of the reference trainer on 2 CPU ranks over
gloo, with the real DeepSpeed engine. Each test launches real processes (10-30 s each on 2 cores)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}
ENV.pop("MASTER_PORT", None)


def smoke(tmp_path: Path, *args: str, timeout: float = 600) -> tuple[int, dict, str]:
    """Run `dsdoctor smoke` as a user would; return (exit code, JSON report, stderr)."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "dsdoctor", "smoke", "--out", str(out), "--json", str(tmp_path / "report.json"),
           *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout, cwd=tmp_path)
    report = json.loads((tmp_path / "report.json").read_text()) if (tmp_path / "report.json").exists() else {}
    return proc.returncode, report, proc.stderr


def by_id(report: dict) -> dict[str, dict]:
    return {f["id"]: f for f in report["findings"]}


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line contains ``text`` (the run's --out dir): what must be gone after a run."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:
            pass
    return [p for p in found if p != os.getpid()]


def test_default_smoke_100_steps_passes_on_two_cpu_ranks(tmp_path):
    code, report, stderr = smoke(tmp_path, "--steps", "100")
    found = by_id(report)
    assert code == 0, stderr
    assert {k: found[k]["severity"] for k in ("TRN600", "TRN601", "TRN604", "TRN605", "TRN606")} == {
        "TRN600": "info", "TRN601": "ok", "TRN604": "ok", "TRN605": "ok", "TRN606": "info"}
    result = report["result"]
    assert result["world_size"] == 2 and result["steps"] == 100
    assert result["loss_decreased"] is True
    assert result["loss_last"] < result["loss_first"] * 0.95
    assert result["checkpoint_roundtrip"] is True
    assert result["trainable_params"] == 28_672  # 4 layers x (q_proj 256*8+8*256 + v_proj 256*8+8*128)
    assert len(result["peak_allocated_bytes"]) == 2 and all(b > 100 * 2**20 for b in result["peak_allocated_bytes"])
    assert len(result["tokens_per_s"]) == 2 and all(t > 0 for t in result["tokens_per_s"])
    env = result["environment"]
    assert env["world_size"] == 2 and env["backend"] == "gloo" and [r["rank"] for r in env["ranks"]] == [0, 1]
    verify = result["verify"]
    assert verify["saved_tensors"] == 16 and verify["empty_tensors"] == []
    assert verify["reload_max_diff"] <= 1e-3 and verify["merge_max_diff"] <= 1e-3 and verify["adapter_effect"] > 1e-2
    out = tmp_path / "out"
    assert (out / "adapter" / "adapter_model.safetensors").is_file() and (out / "smoke.png").stat().st_size > 10_000
    assert len((out / "metrics" / "rank1.jsonl").read_text().splitlines()) == 100
    assert processes_mentioning(str(out)) == []
    # issue 12: the ranks build in one extensions directory per Python environment (TORCH_EXTENSIONS_DIR unset here)
    if not os.environ.get("TORCH_EXTENSIONS_DIR"):
        from dsdoctor.extensions import smoke_root

        assert result["torch_extensions_dir"] == str(smoke_root())
        assert (smoke_root() / "deepspeed_shm_comm").is_dir()


def test_all_labels_masked_is_a_data_finding_with_line_numbers(tmp_path):
    data = tmp_path / "masked.jsonl"
    data.write_text("".join(json.dumps({"instruction": f"question {i}", "output": ""}) + "\n" for i in range(40)))
    code, report, _ = smoke(tmp_path, "--steps", "20", "--data", str(data))
    assert code == 1
    assert report["findings"][-1]["id"] == "DATA701"
    assert "40 sample(s) have no answer token" in report["findings"][-1]["evidence"]
    assert "line(s) 1, 2, 3" in report["findings"][-1]["evidence"]
    assert not (tmp_path / "out" / "train.log").exists()  # read before any rank started


# DeepSpeed rejecting a config at initialize (TRN610) is the case cases/tutorial-zero2-config-in-engine-loop.
def test_auto_values_are_reported_before_any_rank_starts(tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                                "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}))
    start = time.monotonic()
    code, report, _ = smoke(tmp_path, "--deepspeed", str(path))
    assert code == 1 and [f["id"] for f in report["findings"]] == ["DS101"]
    assert report["findings"][0]["evidence"] == ('3 value(s) are "auto": train_micro_batch_size_per_gpu, '
                                                 'gradient_accumulation_steps, optimizer.params.lr')
    assert not (tmp_path / "out" / "train.log").exists() and time.monotonic() - start < 30


def test_zero_learning_rate_fails_the_loss_check(tmp_path):
    code, report, _ = smoke(tmp_path, "--steps", "24", "--lr", "0")
    found = by_id(report)
    assert code == 1
    assert found["TRN601"]["severity"] == "error"
    assert found["TRN605"]["severity"] == "error"  # an adapter that never moved has no effect
    assert "the trained model's logits equal the base model's" in found["TRN605"]["evidence"]


def test_a_frozen_model_is_nothing_to_train(tmp_path):
    """Refused before launch now (issue 12: smoke validated late); the trainer's own TRN609 stays for runs launched
    without dsdoctor (tests/test_training_checks.py maps its record)."""
    start = time.monotonic()
    code, report, stderr = smoke(tmp_path, "--steps", "20", "--method", "freeze", "--freeze-last", "0")
    assert code == 2 and "--freeze-last 0 leaves nothing to train" in stderr
    # --json PATH still gets a document: the refusal, no findings (cli._emit_error)
    assert report["error"].startswith("--freeze-last 0 leaves nothing to train") and report["findings"] == []
    assert time.monotonic() - start < 30 and not (tmp_path / "out").exists()


def test_zero3_lora_adapter_is_gathered_not_empty(tmp_path):
    code, report, stderr = smoke(tmp_path, "--steps", "20", "--zero", "3")
    assert code == 0, report.get("findings") or stderr
    assert report["result"]["zero_stage"] == 3
    verify = report["result"]["verify"]
    assert verify["saved_tensors"] == 16 and verify["empty_tensors"] == [] and verify["saved_bytes"] == 28_672 * 4


@pytest.mark.parametrize("method, trainable", [
    # the last 2 layers: q,o 256x256; k,v 256x128; q/k/v biases; gate/up/down 256x704; 2 RMSNorms
    ("freeze", 2 * (2 * 256 * 256 + 2 * 256 * 128 + 256 + 2 * 128 + 3 * 256 * 704 + 2 * 256)),
    ("ptuning", 16 * 2 * 4 * 128),  # virtual tokens x (k, v) x layers x kv width (2 kv heads x 64)
    # under ZeRO-3, peft's save_pretrained runs the prefix encoder: a collective every rank must enter
    ("ptuning-zero3", 16 * 2 * 4 * 128),
    ("full", 3_805_440),  # embeddings 2 x 1664 x 256 (untied) + 4 layers x 738,304 + final norm 256
])
def test_other_methods_train_save_and_reload(tmp_path, method, trainable):
    method, _, zero = method.partition("-zero")
    code, report, stderr = smoke(tmp_path, "--steps", "20", "--method", method, *(["--zero", zero] if zero else []))
    found = by_id(report)
    assert code == 0, report.get("findings") or stderr
    assert report["result"]["trainable_params"] == trainable
    assert found["TRN605"]["severity"] == "ok"
    assert report["result"]["verify"]["reload_max_diff"] <= 1e-3
    assert ("merge_max_diff" in report["result"]["verify"]) is False  # only LoRA merges


def test_deepspeed_launcher_runs_the_same_job_on_a_users_data_file(tmp_path):
    from dsdoctor.reference_train import train

    lines = train.DEFAULT_DATA.read_text(encoding="utf-8").splitlines()[:200]
    data = tmp_path / "mine.jsonl"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, report, stderr = smoke(tmp_path, "--steps", "20", "--launcher", "deepspeed", "--data", str(data))
    assert code == 0, report.get("findings") or stderr
    assert report["result"]["environment"]["world_size"] == 2 and report["result"]["environment"]["samples"] == 200
    # greedy eval on a user's data uses the prompts of its first two samples
    first_two = [json.loads(line)["instruction"] for line in lines[:2]]
    assert [r["prompt"] for r in report["result"]["greedy_eval"]] == [f"问：{t}\n答：" for t in first_two]
    # the deepspeed launcher sets LOCAL_SIZE, so DeepSpeed's CPU accelerator made one all-reduce segment per rank in
    # /dev/shm and left them; smoke deleted this run's two
    port = report["result"]["command"].split("--master_port ")[1].split()[0]
    removed = report["result"]["shm_segments_removed"]
    assert sorted(Path(p).name.rsplit("_", 2)[1:] for p in removed) == [[port, "0"], [port, "1"]]
    assert not any(Path(p).exists() for p in removed)


def test_a_segment_a_killed_run_left_on_the_port_is_deleted_before_the_launch(tmp_path):
    """A run killed with -9 leaves its DeepSpeed all-reduce segments; DeepSpeed's shm_open would reuse one on the same
    MASTER_PORT as it is (stale collective state: a CI run here once aborted so). smoke deletes it first."""
    from dsdoctor.checks.network import free_port

    port = free_port()
    stale = Path(f"/dev/shm/deepspeed_allreduce_buffer_{os.geteuid()}_127.0.0.1_{port}_1")
    stale.write_bytes(b"\x07" * 4096)  # no live process maps it
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "dsdoctor", "smoke", "--out", str(out), "--json", str(tmp_path / "report.json"),
           "--steps", "5", "--no-verify", "--launcher", "deepspeed"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**ENV, "MASTER_PORT": str(port)}, timeout=600,
                          cwd=tmp_path)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["result"]["shm_segments_removed_before"] == [str(stale)], proc.stderr[-2000:]
    assert not any(Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_{port}_*"))  # and its own after the run


def test_a_killed_rank_is_named_and_nothing_is_left_behind(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "dsdoctor", "smoke", "--steps", "100000", "--out", str(out),
                             "--json", str(tmp_path / "report.json"), "--no-verify"],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (out / "metrics" / "rank1.jsonl").exists() or not (out / "run_env.json").exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.5)
    rank1 = json.loads((out / "run_env.json").read_text())["ranks"][1]["pid"]
    os.kill(rank1, signal.SIGKILL)
    proc.communicate(timeout=120)
    report = json.loads((tmp_path / "report.json").read_text())
    failure = by_id(report)["TRN607"]
    assert proc.returncode == 1
    assert failure["evidence"].startswith("rank 1 exit code -9 (SIGKILL"), failure
    # Rank 0 either raises (gloo: connection closed by peer) and writes its record, or torchrun's SIGTERM
    # reaches it first and it writes none: a race. The report names it exactly when it wrote a record.
    rank0_record = (out / "errors" / "rank0.json").exists()
    assert ("rank(s) [0] failed after it" in failure["evidence"]) == rank0_record, failure
    assert processes_mentioning(str(out)) == []


def test_ctrl_c_stops_every_rank(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "dsdoctor", "smoke", "--steps", "100000", "--out", str(out),
                             "--no-verify"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (out / "metrics" / "rank0.jsonl").exists() or not (out / "metrics" / "rank0.jsonl").stat().st_size:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.5)
    assert len(processes_mentioning(str(out))) >= 3  # the launcher and two ranks
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in stderr and "Traceback" not in stderr
    assert processes_mentioning(str(out)) == []


def test_timeout_kills_the_run_and_says_so(tmp_path):
    code, report, _ = smoke(tmp_path, "--steps", "100000", "--timeout", "4", "--no-verify")
    assert code == 1
    assert by_id(report)["TRN608"]["evidence"].startswith("no end after 4 s")
    assert processes_mentioning(str(tmp_path / "out")) == []


def test_busy_master_port_is_reported_before_any_rank_starts(tmp_path, monkeypatch):
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        port = s.getsockname()[1]
        env = {**ENV, "MASTER_PORT": str(port)}
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "dsdoctor", "smoke", "--out", str(tmp_path / "out"),
                               "--format", "json"], env=env, capture_output=True, text=True, timeout=60)
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and [f["id"] for f in report["findings"]] == ["NET401"]
    assert f"MASTER_PORT={port} is already bound" in report["findings"][0]["evidence"]
    assert not (tmp_path / "out" / "train.log").exists() and time.monotonic() - start < 30


# ------------------------------------------------------------------------------------------- issue 12: a correct user
# config must not FAIL on our bundled random init. The tutorials' own learning rates, schedulers and step counts.
def _ds(tmp_path, lr, scheduler):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                                "gradient_clipping": 1.0, "zero_optimization": {"stage": 2},
                                "optimizer": {"type": "AdamW", "params": {"lr": lr, "torch_adam": True}},
                                "scheduler": scheduler}))
    return str(path)


@pytest.mark.parametrize("case", ["issue-12 WarmupLR over 100 steps, 4 ranks", "tutorial A WarmupDecayLR",
                                  "tutorial A, 20 steps"])
def test_a_real_lora_learning_rate_on_the_bundled_model_is_inconclusive_not_a_failure(tmp_path, case):
    if case.startswith("issue-12"):
        sched = {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 2e-5, "warmup_num_steps": 100}}
        extra = ["--nproc", "4"]
    else:  # shared/tutorials: the ChatGLM LoRA config's scheduler (total_num_steps added: it lacks it)
        sched = {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 2e-5,
                                                     "warmup_num_steps": 200, "total_num_steps": 1000}}
        extra = []
    steps = "20" if "20 steps" in case else "100"
    code, report, stderr = smoke(tmp_path, "--steps", steps, "--deepspeed", _ds(tmp_path, 2e-5, sched), *extra)
    found = by_id(report)
    assert code == 0, (report.get("findings"), stderr[-2000:])
    assert "TRN601" not in found and found["TRN611"]["severity"] == "warning"
    assert "the optimizer moved the parameters" in found["TRN611"]["fix"]
    assert "labels" not in found["TRN611"]["fix"]  # the user's setup is not blamed
    assert report["result"]["parameter_change"]["tensors_changed"] == 16
    assert found["TRN605"]["severity"] in ("ok", "warning"), found["TRN605"]
    assert "holds nothing learned" not in found["TRN605"]["evidence"]


def test_the_trainer_tutorials_full_fine_tune_learns_on_the_bundled_model(tmp_path):
    # shared/tutorials: TrainingArguments(learning_rate=2e-5, lr_scheduler_type="cosine", warmup_ratio=0.1), the
    # engine-loop equivalent is DeepSpeed's WarmupCosineLR
    sched = {"type": "WarmupCosineLR", "params": {"warmup_min_ratio": 0.0, "warmup_num_steps": 10,
                                                  "total_num_steps": 100, "cos_min_ratio": 0.0}}
    code, report, stderr = smoke(tmp_path, "--steps", "100", "--method", "full",
                                 "--deepspeed", _ds(tmp_path, 2e-5, sched))
    assert code == 0, (report.get("findings"), stderr[-2000:])
    assert by_id(report)["TRN601"]["severity"] == "ok"


def test_a_timed_out_run_exits_1_even_while_advancing(tmp_path):
    """issue 12: `--timeout 12` gave WARN TRN608 and exit 0, with the loss and the save never checked."""
    code, report, stderr = smoke(tmp_path, "--steps", "100000", "--timeout", "60", "--no-verify")
    assert code == 1
    finding = by_id(report)["TRN608"]
    assert finding["severity"] == "error"
    log = tmp_path / "out" / "train.log"
    assert f"the run's full log is {log} (dsdoctor explain {log})" in stderr  # issue 12: printed on failure
    assert processes_mentioning(str(tmp_path / "out")) == []
