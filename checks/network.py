"""Network checks (``NET4xx``): the distributed variables before any rank starts (used by ``smoke``, ``env`` and
``nccl``), and the verdicts of ``dsdoctor nccl``'s probe stages."""

from __future__ import annotations

import errno
import os
import re
import socket

from dsdoctor.report import Finding
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


NET402 = rule(
    "NET402", "error", "NCCL_SOCKET_IFNAME names no interface here",
    what="NCCL_SOCKET_IFNAME selects no network interface of this host (or only loopback/docker bridges).",
    why="NCCL finds no usable interface ('Bootstrap : no socket interface found') or, on lo/docker0, ranks on other "
        "nodes never connect and the first collective hangs until the timeout.",
    fix="Set it to the interface the nodes reach each other on (ip -br addr; e.g. NCCL_SOCKET_IFNAME=eth0), or unset it.",
    source="NCCL environment variables: NCCL_SOCKET_IFNAME (prefix match, ^ excludes, = exact)")
NET403 = rule(
    "NET403", "info", "NCCL_DEBUG is on",
    what="NCCL_DEBUG is INFO or TRACE.", why="Useful for a hang, noisy (and slower) for a long run.",
    fix="unset NCCL_DEBUG after debugging (WARN is the quiet useful level).", source="NCCL environment variables")
NET404 = rule(
    "NET404", "info", "an NCCL transport is disabled",
    what="NCCL_P2P_DISABLE or NCCL_IB_DISABLE is set to 1.",
    why="Often copied from an answer about a consumer-GPU hang (RTX 4090 P2P); on NVLink or InfiniBand machines it "
        "makes every all-reduce go through host memory or TCP.",
    fix="Unset it unless this machine needs it (dsdoctor nccl measures both ways).", source="NCCL environment variables")
NET406 = rule(
    "NET406", "error", "MASTER_PORT below 1024 for a user who is not root",
    what="MASTER_PORT is a privileged port (below 1024) and the process is not root.",
    why="The rendezvous store cannot bind: 'The server socket has failed to bind to [::]:520 (errno: 13 - "
        "Permission denied)'.",
    fix="Use a port of 1024 or above, e.g. --master_port 29501 (or MASTER_PORT=29501).",
    source="https://github.com/liucongg/ChatGLM-Finetuning/issues/140; bind(2) EACCES")
NET410 = rule(
    "NET410", "warning", "MASTER_ADDR cannot be reached from here",
    what="MASTER_ADDR is another host and a TCP connection to it times out or has no route.",
    why="This node's ranks wait at rendezvous until the timeout: a firewall, a wrong subnet or the wrong address "
        "(an interface the other nodes cannot reach).",
    fix="Use the master's address on the network the nodes share (ip -br addr on the master), open MASTER_PORT "
        "in its firewall, and check with: nc -vz MASTER_ADDR MASTER_PORT",
    source="connect(2) to MASTER_ADDR:MASTER_PORT with a 2 s timeout; torch/distributed/rendezvous.py")
NET405 = rule(
    "NET405", "error", "MASTER_ADDR does not resolve",
    what="MASTER_ADDR is set to a name this host cannot resolve.",
    why="Every rank fails at rendezvous ('Name or service not known'), or waits until the timeout.",
    fix="Use the master node's IP address, or add the name to /etc/hosts on every node.",
    source="torch/distributed/rendezvous.py (env:// init)")


NET407 = rule(
    "NET407", "error", "a stage did not finish on every rank",
    what="A probe stage (rendezvous, barrier, a collective, the sweep) did not finish on every rank within --timeout.",
    why="The same hang in training waits for NCCL's watchdog (30 minutes by default) before any error.",
    fix="See the evidence for the ranks and the stage; the likely causes are listed per stage.",
    source="dsdoctor nccl stage markers; torch.distributed init_process_group timeout")
NET408 = rule(
    "NET408", "error", "a collective failed or returned wrong values",
    what="A rank raised during a stage, or a collective's result differed from the known value on some rank.",
    why="Training would crash at the same call, or silently train on corrupted gradients.",
    fix="Read the error; run with NCCL_DEBUG=INFO; test GPUs pairwise with CUDA_VISIBLE_DEVICES.",
    source="dsdoctor nccl (results checked on every rank)")
NET409 = rule(
    "NET409", "ok", "every stage passed on every rank",
    what="Rendezvous, barrier, all-reduce, all-gather, reduce-scatter and broadcast gave the right values on every "
         "rank, and the sweep ran.", why="", fix="", source="dsdoctor nccl")


