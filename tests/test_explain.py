"""`dsdoctor explain LOG`: the corpus in cases/logs (real logs made on this machine's CPU with the real DeepSpeed, and
logs written from the public reports), rank prefixes and colours, the first real failure before its cascade, bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsdoctor.checks.logs import explain, read_lines
from dsdoctor.cli import cli

LOGS = Path(__file__).resolve().parents[1] / "cases" / "logs"
CORPUS = sorted(p for p in LOGS.iterdir() if (p / "expected.json").is_file())


def run(*args, input=None):
    result = CliRunner().invoke(cli, ["explain", *args, "--json", "-"], input=input)
    return result.exit_code, (json.loads(result.output) if result.output.strip().startswith("{") else None), result


def test_the_corpus_covers_every_kind_the_issue_names():
    rules = {json.loads((p / "expected.json").read_text())["rule"] for p in CORPUS}
    assert {"LOG801", "NET401", "NET410", "NET402", "DS102", "DS101", "HF201", "MEM501", "MEM504", "ENV305",
            "ENV324", "DS113", "DS114", "TRN602", "DS142", "LOG803", "LOG802", "ENV310"} <= rules
    assert len(CORPUS) >= 25


@pytest.mark.parametrize("case", CORPUS, ids=[p.name for p in CORPUS])
def test_corpus(case):
    expected = json.loads((case / "expected.json").read_text())
    code, report, result = run(str(case / "log.txt"))
    assert code == expected["exit_code"], result.output
    first = report["findings"][0]
    assert first["id"] == expected["rule"]
    assert expected["evidence_contains"] in first["evidence"]
    assert first["fix"]
    assert all(f["severity"] == "info" for f in report["findings"][1:])  # later failures are context


def test_no_personal_details_in_the_corpus():
    import getpass
    import socket

    banned = {"/root/", "/work/", getpass.getuser() + "@", socket.gethostname() + ":"}
    for case in CORPUS:
        text = (case / "log.txt").read_text()
        assert not [b for b in banned if b in text], case.name


def test_prefixes_and_colours_are_removed():
    lines = read_lines("\x1b[31m[rank3]:\x1b[0m ValueError: x\n[default5]: hello\n7: srun label\n0: srun\n1: srun\n"
                       "worker-1: [2024-01-01 10:00:00,000] [INFO] hi\nValueError: not a host\n")
    assert [(ln.rank, ln.text) for ln in lines] == [(3, "ValueError: x"), (5, "hello"), (7, "srun label"), (0, "srun"),
                                                     (1, "srun"), (None, "[2024-01-01 10:00:00,000] [INFO] hi"),
                                                     (None, "ValueError: not a host")]
    # one line that starts "6: " (a "file.py:6: UserWarning" wrapped at 80 columns) is no srun label
    wrapped = read_lines("/opt/env/lib/python3.10/site-packages/torch/utils/checkpoint.py:9\n6: UserWarning: x\n")
    assert [ln.rank for ln in wrapped] == [None, None]


def test_the_first_real_failure_comes_before_its_cascade():
    log = "\n".join([
        "[rank5]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer",
        "[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 2 has a total capacity "
        "of 23.65 GiB of which 1.10 GiB is free.",
        "[2024-01-01 10:00:05,000] [ERROR] [launch.py:321:sigkill_handler] ['python', '-u', 'train.py', "
        "'--local_rank=1'] exits with return code = -9",
        "[rank0]: ValueError: Target modules ['q_proj'] not found in the base model.",
    ])
    findings, result = explain(log)
    assert [f.id for f in findings] == ["MEM501", "MEM504", "LOG803"]
    assert findings[0].severity == "error" and findings[0].evidence.startswith("line 2: rank 2: CUDA out of memory")
    assert "--gpu-mem 23.65" in findings[0].fix  # as CUDA printed it, not rounded up to 24 (issue 12, item 4)
    assert result["first_failure"] == {"rule": "MEM501", "signature": "cuda-oom", "line": 2, "rank": 2}


def test_a_killed_rank_is_the_cause_only_when_nothing_else_is_found():
    log = "[ERROR] [launch.py:321:sigkill_handler] ['python', '-u', 't.py', '--local_rank=3'] exits with return code = -9"
    findings, _ = explain(log)
    assert (findings[0].id, findings[0].severity) == ("MEM504", "error") and "rank 3" in findings[0].evidence


def test_batch_assertion_recomputes_the_triple():
    findings, _ = explain("AssertionError: Check batch related parameters. train_batch_size is not equal to "
                          "micro_batch_per_gpu * gradient_acc_step * world_size 32 != 4 * 1 * 7")
    assert findings[0].evidence == ("line 1: train_batch_size 32 != 4 x 1 x 7 (micro batch x gradient accumulation "
                                    "x world size); the config assumes world size 8")
    assert "Set train_batch_size to 28 (4 x 1 x 7)" in findings[0].fix


def test_stdin():
    code, report, _ = run("-", input="noise\nRuntimeError: CUDA error: no kernel image is available for execution on "
                                     "the device\n")
    assert code == 1 and report["findings"][0]["id"] == "ENV308"


def test_a_log_with_no_failure_lists_its_last_error_looking_lines(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("step 1\nWARNING: something failed to load, retrying\nstep 2\ndone\n")
    code, report, _ = run(str(log))
    assert code == 0
    [finding] = report["findings"]
    assert finding["id"] == "LOG800" and "line 2: WARNING: something failed to load" in finding["evidence"]


@pytest.mark.parametrize("content,message", [
    (b"", "is empty"),
    (b"  \n\n", "is empty"),
    (bytes(range(256)) * 40, "is binary data"),
    (b"\x89PNG\r\n\x1a\n" + b"\x00" * 100, "is binary data"),
])
def test_bad_input_is_one_line(tmp_path, content, message):
    log = tmp_path / "x.log"
    log.write_bytes(content)
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "explain", str(log)], capture_output=True, text=True)
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("make,message", [(lambda p: p / "missing.log", "no such file"),
                                          (lambda p: p, "is a directory")])
def test_missing_or_directory(tmp_path, make, message):
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "explain", str(make(tmp_path))], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_invalid_utf8_is_read():
    findings, _ = explain(b"\xff\xfe garbage \xc3\nAssertionError: Check batch related parameters. train_batch_size "
                          b"is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 8 != 1 * 1 * 2"
                          .decode("utf-8", "replace"))
    assert findings[0].id == "DS102"


def test_eight_ranks_ten_thousand_lines():
    """The benchmark's log (benchmarks/explain_speed.py): 8 ranks interleaved, an OOM on rank 6 near the end, then
    the other ranks' connection errors and watchdog timeouts."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from explain_speed import eight_rank_log

    text, oom_line = eight_rank_log(1300)
    findings, result = explain(text)
    assert result["lines"] > 10_000 and result["ranks"] == list(range(8))
    assert findings[0].id == "MEM501" and findings[0].evidence.startswith(f"line {oom_line}: rank 6:")


def test_no_needle_hides_another():
    from dsdoctor.checks.logs import SIGNATURES

    needles = {n for s in SIGNATURES for n in s.needles}
    assert [(a, b) for a in needles for b in needles if a != b and a in b] == []


# --- from a trial by a new user ---------------------------------------------------------------------------------------

WATCHDOG = ("[rank{r}]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank {r}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600042 "
            "milliseconds before timing out.")
KEYERROR = ("[rank1]: Traceback (most recent call last):\n"
            "[rank1]:   File \"train.py\", line 88, in collate\n"
            "[rank1]:     ids = [s[\"input_ids\"] for s in batch]\n"
            "[rank1]: KeyError: 'input_ids'\n")


def test_an_unknown_python_error_is_the_first_failure_before_its_cascade():
    findings, result = explain(KEYERROR + WATCHDOG.format(r=0) + "\n")
    assert [f.id for f in findings] == ["LOG805", "LOG801"]
    assert findings[0].evidence == ("line 4: rank 1: KeyError: 'input_ids'; stopped in the script train.py (collate), "
                                    "line 88: `ids = [s[\"input_ids\"] for s in batch]` (the traceback's innermost frame)")
    assert result["origin"] == {"package": None, "file": "train.py", "function": "collate", "line": 88,
                                "code": 'ids = [s["input_ids"] for s in batch]', "from": "traceback"}
    code, report, _ = run("-", input=KEYERROR + "[ERROR] ['python', '-u', 'train.py', '--local_rank=1'] exits with "
                                                "return code = 1\n")
    assert code == 1 and report["findings"][0]["id"] == "LOG805"


def test_warmup_auto_is_ds101():
    findings, _ = explain("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
                          "ValueError: warmup_num_steps must be a positive integer, got auto\n")
    assert findings[0].id == "DS101"


