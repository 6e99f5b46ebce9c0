"""`dsdoctor env`: facts equal to what is installed, each rule on controlled inputs (facts, environment variables,
a fake nvcc on PATH), TORCH_CUDA_ARCH_LIST against DeepSpeed's own op builder, --from, and bad input."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from importlib import metadata

import pytest
from click.testing import CliRunner

from dsdoctor.checks.environment import Probe, arch_list_problems, collect, diagnose
from dsdoctor.cli import cli

GIB = 2 ** 30
H200 = {"index": 0, "name": "NVIDIA H200", "memory_total": 143771 * 2 ** 20, "memory_used": 0, "capability": "9.0",
        "bf16": True, "processes": []}


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def ids(facts, **kw):
    return sorted(f.id for f in diagnose(facts, **kw))


def test_facts_are_the_installed_versions():
    import torch

    facts = collect(sections=("versions",))["versions"]
    assert facts["torch"] == torch.__version__ and facts["torch_cuda"] == torch.version.cuda
    for dist in ("deepspeed", "transformers", "peft", "accelerate"):
        assert facts[dist] == metadata.version(dist)
    import deepspeed.git_version_info as info

    assert facts["deepspeed_prebuilt_ops"] == sorted(k for k, v in info.installed_ops.items() if v)


def test_no_torch_or_deepspeed_import_and_fast():
    code = ("import sys, time; t = time.time(); from click.testing import CliRunner; from dsdoctor.cli import cli; "
            "r = CliRunner().invoke(cli, ['env', '--json', '-']); assert r.exit_code in (0, 1), r.output; "
            "print(sorted(m for m in ('torch', 'deepspeed', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("value", ["9.0", "8.0;9.0", "7.0 8.0 9.0+PTX", "9.0a", "sm_90", "Hopper", "9", "9.0,8.0",
                                   "8.6+PTX;9.0a"])
def test_arch_list_verdict_equals_deepspeeds_builder(value, monkeypatch):
    """DeepSpeed's own JIT builder (compute_capability_args, as FusedAdam calls it) raises exactly on the lists
    ENV307 flags."""
    import importlib

    # the CUDA builder itself (deepspeed.ops.op_builder resolves to the CPU accelerator's builders here)
    FusedAdamBuilder = importlib.import_module("deepspeed.ops.op_builder.fused_adam").FusedAdamBuilder
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", value)
    builder = FusedAdamBuilder()
    builder.jit_mode = True
    try:
        builder.compute_capability_args()
        deepspeed_ok = True
    except (ValueError, IndexError):
        deepspeed_ok = False
    bad, _ = arch_list_problems(value)
    assert (not bad) == deepspeed_ok


def test_env307_on_the_h200_images_arch_list():
    facts = {"toolchain": {"TORCH_CUDA_ARCH_LIST": "9.0a", "nvcc": "/usr/local/cuda/bin/nvcc", "gcc": "g++ 12",
                           "ninja": "1.11", "libaio": True}, "gpu": {"gpus": [H200]}}
    found = [f for f in diagnose(facts) if f.id == "ENV307"]
    assert found and found[0].severity == "error" and found[0].fix == 'export TORCH_CUDA_ARCH_LIST="9.0"'
    facts["toolchain"]["TORCH_CUDA_ARCH_LIST"] = "9.0"
    assert ids(facts) == []
    facts["toolchain"]["TORCH_CUDA_ARCH_LIST"] = "8.0"  # no kernel for the H200's 9.0
    assert ids(facts) == ["ENV308"]
    facts["toolchain"]["TORCH_CUDA_ARCH_LIST"] = "8.0+PTX"  # PTX of a lower arch is JIT-compiled by the driver
    assert ids(facts) == []


def test_cuda_versions_against_driver_and_toolkit():
    versions = {"torch": "2.5.1+cu124", "torch_cuda": "12.4", "deepspeed": "0.16.0", "deepspeed_prebuilt_ops": []}
    toolchain = {"nvcc": "/usr/local/cuda/bin/nvcc", "nvcc_cuda": "11.8", "gcc": "gcc", "ninja": "1.11",
                 "libaio": True}
    gpu = {"nvml": True, "driver": "470.82", "driver_cuda": "11.4", "gpus": [dict(H200, capability="8.0")]}
    assert ids({"versions": versions, "toolchain": toolchain, "gpu": gpu}) == ["ENV303", "ENV304"]
    toolchain.update(nvcc=None, nvcc_cuda=None, CUDA_HOME=None)  # DeepSpeed issue 2772: no toolkit at all
    gpu.update(driver="550.54", driver_cuda="12.4")
    assert ids({"versions": versions, "toolchain": toolchain, "gpu": gpu}) == ["ENV305"]
    versions["deepspeed_prebuilt_ops"] = ["fused_adam"]  # prebuilt ops need no toolkit
    versions["deepspeed_built_with"] = {"version": "2.5", "cuda_version": "12.4"}
    assert ids({"versions": versions, "toolchain": toolchain, "gpu": gpu}) == []
    versions["deepspeed_built_with"] = {"version": "2.1", "cuda_version": "12.1"}
    assert ids({"versions": versions, "toolchain": toolchain, "gpu": gpu}) == ["ENV317"]
    versions.update(torch="2.5.1+cpu", torch_cuda=None)
    assert "ENV302" in ids({"versions": versions, "gpu": gpu})


def test_fake_nvcc_on_path_is_read(tmp_path):
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 11.8, V11.8.89'\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    probe = Probe(env={"PATH": str(tmp_path)}, which=lambda name: str(nvcc) if name == "nvcc" else None,
                  nvml=lambda: None)
    toolchain = collect(probe, sections=("toolchain",))["toolchain"]
    assert toolchain["nvcc"] == str(nvcc) and toolchain["nvcc_cuda"] == "11.8"
    assert toolchain["gcc"] is None and toolchain["ninja"] is None


def test_gpus_processes_visible_devices_shm_memlock():
    gpu = {"gpus": [dict(H200, processes=[{"pid": 4242, "used": 30 * GIB}]), dict(H200, index=1)],
           "CUDA_VISIBLE_DEVICES": "0,1,2"}
    found = {f.id: f for f in diagnose({"gpu": gpu, "host": {"dev_shm": 64 * 2 ** 20, "memlock": 64 * 1024}})}
    assert sorted(found) == ["ENV311", "ENV312", "ENV313", "ENV314"]
    assert "PID 4242 (30.0 GiB)" in found["ENV311"].evidence
    assert "/dev/shm: 64 MiB" in found["ENV312"].evidence



def test_stale_deepspeed_shm_segments_are_found_and_removed_but_not_a_live_runs(tmp_path):
    """ENV336 on a fake /dev/shm and /proc: the segment a live process maps (port 29500's rank 0) is neither called
    stale nor deleted, nor is its rank 1 beside it; the two of port 41571 are, and the fix deletes exactly them."""
    from dsdoctor.shm import deepspeed_segments, remove_stale

    shm, proc = tmp_path / "shm", tmp_path / "proc"
    shm.mkdir()
    (proc / "777").mkdir(parents=True)
    for port in (29500, 41571):
        for rank in (0, 1):
            (shm / f"deepspeed_allreduce_buffer_0_127.0.0.1_{port}_{rank}").write_bytes(b"x" * 1000)
    (shm / "deepspeed_allreduce_buffer_garbage").write_bytes(b"")  # not of DeepSpeed's format: ignored
    (proc / "777" / "maps").write_text("7f00-7f10 rw-s 00000000 00:1a 42  /dev/shm/deepspeed_allreduce_buffer_0_"
                                       "127.0.0.1_29500_0\n")
    segments = deepspeed_segments(shm, proc)
    assert [(s.port, s.rank, s.mapped) for s in segments] == [(29500, 0, True), (29500, 1, False), (41571, 0, False),
                                                              (41571, 1, False)]
    finding = diagnose({"host": {"dev_shm": 10_000, "deepspeed_shm": [s.to_dict() for s in segments]}})
    found = {f.id: f for f in finding}
    assert "2 DeepSpeed all-reduce segment(s)" in found["ENV336"].evidence and "(20% of" in found["ENV336"].evidence
    assert found["ENV336"].fix == f"rm -f {shm}/deepspeed_allreduce_buffer_0_127.0.0.1_41571_*"
    removed = remove_stale(port=41571, root=shm, proc=proc)
    assert sorted(s.path.name for s in removed) == [f"deepspeed_allreduce_buffer_0_127.0.0.1_41571_{r}" for r in (0, 1)]
    assert sorted(p.name for p in shm.iterdir()) == ["deepspeed_allreduce_buffer_0_127.0.0.1_29500_0",
                                                     "deepspeed_allreduce_buffer_0_127.0.0.1_29500_1",
                                                     "deepspeed_allreduce_buffer_garbage"]
    assert "ENV336" not in {f.id for f in diagnose({"host": {"deepspeed_shm": [s.to_dict() for s in
                                                                             deepspeed_segments(shm, proc)]}})}

def test_known_bad_versions():
    base = {"torch": "2.0.0", "torch_cuda": "11.7"}
    assert ids({"versions": {**base, "deepspeed": "0.9.0", "accelerate": "0.18.0"}}) == ["ENV310"]
    assert ids({"versions": {**base, "deepspeed": "0.9.3", "accelerate": "0.18.0"}}) == []
    assert ids({"versions": {**base, "deepspeed": "0.12.6", "accelerate": "0.23.0"}}) == ["ENV310"]
    assert ids({"versions": {**base, "deepspeed": "0.12.6", "accelerate": "0.26.1"}}) == []


def test_network_variables(monkeypatch):
    net = {"NCCL_SOCKET_IFNAME": "ens5", "interfaces": ["eth0", "lo"], "NCCL_DEBUG": "INFO",
           "NCCL_P2P_DISABLE": "1", "MASTER_ADDR": "no-such-host.invalid"}
    found = {f.id: f for f in diagnose({"network": net})}
    assert sorted(found) == ["NET402", "NET403", "NET404", "NET405"]
    assert found["NET402"].severity == "error"
    net = {"NCCL_SOCKET_IFNAME": "lo", "interfaces": ["eth0", "lo"]}
    assert [(f.id, f.severity) for f in diagnose({"network": net})] == [("NET402", "warning")]
    for ok in ("eth", "^lo,docker", "=eth0"):
        assert ids({"network": {"NCCL_SOCKET_IFNAME": ok, "interfaces": ["eth0", "lo", "docker0"]}}) == []
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        port = s.getsockname()[1]
        assert ids({"network": {"MASTER_PORT": str(port), "interfaces": []}}) == ["NET401"]
        assert ids({"network": {"MASTER_PORT": str(port), "interfaces": []}}, live=False) == []


def test_command_json_markdown_only_and_from(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    result = runner.invoke(cli, ["env", "--json", "-"])
    data = json.loads(result.stdout)
    assert result.exit_code == 1 and "ENV307" in [f["id"] for f in data["findings"]]
    assert set(data["result"]["facts"]) == {"versions", "toolchain", "gpu", "host", "network"}
    assert "- TORCH_CUDA_ARCH_LIST: 9.0a" in data["result"]["paste_block"]["lines"]
    saved = tmp_path / "env.json"
    saved.write_text(result.stdout)
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")
    clean = json.loads(runner.invoke(cli, ["env", "--json", "-"]).stdout)
    assert "ENV307" not in [f["id"] for f in clean["findings"]]
    result = runner.invoke(cli, ["env", "--from", str(saved), "--format", "markdown"])
    assert result.exit_code == 1 and "ENV307" in result.stdout  # the saved machine's facts, not this one's
    assert "```\n- dsdoctor: " in result.stdout
    result = runner.invoke(cli, ["env", "--only", "gpu,versions", "--json", "-"])
    assert set(json.loads(result.stdout)["result"]["facts"]) == {"versions", "gpu"}


@pytest.mark.parametrize("args,message", [
    (["--only", "gpus"], "sections are versions, toolchain, gpu, host, network"),
    (["--from", "/no/such.json"], "--from /no/such.json: no such file"),
    (["--output-dir", "/no/such/dir"], "not a directory"),
])
def test_bad_input(runner, args, message):
    result = runner.invoke(cli, ["env", *args])
    assert result.exit_code == 2 and message in result.stderr and result.stderr.count("\n") == 1


def test_from_rejects_other_reports(runner, tmp_path):
    other = tmp_path / "x.json"
    other.write_text(json.dumps({"command": "check", "result": {}}))
    result = runner.invoke(cli, ["env", "--from", str(other)])
    assert result.exit_code == 2 and "not a `dsdoctor env --json` report" in result.stderr
    other.write_text("{broken")
    assert "not valid JSON" in runner.invoke(cli, ["env", "--from", str(other)]).stderr


def test_real_environment_is_clean_enough():
    """This machine (and CI): no GPU, CPU torch, DeepSpeed JIT with gcc and ninja: no error, no warning from the
    toolchain (libaio and the memlock limit are information only)."""
    findings = diagnose(collect(Probe(env={k: v for k, v in os.environ.items()
                                          if not k.startswith(("NCCL_", "MASTER_", "TORCH_CUDA"))})))
    assert not [f for f in findings if f.severity in ("error", "warning") and f.id.startswith("ENV30")]


def test_deep_facts_on_this_machine(runner):
    import torch

    result = runner.invoke(cli, ["env", "--deep", "--only", "versions", "--json", "-"])
    deep = json.loads(result.stdout)["result"]["facts"]["deep"]
    assert deep["cuda_available"] is torch.cuda.is_available() and deep["deepspeed_accelerator"] == "cpu"
    assert deep["cxx11_abi"] is bool(torch._C._GLIBCXX_USE_CXX11_ABI)
    assert deep["deepspeed_ops_compatible"]["cpu_adam"] is True  # gcc and ninja are here
    assert runner.invoke(cli, ["env", "--deep", "--from", "x.json"]).exit_code == 2


def test_deep_rules():
    gpu = {"gpus": [H200]}
    versions = {"torch": "2.5.1+cu124", "torch_cuda": "12.4", "deepspeed": "0.16.0", "deepspeed_prebuilt_ops": []}
    deep = {"cuda_available": False, "deepspeed_accelerator": "cpu",
            "deepspeed_ops_compatible": {"cpu_adam": False, "fused_adam": True}}
    assert ids({"versions": versions, "gpu": gpu, "deep": deep}) == ["ENV318", "ENV319", "ENV320"]
    deep = {"cuda_available": True, "deepspeed_accelerator": "cuda",
            "deepspeed_ops_compatible": {"cpu_adam": True, "fused_adam": False}}
    found = diagnose({"versions": versions, "gpu": gpu, "deep": deep})
    assert [f.id for f in found] == ["ENV318"] and "fused_adam" in found[0].evidence
    versions["deepspeed_prebuilt_ops"] = ["fused_adam"]
    assert ids({"versions": versions, "gpu": gpu, "deep": deep}) == []


def test_rtx4090_ecc_and_throttling():
    """DeepSpeed issue 4433: RTX 4090s hang in the first collective unless NCCL_P2P_DISABLE=1."""
    rtx = dict(H200, name="NVIDIA GeForce RTX 4090", capability="8.9", memory_total=24 * GIB)
    facts = {"gpu": {"gpus": [rtx, dict(rtx, index=1)]}, "network": {"interfaces": []}}
    assert ids(facts) == ["ENV321"]
    facts["network"]["NCCL_P2P_DISABLE"] = "1"
    assert ids(facts) == []  # and no NET404: on these cards disabling P2P is the fix
    bad = dict(H200, ecc_uncorrected=3, throttle_reasons=0x40 | 0x1)
    found = {f.id: f for f in diagnose({"gpu": {"gpus": [bad]}})}
    assert sorted(found) == ["ENV322", "ENV323"]
    assert found["ENV323"].evidence == "GPU 0: hardware thermal slowdown"
    assert ids({"gpu": {"gpus": [dict(H200, ecc_uncorrected=0, throttle_reasons=0x1 | 0x4)]}}) == []


def test_ops_for_config_follow_deepspeeds_choice():
    from dsdoctor.checks.environment import ops_for_config

    adam = {"optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}}
    assert ops_for_config(adam) == ["FusedAdamBuilder"]
    assert ops_for_config({**adam, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}) == \
        ["CPUAdamBuilder"]
    assert ops_for_config({"optimizer": {"type": "AdamW", "params": {"torch_adam": True}}}) == []
    assert ops_for_config({"optimizer": {"type": "Lion"}}) == ["FusedLionBuilder"]
    assert ops_for_config({"optimizer": {"type": "Adagrad"}}) == []
    assert ops_for_config({}) == []


def _offload_config(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
                               "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}))
    return cfg


def test_build_ops_reports_the_compiler_failure_in_one_finding(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))  # nothing cached: a real build
    monkeypatch.setenv("CXX", "/bin/false")
    result = runner.invoke(cli, ["env", "--only", "versions", "--build-ops", str(_offload_config(tmp_path)),
                                 "--json", "-"])
    data = json.loads(result.stdout)
    assert result.exit_code == 1
    errors = [f for f in data["findings"] if f["severity"] in ("warning", "error")]
    assert [f["id"] for f in errors] == ["ENV324"]
    assert errors[0]["evidence"].startswith("CPUAdamBuilder after")
    assert "/bin/false" in errors[0]["evidence"]


def test_build_ops_really_builds_cpu_adam(runner, tmp_path, monkeypatch):
    """The CPU Adam op a ZeRO-Offload config needs, JIT-built for real (about 45 s on 2 cores)."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    result = runner.invoke(cli, ["env", "--only", "versions", "--build-ops", str(_offload_config(tmp_path)),
                                 "--json", "-"])
    data = json.loads(result.stdout)
    assert result.exit_code == 0, data["result"].get("built_ops")
    assert [(r["name"], r["ok"], r["compiled"]) for r in data["result"]["built_ops"]] == \
        [("CPUAdamBuilder", True, True)]
    assert list((tmp_path / "ext").rglob("cpu_adam*.so"))


