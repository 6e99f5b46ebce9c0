"""Two hosts on one machine: two network namespaces joined by a veth pair (as root, with addresses that exist only
inside them), running `dsdoctor nccl` across both under torchrun, and proving the pre-launch network findings on
real interfaces: NET410 when the master's port is silently dropped (a firewall: a policy-routing rule that blackholes
that port's replies), not when it is merely closed, and
NET411 when NCCL would bootstrap on another interface than the one that reaches the master.

Host B has a second interface (mgmt0, a management network with a lower interface index) that does not reach A: NCCL's
default choice. Skipped, with the reason, where namespaces cannot be made (not root, no `ip`, no netns support)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from dsdoctor.checks.network import free_port

PID = os.getpid() % 100000
A, B = f"dsdA{PID}", f"dsdB{PID}"
VA, VB = f"vA{PID}", f"vB{PID}"
ADDR_A, ADDR_B = "10.77.0.1", "10.77.0.2"


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=60)


@pytest.fixture(scope="module")
def hosts():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2's `ip`")
    made = sh("ip", "netns", "add", A, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {made.stderr.strip()}")
    try:
        sh("ip", "netns", "add", B)
        sh("ip", "-n", B, "link", "add", "mgmt0", "type", "veth", "peer", "name", "mgmt1")
        sh("ip", "-n", B, "addr", "add", "10.88.0.2/24", "dev", "mgmt0")
        sh("ip", "link", "add", VA, "type", "veth", "peer", "name", VB)
        sh("ip", "link", "set", VA, "netns", A)
        sh("ip", "link", "set", VB, "netns", B)
        sh("ip", "-n", A, "addr", "add", f"{ADDR_A}/24", "dev", VA)
        sh("ip", "-n", B, "addr", "add", f"{ADDR_B}/24", "dev", VB)
        for ns, links in ((A, ("lo", VA)), (B, ("lo", "mgmt0", "mgmt1", VB))):
            for link in links:
                sh("ip", "-n", ns, "link", "set", link, "up")
    except subprocess.CalledProcessError as exc:
        for ns in (A, B):
            sh("ip", "netns", "del", ns, check=False)
        pytest.skip(f"cannot build the two-host network: {' '.join(exc.cmd)}: {exc.stderr.strip()}")
    yield
    for ns in (A, B):
        sh("ip", "netns", "del", ns, check=False)


def in_ns(ns: str, argv: list[str], env: dict, **kw) -> subprocess.Popen:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "NCCL_", "GLOO_", "RANK",
                                                                      "WORLD_SIZE", "LOCAL_"))}
    return subprocess.Popen(["ip", "netns", "exec", ns, *argv], env={**clean, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def env_report(port: int, **extra) -> dict:
    proc = in_ns(B, [sys.executable, "-m", "dsdoctor", "env", "--only", "network", "--json", "-"],
                 {"MASTER_ADDR": ADDR_A, "MASTER_PORT": str(port), **extra})
    out, err = proc.communicate(timeout=60)
    assert out.strip(), err
    return {f["id"]: f for f in json.loads(out)["findings"]}


def test_two_hosts_pass_every_stage_through_torchrun(hosts):
    port = free_port()
    procs = []
    for node, (ns, link) in enumerate(((A, VA), (B, VB))):
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                "--nproc-per-node", "1", "--master-addr", ADDR_A, "--master-port", str(port), "-m", "dsdoctor",
                "nccl", "--backend", "gloo", "--timeout", "30", "--sizes", "1M", "--json", "-"]
        procs.append(in_ns(ns, argv, {"GLOO_SOCKET_IFNAME": link}))
    outputs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-1500:] for _, err in outputs]
    text = outputs[0][0]
    report = json.loads(text[text.index("{"):])
    assert [f["id"] for f in report["findings"]] == ["NET409", "NET413"]
    assert report["result"]["interface"] == VA  # GLOO_SOCKET_IFNAME
    assert report["result"]["world_size"] == 2 and report["result"]["rank"] == 0
    assert report["result"]["stages_ok"] == ["rendezvous", "barrier", "all_reduce", "all_gather", "reduce_scatter",
                                             "broadcast", "sweep", "done"]


def test_nccl_would_bootstrap_on_the_management_interface(hosts):
    findings = env_report(free_port())
    net411 = findings["NET411"]
    assert "NCCL would bootstrap on mgmt0" in net411["evidence"]
    assert f"leaves through {VB} ({ADDR_B})" in net411["evidence"]
    assert net411["fix"].startswith(f"export NCCL_SOCKET_IFNAME={VB}")
    assert "NET411" not in env_report(free_port(), NCCL_SOCKET_IFNAME=VB)


def test_a_closed_port_is_normal_a_dropped_port_is_net410(hosts):
    port = free_port()
    assert "NET410" not in env_report(port)  # refused: nothing listens yet, as before the job starts
    # the master's firewall, without netfilter: a policy-routing rule blackholes every reply from that port (the
    # SYN-ACK or the RST), so the connecting node sees no answer at all; other ports are untouched
    rule = ["ip", "-n", A, "rule", "add", "ipproto", "tcp", "sport", str(port), "blackhole"]
    made = sh(*rule, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot block one port here (ip rule ipproto/sport needs Linux 4.17+): {made.stderr.strip()}")
    try:
        net410 = env_report(port)["NET410"]
        assert net410["severity"] == "warning"
        assert net410["evidence"] == f"MASTER_ADDR={ADDR_A} port {port}: no answer within 2 s"
        assert "NET410" not in env_report(free_port())  # only that port is blocked
    finally:
        sh("ip", "-n", A, "rule", "del", *rule[5:], check=False)


def test_an_address_with_no_route_is_net410(hosts):
    proc = in_ns(B, [sys.executable, "-m", "dsdoctor", "env", "--only", "network", "--json", "-"],
                 {"MASTER_ADDR": "10.99.0.1", "MASTER_PORT": "29500"})
    out, err = proc.communicate(timeout=60)
    findings = {f["id"]: f for f in json.loads(out)["findings"]}
    assert findings["NET410"]["evidence"] == "MASTER_ADDR=10.99.0.1 port 29500: Network is unreachable"


def test_hang_snapshots_of_two_hosts_merge_into_one_verdict(hosts, tmp_path):
    """A job over both hosts (torchrun --nnodes 2, gloo): host B's rank 1 is held up in its own code before step 3's
    all_reduce, host A's rank 0 waits in it. Each host's `dsdoctor hang --json` sees only half: A says the late rank is
    not here (HANG905, rank 1 in no snapshot), B that its rank is in no collective (HANG907). `--merge` of the two
    names rank 1 and where it is (HANG901). The job then goes on to its end."""
    from pathlib import Path

    job = Path(__file__).resolve().parent / "hang_job.py"
    port = free_port()
    launchers = []
    for node, (ns, link) in enumerate(((A, VA), (B, VB))):
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                "--nproc-per-node", "1", "--master-addr", ADDR_A, "--master-port", str(port), str(job), "sleep",
                str(tmp_path)]
        launchers.append(in_ns(ns, argv, {"GLOO_SOCKET_IFNAME": link, "OMP_NUM_THREADS": "1"},
                               start_new_session=True))
    try:
        import time

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(
                (tmp_path / f"loss-{r}.log").exists() and len((tmp_path / f"loss-{r}.log").read_text().splitlines())
                >= 2 for r in range(2)):
            assert all(p.poll() is None for p in launchers), [p.communicate()[1][-1500:] for p in launchers]
            time.sleep(0.3)
        time.sleep(1.0)
        snapshots = []
        for ns, proc in zip((A, B), launchers):
            path = tmp_path / f"{ns}.json"
            # `ip netns exec` runs torchrun as its child: the launcher's PID is the netns exec process's own
            snap = in_ns(ns, [sys.executable, "-m", "dsdoctor", "hang", "--pid", str(proc.pid), "--interval", "0.5",
                              "--json", str(path)], {})
            snap.communicate(timeout=60)
            snapshots.append(json.loads(path.read_text()))
        assert snapshots[0]["findings"][0]["id"] == "HANG905"
        assert "rank 1 of world size 2 is in no snapshot" in snapshots[0]["findings"][0]["evidence"]
        assert snapshots[1]["findings"][0]["id"] == "HANG907"
        merged = subprocess.run([sys.executable, "-m", "dsdoctor", "hang", "--merge", str(tmp_path / f"{A}.json"),
                                 str(tmp_path / f"{B}.json"), "--json", "-"], capture_output=True,
                                text=True, timeout=60)
        data = json.loads(merged.stdout)
        assert merged.returncode == 1
        assert data["findings"][0]["id"] == "HANG901"
        assert data["findings"][0]["title"].startswith("rank 1 has not reached all_reduce: it is at wait_for_release")
        (tmp_path / "release").write_text("")
        assert [p.wait(60) for p in launchers] == [0, 0]
    finally:
        for p in launchers:
            if p.poll() is None:
                os.killpg(p.pid, 9)
