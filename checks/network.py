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


def deepspeed_timeout_minutes() -> int | None:
    """DeepSpeed's default collective timeout in minutes, read from the installed ``deepspeed/constants.py``
    (``default_pg_timeout = timedelta(minutes=int(os.getenv("DEEPSPEED_TIMEOUT", default=N)))``) without importing
    it; None where DeepSpeed is absent or the line has another form."""
    from dsdoctor.files import installed_package_dir

    root = installed_package_dir("deepspeed")
    if root is None:
        return None
    try:
        text = (root / "constants.py").read_text(encoding="utf-8")
    except OSError:
        return None
    found = re.search(r"DEEPSPEED_TIMEOUT[\"']\s*,\s*default\s*=\s*(\d+)", text)
    return int(found.group(1)) if found else None


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
    out.extend(bridge_findings(net))
    if (net.get("NCCL_DEBUG") or "").upper() in ("INFO", "TRACE"):
        out.append(NET403.finding(f"NCCL_DEBUG={net['NCCL_DEBUG']}"))
    consumer = any(re.search(r"RTX 40\d\d", g.get("name", "")) for g in gpus)
    disabled = [k for k in ("NCCL_P2P_DISABLE", "NCCL_IB_DISABLE") if (net.get(k) or "").strip() == "1"
                and not (consumer and k == "NCCL_P2P_DISABLE")]
    if disabled:
        out.append(NET404.finding(", ".join(f"{k}=1" for k in disabled)))
    if (net.get("NCCL_TIMEOUT") or "").strip():
        ds = net.get("DEEPSPEED_TIMEOUT")
        out.append(NET414.finding(f"NCCL_TIMEOUT={str(net['NCCL_TIMEOUT'])[:40]}; DEEPSPEED_TIMEOUT="
                                  f"{ds if ds else '(unset: DeepSpeed waits ' + str(deepspeed_timeout_minutes() or 10) + ' minutes)'}"))
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