def test_privileged_port_and_disk_space():
    net = {"MASTER_PORT": "520", "interfaces": []}
    assert ids({"network": net, "host": {"euid": 1000}}, live=False) == ["NET406"]
    assert ids({"network": net, "host": {"euid": 0}}, live=False) == []  # root may bind it
    assert ids({"host": {"output_dir": "/ckpt", "output_dir_free": 20 * GIB}}) == ["ENV325"]
    assert ids({"host": {"output_dir": "/ckpt", "output_dir_free": 500 * GIB}}) == []


def test_pcie_only_topology():
    pcie = [dict(H200, index=i, nvlinks_active=0) for i in range(4)]
    topology = [{"gpus": [0, 1], "pcie_path": "PIX"}, {"gpus": [0, 2], "pcie_path": "SYS"}]
    found = diagnose({"gpu": {"gpus": pcie, "topology": topology}})
    assert [f.id for f in found] == ["ENV326"] and "across CPU sockets: GPU 0-2" in found[0].evidence
    nvlink = [dict(g, nvlinks_active=18) for g in pcie]
    assert ids({"gpu": {"gpus": nvlink, "topology": topology}}) == []
    assert ids({"gpu": {"gpus": [dict(H200, nvlinks_active=0)]}}) == []  # one GPU: nothing to say