def test_code_quoted_in_a_traceback_is_not_a_failure():
    log = ("Traceback (most recent call last):\n  File \"train.py\", line 12, in <module>\n"
           "    model = AutoModel.from_pretrained(path, trust_remote_code=True)\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    findings, _ = explain(log)
    assert [f.id for f in findings] == ["MEM501"]


def test_store_retries_at_start_up_are_not_a_failure():
    retry = ("[W socket.cpp:464] [c10d] The client socket has failed to connect to [node0]:29500 (errno: 111 - "
             "Connection refused).\n")
    code, report, _ = run("-", input=retry * 3 + "[INFO] [launch.py:347:main] Process 1201 exits successfully.\n")
    assert code == 0 and report["findings"][0]["id"] == "LOG800"
    findings, _ = explain(retry + "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) "
                                  "local_rank: 1 (pid: 4242) of binary: /usr/bin/python\n")
    assert findings[0].id == "MEM504" and "rank 1 (pid 4242)" in findings[0].evidence


def test_line_numbers_are_grep_numbers_with_progress_bars():
    bars = "".join(f"\r{i}%|#" for i in range(100))
    findings, _ = explain(f"start\n{bars}\nstep\nRuntimeError: CUDA error: no kernel image is available for execution "
                          f"on the device\n")
    assert findings[0].evidence.startswith("line 4: ")


def test_a_huge_log_keeps_the_file_s_line_numbers(tmp_path, monkeypatch):
    from dsdoctor.commands import explain as command

    monkeypatch.setattr(command, "MAX_BYTES", 4000)
    monkeypatch.setattr(command, "HEAD_BYTES", 1000)
    log = tmp_path / "big.log"
    lines = [f"step {i} loss 1.0" for i in range(1000)] + ["RuntimeError: CUDA error: no kernel image is available "
                                                          "for execution on the device"]
    log.write_text("\n".join(lines) + "\n")
    report = command.run_explain(str(log))
    first = report.findings[0]
    assert first.id == "ENV308" and first.evidence.startswith("line 1001: ")
    assert "of this log, its middle, were not read" in first.evidence
    start, end = report.result["skipped_lines"]
    assert 1 < start < end < 1001


def test_watchdog_suspects_with_several_world_sizes_and_node_prefixes():
    log = ("[INFO] tp_world_size=1 dp_world_size=8 dist_world_size=8\n"
           + "\n".join(f"node{r // 4}: " + WATCHDOG.format(r=r) for r in range(8) if r != 5) + "\n")
    findings, result = explain(log)
    assert findings[0].id == "LOG801" and "rank(s) [5] did not time out" in findings[0].evidence
    assert result["ranks"] == [0, 1, 2, 3, 4, 6, 7]


@pytest.mark.parametrize("encode", [lambda t: t.encode("utf-16"), lambda t: b"\x00" * 4096 + t.encode()])
def test_utf16_and_leading_nul_logs_are_read(tmp_path, encode):
    log = tmp_path / "x.log"
    log.write_bytes(encode("noise\nRuntimeError: CUDA error: no kernel image is available for execution on the "
                           "device\n"))
    code, report, _ = run(str(log))
    assert code == 1 and report["findings"][0]["id"] == "ENV308"


# --- from a second trial ----------------------------------------------------------------------------------------------

def ids(text):
    findings, _ = explain(text)
    return [f.id for f in findings]


TB = "Traceback (most recent call last):\n  File \"/work/data.py\", line 44, in __getitem__\n    return ex[k]\n"
WATCH = ("[E ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
         "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800042 milliseconds before timing out.\n")


def test_without_rank_prefixes_an_unknown_error_is_not_hidden_by_what_follows():
    assert ids(TB + "KeyError: 'labels'\n" + WATCH.format(r=0) + WATCH.format(r=1)) == ["LOG805", "LOG801"]


def test_a_traceback_glued_to_a_progress_bar():
    assert ids(" 50%|#####| 500/1000 [10:00<10:00, 1.20s/it]" + TB + "ValueError: bad length\n")[0] == "LOG805"


def test_a_handled_exception_is_not_the_failure():
    handled = TB + "PIL.UnidentifiedImageError: cannot identify image file\n" + "".join(
        f" {p}%|##| {p}/100 [00:10<00:10, 1.00it/s]\n" for p in (10, 20, 30))
    assert ids(handled + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n") == ["MEM501"]
    assert ids(handled + "{'train_runtime': 10.0, 'train_loss': 1.0}\n") == ["LOG800"]


def test_an_exception_ignored_at_exit_is_not_a_failure():
    log = ("{'train_runtime': 10.0}\nException ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f>\n"
           + TB + "AttributeError: 'NoneType' object has no attribute 'python_exit_status'\n")
    assert ids(log) == ["LOG800"]


def test_torchrun_s_summary_alone():
    summary = ("E0601 10:40:02 api.py:833] failed (exitcode: 1) local_rank: 0 (pid: 2201) of binary: /usr/bin/python3\n"
               "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n"
               "  exitcode  : 1 (pid: 2201)\n")
    findings, _ = explain(summary + "  traceback : To enable traceback see: https://pytorch.org/docs\n")
    assert findings[0].id == "LOG806" and findings[0].evidence.startswith("line 1: rank 0 exited with code 1")
    with_traceback = summary + ("  traceback : Traceback (most recent call last):\n"
                                "    File \"/work/data.py\", line 44, in __getitem__\n      x = ex['conversations']\n"
                                "  KeyError: 'conversations'\n")
    assert ids(with_traceback)[0] == "LOG805"


@pytest.mark.parametrize("line", ["Exception: bad sample at 10231", "StopIteration", "AssertionError"])
def test_exceptions_without_a_prefix(line):
    traceback = "".join(f"[rank1]: {text}\n" for text in (TB + line).splitlines())
    assert ids(traceback + "[rank0]:" + WATCH.format(r=0))[0] == "LOG805"


@pytest.mark.parametrize("line", [
    "Namespace(model='x', trust_remote_code=True, lr=1e-05)",
    "/usr/lib/python3/wandb.py:10: UserWarning: logging disabled (ModuleNotFoundError: No module named 'wandb')",
    "[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
    "[W601 10:00:00.000 socket.cpp:697] [c10d] The client socket has failed to connect to [node0]:29500 (errno: 111 - "
    "Connection refused).",
    "'(MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded (Caused by "
    "NameResolutionError(: Failed to resolve 'huggingface.co' ([Errno -3] Temporary failure in name resolution)\"))' "
    "thrown while requesting HEAD https://huggingface.co/x/resolve/main/config.json",
])
def test_lines_of_good_runs_are_not_failures(line):
    assert ids(line + "\n{'train_runtime': 10.0}\n[INFO] [launch.py:351:main] Process 1 exits successfully.\n") == \
        ["LOG800"]


def test_pdsh_source_lines_are_quoted_code():
    log = ("node1: [2024-06-01 10:00:00,000] [INFO] starting\nnode1: Traceback (most recent call last):\n"
           "node1:   File \"/work/guard.py\", line 44, in check\n"
           "node1:     raise SystemExit(\"CUDA error: out of memory\")\nnode1: KeyError: 'conversations'\n")
    assert ids(log) == ["LOG805"]


def test_utf16_without_a_byte_order_mark(tmp_path):
    log = tmp_path / "x.log"
    log.write_bytes(("noise line\n" * 10 + "RuntimeError: CUDA error: no kernel image is available for execution on "
                     "the device\n").encode("utf-16-le"))
    code, report, _ = run(str(log))
    assert code == 1 and report["findings"][0]["id"] == "ENV308"


def test_a_run_that_finished_gets_a_warning_not_a_failure():
    log = ("WARNING - accelerate.utils.memory - torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. "
           "Reducing batch size from 32 to 16 and retrying.\n{'loss': 1.7, 'epoch': 1.0}\n"
           "{'train_runtime': 612.1, 'train_loss': 1.8, 'epoch': 1.0}\n"
           "[INFO] [launch.py:351:main] Process 2201 exits successfully.\n")
    code, report, _ = run("-", input=log)
    first = report["findings"][0]
    assert code == 0 and (first["id"], first["severity"]) == ("MEM501", "warning")
    assert first["title"].startswith("the run finished, but:") and report["result"]["finished"] is True
    failed_after = log + "[ERROR] ['python', '-u', 't.py', '--local_rank=1'] exits with return code = 1\n"
    code, report, _ = run("-", input=failed_after)
    assert code == 1 and report["findings"][0]["severity"] == "error"


def test_a_nan_loss_spoils_a_run_that_finished():
    log = ("{'loss': '4.325', 'grad_norm': '2.352', 'epoch': '0.06'}\n{'loss': '0', 'grad_norm': 'nan', 'epoch': '0.12'}\n"
           "{'train_runtime': '0.07', 'train_loss': '0.54', 'epoch': '0.5'}\n")
    code, report, _ = run("-", input=log)
    assert code == 1 and (report["findings"][0]["id"], report["findings"][0]["severity"]) == ("TRN602", "error")


# --- issue 12 ---------------------------------------------------------------------------------------------------------

def explain_cli(args, input=None):
    """``dsdoctor explain ARGS`` in-process: (exit code, stdout, stderr)."""
    from fuzzing import run as fuzz_run

    result = fuzz_run(["explain", *args], input_text=input)
    return result.exit_code, result.stdout, result.stderr


def report_of(args, input=None):
    code, out, err = explain_cli([*args, "--json", "-"], input=input)
    return code, (json.loads(out) if out.strip().startswith("{") else None), err


BATCH = ("AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
         "gradient_acc_step * world_size 16 != 2 * 1 * 2")
TRACEBACK = ("Traceback (most recent call last):\n  File \"/workspace/job/train.py\", line 8, in <module>\n"
             "    engine, *_ = deepspeed.initialize(model=model, config=config)\n")


def test_a_rank_s_exit_is_not_reported_as_missing_when_its_error_is_in_the_log():
    """Issue 12 item 8: DS102 of rank 0, then LOG806 'rank 0 exited with code 1; no error of that rank is in this
    log' contradicted it."""
    log = ("[ERROR] [launch.py:321:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=0'] exits with return "
           "code = 1\n" + "".join(f"[rank0]: {ln}\n" for ln in (TRACEBACK + BATCH).splitlines()))
    assert ids(log) == ["DS102"]
    assert ids((LOGS / "batch-assertion" / "log.txt").read_text()) == ["DS102"]  # rank 1's, in the real log
    # without rank prefixes any error may be the rank's own: no claim that it is missing
    assert ids("exits with return code = 1 --local_rank=1'] exits with return code = 1\n" + TRACEBACK + BATCH) == \
        ["DS102"]
    # a rank with no error of its own still gets LOG806, after the failure that ended the run
    other = "[ERROR] ['python', '-u', 'train.py', '--local_rank=1'] exits with return code = 1\n"
    assert ids(log + other) == ["DS102", "LOG806"]
    # MEM504's "killed by signal 9 with no Python error" is the same claim
    killed = "[ERROR] ['python', '-u', 'train.py', '--local_rank=0'] exits with return code = -9\n"
    assert "MEM504" not in ids("".join(f"[rank0]: {ln}\n" for ln in (TRACEBACK + BATCH).splitlines()) + killed)


def _rank_files(tmp_path, names_and_lines):
    paths = []
    for name, lines in names_and_lines:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{ln}\n" for ln in lines))
        paths.append(str(path))
    return paths


def test_several_files_each_rank_from_its_name(tmp_path):
    """LOG806's own fix, `dsdoctor explain DIR/*.log`, was refused ("Got unexpected extra argument")."""
    paths = _rank_files(tmp_path, [
        ("logs/20240101103000_rank0.log", ["[2024-01-01 10:00:00,000] [INFO] starting", "step=1 loss 2.0"]),
        ("logs/20240101103000_rank1.log", ["[2024-01-01 10:00:00,000] [INFO] starting", *TRACEBACK.splitlines(),
                                           "KeyError: 'input_ids'"]),
    ])
    code, report, _ = report_of(paths)
    first = report["findings"][0]
    assert code == 1 and first["id"] == "LOG805"
    assert first["evidence"].startswith(f"{paths[1]} line 5: rank 1: KeyError: 'input_ids'")
    assert report["result"]["ranks"] == [0, 1] and report["result"]["log"] == paths
    assert report["result"]["first_failure"]["file"] == paths[1]


@pytest.mark.parametrize("name,rank", [("rank3.log", 3), ("node1-rank3.txt", 3), ("20240101103000_rank12.log", 12),
                                       ("run/attempt_0/5/stdout.log", 5), ("train.log", None), ("myrank3.log", None),
                                       ("rank99999999999.log", None)])
def test_a_file_s_rank_from_its_name(name, rank):
    from dsdoctor.commands.explain import rank_of_file

    assert rank_of_file(name) == rank


def test_a_rank_prefix_inside_a_file_wins_over_its_name(tmp_path):
    paths = _rank_files(tmp_path, [("all.log", ["[rank3]: " + BATCH]), ("rank0.log", ["step=1 loss 2.0"])])
    code, report, _ = report_of(paths)
    assert code == 1 and report["findings"][0]["evidence"].startswith(f"{paths[0]} line 1: rank 3: ")


def test_several_files_are_merged_by_their_timestamps(tmp_path):
    """One file per rank: the first failure is the earliest in time, not the first file's (rank 0's watchdog timeout
    came 30 minutes after rank 1's out-of-memory)."""
    watchdog = ("[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
                "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800042 milliseconds before "
                "timing out.")
    paths = _rank_files(tmp_path, [
        ("rank0.log", ["[2024-01-01 10:00:00,000] [INFO] step=1", "[2024-01-01 10:31:00,000] [ERROR] watchdog",
                       watchdog]),
        ("rank1.log", ["[2024-01-01 10:00:00,000] [INFO] step=1", "[2024-01-01 10:01:00,000] [ERROR] step failed",
                       *TRACEBACK.splitlines(), "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 "
                                                "GiB. GPU 1 has a total capacity of 79.15 GiB of which 1.10 GiB is free."]),
    ])
    code, report, _ = report_of(paths)
    assert [f["id"] for f in report["findings"]] == ["MEM501", "LOG801"]
    assert report["findings"][0]["evidence"].startswith(f"{paths[1]} line 6: rank 1: CUDA out of memory")


def test_several_huge_files_keep_each_file_s_cap_and_line_numbers(tmp_path, monkeypatch):
    from dsdoctor.commands import explain as command

    monkeypatch.setattr(command, "MAX_BYTES", 8000)
    monkeypatch.setattr(command, "HEAD_BYTES", 2000)
    monkeypatch.setattr(command, "MAX_TOTAL_BYTES", 8000)
    monkeypatch.setattr(command, "MIN_FILE_BYTES", 4000)
    lines = [f"step {i} loss 1.0" for i in range(2000)]
    paths = _rank_files(tmp_path, [("rank0.log", lines), ("rank1.log", lines + [BATCH])])
    report = command.run_explain(paths)
    first = report.findings[0]
    assert first.id == "DS102" and first.evidence.startswith(f"{paths[1]} line 2001: rank 1: ")
    skipped = report.result["skipped_lines"]
    assert set(skipped) == set(paths) and all(1 < a < b < 2001 for a, b in skipped.values())
    assert f"of {paths[0]} were not read" in first.evidence and report.result["lines"] == 4001


def test_stdin_may_be_one_of_several_but_only_once(tmp_path):
    paths = _rank_files(tmp_path, [("rank0.log", ["step=1 loss 2.0"])])
    code, report, _ = report_of([paths[0], "-"], input="[rank1]: " + BATCH + "\n")
    assert code == 1 and report["findings"][0]["evidence"].startswith("stdin line 1: rank 1: ")
    code, _, err = explain_cli(["-", "-"], input="x\n")
    assert code == 2 and "more than once" in err


# a dsdoctor report instead of a training log (issue 12 item 9)

LOCK_CASE = LOGS / "build-lock-stale"


def test_smoke_s_report_piped_into_explain_points_to_the_run_s_log():
    """The real report of a timed-out smoke, as `dsdoctor smoke ... 2>&1 | dsdoctor explain -` gives it: LOG800 with
    table fragments as evidence, exit 0, before."""
    code, out, err = explain_cli(["-"], input=(LOCK_CASE / "smoke-report.txt").read_text())
    assert code == 2 and out == ""
    assert err.strip() == ("dsdoctor: error: stdin is a dsdoctor smoke report, not a training log: run `dsdoctor "
                           "explain /workspace/job/dsdoctor-smoke/train.log` (the run's own output, kept in its --out "
                           "directory)")


@pytest.mark.parametrize("result,path", [
    ({"out": "runs/x", "log": "runs/x/train.log"}, "runs/x/train.log"),
    ({"out": "runs/y/"}, "runs/y/train.log"),
    ({}, "<--out>/train.log` (dsdoctor-smoke/train.log by default)"),
])
@pytest.mark.parametrize("fmt", ["table", "markdown", "json"])
def test_every_format_of_a_smoke_report_is_recognised(tmp_path, result, path, fmt):
    import io

    from dsdoctor import render
    from dsdoctor.checks.training import TRN608
    from dsdoctor.report import Report

    report = Report("smoke", result={"world_size": 2, **result, "steps": 0})
    report.add(TRN608.finding("no end after 40 s; rank(s) [0, 1] never logged a step"))
    if fmt == "table":
        buffer = io.StringIO()
        render.render_table(report, file=buffer)
        text = buffer.getvalue()
    else:
        text = render.render_markdown(report) if fmt == "markdown" else render.render_json(report)
    log = tmp_path / "smoke.txt"
    log.write_text("starting ranks   0/5 steps  0:00:40\n" + text)
    code, _, err = explain_cli([str(log)])
    assert code == 2 and f"is a dsdoctor smoke report, not a training log: run `dsdoctor explain {path}" in err


def test_other_reports_and_explain_s_own(tmp_path):
    code, _, err = explain_cli(["-"], input="## dsdoctor check\n\n| status | id | finding | evidence | fix |\n|---|---|---|---|---|\n"
                                    "| FAIL | DS102 | train_batch_size != ... | 16 != 2 x 1 x 2 | drop it |\n")
    assert code == 2 and "is a dsdoctor check report, not a training log: explain reads a training run's output" in err
    first = tmp_path / "first.txt"
    first.write_text(json.dumps({"command": "explain", "dsdoctor_version": "0.1.0", "findings": [],
                                 "result": {"log": "train.log"}}, indent=2))
    code, _, err = explain_cli([str(first)])
    assert code == 2 and "is a dsdoctor explain report, not a training log: it explained train.log" in err


def test_a_training_log_with_a_report_in_it_is_still_explained(tmp_path):
    """A training script that runs `dsdoctor check` first: the run's own failure after the report is found, and the
    report's lines (FAIL rows) are no failure of the run."""
    check = ("                 dsdoctor check                 \n┏━━━━━━━━┳━━━━━━━━┓\n┃ status ┃ id     ┃\n"
             "│ FAIL   │ DS102  │ train_batch_size 16 != 2 x 1 x 2; RuntimeError: CUDA out of memory │\n"
             "└────────┴────────┘\n1 FAIL\n")
    log = check + TRACEBACK + "KeyError: 'labels'\n"
    findings, _ = explain(log)  # the lines alone would read the report's row as an OOM
    assert findings[0].id == "MEM501"
    code, report, _ = report_of(["-"], input=log)
    assert code == 1 and [f["id"] for f in report["findings"]] == ["LOG805"]
    assert report["findings"][0]["evidence"].startswith("line 10: KeyError: 'labels'")


# quadratic regular expressions (issue 12, fuzz item 6)

OOM_LINE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "23.65 GiB of which 1.10 GiB is free.")


@pytest.mark.parametrize("log,rule", [
    (OOM_LINE + "0" * 100_000, "MEM501"),  # 10 s at 20,000 digits, over 60 s at 100,000, before (the issue)
    (OOM_LINE + "." * 100_000, "MEM501"),
    ("NCCL WARN socketStartConnect: Connect to " + "1" * 160_000, "LOG810"),  # 37 s; a WARN is no clean log
    ("1." * 10_000 + " " + OOM_LINE, "MEM501"),  # a long dotted word in a log with a CUDA OOM: 11 s, before
    ("." * 20_000 + OOM_LINE, "MEM501"),  # over 20 s
    ("a." * 10_000 + "\n" + OOM_LINE, "MEM501"),
    ("[W" + "1" * 50_000 + " socket.cpp:1]\n" + OOM_LINE, "MEM501"),
    ("Traceback (most recent call last)\n" + "a." * 50_000 + "\n" + OOM_LINE, "MEM501"),
    ("12 validation errors for DeepSpeed" + "0" * 50_000, "LOG800"),
    ("[rank0]: Watchdog caught collective operation timeout" + "[" * 50_000, "LOG800"),
    ("\x1b]" * 30_000 + OOM_LINE, "MEM501"),  # 2.6 s
    ("".join(f"{i}%|" for i in range(20_000)) + "\n" + OOM_LINE, "MEM501"),
])
def test_pathological_lines_are_read_in_linear_time(log, rule):
    start = time.perf_counter()
    findings, _ = explain(log)
    assert time.perf_counter() - start < 1.0 and findings[0].id == rule


#: patterns that are only ever used with .match (anchored at a line's start)
MATCH_ONLY = {"PREFIX", "HOST_FOLLOWER", "C10D_WARNING", "PYTHON_ERROR", "CONTINUES", "GIB"}
FILLERS = ["0", "a", ".", " ", "a.", "0.", "0 ", "[", "]", "_", "-", "'", ":", "(", "\x1b[", "\x1b]", "1 * ", "%|",
           "a....", "0 GiB "]


def _all_patterns():
    import dsdoctor.checks.logs as logs
    from dsdoctor.commands import explain as command

    from dsdoctor.checks.logs import context, imports, precision

    patterns = {f"logs.{n}": p for n, p in vars(logs).items() if isinstance(p, re.Pattern)}
    for module in (context, imports, precision):  # their own patterns (the signatures' are below)
        patterns.update({f"{module.__name__.rsplit('.', 1)[-1]}.{n}": p for n, p in vars(module).items()
                         if isinstance(p, re.Pattern)})
    patterns.update({f"explain.{n}": p for n, p in vars(command).items() if isinstance(p, re.Pattern)})
    patterns.update({f"signature {s.name}": s.pattern for s in logs.SIGNATURES})
    return patterns


def test_every_pattern_is_linear_on_long_runs_of_one_character():
    """The timing harness of issue 12: every compiled pattern of explain (module level and signatures) against
    40,000 characters of one filler, alone and after each of its signature's needles (and its words repeated): a
    pattern that backtracks over the run takes seconds there; a bounded one, milliseconds."""
    import dsdoctor.checks.logs as logs

    needles = {f"signature {s.name}": s.needles for s in logs.SIGNATURES}
    slow = []
    for name, pattern in _all_patterns().items():
        use = pattern.match if name.split(".")[-1] in MATCH_ONLY else pattern.search
        prefixes = [""] + list(needles.get(name, ()))
        fillers = FILLERS + [n + " " for n in needles.get(name, ())] + [p.split()[0] + " " for p in prefixes if p]
        for prefix in prefixes:
            for filler in fillers:
                text = prefix + filler * (40_000 // len(filler))
                start = time.perf_counter()
                use(text)
                took = time.perf_counter() - start
                if took > 0.25:
                    slow.append((name, prefix, filler, round(took, 2)))
    assert slow == []


# unbounded and blocking reads (issue 12, fuzz item 7)

def _explain_process(args, stdin=None, timeout=30):
    """`dsdoctor explain ARGS` in a process with its address space capped at 2 GiB (so that reading /dev/zero whole,
    as before, fails at once instead of taking the machine's memory) and a wall-clock limit."""
    import resource

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2 ** 30, 2 * 2 ** 30))

    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "explain", *args], stdin=stdin, capture_output=True,
                          text=True, timeout=timeout, preexec_fn=cap)
    return proc, time.perf_counter() - start


@pytest.mark.parametrize("make,message", [
    (lambda tmp: (os.mkfifo(tmp / "fifo"), str(tmp / "fifo"))[1], "a named pipe (FIFO), not a regular file"),
    (lambda tmp: "/dev/zero", "/dev/zero: a character device, not a regular file"),
    (lambda tmp: "/dev/urandom", "/dev/urandom: a character device, not a regular file"),
])
def test_what_is_not_a_regular_file_is_refused_at_once(tmp_path, make, message):
    """A FIFO blocked explain forever; /dev/zero and /dev/urandom were read until MemoryError."""
    proc, took = _explain_process([make(tmp_path)])
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert took < 20


@pytest.mark.parametrize("device,message", [("/dev/zero", "stdin is binary data (NUL bytes), not a text log"),
                                            ("/dev/urandom", "stdin is binary data, not a text log")])
def test_endless_binary_stdin_is_refused_at_once(device, message):
    with open(device, "rb") as stdin:
        proc, took = _explain_process(["-"], stdin=stdin)
    assert proc.returncode == 2 and proc.stderr.strip() == f"dsdoctor: error: {message}" and took < 20


def test_a_huge_sparse_file_is_refused_by_its_size(tmp_path):
    """64 GiB of nothing (a sparse file): refused before reading, not read into memory."""
    log = tmp_path / "huge.log"
    with open(log, "wb") as f:
        f.truncate(64 * 2 ** 30)
    proc, took = _explain_process([str(log)])
    assert proc.returncode == 2 and "64 GiB, more than explain reads (16 GiB)" in proc.stderr and took < 20


def test_stdin_keeps_its_head_and_tail_within_the_cap(monkeypatch):
    from dsdoctor.commands import explain as command

    monkeypatch.setattr(command, "MAX_BYTES", 4000)
    monkeypatch.setattr(command, "HEAD_BYTES", 1000)
    log = "".join(f"step {i} loss 1.0\n" for i in range(5000)) + "[rank1]: " + BATCH + "\n"
    code, report, _ = report_of(["-"], input=log)
    first = report["findings"][0]
    assert code == 1 and first["id"] == "DS102" and first["evidence"].startswith("line 5001: rank 1: ")
    assert "of this log, its middle, were not read" in first["evidence"]
    start, end = report["result"]["skipped_lines"]
    assert 1 < start < end < 5001 and report["result"]["lines"] == 5001


def test_endless_text_on_stdin_stops_at_the_cap(monkeypatch):
    from dsdoctor.commands import explain as command

    monkeypatch.setattr(command, "MAX_STDIN_READ_BYTES", 3 * 2 ** 20)
    code, _, err = explain_cli(["-"], input="y\n" * (2 * 2 ** 20))
    assert code == 2 and err.strip() == ("dsdoctor: error: stdin: more than 3 MiB; give the log's last part "
                                         "(`tail -c 64M LOG | dsdoctor explain -`)")