def route_to(ip: str, addresses: list[list[str]] | None = None, port: int = 29500) -> list[str] | None:
    """``[interface, local address]`` this host would use to reach ``ip``: the kernel's route, read by connecting a
    UDP socket (no packet is sent) and asking for its local address, looked up in ``addresses``
    (:func:`interface_addresses` when not given). None when there is no route or the address is on no interface."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((ip, port))
            local = s.getsockname()[0]
    except OSError:
        return None
    name = next((n for n, a in (interface_addresses() if addresses is None else addresses) if a == local), None)
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


# --- the busbw verdict ---------------------------------------------------------------------------------------------

#: Peak bandwidth of one link in one direction, bytes/s, and where the figure comes from. NVLink: per link; a GPU's
#: total is this times its active links (V100 SXM2: 6 links, 300 GB/s both directions; A100 SXM: 12, 600 GB/s;
#: H100/H200 SXM: 18, 900 GB/s; B200: 18, 1.8 TB/s). PCIe: per lane after line encoding (x16 Gen4 = 31.5 GB/s).
LINK_PEAK = {
    ("nvlink", 2): (25e9, "NVIDIA V100 datasheet: NVLink 2, 300 GB/s over 6 links both ways"),
    ("nvlink", 3): (25e9, "NVIDIA A100 datasheet: NVLink 3, 600 GB/s over 12 links both ways"),
    ("nvlink", 4): (25e9, "NVIDIA H100/H200 datasheets: NVLink 4, 900 GB/s over 18 links both ways"),
    ("nvlink", 5): (50e9, "NVIDIA B200 datasheet: NVLink 5, 1.8 TB/s over 18 links both ways"),
    ("pcie", 3): (0.985e9, "PCI-SIG: Gen3 8 GT/s per lane, 128b/130b encoding"),
    ("pcie", 4): (1.969e9, "PCI-SIG: Gen4 16 GT/s per lane, 128b/130b encoding"),
    ("pcie", 5): (3.938e9, "PCI-SIG: Gen5 32 GT/s per lane, 128b/130b encoding"),
    ("pcie", 6): (7.563e9, "PCI-SIG: Gen6 64 GT/s per lane, PAM4 with FLIT encoding"),
}
#: busbw below this fraction of the link's peak is a warning. nccl-tests' doc/PERFORMANCE.md: busbw "should be
#: compared to the hardware peak bandwidth"; a healthy link reaches most of its peak at large sizes, and half of it
#: or less points at traffic that left the link (P2P disabled or unavailable, through host memory, TCP instead of IB).
HEALTHY_FRACTION = 0.5
#: below this size the plateau is not reached and nothing is judged
PLATEAU_BYTES = 64 * 2 ** 20

NET412 = rule(
    "NET412", "warning", "busbw is far below what the link should give",
    what="The all-reduce's bus bandwidth at the largest size is below half of the peak of the slowest link the "
         "ranks share (NVLink, PCIe, or the network between nodes).",
    why="Every ZeRO step all-reduces or reduce-scatters the gradients over that link: a run that should be "
        "compute-bound becomes communication-bound.",
    fix="Run with NCCL_DEBUG=INFO and look at the transport (P2P/NVLink, SHM, NET/IB or NET/Socket); unset "
        "NCCL_P2P_DISABLE/NCCL_IB_DISABLE unless they are needed; check PCIe ACS/IOMMU (P2P through the root "
        "complex), nvidia-fabricmanager on NVSwitch machines, and that NCCL uses the fast NIC.",
    source="nccl-tests doc/PERFORMANCE.md (busbw against the hardware peak); NVIDIA datasheets and PCI-SIG rates")
NET413 = rule(
    "NET413", "ok", "busbw is what the link should give",
    what="The all-reduce's bus bandwidth at the largest size is at least half of the peak of the slowest link.",
    why="", fix="", source="nccl-tests doc/PERFORMANCE.md; NVIDIA datasheets and PCI-SIG rates")
NET414 = rule(
    "NET414", "warning", "NCCL_TIMEOUT is read by nothing",
    what="NCCL_TIMEOUT is set (tutorials tell readers to export it), but NCCL, PyTorch, DeepSpeed, transformers and "
         "accelerate read no such variable.",
    why="The collective timeout stays what the launcher's library sets: DeepSpeed's init_distributed uses "
        "DEEPSPEED_TIMEOUT (minutes; 10 by default in DeepSpeed 0.19), the HF Trainer its ddp_timeout (1800 s). A "
        "long preprocessing step or a slow first save then hits the watchdog (LOG801) the user thought was raised.",
    fix="export DEEPSPEED_TIMEOUT=MINUTES for deepspeed.init_distributed; with the HF Trainer, --ddp_timeout SECONDS; "
        "in your own init_process_group, timeout=datetime.timedelta(...).",
    source="deepspeed/constants.py default_pg_timeout; transformers/training_args.py ddp_timeout; NCCL's "
           "environment variables (docs.nvidia.com/deeplearning/nccl, env.html): no NCCL_TIMEOUT")
NET415 = rule(
    "NET415", "error", "two ranks on one GPU",
    what="NCCL found two ranks of one communicator on the same GPU ('Duplicate GPU detected').",
    why="The ranks did not select their own GPU: no torch.cuda.set_device(local_rank) before the process group, a "
        "model moved to 'cuda' (device 0) on every rank, or CUDA_VISIBLE_DEVICES listing a GPU twice. NCCL refuses "
        "the communicator ('invalid usage') at the first collective.",
    fix="torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before deepspeed.init_distributed() / "
        "init_process_group, and move the model to that device; give CUDA_VISIBLE_DEVICES each GPU once.",
    source="NCCL src/init.cc (Duplicate GPU detected); torch/distributed/distributed_c10d.py")


NET416 = rule(
    "NET416", "warning", "NCCL's socket transport would also use container or VM bridges",
    what="NCCL_SOCKET_IFNAME is unset, and besides the interface that reaches the other nodes this host has bridge "
         "or virtual interfaces (br-*, veth*, virbr*, cni*, flannel*, cali*, vxlan*) that NCCL's default (every "
         "interface but docker* and lo) takes too.",
    why="NCCL's socket transport opens its connections over every interface it selected; the other nodes cannot "
        "reach a Docker or Kubernetes bridge's private address, so the first inter-node collective hangs until the "
        "watchdog's timeout, or fails with 'unhandled system error' / 'Connection refused'. NCCL's INFO line "
        "'NET/Socket : Using [0]bond0:... [1]br-...' shows it.",
    fix="export NCCL_SOCKET_IFNAME=<the interface that reaches the other nodes> (and GLOO_SOCKET_IFNAME) on every "
        "node, or exclude the bridges: NCCL_SOCKET_IFNAME=^docker,lo,br-,veth,virbr.",
    source="NVIDIA/nccl src/misc/socket.cc ncclFindInterfaces (the default '^docker,lo'), src/transport/net_socket.cc "
           "(NET/Socket : Using ...); NVIDIA/nccl issue 697")

#: name prefixes of the bridges and virtual links that hosts of containers and VMs create (NCCL's default excludes
#: only docker* and lo); explain's NET416 signature reads NCCL's interface list with them too
BRIDGE_PREFIXES = ("br-", "veth", "virbr", "cni", "flannel", "cali", "vxlan", "kube-", "tun", "tap", "lxcbr", "lxdbr")
VIRTUAL_IF = re.compile("^(?:" + "|".join(map(re.escape, BRIDGE_PREFIXES)) + ")")


def bridge_findings(net: dict) -> list[Finding]:
    """NET416 from ``dsdoctor env``'s network facts: NCCL_SOCKET_IFNAME unset, MASTER_ADDR another host (a
    multi-node run: ``route_to_master``), and the interfaces NCCL would use (:func:`nccl_interfaces`) include
    bridges (:data:`VIRTUAL_IF`) beside the one the route to the master leaves through."""
    route = net.get("route_to_master")
    if net.get("NCCL_SOCKET_IFNAME") or not route or route[0] == "lo":
        return []
    chosen = nccl_interfaces(net.get("addresses") or [])
    bridges = [name for name in chosen if VIRTUAL_IF.match(name) and name != route[0]]
    if not bridges:
        return []
    return [NET416.finding(f"NCCL would use {', '.join(chosen[:8])}{'...' if len(chosen) > 8 else ''}; the route to "
                           f"MASTER_ADDR={net.get('MASTER_ADDR')} leaves through {route[0]}; bridges among them: "
                           f"{', '.join(bridges[:6])}",
                           fix=f"export NCCL_SOCKET_IFNAME={route[0]} GLOO_SOCKET_IFNAME={route[0]} on every node (each "
                               f"node's own interface name on that network)")]


def link_between(gpus: list[dict], ib_bits_per_s: float = 0.0, nic_bits_per_s: float = 0.0,
                 nodes: int = 1) -> dict | None:
    """The slowest link the ranks' all-reduce crosses, from ``dsdoctor env``'s NVML facts of this node's GPUs (the
    ones the ranks use: ``nvlinks_active``, ``nvlink_version``, ``pcie_gen``, ``pcie_width``) and, for several
    nodes, the node's network (``ib_bits_per_s``: active InfiniBand ports summed, else ``nic_bits_per_s``: the
    interface NCCL uses). Returns ``{"kind", "peak" (bytes/s), "label", "source"}``, or None when unknown.

    One node: NVLink when every GPU has active links of a known generation (peak = the fewest links x the per-link
    rate), else PCIe (the slowest GPU's generation x width). Several nodes: the network, when it is slower."""
    link = None
    if gpus and all(g.get("nvlinks_active") and (("nvlink", g.get("nvlink_version")) in LINK_PEAK) for g in gpus):
        version = min(g["nvlink_version"] for g in gpus)
        links = min(g["nvlinks_active"] for g in gpus)
        per_link, source = LINK_PEAK[("nvlink", version)]
        link = {"kind": "nvlink", "peak": per_link * links, "label": f"NVLink {version} x{links}", "source": source}
    elif gpus and all(("pcie", g.get("pcie_gen")) in LINK_PEAK and g.get("pcie_width") for g in gpus):
        slowest = min(gpus, key=lambda g: LINK_PEAK[("pcie", g["pcie_gen"])][0] * g["pcie_width"])
        per_lane, source = LINK_PEAK[("pcie", slowest["pcie_gen"])]
        link = {"kind": "pcie", "peak": per_lane * slowest["pcie_width"],
                "label": f"PCIe Gen{slowest['pcie_gen']} x{slowest['pcie_width']}", "source": source}
    if nodes > 1:
        bits = ib_bits_per_s or nic_bits_per_s
        if not bits:
            return None
        net = {"kind": "network", "peak": bits / 8, "source": "the ports' rates (/sys/class/infiniband, "
                                                              "/sys/class/net/IF/speed)",
               "label": f"{'InfiniBand' if ib_bits_per_s else 'Ethernet'} {bits / 1e9:g} Gb/s per node"}
        if link is None or net["peak"] < link["peak"]:
            link = net
    return link


def plateau(sweep: list[dict]) -> dict[str, dict]:
    """Each collective's row at the largest size of ``sweep`` (rows ``{"op", "bytes", ...}``; a row without ``op``
    is an all-reduce): the plateau nccl-tests' PERFORMANCE.md reads busbw from."""
    top: dict[str, dict] = {}
    for row in sweep:
        op = row.get("op", "all_reduce")
        if row["bytes"] >= top.get(op, {}).get("bytes", 0):
            top[op] = row
    return top


def busbw_findings(sweep: list[dict], world: int, backend: str, link: dict | None) -> list[Finding]:
    """NET412 / NET413 on the all-reduce plateau of ``sweep`` (rows ``{"op", "bytes", "busbw"}``, busbw in bytes/s)
    against ``link`` (:func:`link_between`); one NET413 ``info`` saying why nothing was judged (one rank: busbw is
    0 by definition; gloo; the link unknown; sizes below the plateau)."""
    top = plateau(sweep).get("all_reduce")
    if top is None:
        return []

    def not_judged(why: str) -> list[Finding]:
        return [NET413.finding(why, severity="info", title="busbw not judged")]

    if world < 2:
        return not_judged("one rank: busbw = algbw x 2(n-1)/n is 0, there is no link to measure "
                          "(the stages still prove the NCCL path)")
    if backend != "nccl":
        return not_judged(f"backend {backend}: the hardware table is for NCCL on GPUs")
    if link is None:
        return not_judged("the link between the ranks is unknown here (no NVML link facts, or no network rate)")
    if top["bytes"] < PLATEAU_BYTES:
        return not_judged(f"largest size {top['bytes']:,} bytes is below the plateau; add --sizes ...,256M,1G")
    fraction = top["busbw"] / link["peak"]
    evidence = (f"all-reduce busbw {top['busbw'] / 1e9:.1f} GB/s at {top['bytes']:,} bytes = {fraction:.0%} of "
                f"{link['label']}'s {link['peak'] / 1e9:.1f} GB/s per direction ({link['source']})")
    if fraction < HEALTHY_FRACTION:
        return [NET412.finding(evidence)]
    return [NET413.finding(evidence)]


def ib_bits_per_s() -> float:
    """The active InfiniBand (or RoCE) ports' rates summed, bits/s, from ``/sys/class/infiniband/*/ports/*/rate``
    ("200 Gb/sec (4X HDR)") and ``state`` ("4: ACTIVE"); 0 when there are none."""
    from pathlib import Path

    total = 0.0
    for port in Path("/sys/class/infiniband").glob("*/ports/*"):
        try:
            if "ACTIVE" not in (port / "state").read_text():
                continue
            found = re.match(r"\s*([\d.]+)\s*Gb/sec", (port / "rate").read_text())
        except OSError:
            continue
        if found:
            total += float(found.group(1)) * 1e9
    return total


def nic_bits_per_s(interface: str | None) -> float:
    """An Ethernet interface's link speed, bits/s (``/sys/class/net/IF/speed`` is in Mb/s; -1 or unreadable for
    virtual interfaces), 0 when unknown."""
    if not interface or "/" in interface:
        return 0.0
    try:
        speed = int(open(f"/sys/class/net/{interface}/speed").read().strip())
    except (OSError, ValueError):
        return 0.0
    return speed * 1e6 if speed > 0 else 0.0


def local_link(nproc: int, nodes: int = 1, interface: str | None = None) -> dict | None:
    """:func:`link_between` for this machine: the first ``nproc`` visible GPUs' NVML facts (CUDA_VISIBLE_DEVICES
    honoured when it lists indices) and, for several nodes, its InfiniBand ports or ``interface``'s speed."""
    from dsdoctor.checks.environment import nvml_facts

    facts = nvml_facts() or {}
    gpus = facts.get("gpus") or []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if visible.strip() and all(v.strip().isdecimal() for v in visible.split(",")):
        gpus = [g for i in visible.split(",") for g in gpus if g["index"] == int(i)]
    ib = ib_bits_per_s() if os.environ.get("NCCL_IB_DISABLE", "").strip() != "1" else 0.0
    return link_between(gpus[:nproc], ib_bits_per_s=ib, nic_bits_per_s=nic_bits_per_s(interface), nodes=nodes)
