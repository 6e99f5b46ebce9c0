"""The describers of the distributed failures of :mod:`.signatures`: collective timeouts (NCCL's watchdog, gloo) with
the ranks that timed out and the suspects, rank 0 late for its first collective, NCCL's connections and interfaces,
the rendezvous store, and NCCL's socket transport over bridges."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from dsdoctor.checks.network import BRIDGE_PREFIXES

from .evidence import MAX_WORLD, _first_line, _int, _shown_number, _where
from .lines import Line

if TYPE_CHECKING:
    from .signatures import Match


def _watchdog(match: Match, lines: list[Line]) -> tuple[str, str]:
    pattern = match.signature.pattern
    timed_out = {}
    for line in lines:
        if match.signature.needles[0] in line.text:
            found = pattern.search(line.text)
            if found:
                rank = line.rank if line.rank is not None else _int(found.group("rank"), 6)
                timed_out.setdefault(rank, found)
    if not timed_out:  # the message wrapped over lines: the match's own (joined) line
        timed_out[match.line.rank if match.line.rank is not None else _int(match.groups.group("rank"), 6)] = \
            match.groups
    ranks = sorted(r for r in timed_out if r is not None)
    first = timed_out[ranks[0]] if ranks else match.groups
    op = first.group("op") or "?"
    timeout_ms = _int(first.group("timeout"), 15)
    after = f"{timeout_ms / 60000:g} min" if timeout_ms is not None else f"{_shown_number(first.group('timeout'))} ms"
    return (f"{op} (SeqNum={_shown_number(first.group('seq') or '?')}, NumelIn="
            f"{_shown_number(first.group('numel') or '?')}) timed out after {after} on rank(s) "
            f"{_ranks(ranks) if ranks else '?'}" + _suspects(ranks, lines), "")


#: work rank 0 does alone before the first collective (HF datasets' map, the tutorials' tokenizing loops,
#: LLaMA-Factory's "Running tokenizer on dataset", a download)
RANK0_WORK = re.compile(r"Running tokenizer|[Tt]okeniz|Map(?: \(num_proc=\d+\))?:\s{0,3}\d|Downloading|"
                        r"Generating train split|preprocess", re.I)


def _unique_id_timeout(match: Match, lines: list[Line]) -> tuple[str, str, dict]:
    """A rank timed out in the c10d store waiting for rank ROOT's NCCL unique id: the store itself answered (the
    network to MASTER_ADDR works), so ROOT had not reached its first collective in time. Unless ROOT's own error is
    in the log, ROOT was busy alone: tokenizing (DATA707), downloading, or loading."""
    g = match.groups
    root, waiting = g.group("root"), g.group("rank") or (match.line.rank if match.line.rank is not None else "a rank")
    busy = next((ln for ln in lines[:match.line_index] if RANK0_WORK.search(ln.text)), None)
    evidence = (f"{_where(match)}rank {waiting} waited for rank {root}'s NCCL unique id (its first NCCL "
                f"collective) and the store gave up ({(g.group('error') or '').strip()[:80]}): the store answered, so "
                f"the network to it works; rank {root} had not reached its first collective in time"
                + (f"; before it, {busy.at}: {busy.text.strip()[:160]}" if busy else
                   "; no error of rank " + str(root) + " in this log"))
    fix = (f"Rank {root} does work alone before the first collective: tokenizing or mapping the dataset (the HF "
           "Trainer's main_process_first, LLaMA-Factory's 'Running tokenizer on dataset'), downloading or loading. "
           "Tokenize once before the run and load the result, use preprocessing_num_workers, or raise the timeout "
           "(--ddp_timeout for the HF Trainer, deepspeed.init_distributed(timeout=timedelta(hours=2))). If rank "
           f"{root} crashed instead, its own error comes first in its log.")
    return evidence, fix, {"title": f"rank {root} was late for the first collective: work it does alone (tokenizing "
                                    f"the data) ran past the timeout"}


def _gloo_timeout(match: Match, lines: list[Line]) -> tuple[str, str]:
    """gloo's timeout: the ranks whose collective timed out, and the ones that did not (the suspects)."""
    ranks = sorted({ln.rank for ln in lines if ln.rank is not None and match.signature.needles[0] in ln.text
                    and match.signature.pattern.search(ln.text)})
    timeout_ms = _int(match.groups.group("timeout"), 15)
    after = f"{timeout_ms / 1000:g} s" if timeout_ms is not None else \
        f"{_shown_number(match.groups.group('timeout'))} ms"
    return (f"gloo {match.groups.group('op')} timed out after {after} on rank(s) {_ranks(ranks) if ranks else '?'}"
            + _suspects(ranks, lines), "")