def network_findings(net: dict, euid: int | None = None, gpus: list | None = None, live: bool = True) -> list[Finding]:
    """NET4xx findings on the distributed variables ``net`` (``dsdoctor env``'s network facts): the interface
    NCCL_SOCKET_IFNAME selects, NCCL_DEBUG, disabled transports (not P2P on RTX 40xx, where disabling it is the fix,
    ENV321), a privileged MASTER_PORT for a non-root ``euid``; with ``live``, also what only this machine can
    answer now: MASTER_ADDR resolving and reachable, MASTER_PORT free."""
    out: list[Finding] = []
    gpus = gpus or []
    ifname = net.get("NCCL_SOCKET_IFNAME")
    if ifname:
        out.extend(_ifname_findings(ifname, net.get("interfaces") or []))
    out.extend(interface_findings(net))
    if (net.get("NCCL_DEBUG") or "").upper() in ("INFO", "TRACE"):
        out.append(NET403.finding(f"NCCL_DEBUG={net['NCCL_DEBUG']}"))
    consumer = any(re.search(r"RTX 40\d\d", g.get("name", "")) for g in gpus)
    disabled = [k for k in ("NCCL_P2P_DISABLE", "NCCL_IB_DISABLE") if (net.get(k) or "").strip() == "1"
                and not (consumer and k == "NCCL_P2P_DISABLE")]
    if disabled:
        out.append(NET404.finding(", ".join(f"{k}=1" for k in disabled)))
    port = (net.get("MASTER_PORT") or "").strip()
    if port.isdecimal() and 0 < int(port) < 1024 and euid not in (None, 0):
        out.append(NET406.finding(f"MASTER_PORT={port}; running as uid {euid}"))
    if live:
        addr = net.get("MASTER_ADDR")
        if addr:
            try:
                infos = socket.getaddrinfo(addr, None)
            except (OSError, UnicodeError):
                out.append(NET405.finding(f"MASTER_ADDR={addr!r} does not resolve on {socket.gethostname()}"))
            else:
                port = (net.get("MASTER_PORT") or "29500").strip()
                unreachable = _unreachable(infos[0][4][0], port)
                if unreachable:
                    out.append(NET410.finding(f"MASTER_ADDR={addr} port {port}: {unreachable}"))
        found = master_port_finding({"MASTER_PORT": net.get("MASTER_PORT") or ""})
        if found:
            out.append(found)
    return out


def _unreachable(ip: str, port: str, timeout_s: float = 2.0) -> str | None:
    """Why ``ip:port`` cannot be reached (a timeout, no route), or None: reachable, refused (nothing listens yet,
    normal before the job starts), a local address, or a port that is not a number."""
    import errno
    import ipaddress

    try:
        address = ipaddress.ip_address(ip)
        port_number = int(str(port).strip())
    except ValueError:
        return None
    if address.is_loopback or address.is_unspecified or ip in _local_addresses():
        return None
    try:
        with socket.create_connection((ip, port_number), timeout=timeout_s):
            return None
    except socket.timeout:
        return f"no answer within {timeout_s:g} s"
    except ConnectionRefusedError:
        return None
    except OSError as exc:
        if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return exc.strerror
        return None