def test_host_ram_against_offload(runner, tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"bf16": {"enabled": True}, "zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}}))
    data = json.loads(runner.invoke(cli, ["env", "--only", "versions", "--deepspeed", str(cfg), "--model",
                                          "llama-2-7b", "--json", "-"]).stdout)
    needed = data["result"]["host_needed_bytes"]["needed_per_node"]
    ram = data["result"]["facts"]["host"]["ram"]
    assert ("MEM504" in [f["id"] for f in data["findings"]]) == (needed > 0.9 * ram)
    assert needed == int(1.5 * 18 * 6_738_415_616) + 2 * 6_738_415_616  # 16 + 2 bytes offloaded, 2 loaded
    result = runner.invoke(cli, ["env", "--deepspeed", str(cfg)])
    assert result.exit_code == 2 and "go together" in result.stderr


def test_trial_findings_on_env(runner, tmp_path):
    """From a fresh-clone trial: comma lists keep every arch in the fix; a CUDA_HOME without nvcc; --from with
    malformed facts is one line; only the sections present are claimed."""
    found = [f for f in diagnose({"toolchain": {"TORCH_CUDA_ARCH_LIST": "8.0,9.0", "gcc": "g++", "ninja": "1",
                                                "libaio": True}}) if f.id == "ENV307"]
    assert found[0].fix == 'export TORCH_CUDA_ARCH_LIST="8.0;9.0"'
    found = [f for f in diagnose({"toolchain": {"TORCH_CUDA_ARCH_LIST": "9.0a;10.0f;12.0", "gcc": "g++",
                                                "ninja": "1", "libaio": True}}) if f.id == "ENV307"]
    assert found[0].fix == 'export TORCH_CUDA_ARCH_LIST="9.0;10.0;12.0"'
    facts = {"versions": {"torch": "2.5.1+cu124", "torch_cuda": "12.4", "deepspeed": "0.16.0",
                          "deepspeed_prebuilt_ops": []},
             "toolchain": {"CUDA_HOME": "/nonexistent", "cuda_home_has_nvcc": False, "nvcc": "/usr/bin/nvcc",
                           "nvcc_cuda": "12.4", "gcc": "g++", "ninja": "1", "libaio": True}}
    assert ids(facts) == ["ENV327"]
    for bad in ({"result": None}, {"result": {"facts": {"network": {"interfaces": None, "NCCL_DEBUG": None}}}},
                {"result": {"facts": {"gpu": {"gpus": [{"index": 0, "name": "x", "memory_total": "80GB",
                                                        "capability": "9.0"}]}}}}):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad))
        result = runner.invoke(cli, ["env", "--from", str(path)])
        assert result.exit_code == 2 and "dsdoctor: error:" in result.stderr and "internal" not in result.stderr
    path.write_text(json.dumps({"result": {"facts": {}}}))
    assert "no facts of the sections" in runner.invoke(cli, ["env", "--from", str(path)]).stderr
    path.write_text(json.dumps({"result": {"facts": {"network": {"interfaces": ["eth0"], "MASTER_PORT": "80",
                                                                 "euid": 1000}}}}))
    data = json.loads(runner.invoke(cli, ["env", "--from", str(path), "--json", "-"]).stdout)
    assert [f["id"] for f in data["findings"]] == ["NET406"] and data["result"]["sections"] == ["network"]
    for args in (["--only", ""], ["--from", ""], ["--output-dir", ""]):
        assert runner.invoke(cli, ["env", *args]).exit_code == 2


