"""`dsdoctor explain LOG`: the corpus in cases/logs (real logs made on this machine's CPU with the real DeepSpeed, and
logs written from the public reports), rank prefixes and colours, the first real failure before its cascade, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
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
    lines = read_lines("\x1b[31m[rank3]:\x1b[0m ValueError: x\n[default5]: hello\n7: srun label\n"
                       "worker-1: [2024-01-01 10:00:00,000] [INFO] hi\nValueError: not a host\n")
    assert [(ln.rank, ln.text) for ln in lines] == [(3, "ValueError: x"), (5, "hello"), (7, "srun label"),
                                                     (None, "[2024-01-01 10:00:00,000] [INFO] hi"),
                                                     (None, "ValueError: not a host")]


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
    assert "--gpu-mem 24" in findings[0].fix
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
    assert "set it to 28" in findings[0].fix


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
    assert findings[0].evidence == ("line 4: rank 1: KeyError: 'input_ids' (raised at File \"train.py\", line 88, in "
                                    "collate)")
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
