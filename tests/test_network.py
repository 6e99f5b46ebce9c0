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