def test_cpu_accelerator_is_information():
    facts = {"versions": {"torch": "2.13.0+cpu", "torch_cuda": None, "deepspeed": "0.19.8"},
             "gpu": {"nvml": False, "gpus": []}}
    found = diagnose(facts)
    assert [(f.id, f.severity) for f in found] == [("ENV328", "info")]


def test_unreachable_master(monkeypatch):
    import errno

    from dsdoctor.checks import network

    def timeout(*a, **k):
        raise socket.timeout()

    monkeypatch.setattr(network.socket, "create_connection", timeout)
    net = {"MASTER_ADDR": "203.0.113.7", "MASTER_PORT": "29500", "interfaces": []}
    found = [f for f in diagnose({"network": net}) if f.id == "NET410"]
    assert found and found[0].evidence == "MASTER_ADDR=203.0.113.7 port 29500: no answer within 2 s"

    def no_route(*a, **k):
        raise OSError(errno.EHOSTUNREACH, "No route to host")

    monkeypatch.setattr(network.socket, "create_connection", no_route)
    assert [f.evidence for f in diagnose({"network": net}) if f.id == "NET410"] == \
        ["MASTER_ADDR=203.0.113.7 port 29500: No route to host"]

    def refused(*a, **k):
        raise ConnectionRefusedError()

    monkeypatch.setattr(network.socket, "create_connection", refused)  # nothing listens yet: normal
    assert "NET410" not in ids({"network": net})
    assert "NET410" not in ids({"network": {**net, "MASTER_ADDR": "127.0.0.1"}})