def test_a_regular_file_over_the_cap_is_streamed_not_loaded(tmp_path, monkeypatch):
    """The middle of a large log is counted, never held: 40 MiB read with a 1 MiB budget (line numbers kept)."""
    import tracemalloc

    from dsdoctor.commands import explain as command

    monkeypatch.setattr(command, "MAX_BYTES", 2 ** 20)
    monkeypatch.setattr(command, "HEAD_BYTES", 2 ** 18)
    log = tmp_path / "big.log"
    with open(log, "w") as f:
        for _ in range(40):
            f.write("step 1 loss 1.0 " * 64 + "\n" + ("x" * 1023 + "\n") * 1000)
        f.write(BATCH + "\n")
    lines = 40 * 1001 + 1
    tracemalloc.start()
    report = command.run_explain(str(log))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert report.findings[0].id == "DS102" and report.findings[0].evidence.startswith(f"line {lines}: ")
    assert peak < 12 * 2 ** 20 and report.result["lines"] == lines


# internal errors from numbers in a log (issue 12, fuzz item 8)

def test_numbers_too_long_for_int_are_text():
    digits = "1234" * 1075  # 4,300 digits: past Python's int() limit
    findings, _ = explain(BATCH.replace("16 != 2", f"{digits} != 2"))
    assert findings[0].id == "DS102"
    assert findings[0].evidence == ("line 1: train_batch_size 123412341234...(4,300 digits) != 2 x 1 x 2 (micro batch "
                                    "x gradient accumulation x world size; numbers too long to be batch sizes)")
    findings, _ = explain(BATCH.replace("!= 2 * 1", f"!= 2 * {digits}"))
    assert findings[0].id == "DS102" and "!= 2 x 123412341234...(4,300 digits) x 2" in findings[0].evidence
    findings, _ = explain(BATCH.replace("16 != 2", f"{digits} != {digits}"))  # longer than a line is matched on
    assert findings[0].id in ("DS102", "LOG810")
    findings, _ = explain(WATCHDOG.format(r=0).replace("600000)", "9" * 5000 + ")"))
    assert findings[0].id == "LOG801" and "999999999999...(5,000 digits) ms" in findings[0].evidence


@pytest.mark.parametrize("prefix", ["[rank99999999999999999999999]: ", "[rank" + "9" * 5000 + "]: ",
                                    "[default1234567]: "])
def test_a_huge_rank_prefix_is_text(prefix):
    lines = read_lines(prefix + "ValueError: x\n")
    assert lines[0].rank is None and lines[0].text == prefix + "ValueError: x"
    findings, _ = explain(TRACEBACK + prefix + "KeyError: 'x'\n")
    assert findings[0].id in ("LOG805", "LOG810")


def test_a_huge_world_size_builds_no_huge_set():
    start = time.perf_counter()
    findings, _ = explain("[INFO] world_size=999999999\n" + WATCHDOG.format(r=0) + "\n")
    assert time.perf_counter() - start < 1.0
    assert findings[0].id == "LOG801" and "did not time out" not in findings[0].evidence  # not a believable size
    findings, _ = explain("[INFO] world_size=1000000\n" + WATCHDOG.format(r=0) + "\n")
    assert "rank(s) [1, 2, 3," in findings[0].evidence and "(999,967 more)] did not time out" in findings[0].evidence


def test_a_size_that_is_no_number_is_text():
    findings, _ = explain("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.2.3 GiB. GPU 0 has a total "
                          "capacity of 99999999999999999999 GiB of which 1.10 GiB is free.")
    assert findings[0].id == "MEM501" and "--gpu-mem" not in findings[0].fix


# a run stopped from outside, and the stale build lock (issue 12 item 1, explain's part)

SIGNAL = ("Traceback (most recent call last):\n  File \"/opt/conda/lib/python3.10/site-packages/torch/distributed/run.py\","
          " line 1032, in <module>\n    main()\ntorch.distributed.elastic.multiprocessing.api.SignalException: Process "
          "4242 got signal: {sig}\n")
RECEIVED = ("W0601 10:30:00.000000 4242 site-packages/torch/distributed/elastic/agent/server/api.py:753] Received {sig} "
            "death signal, shutting down workers\n")


def test_the_real_stale_lock_log_names_the_op_build():
    """The real log of smoke on a stale lock (cases/logs/build-lock-stale: made by produce.py): LOG805 SignalException
    before; now ENV329 with the lock path, inconclusive between a stale lock and a build still running, and LOG807."""
    findings, result = explain((LOCK_CASE / "log.txt").read_text())
    assert [f.id for f in findings] == ["ENV329", "LOG807"]
    build, stop = findings
    assert build.severity == "error" and "(inconclusive)" in build.title
    assert "deepspeed_shm_comm_op built successfully' line never came" in build.evidence
    assert build.evidence.endswith("lock: ${TORCH_EXTENSIONS_DIR:-$HOME/.cache/torch_extensions/py311_cpu}/"
                                   "deepspeed_shm_comm/lock")
    assert "s before the stop (line " in build.evidence and ", SIGTERM)" in build.evidence
    assert "Inconclusive between a stale build lock and a build still running" in build.fix
    assert "`ls -l ${TORCH_EXTENSIONS_DIR:-$HOME/.cache/torch_extensions/py311_cpu}/deepspeed_shm_comm/lock`" in build.fix
    assert "`dsdoctor env`" in build.fix
    assert "stopped from outside by signal 15 (SIGTERM" in stop.evidence and "no training step was logged" in \
        stop.evidence and "Setting accelerator to CPU" in stop.evidence
    assert result["first_failure"]["rule"] == "ENV329"


VERBOSE_BUILD = [
    "[2024-06-01 10:00:00,000] [INFO] [real_accelerator.py:161:get_accelerator] Setting ds_accelerator to cuda "
    "(auto detect)",
    "Using /root/.cache/torch_extensions/py310_cu121 as PyTorch extensions root...",
]


@pytest.mark.parametrize("extra,lock", [
    ([], "/root/.cache/torch_extensions/py310_cu121/*/lock"),  # waiting on another's lock: only the root is printed
    (["Creating extension directory /root/.cache/torch_extensions/py310_cu121/fused_adam...",
      "Emitting ninja build file /root/.cache/torch_extensions/py310_cu121/fused_adam/build.ninja...",
      "Building extension module fused_adam..."], "/root/.cache/torch_extensions/py310_cu121/fused_adam/lock"),
])
def test_a_stop_during_a_verbose_jit_build_is_env329_with_its_lock(extra, lock):
    log = "\n".join(VERBOSE_BUILD + extra) + "\n" + RECEIVED.format(sig=15) + SIGNAL.format(sig=15)
    findings, _ = explain(log)
    assert [f.id for f in findings] == ["ENV329", "LOG807"]
    assert findings[0].evidence.startswith("line 2: a JIT op build") and findings[0].evidence.endswith(f"lock: {lock}")
    assert f"`ls -l {lock}`" in findings[0].fix


def test_a_finished_build_is_not_where_it_hung():
    log = "\n".join(VERBOSE_BUILD + ["Loading extension module fused_adam...", "Time to load fused_adam op: 0.1 s"] +
                    [f"{{'loss': 1.{i}, 'epoch': 0.{i}}}" for i in range(3)]) + "\n" + RECEIVED.format(sig=2)
    findings, _ = explain(log)
    assert [f.id for f in findings] == ["LOG807"]
    assert "stopped from outside by signal 2 (SIGINT: a Ctrl-C)" in findings[0].evidence
    assert "the last training progress before it: line 7: {'loss': 1.2, 'epoch': 0.2}" in findings[0].evidence


@pytest.mark.parametrize("log,what", [
    (SIGNAL.format(sig="Signals.SIGTERM"), "signal 15 (SIGTERM"),  # python 3.8's str() of the signal
    ("[rank0]: Traceback (most recent call last):\n[rank0]:   File \"train.py\", line 3, in <module>\n"
     "[rank0]:     time.sleep(1)\n[rank0]: KeyboardInterrupt\n", "signal 2 (SIGINT: a Ctrl-C)"),
    ("slurmstepd: error: *** STEP 1234.0 ON node01 CANCELLED AT 2024-06-01T10:00:00 DUE TO TIME LIMIT ***\n",
     "the job scheduler cancelled the job (time limit)"),
    ("[2024-06-01 10:00:00,000] [INFO] [launch.py:319:sigkill_handler] Main process received SIGTERM, exiting\n",
     "signal 15 (SIGTERM"),
])
def test_a_stop_from_outside_is_not_a_python_error_of_the_run(log, what):
    findings, _ = explain("[2024-06-01 09:00:00,000] [INFO] step=10, skipped=0\n" + log)
    assert findings[0].id == "LOG807" and what in findings[0].evidence
    assert "the last training progress before it: line 1:" in findings[0].evidence


def test_a_failure_before_the_stop_is_the_cause_and_errors_after_it_are_not():
    oom = "[rank1]: " + OOM_LINE + "\n"
    after = "[rank0]: Traceback (most recent call last):\n[rank0]: RuntimeError: DataLoader worker (pid 7) is killed\n"
    findings, _ = explain(oom + RECEIVED.format(sig=15) + after)
    assert [f.id for f in findings] == ["MEM501", "LOG807"]  # and LOG807 does not say "not by an error of its own"
    assert "stopped from outside by signal 15 (SIGTERM" in findings[1].evidence
    assert "after the failure at line 1" in findings[1].evidence and "not by an error" not in findings[1].evidence
    assert findings[1].title == "later: the run was stopped from outside (a signal)"
    assert ids(RECEIVED.format(sig=15) + after)[0] == "LOG807"
    killed = "[ERROR] ['python', '-u', 'train.py', '--local_rank=1'] exits with return code = -9\n"
    assert ids(RECEIVED.format(sig=15) + killed)[0] == "LOG807"  # the launcher's kill after the stop, not the OOM killer


@pytest.mark.parametrize("log,budget", [("\n" * 300 + "[rank1]: " + BATCH + "\n", None),
                                        ("a\n" * 3000 + "[rank1]: " + BATCH + "\n", 4000)])
def test_a_log_of_millions_of_short_lines_keeps_a_bounded_number(tmp_path, monkeypatch, log, budget):
    """64 MiB of newlines were 64 million line objects; at most MAX_LINES are kept (head and tail), numbered as the
    file's lines."""
    from dsdoctor.commands import explain as command

    monkeypatch.setattr(command, "MAX_LINES", 100)
    monkeypatch.setattr(command, "HEAD_LINES", 10)
    if budget:
        monkeypatch.setattr(command, "MAX_BYTES", budget)
        monkeypatch.setattr(command, "HEAD_BYTES", 1000)
    path = tmp_path / "lines.log"
    path.write_text(log)
    report = command.run_explain(str(path))
    total = log.count("\n")
    assert report.findings[0].id == "DS102" and report.findings[0].evidence.startswith(f"line {total}: rank 1: ")
    assert report.result["lines"] == total
    start, end = report.result["skipped_lines"]
    assert start == 11 and end == total - 100 + 10


def test_explain_imports_no_torch_nor_deepspeed():
    code = ("import sys\nfrom click.testing import CliRunner\nfrom dsdoctor.cli import cli\n"
            f"CliRunner().invoke(cli, ['explain', {str(LOGS / 'batch-assertion' / 'log.txt')!r}, "
            f"{str(LOCK_CASE / 'log.txt')!r}])\n"
            "print(sorted(m for m in ('torch', 'deepspeed', 'transformers') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "[]"


def test_torchrun_s_log_dir_layout_as_log806_s_fix_names_it(tmp_path):
    """LOG806's fix: `torchrun --log-dir DIR --redirects 3` then `dsdoctor explain DIR/*/attempt_*/*/std*.log`."""
    paths = _rank_files(tmp_path, [("run1/attempt_0/0/stderr.log", ["ok"]),
                                   ("run1/attempt_0/1/stderr.log", [*TRACEBACK.splitlines(), "KeyError: 'labels'"])])
    code, report, _ = report_of(sorted(str(p) for p in tmp_path.glob("*/attempt_*/*/std*.log")))
    assert code == 1 and report["findings"][0]["evidence"].startswith(f"{paths[1]} line 4: rank 1: KeyError")


def test_a_report_inside_a_longer_log_that_holds_no_failure_is_no_error():
    """A training log that printed a dsdoctor report and then trained: LOG800 for the log, not "this is a report"."""
    check = "## dsdoctor check\n\n| status | id | finding | evidence | fix |\n|---|---|---|---|---|\n| FAIL | DS102 | x |\n"
    code, report, _ = report_of(["-"], input=check + "".join(f"step={i} loss 1.0\n" for i in range(30)))
    assert code == 0 and report["findings"][0]["id"] == "LOG800"
    code, _, err = explain_cli(["-"], input=check + "step=1 loss 1.0\n")
    assert code == 2 and "is a dsdoctor check report" in err


def test_a_closed_stdin_is_one_line():
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "explain", "-"], capture_output=False, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=lambda: os.close(0), timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == ("dsdoctor: error: - : stdin is closed; give the log file, "
                                                            "or pipe the log into `dsdoctor explain -`")


def test_a_pydantic_block_lists_every_field_with_the_rule_check_gives():
    """pydantic v2 (DeepSpeed 0.10+; the plural header, which the signature missed) and v1 (DeepSpeed 0.9): every
    field, its value and type, pydantic's message, and check's rule for it."""
    v2 = ("Traceback (most recent call last):\n  File \"train.py\", line 10, in <module>\n"
          "pydantic_core._pydantic_core.ValidationError: 3 validation errors for DeepSpeedZeroConfig\n"
          "stage3_prefetch_bucket_size\n  Input should be a valid integer, got a number with a fractional part "
          "[type=int_from_float, input_value=15099494.4, input_type=float]\n"
          "    For further information visit https://errors.pydantic.dev/2.5/v/int_from_float\n"
          "stage3_max_live_paramters\n  Extra inputs are not permitted [type=extra_forbidden, input_value=1000000000, "
          "input_type=int]\n"
          "stage\n  Input should be less than or equal to 3 [type=less_than_equal, input_value=4, input_type=int]\n")
    findings, _ = explain(v2)
    assert findings[0].id == "DS199"
    assert ("stage3_prefetch_bucket_size = 15099494.4 (float): Input should be a valid integer, got a number with a "
            "fractional part [DS137]; stage3_max_live_paramters = 1000000000 (int): Extra inputs are not permitted "
            "[DS131]; stage = 4 (int): Input should be less than or equal to 3 [DS140]") in findings[0].evidence
    v1 = ("pydantic.error_wrappers.ValidationError: 1 validation error for DeepSpeedZeroConfig\n"
          "reduce_bucket_size\n  value is not a valid integer (type=type_error.integer)\n")
    findings, _ = explain(v1)
    assert findings[0].id == "DS137"  # its one field's rule: a value of the wrong type
    assert findings[0].evidence.endswith("reduce_bucket_size: value is not a valid integer [DS137]")


KINDS_TB = "Traceback (most recent call last):\n  File \"/work/train.py\", line 9, in <module>\n    main()\n"


@pytest.mark.parametrize("log,rule,evidence", [
    (KINDS_TB + "deepspeed.ops.op_builder.builder.CUDAMismatchException: >- DeepSpeed Op Builder: Installed CUDA "
     "version 12.1 does not match the version torch was compiled with 11.8, unable to compile cuda/cpp extensions "
     "without a matching cuda version.\n", "ENV304", "Installed CUDA version 12.1"),
    ("nvcc fatal   : Unsupported gpu architecture 'compute_90'\nninja: build stopped: subcommand failed.\n" + KINDS_TB
     + "RuntimeError: Error building extension 'fused_adam'\n", "ENV330", "compute_90"),
    (KINDS_TB + "RuntimeError: Ninja is required to load C++ extensions\n", "ENV306", "Ninja is required"),
    # the WARN is the cause, NCCL's "unhandled system error" its consequence
    ("node1:123:456 [0] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device\n"
     "node1:123:456 [0] NCCL INFO include/shm.h:41 -> 2\n" + KINDS_TB + "torch.distributed.DistBackendError: NCCL "
     "error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, unhandled system error (run with "
     "NCCL_DEBUG=INFO for details), NCCL version 2.18.1\n", "ENV312", "posix_fallocate failed"),
    ("node1:1:2 [1] init.cc:735 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000\n"
     + KINDS_TB + "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
     "ProcessGroupNCCL.cpp:1691, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.19.3\n",
     "NET415", "Duplicate GPU detected"),
    (KINDS_TB + "AttributeError: 'DeepSpeedZeRoOffload' object has no attribute "
     "'set_gradient_accumulation_boundary'\n", "DS120", "DeepSpeedZeRoOffload"),
    (KINDS_TB + "RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn\n", "TRN613",
     "element 0"),
    ("usage: train.py [-h] [--model MODEL]\ntrain.py: error: unrecognized arguments: --local_rank=0\n", "ENV331",
     "--local_rank=0"),
    (KINDS_TB + "ValueError: DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` or with passing a "
     "`device_map`.\n", "HF209", "Zero-3"),
    (KINDS_TB + "ValueError: The checkpoint being loaded used a DP world size of 8 but the current world size is 4. "
     "Automatic adjustment of ZeRO's optimizer state partitioning with a new world size is not currently supported.\n",
     "DS146", "DP world size of 8"),
    (KINDS_TB + "FileNotFoundError: [Errno 2] No such file or directory: '/home/user/.cache/huggingface/modules/"
     "transformers_modules/chatglm3-6b/modeling_chatglm.py'\n", "ENV332", "transformers_modules"),
])
def test_issue_14_kinds_are_named_with_the_rule_that_catches_them(log, rule, evidence):
    findings, _ = explain(log)
    assert findings[0].id == rule and findings[0].severity == "error" and evidence in findings[0].evidence


# --- real threads (cases/threads): the tuning split must stay right; every thread's failure is never exit 0 --------

THREADS = sorted(p for p in (Path(__file__).resolve().parents[1] / "cases" / "threads").iterdir()
                 if (p / "meta.json").exists())


def _thread_score(case):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from explain_threads import score

    return score(case)


@pytest.mark.parametrize("case", [c for c in THREADS if json.loads((c / "meta.json").read_text()).get("split")
                                  == "tuning" and c.name[:4] != "b-12"], ids=lambda c: c.name[:4])