def _local_addresses() -> set[str]:
    try:
        return {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        return set()


def _ifname_findings(value: str, interfaces: list[str]) -> list[Finding]:
    """NET402 for an NCCL_SOCKET_IFNAME that selects nothing, or only lo / docker bridges. NCCL's syntax: a
    comma-separated list of prefixes; ``^`` excludes; ``=`` matches exactly."""
    if not interfaces:
        return []
    selected = _select(value, interfaces)
    if not selected:
        return [NET402.finding(f"NCCL_SOCKET_IFNAME={value}; interfaces here: {', '.join(interfaces)}")]
    if all(i == "lo" or i.startswith(("docker", "virbr", "veth")) for i in selected):
        return [NET402.finding(f"NCCL_SOCKET_IFNAME={value} selects only {', '.join(selected)}", severity="warning",
                               title="NCCL_SOCKET_IFNAME selects only loopback or container bridges")]
    return []


# --- which interface NCCL would use, and which one reaches the master -------------------------------------------------

NET411 = rule(
    "NET411", "warning", "NCCL would not use the interface that reaches MASTER_ADDR",
    what="The route to MASTER_ADDR leaves through one interface, and NCCL (by NCCL_SOCKET_IFNAME, or by its own "
         "choice when it is unset: ib* first, then the first interface that is not docker* or lo) would use another.",
    why="NCCL's bootstrap and socket transport then listen on an address the other nodes cannot reach (a second NIC, "
        "a management network, a bridge such as virbr0 or cni0): the ranks meet at the TCP store, then the first "
        "collective hangs until the watchdog's timeout.",
    fix="export NCCL_SOCKET_IFNAME=<the interface that reaches the master> (shown in the evidence) on every node, "
        "and GLOO_SOCKET_IFNAME for the gloo groups DeepSpeed also creates.",
    source="NVIDIA/nccl src/misc/socket.cc ncclFindInterfaces (the default order) and bootstrap.cc (the first match "
           "is the bootstrap interface); the route by connect(2) on a UDP socket and getsockname(2)")


def interface_addresses() -> list[list[str]]:
    """``[interface, address]`` pairs in the order ``getifaddrs(3)`` gives them (what NCCL walks): IPv4 addresses by
    interface index, then IPv6 ones (link-local ``fe80::`` left out). Empty when psutil cannot read them."""
    try:
        import psutil

        by_name = psutil.net_if_addrs()
    except Exception:  # noqa: BLE001 - no psutil, or no permission: the NCCL interface check is skipped
        return []
    v4 = [[name, a.address] for name, addrs in by_name.items() for a in addrs if a.family == socket.AF_INET]
    v6 = [[name, a.address.split("%")[0]] for name, addrs in by_name.items() for a in addrs
          if a.family == socket.AF_INET6 and not a.address.lower().startswith("fe80")]
    return v4 + v6


def _select(value: str, names: list[str]) -> list[str]:
    """The interfaces of ``names`` that an NCCL_SOCKET_IFNAME-style list selects: comma-separated prefixes, ``^``
    excludes, ``=`` matches exactly (NCCL's ``parseStringList`` / ``matchIfList``)."""
    exclude = value.startswith("^")
    body = value[1:] if exclude else value
    exact = body.startswith("=")
    wanted = [n.strip() for n in (body[1:] if exact else body).split(",") if n.strip()]

    def matches(name: str) -> bool:
        return any(name == w if exact else name.startswith(w) for w in wanted)

    return [n for n in names if matches(n) != exclude]


def nccl_interfaces(addresses: list[list[str]], ifname: str | None = None) -> list[str]:
    """The interfaces NCCL's socket code would use here, in order (the first is the bootstrap interface), from
    ``addresses`` as :func:`interface_addresses` gives them. Mirrors ``ncclFindInterfaces``: NCCL_SOCKET_IFNAME
    (longer than one character) decides alone; otherwise ``ib*``, else every interface but ``docker*`` and ``lo``,
    else ``docker*``, else ``lo`` (NCCL_COMM_ID's subnet hint is not modelled)."""
    names = list(dict.fromkeys(name for name, _ in addresses))
    if ifname and len(ifname) > 1:
        return _select(ifname, names)
    for choice in ("ib", "^docker,lo", "docker", "lo"):
        found = _select(choice, names)
        if found:
            return found
    return []


def route_to(ip: str, port: int = 29500) -> list[str] | None:
    """``[interface, local address]`` this host would use to reach ``ip``: the kernel's route, read by connecting a
    UDP socket (no packet is sent) and asking for its local address. None when there is no route or the local address
    belongs to no interface psutil lists."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((ip, port))
            local = s.getsockname()[0]
    except OSError:
        return None
    name = next((n for n, a in interface_addresses() if a == local), None)
    return [name, local] if name else None


def interface_findings(net: dict) -> list[Finding]:
    """NET411 from ``dsdoctor env``'s network facts: ``route_to_master`` (``[interface, address]``, set when
    MASTER_ADDR is another host) against the interfaces NCCL would use (``addresses``, NCCL_SOCKET_IFNAME)."""
    route = net.get("route_to_master")
    addresses = net.get("addresses") or []
    if not route or not addresses or route[0] == "lo":
        return []
    ifname = net.get("NCCL_SOCKET_IFNAME")
    chosen = nccl_interfaces(addresses, ifname)
    if not chosen:
        return []  # NET402 covers an NCCL_SOCKET_IFNAME that selects nothing
    if ifname:
        if route[0] in chosen:
            return []
        how = f"NCCL_SOCKET_IFNAME={ifname} selects {', '.join(chosen)}"
    else:
        if chosen[0] == route[0]:
            return []
        how = f"NCCL_SOCKET_IFNAME is unset and NCCL would bootstrap on {chosen[0]} (its order: ib*, then the " \
              f"first that is not docker*/lo, among {', '.join(chosen)})"
    return [NET411.finding(f"{how}; the route to MASTER_ADDR={net.get('MASTER_ADDR')} leaves through {route[0]} "
                           f"({route[1]})",
                           fix=f"export NCCL_SOCKET_IFNAME={route[0]} GLOO_SOCKET_IFNAME={route[0]} on every node "
                               f"(each node's own interface name on that network).")]
