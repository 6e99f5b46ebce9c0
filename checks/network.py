"""Network checks (``NET4xx``) that must pass before any rank starts."""

from __future__ import annotations

import errno
import os
import socket

from dsdoctor.rules import rule

NET401 = rule(
    "NET401", "error", "MASTER_PORT is busy",
    what="The rendezvous port is already bound on this host.",
    why="torchrun / the deepspeed launcher then fails with 'address already in use' (EADDRINUSE), or worse, "
        "ranks join another job's rendezvous and hang: a leftover run or a second job on the same port.",
    fix="Set MASTER_PORT to a free port (export MASTER_PORT=29501; launchers: --master_port 29501), unset it "
        "(dsdoctor then picks a free one), or find the holder with `ss -ltnp | grep PORT` and stop it.",
    source="torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py (TCPStore binds MASTER_PORT)")


def port_in_use(port: int, host: str = "") -> bool:
    """True when ``port`` cannot be bound on ``host`` (all interfaces by default) because it is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # as the TCPStore binds: SO_REUSEADDR, so a port left in TIME_WAIT by a finished run is free
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def free_port() -> int:
    """A TCP port the kernel reports free now (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def master_port_finding(env: dict | None = None):
    """NET401 when MASTER_PORT is set and busy; None when it is unset or free."""
    env = os.environ if env is None else env
    value = (env.get("MASTER_PORT") or "").strip()  # int() and torch accept surrounding spaces
    if not value:
        return None
    if not (value.isascii() and value.isdecimal()) or not 0 < int(value) < 65536:
        return NET401.finding(f"MASTER_PORT={value!r} is not a port number", title="MASTER_PORT is invalid",
                              fix="Set MASTER_PORT to a free port number between 1 and 65535 (1024 or above "
                                  "unless you are root).")
    if port_in_use(int(value)):
        return NET401.finding(f"MASTER_PORT={value} is already bound on {socket.gethostname()}")
    return None