def test_nvcc_that_cannot_compile_for_the_gpu_or_the_arch_list(tmp_path):
    """`nvcc fatal : Unsupported gpu architecture 'compute_90'` before launch (ENV330): a CUDA 11.7 nvcc lists
    compute_35..compute_87, an H200 is 9.0; with TORCH_CUDA_ARCH_LIST the list's entries are what the build targets."""
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\nif [ \"$1\" = --list-gpu-arch ]; then printf 'compute_35\\ncompute_37\\ncompute_50\\n"
                    "compute_52\\ncompute_53\\ncompute_60\\ncompute_61\\ncompute_62\\ncompute_70\\ncompute_72\\n"
                    "compute_75\\ncompute_80\\ncompute_86\\ncompute_87\\n'; else echo 'Cuda compilation tools, release "
                    "11.7, V11.7.99'; fi\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    probe = Probe(env={"PATH": str(tmp_path)}, which=lambda name: str(nvcc) if name == "nvcc" else None,
                  nvml=lambda: None)
    toolchain = collect(probe, sections=("toolchain",))["toolchain"]
    assert toolchain["nvcc_archs"][0] == "3.5" and toolchain["nvcc_archs"][-1] == "8.7" and "8.6" in \
        toolchain["nvcc_archs"]
    versions = {"torch": "2.1.2+cu118", "torch_cuda": "11.8", "deepspeed": "0.12.6", "deepspeed_prebuilt_ops": []}
    gpu = {"nvml": True, "driver": "550.54", "driver_cuda": "12.4", "gpus": [H200]}
    found = {f.id: f for f in diagnose({"versions": versions, "toolchain": toolchain, "gpu": gpu})}
    assert "ENV330" in found and "not 9.0 (the GPUs here)" in found["ENV330"].evidence
    toolchain["TORCH_CUDA_ARCH_LIST"] = "8.0;8.6"  # the build targets the list, which this nvcc has
    assert "ENV330" not in ids({"versions": versions, "toolchain": toolchain, "gpu": gpu})
    toolchain["nvcc_archs"] = None  # an nvcc without --list-gpu-arch says nothing
    toolchain["TORCH_CUDA_ARCH_LIST"] = None
    assert "ENV330" not in ids({"versions": versions, "toolchain": toolchain, "gpu": gpu})


def test_a_gpu_listed_twice_in_cuda_visible_devices():
    gpu = {"nvml": True, "gpus": [H200, dict(H200, index=1)], "CUDA_VISIBLE_DEVICES": "0,1,1"}
    found = {f.id: f for f in diagnose({"gpu": gpu})}
    assert found["NET415"].evidence == "CUDA_VISIBLE_DEVICES=0,1,1: 1 listed twice"