def _ranks(ranks: list[int], most: int = 32) -> str:
    """'[0, 1, 2]', or the first ``most`` of a long list and how many more."""
    return str(ranks) if len(ranks) <= most else f"{str(ranks[:most])[:-1]}, ... ({len(ranks) - most:,} more)]"


def _suspects(timed_out: list[int], lines: list[Line]) -> str:
    """'; rank(s) [..] did not time out ...' for the ranks of the world size that are not among ``timed_out`` (at
    most 32 listed, counted up to :data:`MAX_WORLD`)."""
    world = _world_size(lines)
    if not world or not timed_out:
        return ""
    seen = set(timed_out)
    missing, count = [], 0
    for rank in range(world):
        if rank not in seen:
            count += 1
            if len(missing) < 32:
                missing.append(rank)
    if not count:
        return ""
    shown = str(missing) if count == len(missing) else f"{str(missing)[:-1]}, ... ({count - len(missing):,} more)]"
    return f"; rank(s) {shown} did not time out: they were not in the collective (the suspects)"


#: a world size as launchers and DeepSpeed print it
WORLD_SIZE = re.compile(r"(?<!\w)(?:dist_)?world_size[=:\s]{1,4}(\d{1,8})(?!\d)|WORLD_SIZE=(\d{1,8})(?!\d)|"
                        r"world size[=:\s]{1,4}(\d{1,8})(?!\d)")


def _world_size(lines: list[Line]) -> int | None:
    """The world size the log prints (up to :data:`MAX_WORLD`; a larger number is not taken), else one more than
    the highest rank seen."""
    for line in lines[:4000]:
        found = WORLD_SIZE.search(line.text)
        if found:
            world = int(next(g for g in found.groups() if g))
            return world if 0 < world <= MAX_WORLD else None
    ranks = {line.rank for line in lines if line.rank is not None}
    return max(ranks) + 1 if ranks else None


#: NCCL's INFO lines naming the interface it uses ('Bootstrap : Using eth0:10.0.0.5<0>')
NCCL_USING = re.compile(r"(?:Bootstrap : Using|NET/Socket : Using \[0\])\s{0,4}([\w.-]{1,64}):"
                        r"(\d{1,3}(?:\.\d{1,3}){3})")


def _nccl_connect(match: Match, lines: list[Line]) -> tuple[str, str]:
    """NCCL could not connect to a peer: the address it tried and the interface NCCL chose (its INFO lines
    'Bootstrap : Using eth0:10.0.0.5<0>' or 'NET/Socket : Using [0]docker0:172.17.0.1<0>', when logged)."""
    using = None
    for line in lines:
        if "Using" in line.text:
            found = NCCL_USING.search(line.text)
            if found:
                using = found
                break
    evidence = f"NCCL could not connect to {match.groups.group('addr')}: {match.line.text.strip()[:200]}"
    if using:
        evidence += f"; NCCL used interface {using.group(1)} ({using.group(2)})"
    name = using.group(1) if using else "the interface"
    cause = f"NCCL chose {name}, which the other nodes may not reach" if using else \
        "NCCL's interface cannot reach the peer"
    fix = (f"{cause}: set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the interface of the network the nodes "
           f"share, on every node (`ip -br addr`); open the ports between nodes in the firewall.")
    return evidence, fix