def test_a_real_thread_of_the_tuning_split_is_named(case):
    """Each thread's cause as its maintainers or reporter found it (meta.json ``expected``), named by rule or origin:
    b-12 is left out (ms-swift 2.6's refusal, a message the mined ms-swift 4.6 no longer has)."""
    r = _thread_score(case)
    assert r["right"] and not r["wrong_rule"], r


@pytest.mark.parametrize("case", [c for c in THREADS if json.loads((c / "meta.json").read_text()).get("split")
                                  in ("tuning", "held-out")], ids=lambda c: c.name[:4])
def test_no_real_thread_with_a_failure_is_answered_exit_0(case):
    """The threads scored already (a later batch, held-out-2, is scored once by benchmarks/explain_threads.py before it
    joins this test)."""
    r = _thread_score(case)
    assert not r["exit0"], r


def test_the_thread_scorer_accepts_evidence_that_points_at_the_line_the_collector_quoted():
    """benchmarks/explain_threads.py's evidence check: explain restates a pydantic block (cases/threads/p-02's form);
    the collector quoted the raw, wrapped lines. The line the evidence cites holds them; another line does not."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from explain_threads import evidence_holds

    log = ("[INFO] starting\nTraceback (most recent call last):\n  ...\npydantic_core._pydantic_core.ValidationError: "
           "1 validation error for DeepSpeedBF16Config\nloss_scale_window\n  Extra inputs are not permitted "
           "[type=extra_forbidden]\n")
    want = "1 validation error for DeepSpeedBF16Config\nloss_scale_window\n  Extra inputs are not permitted"
    said = "line 4: 1 validation error for DeepSpeedBF16Config: loss_scale_window = 100 (int): Extra inputs are not"
    assert evidence_holds(want, said, log)
    assert not evidence_holds(want, said.replace("line 4", "line 1"), log)
    assert not evidence_holds("Current loss scale already at minimum", said, log)
    assert evidence_holds("loss_scale_window", said, "")  # in the evidence itself
    assert evidence_holds(None, "", "")


def test_a_traceback_tail_pasted_alone_is_a_failure_named_by_its_innermost_frame():
    """A reporter pasted two lines of a traceback (LLaMA-Factory #4xxx's form, cases/threads/b-05): no exception line,
    yet a failure (never LOG800, exit 0), and its origin is the frame's package, file and function."""
    tail = ('File ".../lib/python3.9/site-packages/deepspeed/runtime/zero/stage3.py", line 525, in defragment\n'
            "    assert len(set(t.dtype for t in tensors)) == 1\n")
    findings, result = explain(tail)
    assert findings[0].id == "LOG810" and findings[0].severity == "error"
    assert result["origin"] == {"package": "deepspeed", "file": "runtime/zero/stage3.py", "function": "defragment",
                                "line": 525, "code": "assert len(set(t.dtype for t in tensors)) == 1",
                                "from": "traceback"}
    assert "stopped in DeepSpeed's runtime/zero/stage3.py (defragment), line 525" in findings[0].evidence
    # a source checkout's path (pip install -e) names the package too
    findings, result = explain('  File "/work/LLaMA-Factory/src/llamafactory/train/sft/workflow.py", line 40, in '
                               'run_sft\n    raise ValueError("bad")\n')
    assert (result["origin"]["package"], result["origin"]["file"]) == ("llamafactory", "train/sft/workflow.py")


def test_an_attribute_error_of_a_library_class_is_placed_at_its_frame_in_that_library():
    """'BF16_Optimizer' object has no attribute 'fp16_groups' (DeepSpeed PR #4434's paste, cases/threads/i-07): the
    class is defined in runtime/bf16_optimizer.py but DeepSpeed read the attribute in runtime/engine.py, the frame;
    the paste begins inside the frame line (its `File "` cut off). A frame in another package (torch's autograd
    running DeepSpeed's hook) still gives way to the class's own package."""
    log = ('.env/lib/python3.11/site-packages/deepspeed/runtime/engine.py", line 3288, in _get_zero_param_shapes\n'
           "    ) == 2 else self.optimizer.fp16_groups\n"
           "AttributeError: 'BF16_Optimizer' object has no attribute 'fp16_groups'. Did you mean: 'bf16_groups'?\n")
    _, result = explain(log)
    assert (result["origin"]["package"], result["origin"]["file"], result["origin"]["function"],
            result["origin"]["line"]) == ("deepspeed", "runtime/engine.py", "_get_zero_param_shapes", 3288)
    hook = ('  File "/usr/lib/python3/site-packages/torch/autograd/graph.py", line 825, in _engine_run_backward\n'
            "    return Variable._execution_engine.run_backward(\n"
            "AttributeError: 'DeepSpeedZeroOptimizer_Stage3' object has no attribute 'ipg_index'\n")
    _, result = explain(hook)
    assert result["origin"]["package"] == "deepspeed" and result["origin"]["file"] == "runtime/zero/stage3.py"


def test_a_library_warning_in_a_log_without_failure_is_named_with_its_origin():
    """DeepSpeed's launcher drops CUDA_VISIBLE_DEVICES when --num_gpus or --include is given (launcher/runner.py, a
    print: the job runs on other GPUs than chosen); no failure, so a warning (LOG811), exit 0."""
    line = ("Detected CUDA_VISIBLE_DEVICES=2,4,5,7 but ignoring it because one or several of "
            "--include/--exclude/--num_gpus/--num_nodes cl args were used. If you want to use CUDA_VISIBLE_DEVICES "
            "don't pass any of these arguments to deepspeed.\n")
    findings, result = explain(line)
    assert (findings[0].id, findings[0].severity) == ("LOG811", "warning")
    assert result["origin"]["package"] == "deepspeed" and result["origin"]["file"] == "launcher/runner.py"
    # a deprecation is no such warning
    findings, _ = explain("FutureWarning: `tokenizer` is deprecated and will be removed in version 5.0.0\n")
    assert findings[0].id == "LOG800"


def test_a_build_failure_pasted_without_torchs_runtime_error_names_the_op_and_the_linker():
    """cases/threads/a-07's form: ninja's lines and its CalledProcessError, the linker's 'cannot find -lcurand'."""
    log = ("Building extension module cpu_adam...\n[1/1] c++ cpu_adam.o -shared -lcurand -o cpu_adam.so\n"
           "FAILED: cpu_adam.so \n/usr/bin/ld: cannot find -lcurand\ncollect2: error: ld returned 1 exit status\n"
           "ninja: build stopped: subcommand failed.\n")
    findings, _ = explain(log)
    assert findings[0].id == "ENV324"
    assert findings[0].evidence == "line 3: building op 'cpu_adam' failed: /usr/bin/ld: cannot find -lcurand"
    assert "LIBRARY_PATH=$CUDA_HOME/lib64" in findings[0].fix


def test_a_float_for_an_int_field_says_since_which_deepspeed_it_is_refused():
    """DeepSpeed issue 6525 (cases/threads/a-01): the HF-filled 0.9 x hidden^2 is a float; DeepSpeed's config models
    refuse it since they moved to pydantic 2, which the catalogue records per mined version (config_utils.py)."""
    case = next(c for c in THREADS if c.name.startswith("a-01"))
    findings, _ = explain((case / "log.txt").read_text())
    assert findings[0].id == "DS137"
    assert ("stage3_prefetch_bucket_size = 15099494.4 (float): Input should be a valid integer, got a number with a "
            "fractional part [DS137] (DeepSpeed's config models take pydantic 2 in the versions mined 0.16.9, 0.19.8, "
            "which refuses a float for an int; 0.9.5-0.14.4 used pydantic 1's API") in findings[0].evidence


def test_pasted_forms_of_real_threads_are_read_as_the_library_printed_them():
    """Forms seen in round 4's held-out threads, each general: a full-width colon typed by a CJK input method; a
    message whose backticks the issue tracker rendered away; IPython's frame lines; a message retyped with a typo,
    named by the rule whose signature its template matches; torch's C++ host allocator failing; transformers 4.31's
    wording (its integration lived in deepspeed.py then)."""
    findings, _ = explain("AttributeError\uff1a'Seq2SeqTrainer' object has no attribute 'is_deepspeed_enabled'\n")
    assert findings[0].id != "LOG800" and "AttributeError:'Seq2SeqTrainer'" in findings[0].evidence
    findings, result = explain("ValueError: Please make sure to properly initialize your accelerator via accelerator "
                               "= Accelerator() before using any functionality from the accelerate library.\n")
    assert findings[0].id == "LOG809" and result["origin"]["package"] == "accelerate"
    assert result["origin"]["file"] == "state.py"
    ipython = ("File ~/venv3.8/lib/python3.8/site-packages/transformers/modeling_utils.py:3756, in "
               "PreTrainedModel._load_pretrained_model(cls, model, state_dict)\n"
               "   3753         error_msg += (\n"
               '-> 3756     raise RuntimeError(f"Error(s) in loading state_dict for {model.__class__.__name__}")\n')
    _, result = explain(ipython)
    assert (result["origin"]["package"], result["origin"]["file"], result["origin"]["line"]) == \
        ("transformers", "modeling_utils.py", 3756)
    assert result["origin"]["code"].startswith("raise RuntimeError(")
    findings, result = explain("一直报错误:ValieError;DeepSpeed Zreo-3 is not compatible with 'low_cpu_mem_usage=True' "
                               "or with passing a 'device_map'.\n")
    assert findings[0].id == "HF209" and "approximately" in findings[0].evidence
    assert result["origin"]["function"] == "PreTrainedModel.from_pretrained"
    findings, _ = explain("RuntimeError: [enforce fail at alloc_cpu.cpp:83] err == 0. DefaultCPUAllocator: can't "
                          "allocate memory: you tried to allocate 268435456 bytes. Error code 12\n")
    assert findings[0].id == "MEM504"
    findings, result = explain("ValueError: Found `optimizer` configured in the DeepSpeed config, but no `scheduler`. "
                               "Please configure a scheduler in the DeepSpeed config.\n")
    assert result["origin"]["package"] == "transformers" and result["origin"]["versions"] == "4.31.0"
    # an unrelated line of many words is no approximate match
    findings, _ = explain("Error: the quick brown fox jumps over the lazy dog while everyone watches the training\n")
    assert findings[0].id == "LOG810"


def test_forms_of_round_5s_threads_are_read():
    """Forms seen in round 5's held-out threads, each general: rich's traceback box (accelerate and LLaMA-Factory
    install rich.traceback), whose frame name wraps onto the next box line and whose raise shows its message on the
    source lines after ``❱`` (QwenLM/Qwen PR 833); cuBLAS refusing a GEMM on bf16 operands (DeepSpeed #6723, a
    TITAN X); a DeepSpeed op build without Python's headers (DeepSpeed #3223)."""
    box = (
        "\u256d\u2500\u2500\u2500\u2500 Traceback (most recent call last) \u2500\u2500\u2500\u2500\u256e\n"
        "\u2502 /env/lib/python3.10/site-packages/transformers/modeling_utils.py:2364 in \u2502\n"
        "\u2502 from_pretrained                                                  \u2502\n"
        "\u2502   2363 \u2502   \u2502   if is_deepspeed_zero3_enabled():                 \u2502\n"
        "\u2502 \u2771 2364 \u2502   \u2502   \u2502   raise ValueError(                     \u2502\n"
        "\u2502   2365 \u2502   \u2502   \u2502   \u2502   \"DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` or  \u2502\n"
        "\u2502   2366 \u2502   \u2502   \u2502   )                                     \u2502\n"
        "\u2570\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u256f\n")
    from dsdoctor.checks.logs.lines import read_lines

    texts = [ln.text for ln in read_lines(box)]
    assert texts[0] == "Traceback (most recent call last):" and texts[2] == "" and texts[3] == ""
    assert texts[1] == ('  File "/env/lib/python3.10/site-packages/transformers/modeling_utils.py", line 2364, in '
                        'from_pretrained')
    assert texts[4] == "    raise ValueError(" and texts[5].startswith('    "DeepSpeed Zero-3 is not compatible')
    findings, result = explain(box)
    assert findings[0].id == "HF209" and "DeepSpeed Zero-3 is not compatible" in findings[0].evidence
    assert (result["origin"]["package"], result["origin"]["file"]) == ("transformers", "modeling_utils.py")
    assert [ln.text for ln in read_lines("\u2502 not a box")] == ["\u2502 not a box"]
    findings, _ = explain("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmStridedBatchedEx("
                          "handle, opa, opb, (int)m, (int)n, (int)k, (void*)&falpha, a, CUDA_R_16BF, (int)lda, stridea, "
                          "b, CUDA_R_16BF, (int)ldb, strideb, (void*)&fbeta, c, CUDA_R_16BF, (int)ldc, stridec, "
                          "(int)num_batches, compute_type, CUBLAS_GEMM_DEFAULT_TENSOR_OP)\n")
    assert findings[0].id == "DS111"
    findings, _ = explain("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmEx( handle, "
                          "opa, opb, m, n, k, &falpha, a, CUDA_R_16F, lda, b, CUDA_R_16F, ldb, &fbeta, c, CUDA_R_16F)`\n")
    assert findings[0].id != "DS111"  # fp16 operands: not the bf16 refusal
    findings, _ = explain("/home/user/.venv/lib/python3.10/site-packages/torch/include/torch/csrc/python_headers.h:12:10: "
                          "fatal error: Python.h: No such file or directory 12 | #include <Python.h> | ^~~~~~~~~~ "
                          "compilation terminated.\n")
    assert findings[0].id == "ENV333" and "dsdoctor env" in findings[0].fix


def test_env_names_missing_python_headers():
    """ENV333 from the toolchain facts: Python.h absent from the interpreter's include directory, with DeepSpeed
    installed (its JIT ops include it); nothing when the header is there or DeepSpeed is not."""
    from dsdoctor.checks.environment import diagnose

    def findings_from_facts(facts):
        return diagnose(facts, env={}, live=False)

    facts = {"versions": {"python": "3.10.12", "deepspeed": "0.16.0", "torch": "2.5.1"},
             "toolchain": {"python_h": False, "python_include": "/usr/include/python3.10", "gcc": "gcc 11",
                           "libaio": True, "ninja": "1.11"}}
    found = [f for f in findings_from_facts(facts) if f.id == "ENV333"]
    assert len(found) == 1 and "/usr/include/python3.10/Python.h" in found[0].evidence
    assert "python3.10-dev" in found[0].fix
    facts["toolchain"]["python_h"] = True
    assert not [f for f in findings_from_facts(facts) if f.id == "ENV333"]
    facts["toolchain"]["python_h"] = False
    facts["versions"]["deepspeed"] = None
    assert not [f for f in findings_from_facts(facts) if f.id == "ENV333"]


def test_env_names_a_deepspeed_launcher_not_on_path():
    """ENV334: DeepSpeed imports, but `deepspeed` is not on PATH (VisualGLM's finetune script, cases/threads/h-05:
    'deepspeed: command not found' with DeepSpeed 0.9.2 installed); the directory pip put it in is the fix."""
    from dsdoctor.checks.environment import diagnose

    facts = {"versions": {"python": "3.10.12", "deepspeed": "0.9.2", "torch": "2.0.1"},
             "toolchain": {"python_h": True, "gcc": "gcc 11", "libaio": True, "ninja": "1.11",
                           "deepspeed_cli": None, "scripts_dir": "/home/user/env/bin"}}
    found = [f for f in diagnose(facts, env={}, live=False) if f.id == "ENV334"]
    assert len(found) == 1 and "/home/user/env/bin" in found[0].evidence and "export PATH=/home/user/env/bin" in \
        found[0].fix
    facts["toolchain"]["deepspeed_cli"] = "/home/user/env/bin/deepspeed"
    assert not [f for f in diagnose(facts, env={}, live=False) if f.id == "ENV334"]
    findings, _ = explain("finetune/finetune_visualglm.sh: line 56: deepspeed: command not found\n")
    assert findings[0].id == "ENV334" and "python -m deepspeed.launcher.runner" in findings[0].fix


def test_nccl_socket_transport_over_container_bridges_is_named():
    """NVIDIA/nccl #697 (cases/threads/l-03): NCCL's 'NET/Socket : Using' list held Docker bridges besides bond0,
    which the other node cannot reach; the fix is NCCL_SOCKET_IFNAME=bond0. Pasted as one line or one interface per
    line; a list without bridges is no finding. `env` names it before launch (NET416)."""
    one_line = ("host1:1234:1234 [0] NCCL INFO NET/Socket : Using [0]bond0:10.0.0.1<0> [1]br-05ab815fa14e:172.18.0.1<0> "
                "[2]veth6163fba:fe80::1%veth6163fba<0>\n")
    findings, _ = explain(one_line)
    assert findings[0].id == "NET416" and "bridges among them: br-05ab815fa14e, veth6163fba" in findings[0].evidence
    assert findings[0].fix.startswith("export NCCL_SOCKET_IFNAME=bond0")
    findings, _ = explain("INFO NET/Socket : Using\n[0]bond0:10.0.0.1<0>\n[1]br-d5d80d7dbbad:10.0.0.3<0>\n")
    assert findings[0].id == "NET416" and "2 interfaces: bond0, br-d5d80d7dbbad" in findings[0].evidence
    findings, _ = explain("host1:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]ib0:10.1.0.1<0>\n")
    assert all(f.id != "NET416" for f in findings)
    from dsdoctor.checks.network import bridge_findings

    net = {"MASTER_ADDR": "10.0.0.9", "route_to_master": ["bond0", "10.0.0.1"],
           "addresses": [["lo", "127.0.0.1"], ["bond0", "10.0.0.1"], ["docker0", "172.17.0.1"],
                         ["br-05ab815fa14e", "172.18.0.1"]]}
    (found,) = bridge_findings(net)
    assert found.id == "NET416" and "br-05ab815fa14e" in found.evidence and "docker0" not in found.evidence
    assert "NCCL_SOCKET_IFNAME=bond0" in found.fix
    assert not bridge_findings({**net, "NCCL_SOCKET_IFNAME": "bond0"})
    assert not bridge_findings({**net, "route_to_master": ["lo", "127.0.0.1"]})  # one node: no other node to reach


# --- held-out-7 (2026-12-05): causes no rule named, written as general rules ----------------------------------------

def test_an_op_needing_a_newer_libstdcxx_than_the_one_loaded():
    log = ("ImportError: /opt/conda/lib/python3.9/site-packages/snappy/../../.././libstdc++.so.6: version "
           "`GLIBCXX_3.4.29' not found (required by /root/.cache/torch_extensions/py39_cu117/cpu_adam/cpu_adam.so)\n")
    findings, _ = explain(log)
    assert findings[0].id == "ENV335" and "GLIBCXX_3.4.29" in findings[0].title
    assert "rm -rf /root/.cache/torch_extensions/py39_cu117/cpu_adam" in findings[0].fix


def test_another_packages_object_lacking_what_the_caller_expects_is_a_version_mismatch():
    log = ("Traceback (most recent call last):\n"
           "  File \"/venv/lib/python3.12/site-packages/trl/models/utils.py\", line 173, in add_hooks\n"
           "    optimizer_offload._register_hooks_recursively(optimizer_offload.module)\n"
           "AttributeError: 'DeepSpeedZeRoOffload' object has no attribute '_register_hooks_recursively'\n")
    findings, _ = explain(log)
    assert findings[0].id == "ENV310" and "trl expects another version of deepspeed" in findings[0].title
    # the user's own object: no package to blame, the unnamed error it is
    own = ("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    m.fit()\n"
           "AttributeError: 'MyModel' object has no attribute 'fit'\n")
    assert explain(own)[0][0].id == "LOG805"


def test_an_option_the_shell_ran_as_a_command():
    log = ("[ERROR] [launch.py:322:sigkill_handler] ['/usr/bin/python3', '-u', 'train.py', '--local_rank=0'] exits "
           "with return code = 2\nscript/train/finetune.sh: 25: --output_dir: not found\n")
    findings, _ = explain(log)
    assert findings[0].id == "PRE017" and "--output_dir" in findings[0].evidence


# --- held-out-8's kinds (cases/threads/q-*), each in a form of its own: the log as another user would paste it -----

def test_a_pydantic_block_pasted_on_one_line_names_each_field_and_a_section_put_inside_another():
    """pydantic 1's block joined on its header's line (an issue title; DeepSpeed #2721's form): the field, its
    message and type are read off that line; ``aio`` is one of DeepSpeed's top-level sections (the shipped schema),
    so the fix says to move it out, not that it is misspelled."""
    log = ("pydantic.error_wrappers.ValidationError: 2 validation errors for DeepSpeedZeroConfig aio extra fields "
           "not permitted (type=value_error.extra) stage3_gather_fp16_weights extra fields not permitted "
           "(type=value_error.extra)\n")
    findings, _ = explain(log)
    assert findings[0].id == "DS131" and findings[0].severity == "error"
    assert "aio: extra fields not permitted [DS131]" in findings[0].evidence
    assert "stage3_gather_fp16_weights: extra fields not permitted [DS131]" in findings[0].evidence
    assert findings[0].fix.startswith("'aio' is a top-level section of the DeepSpeed config")
    assert "stage3_gather_fp16_weights'" not in findings[0].fix.split(":")[0]


def test_a_log_that_ends_in_a_jit_op_build_is_a_hang_there_not_no_failure():
    """Two ranks' last lines are torch's 'Using ROOT as PyTorch extensions root...' and nothing came after
    (OpenRLHF #208's form): ENV329, an error (exit 1), with the lock under that root; a build that finished is not."""
    root = "/home/user/.cache/torch_extensions/py311_cu121"
    log = (f"[rank0]: Installed CUDA version 12.1 matches\nUsing {root} as PyTorch extensions root...\n"
           f"Using {root} as PyTorch extensions root...\n")
    findings, result = explain(log)
    assert findings[0].id == "ENV329" and findings[0].severity == "error"
    assert f"lock: {root}/*/lock" in findings[0].evidence and f"rm {root}/*/lock" in findings[0].fix
    assert result["first_failure"]["signature"] == "ends-in-build"
    done = log + "Loading extension module fused_adam...\nTime to load fused_adam op: 0.5 seconds\n"
    assert explain(done)[0][0].id != "ENV329"


def test_a_printed_state_dict_of_empty_tensors_is_zero3_saving_placeholders():
    """A reporter printed the shapes of a saved ZeRO-3 state dict (chatglm_finetuning #212's form): every weight
    torch.Size([0]) is DS142, whose fix now names zero_to_fp32.py for weights already saved."""
    log = "".join(f"model.layers.{i}.self_attn.q_proj.weight torch.Size([0])\n" for i in range(3))
    findings, _ = explain(log)
    assert findings[0].id == "DS142" and "line 1" in findings[0].evidence
    assert "zero_to_fp32.py" in findings[0].fix
    assert explain("model.layers.0.self_attn.q_proj.weight torch.Size([4096, 4096])\n")[0][0].id == "LOG800"


def test_a_store_timeout_for_rank_0s_nccl_unique_id_is_rank_0_late_for_the_first_collective():
    """torch's ProcessGroupNCCL message when a rank's first collective waits for rank 0's ncclUniqueId in the
    store (the Finetune-ChatGLM2-6B #13 form, torch 2.0's 'retreiving' spelling): DATA707, an error; the log's
    own tokenizing line before it is cited; libtorch's 'Exception raised from' alone is a failure, never exit 0."""
    log = ("Running tokenizer on train dataset:  41%|████      | 950000/2300000\n"
           "RuntimeError: [3] is setting up NCCL communicator and retreiving ncclUniqueId from [0] via c10d key-value "
           "store by key '0', but store->get('0') got error: Socket Timeout\n"
           "Exception raised from recvBytes at ../torch/csrc/distributed/c10d/Utils.hpp:604 (most recent call first)\n")
    findings, _ = explain(log)
    assert findings[0].id == "DATA707" and findings[0].severity == "error"
    assert "rank 3 waited for rank 0's NCCL unique id" in findings[0].evidence
    assert "before it, line 1: Running tokenizer on train dataset" in findings[0].evidence
    assert findings[0].title.startswith("rank 0 was late for the first collective")
    only = "Exception raised from recvBytes at ../torch/csrc/distributed/c10d/Utils.hpp:604 (most recent call first)\n"
    assert explain(only)[0][0].id == "LOG810"


def test_a_cuda_minor_version_deepspeed_accepted_is_no_failure_and_a_missing_toolkit_header_is_the_build():
    """DeepSpeed #3411's form: 'Installed CUDA version 11.2 does not match ... 11.7 but since the APIs are compatible,
    accepting this combination' is DeepSpeed's warning (op_builder/builder.py), not ENV304's refusal; the build's
    'fatal error: curand_kernel.h' is the failure (ENV324), whose fix names the toolkit's header and the skew. A major
    mismatch stays ENV304."""
    log = ("Installed CUDA version 11.2 does not match the version torch was compiled with 11.7 but since the APIs "
           "are compatible, accepting this combination\n"
           "Using /home/user/.cache/torch_extensions/py38_cu117 as PyTorch extensions root...\n"
           "/opt/ds/ops/csrc/includes/custom_cuda_layers.h:12:10: fatal error: curand_kernel.h: No such file or "
           "directory\ncompilation terminated.\nninja: build stopped: subcommand failed.\n")
    findings, _ = explain(log)
    assert [f.id for f in findings] == ["ENV324"]
    assert "curand_kernel.h is a header of the CUDA toolkit" in findings[0].fix
    assert "CUDA 11.2's toolkit while torch was built with 11.7" in findings[0].fix
    major = ("Exception: Installed CUDA version 12.2 does not match the version torch was compiled with 11.7, unable "
             "to compile cuda/cpp extensions without a matching cuda version.\n")
    assert explain(major)[0][0].id == "ENV304"


def test_a_loss_without_grad_fn_is_lora_matching_nothing_when_the_command_checkpoints_nothing():
    """DeepSpeed #3339's form: the command trains LoRA (--only_optimize_lora) with no gradient checkpointing, and
    the loss has no grad_fn: nothing trains (LOG803), not TRN613. With checkpointing on the line, or with no command
    in the log, it stays TRN613."""
    error = "RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn\n"
    line = "deepspeed main.py --lora_dim 8 --only_optimize_lora --model_name_or_path m --deepspeed\n"
    findings, _ = explain(line + error)
    assert findings[0].id == "LOG803" and "turns no gradient checkpointing on" in findings[0].evidence
    assert explain(line.replace("--deepspeed", "--gradient_checkpointing --deepspeed") + error)[0][0].id == "TRN613"
    assert explain(error)[0][0].id == "TRN613"


def test_deepspeeds_scheduler_without_its_step_count_and_a_script_reading_the_launchers_local_rank_as_a_path():
    """A new user's trial, on logs of real CPU runs: DeepSpeed's WarmupDecayLR built from a config without
    total_num_steps is DS125 (check's rule for that config), not LOG805; a script that reads sys.argv[1] as its config
    path gets the deepspeed launcher's --local_rank=N (ENV331); and first_failure names the finding's own rule."""
    sched = ("Traceback (most recent call last):\n  File \"tiny.py\", line 9, in <module>\n"
             "TypeError: WarmupDecayLR.__init__() missing 1 required positional argument: 'total_num_steps'\n")
    findings, result = explain(sched)
    assert findings[0].id == "DS125" and result["first_failure"]["rule"] == "DS125"
    argv = ("  File \"tiny.py\", line 6, in <module>\n    config = json.load(open(sys.argv[1]))\n"
            "FileNotFoundError: [Errno 2] No such file or directory: '--local_rank=1'\n")
    assert explain(argv)[0][0].id == "ENV331"
    pydantic = ("pydantic_core._pydantic_core.ValidationError: 1 validation error for DeepSpeedZeroConfig\n"
                "stage3_prefetch_bucket_size\n  Input should be a valid integer, got a number with a fractional part "
                "[type=int_from_float, input_value=1.5, input_type=float]\n")
    findings, result = explain(pydantic)
    assert findings[0].id == "DS137" and result["first_failure"]["rule"] == "DS137"


def test_a_rich_traceback_flattened_onto_one_line_is_read_as_python_prints_it():
    """GitHub joins the lines of a paste outside a code block: a whole rich box on one line (FastChat #1458's form).
    Its frames and the exception after the box are read; another package's class lacking an attribute the code of
    a project checkout uses is ENV310, the checkout named as the package (not "the script")."""
    box = ("\u256d\u2500\u2500\u2500 Traceback (most recent call last) \u2500\u2500\u2500\u256e \u2502 "
           "/home/user/Proj-X/projx/train/run_sft.py:88 in main \u2502 \u2502 \u2502 \u2502 87 \u2502 \u2502 "
           "\u2771 88 \u2502 cfg = trainer.accelerator_state_ds \u2502 \u2502 89 \u2502 \u2502 \u2570\u2500\u2500\u2500"
           "\u256f AttributeError: 'Trainer' object has no attribute 'accelerator_state_ds'")
    lines = read_lines(box)
    assert [ln.text for ln in lines][0] == "Traceback (most recent call last):"
    assert '  File "/home/user/Proj-X/projx/train/run_sft.py", line 88, in main' in [ln.text for ln in lines]
    assert {ln.number for ln in lines} == {1}
    findings, result = explain(box)
    assert findings[0].id == "ENV310" and "the projx checkout" in findings[0].evidence
    assert "git pull" in findings[0].fix
    assert result["origin"]["package"] == "projx" and result["origin"]["file"] == "train/run_sft.py"


def test_a_project_checkout_is_named_as_the_origin_and_a_users_script_is_not():
    from dsdoctor.checks.logs.origin import _package

    assert _package("/data/user/FooBar/foobar/model/dispatch/__init__.py") == ("foobar", "model/dispatch/__init__.py")
    assert _package("/home/user/MyRepo/myrepo/__init__.py") == ("myrepo", "__init__.py")
    assert _package("/data/user/My-Repo/src/mytuner/data/loader.py") == ("mytuner", "data/loader.py")
    assert _package("/home/user/experiments/Qwen/finetune.py") == (None, "finetune.py")
    assert _package("/workspace/train.py") == (None, "train.py")
    assert _package("/root/data/utils/x.py") == (None, "x.py")  # folders a checkout is kept in are no package
    # a tool's checkout with a folder named after a library inside it is the tool's code; a checkout folder named as
    # its package is not the package
    assert _package("/home/user/llm/OpenRLHF/openrlhf/utils/deepspeed/deepspeed.py") == \
        ("openrlhf", "utils/deepspeed/deepspeed.py")
    assert _package("/home/user/verl/verl/trainer/ppo/ray_trainer.py") == ("verl", "trainer/ppo/ray_trainer.py")
    assert _package("/home/user/DeepSpeed/deepspeed/runtime/engine.py") == ("deepspeed", "runtime/engine.py")


@pytest.mark.parametrize("width", [80, 100, 120])
def test_a_pydantic_block_a_terminal_wrapped_keeps_every_field_and_its_rule(width):
    """pydantic 2's block wrapped at the terminal's width (the header's model name, each message's ``[type=int_`` /
    ``from_float, input_value=...]`` and the 'For further information' links cut): every field is read with its
    value, and the finding is the rule of its fields (DS137), as for the block unwrapped."""
    block = ("pydantic_core._pydantic_core.ValidationError: 2 validation errors for DeepSpeedZeroConfig\n"
             "stage3_prefetch_bucket_size\n"
             "  Input should be a valid integer, got a number with a fractional part [type=int_from_float, "
             "input_value=15099494.4, input_type=float]\n"
             "    For further information visit https://errors.pydantic.dev/2.9/v/int_from_float\n"
             "reduce_bucket_size\n"
             "  Input should be a valid integer, got a number with a fractional part [type=int_from_float, "
             "input_value=16777216.5, input_type=float]\n"
             "    For further information visit https://errors.pydantic.dev/2.9/v/int_from_float\n")
    wrapped = "\n".join(line[i:i + width] for line in block.splitlines() for i in range(0, max(len(line), 1), width))
    assert wrapped.count("\n") > block.count("\n")  # the block was really cut
    findings, _ = explain(wrapped + "\n")
    assert findings[0].id == "DS137"
    assert "stage3_prefetch_bucket_size = 15099494.4 (float)" in findings[0].evidence
    assert "reduce_bucket_size = 16777216.5 (float)" in findings[0].evidence


def test_a_failure_inside_deepspeeds_mpi_discovery_is_a_run_no_launcher_started():
    """deepspeed.init_distributed without RANK/WORLD_SIZE/... falls back to MPI discovery: mpi4py missing there, or
    GNU inetutils' hostname refusing -I, is PRE023 (no launcher), not a package to install; mpi4py missing elsewhere
    stays LOG808, and DeepSpeed's own module missing from its install is LOG808 too (not another version)."""
    frame = '  File "/opt/venv/lib/python3.10/site-packages/deepspeed/comm/comm.py", line 677, in mpi_discovery\n'
    findings, result = explain(f"Traceback (most recent call last):\n{frame}    from mpi4py import MPI\n"
                               "ModuleNotFoundError: No module named 'mpi4py'\n")
    assert findings[0].id == "PRE023" and "accelerate launch --use_deepspeed" in findings[0].fix
    assert (result["origin"]["package"], result["origin"]["function"]) == ("deepspeed", "mpi_discovery")
    findings, _ = explain(f"Traceback (most recent call last):\n{frame}    result = subprocess.check_output(cmd)\n"
                          "subprocess.CalledProcessError: Command '['hostname', '-I']' returned non-zero exit status "
                          "64.\n")
    assert findings[0].id == "PRE023"
    other = ('Traceback (most recent call last):\n  File "/home/user/train.py", line 3, in <module>\n'
             "    from mpi4py import MPI\nModuleNotFoundError: No module named 'mpi4py'\n")
    assert explain(other)[0][0].id == "LOG808"
    own = ('Traceback (most recent call last):\n  File "/opt/venv/lib/python3.11/site-packages/deepspeed/runtime/'
           'engine.py", line 1835, in _configure_zero_optimizer\n    from deepspeed.runtime.newpart.stage3 import X\n'
           "ModuleNotFoundError: No module named 'deepspeed.runtime.newpart'\n")
    findings, _ = explain(own)
    assert findings[0].id == "LOG808" and "install lacks its own module deepspeed.runtime.newpart" in \
        findings[0].title
    user = own.replace("/opt/venv/lib/python3.11/site-packages/deepspeed/runtime/engine.py", "/home/user/train.py")
    assert explain(user)[0][0].id == "ENV310"


def test_ranks_that_failed_entering_main_process_first_waited_out_the_main_processs_preprocessing():
    """A traceback whose frame stopped at ``with training_args.main_process_first(...)`` (entering it is the other
    ranks' barrier) is DATA707, its error cut from the paste or a timeout; one that lost the main process's
    connection there is that rank's failure (LOG806); the same words quoted in the block's body, or printed outside
    a traceback, are not read."""
    head = ('Traceback (most recent call last):\n  File "run_clm.py", line 414, in main\n'
            '    with training_args.main_process_first(desc="dataset map tokenization"):\n'
            '  File "/usr/lib/python3.10/contextlib.py", line 135, in __enter__\n    return next(self.gen)\n')
    findings, _ = explain(head + "RuntimeError: [Rank 1] Watchdog caught collective operation timeout: "
                                 "WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 1800000 milliseconds before timing out.\n")
    assert findings[0].id == "DATA707" and "ddp_timeout" in findings[0].fix
    findings, _ = explain(head + "RuntimeError: Connection reset by peer\n")
    assert findings[0].id == "LOG806"
    body = head.replace('    with training_args.main_process_first(desc="dataset map tokenization"):',
                        "    dataset = dataset.map(tokenize)")
    assert explain(body + "ValueError: bad sample\n")[0][0].id != "DATA707"
    assert explain('print: with args.main_process_first(desc="x"): done\n')[0][0].id != "DATA707"


def test_the_deepspeed_launcher_finding_no_address_for_the_first_node_is_an_empty_master_addr():
    """runner.py's "Using IP address of {} for node {}" with nothing between (``hostname -I`` printed nothing on the
    first node), or the command it runs with ``--master_addr=`` empty: NET405, DeepSpeed's launcher as origin."""
    line = ("[2024-01-02 10:00:00,000] [INFO] [runner.py:417:main] Using IP address of  for node node-0.cluster\n"
            "[2024-01-02 10:00:00,001] [INFO] [runner.py:508:main] cmd = pdsh -w node-0,node-1 ...\n")
    findings, result = explain(line)
    assert findings[0].id == "NET405" and "--master_addr" in findings[0].fix and "node-0.cluster" in findings[0].fix
    assert (result["origin"]["package"], result["origin"]["file"]) == ("deepspeed", "launcher/runner.py")
    assert explain(line.replace("of  for", "of 10.0.0.1 for"))[0][0].id != "NET405"


def test_an_nccl_result_code_in_torchs_error_is_nccls():
    """torch's "NCCL error in: ProcessGroupNCCL.cpp:N, unhandled cuda error": the result code is NCCL's; the origin
    is NCCL, at the file its WARN line names where the log has one."""
    error = "RuntimeError: NCCL error in: ../torch/lib/c10d/ProcessGroupNCCL.cpp:825, unhandled cuda error\n"
    _, result = explain(error)
    assert result["origin"]["package"] == "nccl"
    _, result = explain("host:1:2 [0] include/shm.h:48 NCCL WARN Call to posix_fallocate failed : No space left\n"
                        + error)
    assert (result["origin"]["package"], result["origin"]["file"]) == ("nccl", "include/shm.h")


def test_a_models_remote_code_is_named_by_the_package_transformers_imports_it_as():
    _, result = explain('Traceback (most recent call last):\n  File "/root/.cache/huggingface/modules/'
                        'transformers_modules/SomeModel-8B/configuration_some.py", line 51, in __init__\n'
                        "    if llm_config['architectures'][0] == 'LlamaForCausalLM':\nKeyError: 'architectures'\n")
    assert (result["origin"]["package"], result["origin"]["file"]) == \
        ("transformers_modules", "SomeModel-8B/configuration_some.py")


def test_a_batch_assertion_with_world_size_one_says_deepspeed_counted_one_process_of_several():
    """"4096 != 128 * 4 * 1": the config is right for 8 processes and DeepSpeed counted one: DS102 names both causes
    (one process launched; DeepSpeed 0.9.0 under accelerate), and ENV310 when the log shows DeepSpeed 0.9.0."""
    line = ("AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
            "gradient_acc_step * world_size 4096 != 128 * 4 * 1\n")
    findings, _ = explain(line)
    assert findings[0].id == "DS102" and "right for world size 8" in findings[0].evidence
    assert "0.9.0" in findings[0].fix and "--num_gpus 8" in findings[0].fix
    findings, _ = explain("[INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.9.0, git-hash=unknown\n"
                          + line)
    assert findings[0].id == "ENV310" and findings[0].title == "DeepSpeed 0.9.0 under accelerate counts world size 1"
    assert explain(line.replace("4096 != 128 * 4 * 1", "4096 != 128 * 4 * 2"))[0][0].id == "DS102"


def test_a_keyword_a_packages_api_does_not_take_is_code_written_for_another_version():
    """``TypeError: __init__() got an unexpected keyword argument 'k'`` where the frame's source line calls a
    package's API with ``k=``: the installed version lacks it (ENV310); a keyword of the user's own function is not."""
    log = ('Traceback (most recent call last):\n  File "/work/train.py", line 39, in build\n'
           "    with deepspeed.zero.Init(new_group_option=group, config_dict_or_path=cfg):\n"
           "TypeError: __init__() got an unexpected keyword argument 'new_group_option'\n")
    findings, _ = explain(log)
    assert findings[0].id == "ENV310" and "deepspeed.zero.Init does not take new_group_option" in findings[0].title
    own = log.replace("deepspeed.zero.Init(", "make_group(").replace("__init__()", "make_group()")
    assert explain(own)[0][0].id != "ENV310"


def test_an_optimizer_with_nothing_to_train_is_trn609_but_not_the_trainers_zero3_count():
    """torch's "optimizer got an empty parameter list", or a script's own "trainable params: 0" before a failure:
    TRN609. The Trainer's "Number of trainable parameters = 0" is what ZeRO-3's partitioned parameters print anyway."""
    findings, _ = explain("ValueError: optimizer got an empty parameter list\n")
    assert findings[0].id == "TRN609" and "target_modules" in findings[0].fix
    cut = ('GPU1 Trainable Params: 0\nTraceback (most recent call last):\n  File "/x/deepspeed/runtime/engine.py", '
           "line 1230, in _configure_optimizer\n    basic_optimizer = self._configure_basic_optimizer(params)\n")
    assert explain(cut)[0][0].id == "TRN609"
    trainer = "[INFO|trainer.py:1690] 2024-01-01 10:00:00,000 >>   Number of trainable parameters = 0\n"
    assert explain(trainer)[0][0].id != "TRN609"
    assert explain("trainable params: 4,194,304 || all params: 6,742,609,920 || trainable%: 0.0622\n")[0][0].id \
        != "TRN609"


def test_an_unexpected_keyword_is_a_misspelling_a_trainingarguments_field_or_another_version():
    """``got an unexpected keyword argument``: a TrainingArguments field another transformers has (HF205, with the
    field of a close name: evaluation_strategy / eval_strategy); a keyword close to a parameter the installed API
    has (``deepspeed.initialize(config_file=...)``: a misspelling, LOG805 saying which); torch's generic
    "X.__init__() got an unexpected keyword" template names no origin by itself."""
    trainer = ('Traceback (most recent call last):\n  File "/work/finetune.py", line 11, in <module>\n'
               '    args = TrainingArguments(output_dir="out",\n'
               "TypeError: TrainingArguments.__init__() got an unexpected keyword argument 'evaluation_strategy'\n")
    findings, _ = explain(trainer)
    assert findings[0].id == "HF205" and "eval_strategy" in findings[0].evidence and "eval_strategy" in \
        findings[0].fix
    typo = ('Traceback (most recent call last):\n  File "/work/train.py", line 8, in <module>\n'
            "    engine, opt, _, _ = deepspeed.initialize(model=model, config_file=args.config)\n"
            "TypeError: initialize() got an unexpected keyword argument 'config_file'\n")
    findings, _ = explain(typo)
    assert findings[0].id == "LOG805" and findings[0].title == \
        "deepspeed.initialize has no parameter config_file: did you mean config?"
    assert "Pass config= instead of config_file=" in findings[0].fix
    from dsdoctor.messages.catalogue import lookup

    assert lookup("TypeError: MyModel.__init__() got an unexpected keyword argument 'hidden'") is None


def test_a_peer_lost_alone_or_a_cpp_terminate_is_a_failure_never_exit_0():
    """gloo's "Connection closed by peer" with no other error: this rank lost a peer that failed first (LOG806, exit
    1); the C++ runtime's "terminate called ..." is a failure line (SIGABRT follows)."""
    lost = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
            "[127.0.0.1]:10126. This is typically caused by a remote worker crashing.\n")
    assert explain(lost)[0][0].id == "LOG806"
    findings, _ = explain("terminate called without an active exception\n")
    assert findings[0].id == "LOG810" and findings[0].severity == "error"


