"""NET4xx (checks/network.py, installed as dsdoctor.checks.network): the rendezvous port."""

from __future__ import annotations

import socket

import pytest

from dsdoctor.checks.network import NET401, free_port, master_port_finding, port_in_use


@pytest.fixture
def busy_port():
    """A port held by a listening socket for the duration of the test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        s.listen(1)
        yield s.getsockname()[1]


def test_port_in_use_for_a_listening_port(busy_port):
    assert port_in_use(busy_port) is True


def test_port_in_use_for_a_loopback_listener():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        assert port_in_use(s.getsockname()[1]) is True


def test_port_free_after_release():
    port = free_port()
    assert isinstance(port, int) and 0 < port < 65536
    assert port_in_use(port) is False


def test_master_port_busy_is_net401_error(busy_port):
    f = master_port_finding({"MASTER_PORT": str(busy_port)})
    assert f is not None
    assert (f.id, f.severity, f.title) == ("NET401", "error", "MASTER_PORT is busy")
    assert f.evidence.startswith(f"MASTER_PORT={busy_port} is already bound on ")
    assert f.fix == NET401.fix


@pytest.mark.parametrize("value", ["abc", "-1", "0", "65536", "29500x", "1.5"])
def test_master_port_invalid(value):
    f = master_port_finding({"MASTER_PORT": value})
    assert f is not None
    assert (f.id, f.severity, f.title) == ("NET401", "error", "MASTER_PORT is invalid")
    assert f.evidence == f"MASTER_PORT={value!r} is not a port number"
    assert "between 1 and 65535" in f.fix


@pytest.mark.parametrize("env", [{}, {"MASTER_PORT": ""}, {"OTHER": "1"}])
def test_master_port_unset_is_none(env):
    assert master_port_finding(env) is None


def test_master_port_free_is_none():
    assert master_port_finding({"MASTER_PORT": str(free_port())}) is None


def test_master_port_reads_os_environ(monkeypatch, busy_port):
    monkeypatch.setenv("MASTER_PORT", str(busy_port))
    assert master_port_finding().id == "NET401"
    monkeypatch.delenv("MASTER_PORT")
    assert master_port_finding() is None


def test_master_port_unicode_digit_is_invalid_not_a_crash():
    f = master_port_finding({"MASTER_PORT": "²"})
    assert f is not None and f.title == "MASTER_PORT is invalid"


# --- NET411: the interface NCCL would use against the route to the master --------------------------------------------

from dsdoctor.checks.network import interface_findings, nccl_interfaces, route_to  # noqa: E402

HOST = [["lo", "127.0.0.1"], ["eno1", "10.0.0.5"], ["docker0", "172.17.0.1"], ["ens5", "192.168.8.5"],
        ["lo", "::1"]]


@pytest.mark.parametrize("addresses,ifname,expected", [
    (HOST, None, ["eno1", "ens5"]),  # neither docker* nor lo, in getifaddrs order
    (HOST + [["ib0", "10.9.0.5"]], None, ["ib0"]),  # InfiniBand's IPoIB first
    ([["lo", "127.0.0.1"], ["docker0", "172.17.0.1"]], None, ["docker0"]),
    ([["lo", "127.0.0.1"]], None, ["lo"]),
    (HOST, "ens", ["ens5"]),  # a prefix
    (HOST, "^eno,lo,docker", ["ens5"]),  # ^ excludes
    (HOST, "=ens", []),  # = is exact
    (HOST, "e", ["eno1", "ens5"]),
])
def test_nccl_interfaces_mirror_ncclFindInterfaces(addresses, ifname, expected):
    assert nccl_interfaces(addresses, ifname) == expected


def test_route_through_another_interface_than_nccl_would_bootstrap_on():
    net = {"MASTER_ADDR": "192.168.8.1", "addresses": HOST, "route_to_master": ["ens5", "192.168.8.5"]}
    [finding] = interface_findings(net)
    assert finding.id == "NET411" and finding.severity == "warning"
    assert "NCCL would bootstrap on eno1" in finding.evidence and "leaves through ens5 (192.168.8.5)" in finding.evidence
    assert finding.fix.startswith("export NCCL_SOCKET_IFNAME=ens5 GLOO_SOCKET_IFNAME=ens5")


def test_an_ifname_that_leaves_out_the_route():
    net = {"MASTER_ADDR": "192.168.8.1", "addresses": HOST, "route_to_master": ["ens5", "192.168.8.5"],
           "NCCL_SOCKET_IFNAME": "eno1"}
    [finding] = interface_findings(net)
    assert "NCCL_SOCKET_IFNAME=eno1 selects eno1" in finding.evidence


@pytest.mark.parametrize("net", [
    {"MASTER_ADDR": "10.0.0.1", "addresses": HOST, "route_to_master": ["eno1", "10.0.0.5"]},  # NCCL's pick
    {"MASTER_ADDR": "192.168.8.1", "addresses": HOST, "route_to_master": ["ens5", "192.168.8.5"],
     "NCCL_SOCKET_IFNAME": "ens"},
    {"MASTER_ADDR": "127.0.0.1", "addresses": HOST, "route_to_master": ["lo", "127.0.0.1"]},  # one node
    {"MASTER_ADDR": "192.168.8.1", "addresses": HOST, "route_to_master": None},
    {"MASTER_ADDR": "192.168.8.1", "addresses": [], "route_to_master": ["ens5", "192.168.8.5"]},  # old report
])
def test_no_net411_when_nccl_uses_the_route(net):
    assert interface_findings(net) == []


def test_route_to_loopback_is_lo():
    assert route_to("127.0.0.1") == ["lo", "127.0.0.1"]


# --- the busbw verdict against the link's peak ----------------------------------------------------------------------

from dsdoctor.checks.network import busbw_findings, link_between  # noqa: E402

H100_SXM = {"nvlinks_active": 18, "nvlink_version": 4, "pcie_gen": 5, "pcie_width": 16}
L40S = {"nvlinks_active": 0, "nvlink_version": None, "pcie_gen": 4, "pcie_width": 16}


def test_links_from_nvml_facts():
    assert link_between([H100_SXM] * 8)["peak"] == 450e9 and link_between([H100_SXM])["label"] == "NVLink 4 x18"
    pcie = link_between([L40S, dict(L40S, pcie_width=8)])
    assert pcie["label"] == "PCIe Gen4 x8" and pcie["peak"] == 8 * 1.969e9
    assert link_between([H100_SXM, L40S])["kind"] == "pcie"  # not every GPU on NVLink: the ring crosses PCIe
    two_nodes = link_between([H100_SXM] * 8, ib_bits_per_s=8 * 400e9, nodes=2)
    assert two_nodes["kind"] == "network" and two_nodes["peak"] == 400e9
    assert link_between([H100_SXM] * 8, nic_bits_per_s=25e9, nodes=2)["label"] == "Ethernet 25 Gb/s per node"
    assert link_between([H100_SXM] * 8, nodes=2) is None  # the network's rate unknown
    assert link_between([{"nvlinks_active": 0}]) is None


def sweep_of(busbw, size=2 ** 30):
    return [{"op": "all_reduce", "bytes": 2 ** 20, "busbw": busbw / 10},
            {"op": "all_reduce", "bytes": size, "busbw": busbw}, {"op": "broadcast", "bytes": size, "busbw": 1.0}]


def test_busbw_verdicts():
    link = link_between([L40S] * 2)  # 31.5 GB/s per direction
    [good] = busbw_findings(sweep_of(25e9), 2, "nccl", link)
    assert (good.id, good.severity) == ("NET413", "ok")
    assert good.evidence.startswith("all-reduce busbw 25.0 GB/s at 1,073,741,824 bytes = 79% of PCIe Gen4 x16's "
                                    "31.5 GB/s per direction")
    [slow] = busbw_findings(sweep_of(9e9), 2, "nccl", link)  # P2P off: through host memory
    assert (slow.id, slow.severity) == ("NET412", "warning") and "29% of PCIe Gen4 x16" in slow.evidence


@pytest.mark.parametrize("world,backend,link,size,why", [
    (1, "nccl", {"peak": 1e9}, 2 ** 30, "one rank"),
    (2, "gloo", {"peak": 1e9}, 2 ** 30, "backend gloo"),
    (2, "nccl", None, 2 ** 30, "the link between the ranks is unknown"),
    (2, "nccl", {"peak": 1e9, "label": "x", "source": "y"}, 16 * 2 ** 20, "largest size 16,777,216 bytes"),
])
def test_busbw_not_judged(world, backend, link, size, why):
    [finding] = busbw_findings(sweep_of(1e9, size), world, backend, link)
    assert (finding.id, finding.severity) == ("NET413", "info") and finding.evidence.startswith(why)


def test_nccl_timeout_is_read_by_nothing():
    """newcomer trial: tutorial 2 tells readers to export NCCL_TIMEOUT=1800; no library reads it, so the run keeps
    DeepSpeed's 10-minute (DEEPSPEED_TIMEOUT) collective timeout, the one LOG801 then explains."""
    from dsdoctor.checks.network import deepspeed_timeout_minutes, network_findings

    (f,) = [f for f in network_findings({"NCCL_TIMEOUT": "1800"}, live=False) if f.id == "NET414"]
    assert f.severity == "warning"
    assert f.evidence == f"NCCL_TIMEOUT=1800; DEEPSPEED_TIMEOUT=(unset: DeepSpeed waits {deepspeed_timeout_minutes()} minutes)"
    assert deepspeed_timeout_minutes() == 10  # DeepSpeed 0.19.8's deepspeed/constants.py
    assert "DEEPSPEED_TIMEOUT" in f.fix and "--ddp_timeout" in f.fix
    (g,) = [f for f in network_findings({"NCCL_TIMEOUT": "1800", "DEEPSPEED_TIMEOUT": "60"}, live=False)
            if f.id == "NET414"]
    assert g.evidence.endswith("DEEPSPEED_TIMEOUT=60")
    assert not [f for f in network_findings({"DEEPSPEED_TIMEOUT": "60"}, live=False) if f.id == "NET414"]