#: the store client's retries ('failed to connect to [node0]:29500 (errno: 111 - Connection refused)')
STORE_RETRY = re.compile(r"failed to connect to (\S{1,300}) \((errno: \d{1,5} - [^)]{1,200})\)")


def _rendezvous(match: Match, lines: list[Line]) -> tuple[str, str]:
    """The error that ended the rendezvous, and the last address the store client tried before it."""
    where = _where(match)
    tried = None
    for line in lines[:match.line_index]:
        found = STORE_RETRY.search(line.text) if "failed to connect to" in line.text else None
        if found:
            tried = found
    evidence = where + match.line.text.strip()[:240]
    if tried:
        evidence += f" (last attempt: {tried.group(1)}, {tried.group(2)})"
    return evidence, ""


def _no_interface(match: Match, lines: list[Line]) -> tuple[str, str]:
    """NCCL found no interface: the NCCL_SOCKET_IFNAME the log shows, when it does."""
    named = next((m.group(1) for m in (NCCL_IFNAME.search(ln.text) for ln in lines[:match.line_index]
                                       if "SOCKET_IFNAME" in ln.text) if m), None)
    return (_where(match) + match.line.text.strip()[:240] + (f" (NCCL_SOCKET_IFNAME={named} in this log)" if named
                                                              else ""),
            "NCCL_SOCKET_IFNAME must name an interface every node has (`ip -br addr`; a prefix like eth matches eth0): "
            "unset it or correct it. `dsdoctor env` checks it against the interfaces present.")


#: NCCL's own report of the variable: "NCCL_SOCKET_IFNAME set by environment to eth2"
NCCL_IFNAME = re.compile(r"NCCL_SOCKET_IFNAME set (?:by environment )?to (\S{1,64})")


#: one interface of NCCL's "NET/Socket : Using [0]bond0:10.0.0.1<0> [1]br-05ab:172.18.0.1<0>" list
NCCL_IF = re.compile(r"\[(\d{1,2})\]([\w.:-]{1,40}?):[0-9a-fA-F.:%\w-]{1,60}<\d{1,6}>")


#: bridges and virtual links of container and VM hosts, as `env`'s NET416 check names them
BRIDGE_IF = "(?:" + "|".join(map(re.escape, BRIDGE_PREFIXES)) + ")"


def _bridges(match: Match, lines: list[Line]) -> tuple[str, str]:
    """NET416 from NCCL's socket transport list: the interfaces on the 'NET/Socket : Using' line and the lines after
    it that continue the list (a paste puts one interface per line), the bridges among them, and the first other one
    as the fix's NCCL_SOCKET_IFNAME."""
    start = match.line_index
    while start > 0 and "NET/Socket" not in lines[start].text and NCCL_IF.match(lines[start].text.strip()):
        start -= 1
    found = []
    for line in lines[start:start + 40]:
        items = NCCL_IF.findall(line.text)
        if not items and found:
            break
        found += [name for _, name in items]
    bridges = [n for n in found if re.match(BRIDGE_IF, n)]
    real = next((n for n in found if not re.match(BRIDGE_IF, n) and not n.startswith(("lo", "docker"))), None)
    evidence = (_where(match) + f"NCCL's socket transport uses {len(found)} interfaces: {', '.join(found[:6])}"
                + ("..." if len(found) > 6 else "") + f"; bridges among them: {', '.join(bridges[:6])}")
    fix = (f"export NCCL_SOCKET_IFNAME={real} (the interface that reaches the other nodes; GLOO_SOCKET_IFNAME too) on "
           f"every node." if real else "")
    return evidence, fix


# --- GPUs and the rendezvous: a rank on another's GPU, the store client, NCCL's bootstrap ----------------------