def test_a_save_that_waited_for_ranks_that_never_called_it_is_trn614():
    """The script's ``engine.save_checkpoint(...)`` line is where rank 0's frame stopped, and its error is a peer
    gone (the other ranks exited without saving): TRN614. Another rank's own error, when the log has one, wins."""
    log = ("[rank0]: Traceback (most recent call last):\n"
           '[rank0]:   File "/work/train.py", line 12, in <module>\n'
           '[rank0]:     engine.save_checkpoint("ckpt", tag="final")\n'
           '[rank0]:   File "/x/deepspeed/runtime/engine.py", line 4900, in save_checkpoint\n'
           "[rank0]:     dist.barrier()\n"
           "[rank0]: RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:10126. This is typically caused "
           "by a remote worker crashing.\n")
    findings, _ = explain(log)
    assert findings[0].id == "TRN614" and "on every rank" in findings[0].fix
    oom = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    assert explain(oom + log)[0][0].id != "TRN614"


def test_trial_wordings_name_what_the_log_shows():
    """From a new user's trial: DS118 lists the parameters the installed optimizer class takes (FusedAdam's source);
    a config path given through the script's own option is not called --deepspeed; a text with no error-looking line
    is not told to read its error-looking lines."""
    findings, _ = explain("TypeError: FusedAdam.__init__() got an unexpected keyword argument 'momentum'\n")
    assert findings[0].id == "DS118" and "the installed FusedAdam takes" in findings[0].evidence
    assert "betas" in findings[0].fix and "momentum" in findings[0].fix
    own = ('Traceback (most recent call last):\n  File "/x/deepspeed/runtime/tensor_parallel/init_utils.py", line 29, '
           "in load_ds_config\n    raise ValueError(\nValueError: Expected a string path to an existing deepspeed "
           "config, or a dictionary or a valid base64. Received: configs/ds.json\n")
    findings, result = explain(own)
    assert findings[0].id == "PRE014" and "--deepspeed" not in findings[0].evidence
    assert result["origin"]["file"] == "runtime/tensor_parallel/init_utils.py"  # the frame that raised it
    findings, _ = explain("The quick brown fox.\nAnother line of prose.\n")
    assert findings[0].id == "LOG800" and "error-looking lines (in the evidence)" not in findings[0].fix


def test_a_banner_is_no_message_and_a_cpu_runs_abort_gets_no_cuda_advice():
    """torchrun's line of stars (the start of its OMP_NUM_THREADS notice) matches no message; a rank's SIGABRT after
    the C++ runtime's "terminate called" says so, with no CUDA or NCCL advice."""
    from dsdoctor.messages.catalogue import lookup

    assert lookup("W1205 10:50:57.675000 26229 site-packages/torch/distributed/run.py:874] " + "*" * 41) is None
    log = ("[WARNING] [real_accelerator.py:213:get_accelerator] Setting accelerator to CPU.\n"
           "terminate called without an active exception\n"
           "E1205 10:53:49.093000 29045 site-packages/torch/distributed/elastic/multiprocessing/api.py:1002] failed "
           "(exitcode: -6) local_rank: 1 (pid: 29091) of binary: /usr/bin/python3\n")
    findings, _ = explain(log)
    assert any(f.id == "LOG806" and "terminate called" in f.evidence and "CUDA_LAUNCH_BLOCKING" not in f.fix
               for f in findings)


def test_an_unnamed_exception_line_a_terminal_wrapped_is_read_whole():
    """``TypeError: ... argument 'eval`` / ``uation_strategy'`` (a paste wrapped at 80 columns): the refiners read the
    exception line joined with its continuation (HF205 for the whole field name)."""
    log = ('Traceback (most recent call last):\n  File "/work/finetune.py", line 11, in <module>\n'
           '    args = TrainingArguments(output_dir="out",\n'
           "TypeError: TrainingArguments.__init__() got an unexpected keyword argument 'eval\nuation_strategy'\n")
    findings, _ = explain(log)
    assert findings[0].id == "HF205" and "'evaluation_strategy'" in findings[0].evidence


def test_a_log_that_ends_in_a_progress_bar_at_zero_is_a_run_stopped_at_its_first_step():
    """No error, and the last line is tqdm's bar at 0% (cut inside it, or whole): the first step or evaluation batch
    never finished; inconclusive (exit 1), never a clean log. A bar that moved on, or a run that finished, is not."""
    start = ("[INFO|trainer.py:1684] 2024-01-02 10:00:00,000 >> ***** Running training *****\n"
             "[INFO|trainer.py:1690] 2024-01-02 10:00:00,001 >>   Total optimization steps = 500\n")
    for bar in ("  0%|▍", "  0%|          | 0/500 [00:00<?, ?it/s]"):
        findings, result = explain(start + bar + "\n")
        assert findings[0].id == "LOG810" and findings[0].title == "the run stops at its first step (inconclusive)"
        assert result["first_failure"]["signature"] == "ends-at-first-step" and "line 3" in findings[0].evidence
    assert explain(start + " 40%|████      | 200/500 [01:00<01:30, 3.3it/s]\n")[0][0].id == "LOG800"
    code = subprocess.run([sys.executable, "-m", "dsdoctor", "explain", "-"], input=start + "  0%|▍\n", text=True,
                          capture_output=True).returncode
    assert code == 1


def test_an_undefined_torch_symbol_without_its_library_path_is_an_extension_built_for_another_torch():
    """The loader's "undefined symbol" pasted without the .so's path: a mangled symbol of torch's C++ API (c10::,
    at::, torch::) means an extension compiled against another torch (ENV310); a C function of a CUDA library, or a
    symbol of no torch namespace, is not said to be."""
    findings, _ = explain("ImportError: undefined symbol: _ZN3c104cuda9SetDeviceEi\n")
    assert findings[0].id == "ENV310" and findings[0].title == "a compiled extension was built for another torch"
    assert explain("ImportError: undefined symbol: _ZNK2at10TensorBase8data_ptrIfEEPT_v\n")[0][0].id == "ENV310"
    assert explain("ImportError: undefined symbol: cublasLtMatmul\n")[0][0].id != "ENV310"


def test_a_failure_line_in_another_versions_spacing_is_named_approximately():
    """A message built by joining string literals lost or gained spaces between versions ("... as batch size.Please
    set" in one, "batch size. Please set" in the mined one): a failure line that holds it approximately is the
    library's (LOG809, its origin), not an unnamed failure."""
    line = ("ValueError: At least one of the dataloaders passed to `accelerate.prepare()` has `None` as batch size."
            "Please set an integer value in `train_micro_batch_size_per_gpu` in the deepspeed config fileor assign "
            "integer value to `AcceleratorState().deepspeed_plugin.deepspeed_config['train_micro_batch_size_per_gpu']`.")
    findings, result = explain(line + "\n")
    assert findings[0].id == "LOG809" and "approximately" in findings[0].evidence
    assert (result["origin"]["package"], result["origin"]["file"]) == ("accelerate", "accelerator.py")


def test_the_frame_that_raised_a_message_says_which_of_its_copies_ran():
    """torch has "Attempting to unscale FP16 gradients." in its AMP scaler and in FSDP's copy of it: the traceback's
    frame right above says which one ran (torch < 2.3's cuda/amp/grad_scaler.py), with the versions of the source."""
    log = ("Traceback (most recent call last):\n"
           '  File "/opt/conda/lib/python3.9/site-packages/torch/cuda/amp/grad_scaler.py", line 212, in _unscale_grads_\n'
           '    raise ValueError("Attempting to unscale FP16 gradients.")\n'
           "ValueError: Attempting to unscale FP16 gradients.\n")
    findings, result = explain(log)
    assert findings[0].id == "LOG809"
    assert (result["origin"]["package"], result["origin"]["file"], result["origin"]["line"]) == \
        ("torch", "cuda/amp/grad_scaler.py", 212)


def test_argparse_refusing_a_path_as_a_dict_is_transformers_parser_in_any_casing():
    """HfArgumentParser types a field annotated Dict (typing's name, capitalised) or dict as argparse type=dict:
    "--deepspeed: invalid Dict value", the value left out of the paste, is HF205 with transformers' parser as
    origin; another type's refusal is the script's (PRE021)."""
    findings, result = explain("--deepspeed: invalid Dict value\n")
    assert findings[0].id == "HF205" and "reads --deepspeed as a dict" in findings[0].evidence
    assert (result["origin"]["package"], result["origin"]["file"]) == ("transformers", "hf_argparser.py")
    assert explain("train.py: error: argument --epochs: invalid int value: 'two'\n")[0][0].id == "PRE021"


def test_a_message_a_tool_copied_from_a_library_is_the_librarys_unless_the_tools_frame_raised_it():
    """unsloth_zoo patches torch's load_state_dict with torch's own message: word for word, the message is torch's.
    A refusal unsloth raised (in unsloth/models/llama.py), which unsloth_zoo also carries, is named by the frame that
    raised it, at the frame's line."""
    from dsdoctor.messages.catalogue import lookup

    copied = lookup("size mismatch for weight: copying a param with shape torch.Size([0]) from checkpoint, the shape "
                    "in current model is torch.Size([4096, 4096]).")
    assert (copied.entry.package, copied.entry.file) == ("torch", "nn/modules/module.py")
    log = ("Traceback (most recent call last):\n"
           '  File "/opt/venv/lib/python3.11/site-packages/unsloth/models/llama.py", line 1878, in from_pretrained\n'
           "    raise RuntimeError('Unsloth currently does not support multi GPU setups - but we are working on it!')\n")
    findings, result = explain(log)
    assert findings[0].id == "LOG809"
    assert (result["origin"]["package"], result["origin"]["file"], result["origin"]["line"]) == \
        ("unsloth", "models/llama.py", 1878)  # the frame's line, not the mined version's
    assert result["origin"]["from"] == "traceback"
    bare = explain("RuntimeError: Unsloth currently does not support multi GPU setups - but we are working on it!\n")
    assert bare[1]["origin"]["package"] == "unsloth"  # no frame: unsloth's own mined version before unsloth_zoo's copy