#: a launch line that starts the script with plain python (no launcher): ``python src/train_sft.py \\``
PLAIN_PYTHON = re.compile(r"^\s{0,8}(?:[A-Z_]{1,40}=\S{0,200}\s{1,4}){0,6}python3?(?:\.\d{1,2})?\s{1,4}(?!-m\s)"
                          r"(?P<script>\S{1,300}\.py)\b")


VISIBLE = re.compile(r"CUDA_VISIBLE_DEVICES=(?P<ids>\d{1,3}(?:,\d{1,3}){1,63})")


#: a launcher or a rank in the log: the run was distributed (one process per GPU)
DISTRIBUTED = re.compile(r"\b(?:torchrun|torch\.distributed\.(?:run|launch)|deepspeed\s{1,4}(?:--|\S{1,200}\.py)|"
                         r"accelerate\s{1,4}launch|LOCAL_RANK|local_rank=\d|world_size[=:]\s{0,2}[2-9])")


def _two_gpus(match: Match, lines: list[Line]) -> tuple:
    """PRE016 for a tensor on another GPU in a run of one process (the model spread over the GPUs by device_map, or
    plain python with several visible); NET415's ranks without their own GPU when the run was distributed."""
    g = match.groups
    head = [ln.text for ln in lines[:400]]
    plain = next((PLAIN_PYTHON.match(t) for t in head if PLAIN_PYTHON.match(t)), None)
    visible = next((VISIBLE.search(t) for t in head if VISIBLE.search(t)), None)
    ranked = any(ln.rank is not None for ln in lines)
    distributed = ranked or any(DISTRIBUTED.search(t) for t in head)
    seen = f"{g.group('a')} and {g.group('b')}"
    if distributed and not plain:
        return (_where(match) + match.line.text.strip()[:240] + f" ({seen} in one rank: it reached another "
                "rank's GPU)",
                "Give each rank its own GPU before anything is moved to one: torch.cuda.set_device(int(os.environ["
                "'LOCAL_RANK'])) at the start, and .to(f'cuda:{local_rank}') or .to(model.device), never 'cuda:0' "
                "or .cuda() before set_device; load the model without device_map (the launcher gives each rank one "
                "GPU).", {"rule": "NET415", "title": "a rank uses another rank's GPU"})
    how = (f"the line runs {plain.group('script')} with plain python" if plain else "the run is one process")
    shown = f" with CUDA_VISIBLE_DEVICES={visible.group('ids')}" if visible else ""
    return (_where(match) + match.line.text.strip()[:240] + f" ({how}{shown}, so the model and its tensors "
            "are spread over several GPUs (device_map=\"auto\", which from_pretrained and the trainers use when "
            "no launcher started the run), and one op met tensors of two GPUs)",
            "Launch one process per GPU: `torchrun --nproc_per_node N script.py ...` or `deepspeed --num_gpus N "
            "script.py ...` (LLaMA-Factory: `llamafactory-cli train` with FORCE_TORCHRUN=1, or `accelerate launch`); "
            "or train on one GPU: CUDA_VISIBLE_DEVICES=0 python script.py ...",
            {"title": "one process trains on several GPUs and mixed their tensors"})


def _store_unreachable(match: Match, lines: list[Line]) -> tuple[str, str]:
    g = match.groups
    addr = (g.group("addr") or g.group("addr2") or "").removeprefix("::ffff:")
    why = {"110": "the connection timed out", "113": "no route to the host", "101": "the network is unreachable"}
    odd = ""
    if re.fullmatch(r"255\.\d{1,3}\.\d{1,3}\.\d{1,3}|\d{1,3}\.\d{1,3}\.\d{1,3}\.(?:0|255)", addr):
        odd = f"; {addr} is a netmask or a network's address, not a host"
    return (_where(match) + match.line.text.strip()[:240] + f" ({why[g.group('errno')]}: this node cannot reach "
            f"MASTER_ADDR {addr}:{g.group('port')}{odd})",
            "Set MASTER_ADDR to an address of the node that runs rank 0 that every node can reach (`hostname -I` "
            "there; on one node 127.0.0.1), and open MASTER_PORT between the nodes.")