def test_a_package_that_cannot_import_a_name_from_itself_hid_a_broken_dependency():
    """``cannot import name X from 'P.m'`` raised by P's own code: P.m's try/except swallowed its real import error
    (LLaVA #1034's kind: flash-attn built for another torch): LOG808, not a version mismatch with another package."""
    own = ("Traceback (most recent call last):\n"
           '  File "/srv/VisionLM/visionlm/serve/cli.py", line 3, in <module>\n'
           "    from visionlm.model import VisionLMForCausalLM\n"
           "ImportError: cannot import name 'VisionLMForCausalLM' from 'visionlm.model' "
           "(/srv/VisionLM/visionlm/model/__init__.py)\n")
    findings, _ = explain(own)
    assert findings[0].id == "LOG808" and "visionlm.model's imports failed part-way" in findings[0].evidence
    assert "import flash_attn" in findings[0].fix
    other = ("Traceback (most recent call last):\n  File \"/home/user/train.py\", line 3, in <module>\n"
             "    from transformers import FancyNewTrainer\n"
             "ImportError: cannot import name 'FancyNewTrainer' from 'transformers' "
             "(/usr/lib/python3/site-packages/transformers/__init__.py)\n")
    assert explain(other)[0][0].id == "ENV310"


def test_an_op_that_did_not_load_for_a_cuda_library_symbol_is_not_a_build_failure_nor_another_torch():
    """The op's .so was built and fails to load on an unmangled CUDA library function (DeepSpeed #1846's kind:
    linked without -lcurand): not ENV324 (never built) nor ENV317 (built for another torch); the destructor's
    AttributeError after it is its consequence. A mangled torch symbol stays ENV317."""
    so = "/opt/venv/lib/python3.9/site-packages/deepspeed/ops/adam/cpu_adam_op.cpython-39-x86_64-linux-gnu.so"
    log = ("Exception ignored in: <function DeepSpeedCPUAdam.__del__ at 0x7f>\nTraceback (most recent call last):\n"
           '  File "/opt/venv/lib/python3.9/site-packages/deepspeed/ops/adam/cpu_adam.py", line 102, in __del__\n'
           "    self.ds_opt_adam.destroy_adam(self.opt_id)\n"
           "AttributeError: 'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'\n"
           f"ImportError: {so}: undefined symbol: cublasSgemm_v2\n")
    findings, result = explain(log)
    assert findings[0].id == "LOG810" and "libcublas" in findings[0].title and "line 6" in findings[0].evidence
    assert result["origin"]["package"] == "deepspeed" and result["origin"]["file"] == "ops/adam/cpu_adam.py"
    assert findings[1].id == "ENV324" and "was built, but its shared object did not load (line 6)" in \
        findings[1].evidence
    torch_abi = log.replace("cublasSgemm_v2", "_ZN3c1015SmallVectorBaseIjE8grow_podEPvmm")
    assert explain(torch_abi)[0][0].id == "ENV317"


def test_an_old_nccl_warn_line_is_a_failure_with_nccls_file_as_origin():
    """NCCL before 2.4 printed 'file:line WARN' without 'NCCL': a failure (never exit 0), its origin NCCL's file."""
    findings, result = explain("include/net.h:33 WARN Frobnication of the widget failed : 5\n")  # not catalogued
    assert findings[0].id == "LOG810" and findings[0].severity == "error"
    assert result["origin"] == {"package": "nccl", "file": "include/net.h", "function": None, "line": 33, "code": "",
                                "from": "mention"}
    # a catalogued one: NCCL's template, at the file and line the log names (the version that ran)
    findings, result = explain("src/transport/net_ib.cc:120 WARN NET/IB : Got async event : port error\n")
    assert findings[0].id == "LOG809" and (result["origin"]["file"], result["origin"]["line"]) == (
        "src/transport/net_ib.cc", 120)


def test_nccl_tests_that_print_their_header_and_no_row_hang_in_the_first_collective():
    """nccl-tests prints a row as each size finishes: a paste that ends at the header (NVIDIA/nccl #104's kind) is
    a hang in the first collective, an error with the P2P checks in its fix; one row after it is no such hang."""
    head = ("# nThread 1 nGpus 2 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20\n"
            "#  Rank  0 Group  0 Pid  11 on host device  0 [0x3b] Tesla V100\n"
            "#                                                       out-of-place                       in-place\n"
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
            "   busbw #wrong\n"
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)"
            "  (GB/s)\n")
    findings, result = explain(head)
    assert findings[0].id == "LOG810" and "first collective" in findings[0].title
    assert "NCCL_P2P_DISABLE=1" in findings[0].fix and "acsctl" in findings[0].fix
    assert result["origin"]["package"] == "nccl" and result["first_failure"]["line"] == 4
    row = head + "           8             2     float     sum      -1    20.15    0.00    0.00      0    19.8\n"
    assert explain(row)[0][0].id == "LOG800"


def test_tensors_of_two_gpus_in_one_op_is_one_process_on_several_gpus_or_a_rank_on_anothers_gpu():
    """torch's 'Expected all tensors to be on the same device ... cuda:0 and cuda:1', pasted bare: with plain python
    on several visible GPUs (LLaMA-Factory #140's kind) PRE016; in a launched run (rank prefixes) NET415, a rank
    that reached another's GPU; between the CPU and a GPU neither."""
    msg = "Expected all tensors to be on the same device, but found at least two devices, cuda:1 and cuda:0!"
    plain = f"CUDA_VISIBLE_DEVICES=0,1 python train.py --model_name_or_path m --do_train\nError\n{msg}\n"
    findings, _ = explain(plain)
    assert findings[0].id == "PRE016" and "train.py with plain python with CUDA_VISIBLE_DEVICES=0,1" in \
        findings[0].evidence and "torchrun --nproc_per_node" in findings[0].fix
    ranked = f"[rank1]: Traceback (most recent call last):\n[rank1]: RuntimeError: {msg}\n"
    assert explain(ranked)[0][0].id == "NET415"
    cpu = "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cpu and cuda:0!"
    assert explain(cpu)[0][0].id not in ("PRE016", "NET415")


def test_the_kernels_oom_killer_line_is_host_ram():
    """dmesg's or journalctl's own line (mm/oom_kill.c) pasted after the launcher's kills: MEM504 with the resident
    size, not "no failure"."""
    log = ("[2024-03-01 10:00:00,000] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 2211\n"
           "Mar 01 10:00:01 node kernel: Out of memory: Killed process 2211 (pt_main_thread) total-vm:91234567kB, "
           "anon-rss:41943040kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:9000kB oom_score_adj:0\n")
    findings, _ = explain(log)
    assert findings[0].id == "MEM504" and findings[0].severity == "error"
    assert "killed process 2211 (pt_main_thread, 40.0 GiB resident)" in findings[0].evidence


def test_a_dtype_clash_is_ds113_only_between_fp16_and_bf16():
    """fp16 against bf16 is the config's precision against the weights' (DS113); fp32 against bf16 is a cast in the
    model's code (DeepSeek-MoE #35's kind: a gate computed in fp32 under ZeRO-3's linear): unnamed, its origin the
    frame that raised it."""
    frame = ('  File "/venv/lib/python3.10/site-packages/deepspeed/runtime/zero/linear.py", line 57, in forward\n'
             "    output = input.matmul(weight.t())\n")
    fp32 = explain(frame + "RuntimeError: expected mat1 and mat2 to have the same dtype, but got: float != "
                           "c10::BFloat16\n")
    assert fp32[0][0].id == "LOG805" and "an fp32 and a half-precision tensor" in fp32[0][0].title
    assert "Cast the batch" in fp32[0][0].fix
    assert fp32[1]["origin"]["file"] == "runtime/zero/linear.py"
    half = explain(frame + "RuntimeError: expected mat1 and mat2 to have the same dtype, but got: c10::Half != "
                           "c10::BFloat16\n")
    assert half[0][0].id == "DS113"


def test_a_missing_optimizer_shard_alone_names_both_causes_and_how_to_tell():
    """No such zero_pp_rank_*_optim_states.pt: another world size (DS146) or a checkpoint saved without optimizer
    states (a converted one: transpeeder #28's kind); DeepSpeed's own world-size message is DS146 outright."""
    findings, result = explain("FileNotFoundError: [Errno 2] No such file or directory: 'out/global_step50/"
                               "zero_pp_rank_5_mp_rank_00_optim_states.pt'\n")
    assert findings[0].id == "LOG810" and "inconclusive" in findings[0].title
    assert "`ls out/global_step50`" in findings[0].fix and "load_module_only=True" in findings[0].fix
    assert "ds_to_universal.py" in findings[0].fix
    assert result["origin"]["package"] == "deepspeed"
    said = explain("ValueError: The checkpoint being loaded used a DP world size of 4 but the current world size is "
                   "8. Automatic adjustment of ZeRO's optimizer state partitioning with a new world size is not "
                   "currently supported.\n")
    assert said[0][0].id == "DS146"


def test_which_side_of_a_size_mismatch_is_zero3s_placeholder():
    """A [0] weight in the checkpoint was saved without gathering (DS142); a [0] weight in the model is ZeRO-3's
    placeholder written to by load_state_dict (DeepSpeedExamples #560's kind: from_config under zero.Init): LOG812."""
    model_side = ("size mismatch for transformer.h.3.mlp.fc_in.weight: copying a param with shape torch.Size([16384, "
                  "4096]) from checkpoint, the shape in current model is torch.Size([0]).\n")
    findings, _ = explain(model_side)
    assert findings[0].id == "LOG812" and "from_pretrained(path)" in findings[0].fix
    saved_side = ("size mismatch for transformer.h.3.mlp.fc_in.weight: copying a param with shape torch.Size([0]) "
                  "from checkpoint, the shape in current model is torch.Size([16384, 4096]).\n")
    assert explain(saved_side)[0][0].id == "DS142"


def test_a_python_traceback_pasted_on_one_line_is_read_frame_by_frame():
    """An issue title or a paste whose newlines became spaces: the frames, their code and the exception are split
    back (on the line's number, the rank prefix kept), so the signature and the innermost frame are found."""
    flat = ("[rank1]: Traceback (most recent call last): File \"/home/user/run.py\", line 10, in <module> main() "
            "File \"/opt/env/lib/python3.10/site-packages/deepspeed/runtime/engine.py\", line 1200, in "
            "_configure_optimizer raise ZeRORuntimeException(msg) deepspeed.runtime.zero.utils.ZeRORuntimeException: "
            "You are using ZeRO-Offload with a client provided optimizer (<class 'torch.optim.adamw.AdamW'>) which in "
            "most cases will yield poor performance.\n")
    lines = read_lines(flat)
    assert [ln.text for ln in lines] == [
        "Traceback (most recent call last):", '  File "/home/user/run.py", line 10, in <module>', "    main()",
        '  File "/opt/env/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 1200, in '
        "_configure_optimizer", "    raise ZeRORuntimeException(msg)",
        "deepspeed.runtime.zero.utils.ZeRORuntimeException: You are using ZeRO-Offload with a client provided "
        "optimizer (<class 'torch.optim.adamw.AdamW'>) which in most cases will yield poor performance."]
    assert {(ln.number, ln.rank) for ln in lines} == {(1, 1)}
    assert explain(flat)[0][0].id == "DS121"


def test_a_named_failure_also_says_where_it_was_raised_when_its_line_does():
    """The origin of a failure a rule names: the traceback right above its exception line, a library file a
    compiler's line names, NCCL's file:line; none for a launcher's line, which says nothing of where."""
    header = ("/venv/lib/python3.10/site-packages/deepspeed/ops/csrc/includes/context.h:9:10: fatal error: "
              "cublas_v2.h: No such file or directory\n")
    _, result = explain(header + "ninja: build stopped: subcommand failed.\n")
    assert (result["origin"]["package"], result["origin"]["file"]) == ("deepspeed", "ops/csrc/includes/context.h")
    raised = ("Traceback (most recent call last):\n"
              '  File "/venv/lib/python3.10/site-packages/deepspeed/runtime/config.py", line 900, in _do_error_check\n'
              "    assert train_batch == micro_batch * grad_acc * self.world_size, (\n"
              "AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
              "gradient_acc_step * world_size 32 != 4 * 1 * 4\n")
    findings, result = explain(raised)
    assert findings[0].id == "DS102" and result["origin"]["file"] == "runtime/config.py"
    findings, result = explain("Loading checkpoint shards:  50%|#####     | 1/2\nKilled\n")  # the shell's word
    assert findings[0].id == "MEM504" and result.get("origin") is None


def test_a_value_the_scripts_argparse_refuses_is_pre021_with_or_without_its_head():
    """argparse's refusal of a value (a choice, an int): PRE021, the same rule preflight gives the line; pasted
    whole (prog: error: argument ...) or only its tail (LLaMA-Factory #1514's form). An unknown option stays LOG810."""
    whole = "usage: sft.py [-h] [--stage {pt,sft}]\nsft.py: error: argument --stage: invalid choice: 'dpo' " \
            "(choose from 'pt', 'sft')\n"
    findings, _ = explain(whole)
    assert findings[0].id == "PRE021" and "the value of --stage" in findings[0].evidence
    tail = "--lora_rank: invalid int value: 'eight'\n"
    assert explain(tail)[0][0].id == "PRE021"
    unknown = "sft.py: error: unrecognized arguments: --lora_rnk 8\n"
    assert explain(unknown)[0][0].id == "LOG810"


def test_a_deepspeed_config_path_that_is_no_file_is_pre014_with_the_launchs_path():
    """HfDeepSpeedConfig takes a --deepspeed value that is no file for base64: its message, or the decoding error
    under the source line that decodes it (FastChat #2208's form), is PRE014 with the path the launch gave."""
    log = ("CONFIG=configs/zero_2.jsn\ntorchrun --nproc_per_node 2 train.py --deepspeed $CONFIG --bf16 True\n"
           "    config_decoded = base64.urlsafe_b64decode(config_file_or_dict).decode(\"utf-8\")\n"
           "binascii.Error: Incorrect padding\n")
    findings, result = explain(log)
    assert findings[0].id == "PRE014" and "--deepspeed $CONFIG = configs/zero_2.jsn" in findings[0].evidence
    said = ("ValueError: Expected a string path to an existing deepspeed config, or a dictionary, or a base64 encoded "
            "string. Received: ds/z3.json\n")
    findings, result = explain(said)
    assert findings[0].id == "PRE014" and result["origin"]["package"] == "accelerate"


def test_a_module_gone_named_on_its_own_line_after_transformers_lazy_import_is_a_version_mismatch():
    log = ("RuntimeError: Failed to import transformers.trainer because of the following error (look up to see its "
           "traceback):\nNo module named 'transformers.deepspeed'\n")
    findings, _ = explain(log)
    assert findings[0].id == "ENV310" and "transformers.integrations.deepspeed" in findings[0].evidence


def test_the_store_client_that_cannot_reach_master_addr_is_net410_a_refused_retry_is_not():
    """c10d's '[W socket.cpp] The client socket has failed to connect to ...' timing out is an address this node
    cannot reach (LlamaFactory #3715's form, with a netmask for MASTER_ADDR); a refused connection is the retry while
    the master starts, no failure by itself."""
    timed_out = ("[W socket.cpp:601] [c10d] The client socket has failed to connect to [::ffff:10.1.255.255]:29500 "
                 "(errno: 110 - Connection timed out).\n")
    findings, _ = explain(timed_out)
    assert findings[0].id == "NET410" and findings[0].severity == "error"
    assert "10.1.255.255 is a netmask or a network's address, not a host" in findings[0].evidence
    refused = timed_out.replace("errno: 110 - Connection timed out", "errno: 111 - Connection refused")
    assert explain(refused)[0][0].id == "LOG800"
    after = timed_out + "[rank0]: AssertionError: Check batch related parameters. train_batch_size is not equal to " \
        "micro_batch_per_gpu * gradient_acc_step * world_size 16 != 2 * 1 * 2\n"
    assert explain(after)[0][0].id == "DS102"  # a retry before a real failure is not the cause


def test_a_parameter_zero3_never_partitioned_and_pips_build_folder_are_named_by_origin():
    findings, result = explain("AttributeError: 'Parameter' object has no attribute 'ds_id'\n")
    assert result["origin"]["package"] == "deepspeed" and "never partitioned it" in findings[0].evidence
    build = ("  File \"/tmp/pip-install-ab12cd/flash-attn_0123456789abcdef0123456789abcdef/setup.py\", line 20, in "
             "<module>\n    import torch\nModuleNotFoundError: No module named 'torch'\n")
    from dsdoctor.checks.logs.origin import _package

    assert _package("/tmp/pip-install-ab12cd/deepspeed_0123456789abcdef0123456789abcdef/op_builder/builder.py") == (
        "deepspeed", "op_builder/builder.py")
    assert explain(build)[0][0].id == "ENV301"


def test_ssh_refusing_a_hostfiles_node_is_a_failure():
    log = ("Warning: Permanently added 'node2' (ED25519) to the list of known hosts.\n"
           "user@node2: Permission denied (publickey,password).\n"
           "ssh: connect to host node3 port 22: Connection timed out\n")
    findings, _ = explain(log)
    assert findings[0].id == "LOG810" and findings[0].severity == "error" and "node3" in findings[0].evidence


def test_a_log_that_ends_at_the_launchers_start_is_a_stop_there_not_no_failure():
    """Nothing of the ranks after the launcher's own lines (a pdsh launch whose nodes never answer): inconclusive,
    exit 1; a launcher line that says every rank ended well is no such stop."""
    log = ("[2024-02-02 10:00:00,000] [INFO] [real_accelerator.py:161:get_accelerator] Setting ds_accelerator to cuda "
           "(auto detect)\n[2024-02-02 10:00:01,000] [INFO] [multinode_runner.py:80:get_cmd] Running on the following "
           "workers: node-a,node-b\n[2024-02-02 10:00:01,000] [INFO] [runner.py:571:main] cmd = pdsh -S -f 1024 -w "
           "node-a,node-b export PYTHONPATH=/work; cd /work; python -u -m deepspeed.launcher.launch train.py\n")
    findings, result = explain(log)
    assert findings[0].id == "LOG810" and findings[0].severity == "error" and "stops at its launch" in findings[0].title
    assert result["first_failure"]["signature"] == "ends-in-launch"
    ok = log + "[2024-02-02 10:30:00,000] [INFO] [launch.py:351:main] Process 11 exits successfully.\n"
    assert explain(ok)[0][0].id == "LOG800"


def test_torchs_checkpoint_warning_over_a_frozen_base_is_trn613_even_without_the_error_line():
    """torch's 'None of the inputs have requires_grad=True' before a traceback cut short (Chinese-LLaMA-Alpaca #847's
    form): the warning is the cause (TRN613), with torch's checkpoint.py as origin."""
    log = ("/opt/env/lib/python3.10/site-packages/torch/utils/checkpoint.py:90: UserWarning: None of the inputs have "
           "requires_grad=True. Gradients will be None\n  warnings.warn(\nTraceback (most recent call last):\n"
           '  File "/opt/env/lib/python3.10/site-packages/transformers/trainer.py", line 2100, in _inner_training_loop\n')
    findings, result = explain(log)
    assert findings[0].id == "TRN613" and result["origin"]["file"] == "utils/checkpoint.py"


def test_a_cuda_kernels_device_assertion_is_a_failure_with_torchs_kernel_as_origin():
    """A device-side assertion of torch's CUDA kernels, after a progress bar or alone (llama-cookbook #189's kind: a
    pad token past the embedding's rows): never 'no failure', its origin the kernel's file, the embedding check in
    the fix for an index-select; another condition is named without it."""
    log = ("  3%|▎         | 2/60 [00:03<01:30,  1.5s/it]/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1422: "
           "indexSelectSmallIndex: block: [3,0,0], thread: [5,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n")
    findings, result = explain(log)
    assert findings[0].id == "LOG810" and findings[0].severity == "error"
    assert "resize_token_embeddings" in findings[0].fix
    assert (result["origin"]["package"], result["origin"]["file"]) == ("torch", "aten/src/ATen/native/cuda/Indexing.cu")
    loss = ("/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], "
            "thread: [0,0,0] Assertion `t >= 0 && t < n_classes` failed.\n")
    findings, _ = explain(loss)
    assert findings[0].id == "LOG810" and "a label outside the classes" in findings[0].evidence


def test_an_evaluation_loss_of_nan_is_an_eval_batch_without_labels():
    findings, _ = explain("{'loss': 1.21, 'learning_rate': 1e-05, 'epoch': 1.0}\n{'eval_loss': nan, 'eval_runtime': "
                          "12.1, 'epoch': 1.0}\n")
    assert findings[0].id == "DATA701" and "every label is -100" in findings[0].evidence
    assert explain("{'loss': nan, 'epoch': 0.5}\n{'eval_loss': nan, 'epoch': 1.0}\n")[0][0].id == "TRN602"


def test_an_nccl_error_that_came_back_through_its_bootstrap_is_the_interface_it_chose():
    """NCCL_DEBUG=INFO shows the bootstrap on an interface NCCL picked itself (ib*) and the error's return through
    bootstrap.cc (NVIDIA/nccl #1000's kind): NET411 naming it; the same error without that trace stays NET408."""
    log = ("host-a:11:11 [0] NCCL INFO Bootstrap : Using ib0:192.168.50.1<0>\n"
           "host-a:11:40 [0] NCCL INFO misc/socket.cc:484 -> 2\n"
           "host-a:11:40 [0] NCCL INFO bootstrap.cc:123 -> 2\n"
           "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970,"
           " unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n")
    findings, _ = explain(log)
    assert findings[0].id == "NET411" and "used ib0 (192.168.50.1)" in findings[0].evidence
    bare = log.split("\n", 3)[3]
    assert explain(bare)[0][0].id == "NET408"


def test_a_dict_value_refused_by_hfargumentparser_is_hf205():
    findings, _ = explain("train.py: error: argument --deepspeed: invalid dict value: 'ds_z2.json'\n")
    assert findings[0].id == "HF205" and "HfArgumentParser" in findings[0].evidence


def test_a_message_two_packages_raise_is_named_by_the_one_whose_frame_raised_it():
    """ms-swift copies the Trainer's 'did not return a loss' message: in a traceback that ends in transformers'
    trainer.py (unsloth #1102's form), the origin is transformers."""
    log = ('  File "/venv/lib/python3.10/site-packages/transformers/trainer.py", line 3381, in compute_loss\n'
           "    raise ValueError(\n"
           "ValueError: The model did not return a loss from the inputs, only the following keys: logits. For "
           "reference, the inputs it received are input_ids,attention_mask.\n")
    assert explain(log)[1]["origin"]["package"] == "transformers"


def test_a_torch_cpp_message_with_no_frame_is_named_torchs_but_a_frame_comes_first():
    """torch's C++ checks are in no Python source: a pasted line that holds one and no traceback (ms-swift #2746's
    form) is torch's, from its library; with a traceback, the innermost frame says whose code called the op."""
    bare = "RuntimeError: Expected to mark a variable ready only once. This error is caused by one of the following\n"
    findings, result = explain(bare)
    assert findings[0].id == "LOG810" and result["origin"]["package"] == "torch"
    assert result["origin"]["from"] == "cpp" and "C++ (lib/libtorch_cpu.so" in findings[0].evidence
    framed = ('  File "/venv/lib/python3.10/site-packages/deepspeed/runtime/zero/stage3.py", line 2100, in step\n'
              "    total_norm = self.unscale_and_clip_grads(sub_group_id, scaled_global_grad_norm)\n" + bare)
    assert explain(framed)[1]["origin"]["package"] == "deepspeed"


def test_a_native_assertion_aborts_the_process_and_names_its_package():
    """glibc's assert() line in a compiled op (DeepSpeed #4888's kind), with its source path or only its function:
    a failure (not 'stops at its launch' for the launcher's kills after it), its origin the path's package or the
    one the function's name says."""
    log = ("python: /venv/lib/python3.11/site-packages/deepspeed/ops/csrc/aio/py_lib/deepspeed_py_aio.cpp:77: int "
           "deepspeed_aio_read(torch::Tensor&, const char*): Assertion `num_bytes > 0' failed.\n"
           "[2024-05-01 10:00:00,000] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 4242\n")
    findings, result = explain(log)
    assert findings[0].id == "LOG810" and "assertion `num_bytes > 0`" in findings[0].evidence
    assert (result["origin"]["package"], result["origin"]["file"]) == ("deepspeed",
                                                                       "ops/csrc/aio/py_lib/deepspeed_py_aio.cpp")
    findings, result = explain("void c10::cuda::CUDACachingAllocator::free(void*): Assertion `block != nullptr' "
                               "failed.\n")
    assert findings[0].severity == "error" and result["origin"]["package"] == "torch"


def test_torchruns_failure_summary_names_the_rank_that_failed():
    log = ("[2025-01-01 00:00:00,000] [INFO] [logging.py:128:log_dist] [Rank 0] step=100\n\n  host      : node-a\n"
           "  rank      : 6 (local_rank: 6)\n  exitcode  : 1 (pid: 31337)\n  error_file: <N/A>\n")
    findings, _ = explain(log)
    assert findings[0].id == "LOG806" and "rank 6 exited with code 1" in findings[0].evidence


def test_a_copy_of_a_deepspeed_script_is_deepspeeds_code():
    """DeepSpeed writes zero_to_fp32.py into every checkpoint folder, and users copy ds_to_universal.py: a frame in
    such a file is DeepSpeed's (the catalogue's scripts); a user's own launch.py or __init__.py is not."""
    from dsdoctor.checks.logs.origin import _package

    assert _package("/data/run1/checkpoint-500/zero_to_fp32.py") == ("deepspeed", "utils/zero_to_fp32.py")
    assert _package("/home/user/tools/ds_to_universal.py") == ("deepspeed", "checkpoint/ds_to_universal.py")
    assert _package("/home/user/launch.py") == (None, "launch.py")
    log = ("Traceback (most recent call last):\n  File \"/data/run1/checkpoint-500/zero_to_fp32.py\", line 600, in "
           "<module>\n    convert_zero_checkpoint_to_fp32_state_dict(args.checkpoint_dir, args.output_file)\n"
           "ValueError: unknown zero stage 0\n")
    assert explain(log)[1]["origin"]["package"] == "deepspeed"


def test_a_dead_threads_error_is_the_failure_though_the_main_thread_prints_progress():
    """A data-reading thread's uncaught exception (threading's "Exception in thread ..."), then the main thread's
    steps, then a stop: the thread's error is the cause (found by a new user's trial: it was taken for a handled
    one). A ranked error is not saved by another rank's unprefixed progress either."""
    log = ("Exception in thread Thread-1 (prefetch):\nTraceback (most recent call last):\n"
           '  File "/srv/job/data.py", line 20, in prefetch\n    rec = json.loads(line)\n'
           "json.decoder.JSONDecodeError: Expecting value: line 1 column 36 (char 35)\n"
           "step 0 loss 4.88\nstep 1 loss 4.87\nstep 2 loss 4.86\n"
           "W1205 07:41:10.428000 18428 site-packages/torch/distributed/elastic/agent/server/api.py:753] Received 15 "
           "death signal, shutting down workers\n")
    assert explain(log)[0][0].id == "LOG805"
    ranked = ("[rank1]: Traceback (most recent call last):\n[rank1]:   File \"/srv/job/train.py\", line 9, in <module>\n"
              "[rank1]: KeyError: 'labels'\nstep 0 loss 4.88\nstep 1 loss 4.87\nstep 2 loss 4.86\n")
    assert explain(ranked)[0][0].id == "LOG805"


def test_torchruns_failure_box_names_its_root_cause_not_the_ranks_it_sent_sigterm():
    """The box lists the ranks torchrun's agent ended with SIGTERM under Failures, the one that failed first under
    Root Cause: the root cause (a SIGKILL here: MEM504, its rank) is the finding; a rank whose own error is in the
    log is not said to have none."""
    box = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n=====\ntrain.py FAILED\n-----\n"
           "Failures:\n[1]:\n  time      : 2026-01-01_00:00:00\n  host      : node-a\n  rank      : 0 (local_rank: 0)\n"
           "  exitcode  : -15 (pid: 101)  (SIGTERM)\n  error_file: <N/A>\n"
           "  traceback : Signal 15 (SIGTERM) received by PID 101\n-----\nRoot Cause (first observed failure):\n[0]:\n"
           "  time      : 2026-01-01_00:00:00\n  host      : node-a\n  rank      : 3 (local_rank: 3)\n"
           "  exitcode  : -9 (pid: 104)  (SIGKILL)\n  error_file: <N/A>\n"
           "  traceback : Signal 9 (SIGKILL) received by PID 104\n=====\n")
    findings, _ = explain(box)
    assert findings[0].id == "MEM504" and "rank 3 (pid 104)" in findings[0].evidence
    assert not [f for f in findings if f.id == "LOG806"]
    own = ("[rank1]: AssertionError: Check batch related parameters. train_batch_size is not equal to "
           "micro_batch_per_gpu * gradient_acc_step * world_size 32 != 4 * 2 * 2\nFailures:\n[1]:\n"
           "  rank      : 1 (local_rank: 1)\n  exitcode  : 1 (pid: 13222)\n")
    assert [f.id for f in explain(own)[0]] == ["DS102"]


def test_under_the_deepspeed_launcher_only_a_refused_local_rank_or_a_displaced_argument_is_env331():
    spawned = ("[2024-01-01 00:00:00,000] [INFO] [launch.py:256:main] process 1 spawned with command: ['/usr/bin/"
               "python3', '-u', 'train.py', '--local_rank=0', '--lr', '2e-5']\n")
    usage = "usage: train.py [-h] [--local_rank LOCAL_RANK] [--lr LR]\n"
    value = spawned + usage + "train.py: error: argument --lr: invalid int value: '2e-5'\n"
    assert explain(value)[0][0].id == "PRE021"
    unknown = spawned + "usage: train.py [-h] [--lr LR]\ntrain.py: error: unrecognized arguments: --local_rank=0\n"
    assert explain(unknown)[0][0].id == "ENV331"


def test_the_launchers_local_rank_taken_for_the_config_path_is_env331():
    log = ("[rank1]: binascii.Error: Invalid base64-encoded string: number of data characters (13) cannot be 1 more "
           "than a multiple of 4\n[rank1]: During handling of the above exception, another exception occurred:\n"
           "[rank1]: ValueError: Expected a string path to an existing deepspeed config, or a dictionary or a valid "
           "base64. Received: --local_rank=1\n")
    findings, _ = explain(log)
    assert findings[0].id == "ENV331" and "sys.argv[1]" in findings[0].fix


def test_a_none_from_a_checkpoint_that_was_not_found_names_the_missing_checkpoint():
    log = ("[2026-01-01 00:00:00,000] [WARNING] [engine.py:4437:load_checkpoint] Unable to find latest file at "
           "runs/a/latest, if trying to load latest checkpoint please ensure this file exists or pass an explicit "
           "checkpoint tag when loading a checkpoint.\n[rank0]: Traceback (most recent call last):\n"
           "[rank0]:   File \"/srv/job/train.py\", line 30, in <module>\n[rank0]:     step = state['step']\n"
           "[rank0]: TypeError: 'NoneType' object is not subscriptable\n")
    findings, _ = explain(log)
    assert findings[0].id == "PRE014" and "no runs/a/latest" in findings[0].evidence and "`ls runs/a`" in \
        findings[0].fix


def test_the_config_blocks_deepspeed_refuses_at_initialize_get_checks_rules():
    """What `check` names before launch, explain names in the log: an optimizer type DeepSpeed does not support
    (DS122), an optimizer parameter its class does not take (DS118), a torch scheduler handed DeepSpeed's optimizer
    wrapper (DS124)."""
    assert explain("AssertionError: adamw_hf is not a supported DeepSpeed Optimizer\n")[0][0].id == "DS122"
    assert explain("TypeError: DeepSpeedCPUAdam.__init__() got an unexpected keyword argument 'beta1'\n")[0][0].id \
        == "DS118"
    assert explain("TypeError: DeepSpeedZeroOptimizer_Stage3 is not an Optimizer\n")[0][0].id == "DS124"


def test_a_few_nul_bytes_are_dropped_and_a_config_is_not_a_log(tmp_path):
    """The NUL padding a crash leaves in a log is dropped, the log read; a DeepSpeed config given to explain is
    refused with one line pointing at check (exit 2), as any JSON document is; JSON lines are a log."""
    log = tmp_path / "train.log"
    log.write_bytes(b"Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nKeyError: 'labels'\n"
                    + b"\x00" * 12)
    code, report, _ = run(str(log))
    assert code == 1 and report["findings"][0]["id"] == "LOG805"
    config = tmp_path / "ds_config.json"
    config.write_text('{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}}\n')
    proc = subprocess.run([sys.executable, "-m", "dsdoctor", "explain", str(config)], capture_output=True, text=True)
    assert proc.returncode == 2 and f"`dsdoctor check {config}`" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    lines = tmp_path / "metrics.jsonl"
    lines.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": NaN}\n')
    assert run(str(lines))[0] in (0, 1)


def test_the_needle_trie_finds_what_the_plain_alternation_finds():
    """signatures.NEEDLES is the needles' alternation factored as a trie (for speed): at every position of every
    line of the corpus it names the same needle, the longest there."""
    from dsdoctor.checks.logs import signatures

    needles = {n for s in signatures.SIGNATURES for n in s.needles}
    plain = re.compile("(?=(" + "|".join(re.escape(n) for n in sorted(needles, key=len, reverse=True)) + "))")
    texts = [p.read_text(errors="replace") for p in sorted(Path(__file__).parents[1].glob("cases/**/log.txt"))]
    lines = [ln for text in texts for ln in text.split("\n")]
    assert len(lines) > 3000
    assert all(plain.findall(ln) == signatures.NEEDLES_AT.findall(ln) for ln in lines)
    assert re.fullmatch(signatures.trie_pattern({"ab", "abc", "b"}), "abc")


def test_a_batch_assertion_the_trainer_filled_for_one_process_is_fixed_on_the_trainers_side():
    """An all-"auto" config under the HF Trainer on 2 ranks whose TrainingArguments saw one process (a CPU machine
    without use_cpu): the triple is the Trainer's, for world size 1; writing train_batch_size into the config would
    only meet HF201 (found by a new user's trial)."""
    log = ("[rank1]:   File \"/venv/lib/python3.11/site-packages/transformers/integrations/deepspeed.py\", line 410, in "
           "deepspeed_init\n[rank1]:     hf_deepspeed_config.trainer_config_finalize(args, model, num_training_steps)\n"
           "[rank1]: AssertionError: Check batch related parameters. train_batch_size is not equal to "
           "micro_batch_per_gpu * gradient_acc_step * world_size 4 != 4 * 1 * 2\n")
    findings, _ = explain(log)
    assert findings[0].id == "DS102" and "filled the config's batch values for world size 1" in findings[0].evidence
    assert "use_cpu" in findings[0].fix and "--launch trainer --world-size 2" in findings[0].fix
    plain = log.split("\n", 2)[2]  # the same assertion without the Trainer's frames: the config's own triple
    assert "Set train_batch_size to 8" in explain(plain)[0][0].fix


def test_a_log_quoted_in_a_reply_is_read_without_its_quote_markers():
    """A log quoted in a GitHub or e-mail reply ("> " on every line, found by a new user's trial): the markers go,
    rank prefixes and tracebacks are read as the run printed them; a log with a few '>' lines is left as it is."""
    log = ("[rank0]: Traceback (most recent call last):\n[rank0]:   File \"/srv/job/train.py\", line 9, in <module>\n"
           "[rank0]: KeyError: 'labels'\n")
    quoted = "".join("> " + ln + "\n" for ln in log.splitlines())
    assert [(ln.rank, ln.text) for ln in read_lines(quoted)] == [(ln.rank, ln.text) for ln in read_lines(log)]
    assert explain(quoted)[0][0].id == "LOG805"
    mixed = "step 1\n> a note\nstep 2\nstep 3\n"
    assert [ln.text for ln in read_lines(mixed)][1] == "> a note"