#: NCCL_DEBUG=INFO's lines: the interface its bootstrap chose (init.cc bootstrapNetInit: "Bootstrap : Using
#: ibp12s0:10.0.0.2<0>"), and an error's return path through its bootstrap or socket code ("bootstrap.cc:270 -> 2")
NCCL_BOOTSTRAP_IF = re.compile(r"NCCL INFO Bootstrap : Using (?P<ifname>[\w.-]{1,40}):(?P<addr>[\d.:a-fA-F]{2,60})")


NCCL_BOOTSTRAP_ERROR = re.compile(r"NCCL INFO (?:bootstrap|misc/socket|socket)\.cc:\d{1,6} -> [1-9]")


def _nccl_error(match: Match, lines: list[Line]) -> tuple:
    """NET408, NCCL's failure as torch reports it; NET411 when NCCL_DEBUG=INFO's own trace shows the error coming
    back through its bootstrap (socket) code, over the interface it picked by itself: NCCL_SOCKET_IFNAME unset, it
    prefers ib* (IPoIB) and others before the one that reaches the other nodes (misc/socket.cc ncclFindInterfaces)."""
    chosen = next((m for m in (NCCL_BOOTSTRAP_IF.search(ln.text) for ln in lines[:20000] if "Bootstrap :" in ln.text)
                   if m), None)
    failed = next((ln for ln in lines[:match.line_index + 1] if " -> " in ln.text and NCCL_BOOTSTRAP_ERROR.search(
        ln.text)), None)
    named = any("NCCL_SOCKET_IFNAME" in ln.text for ln in lines[:20000])
    if chosen is None or failed is None or named:  # NCCL's result code ("unhandled cuda error": ncclUnhandledCudaError)
        from .origin import nccl_origin  # is NCCL's; its WARN line, where the log has one, says from which file

        origin = nccl_origin(lines[:match.line_index + 1]) or {"package": "nccl", "file": None, "function": None,
                                                               "line": None, "code": "", "from": "mention"}
        return (*_first_line(match, lines), {"origin": origin})
    ifname = chosen.group("ifname")
    return (_where(match) + match.line.text.strip()[:200] + f" (NCCL's bootstrap used {ifname} ({chosen.group('addr')}"
            f"), the interface it chose itself, and failed there: {failed.at}: {failed.text.strip()[:120]})",
            f"Set NCCL_SOCKET_IFNAME to the interface that reaches MASTER_ADDR from every node (the one `ip route get "
            f"MASTER_ADDR` names; not {ifname}), for every rank; `dsdoctor env` on each node names it.",
            {"rule": "NET411", "title": "NCCL bootstrapped over an interface the other nodes cannot reach"})


def _empty_master_addr(match: Match, lines: list[Line]) -> tuple[str, str, dict]:
    """NET405 from DeepSpeed's launcher (launcher/runner.py) printing an empty master address: it asks the first
    node of the hostfile for its address (``ssh NODE hostname -I``, the first word of the answer) and got nothing (a
    container without that hostname, an interface with no IPv4 address), so every node is started with
    ``--master_addr=`` and no rank can rendezvous."""
    node = match.groups.groupdict().get("node")
    return (_where(match) + match.line.text.strip()[:240] + " (DeepSpeed's launcher found no IP address for the "
            f"first node{' ' + node if node else ''}: `hostname -I` printed nothing there, so every node gets an "
            "empty --master_addr)",
            "Give the address yourself: `deepspeed --hostfile H --master_addr <first node's IP> ...`; check what "
            f"`ssh {node or 'NODE'} hostname -I` prints (some containers' hostname has no -I, or lists no address).",
            {"title": "the deepspeed launcher found no address for the first node: MASTER_ADDR is empty",
             "origin": {"package": "deepspeed", "file": "launcher/runner.py", "function": "main", "line": None,
                        "code": "", "from": "mention"}})

