"""One rank of ``dsdoctor nccl``: the probe stages, each reported to ``--out`` as it starts and ends.

Run by a launcher (``dsdoctor nccl`` starts torchrun locally; for several nodes run it under torchrun,
``deepspeed --hostfile`` or ``srun``: ``torchrun --nnodes 2 ... -m dsdoctor.nccl_worker --out DIR``). Each rank
appends JSON lines to ``DIR/rank<R>.jsonl``: ``{"stage", "status": "start"|"ok"|"fail", "t", ...}``, so the parent
can tell which stage hangs and which ranks never reached it.

Stages: ``rendezvous`` (init_process_group), ``barrier``, ``all_reduce``, ``all_gather``, ``reduce_scatter``,
``broadcast`` (known values, checked on every rank), then ``sweep``: timed all-reduce of each size with algbw and
busbw as nccl-tests' ``doc/PERFORMANCE.md`` defines them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import time
from pathlib import Path

#: nccl-tests doc/PERFORMANCE.md: bus bandwidth = algorithm bandwidth x this factor, n ranks.
BUSBW_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
                "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}


#: The collectives of the sweep, in order.
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def parse_size(text: str) -> int:
    """'1M' -> 1048576 bytes (K, M, G are powers of 1024)."""
    import math

    units = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in units:
        number = float(text[:-1])  # ValueError for a non-number
        if not math.isfinite(number):  # 'infM' and 'nanG': a ValueError, not an OverflowError from int()
            raise ValueError(f"{text!r} is not a finite size")
        return int(number * units[text[-1]])
    return int(text)


def _interfaces_used(backend: str) -> dict:
    """The interface this rank's traffic uses: for nccl, the one NCCL picks (NCCL_SOCKET_IFNAME or its default
    order, ``checks.network.nccl_interfaces``); for gloo, GLOO_SOCKET_IFNAME, else the interface of the address the
    host name resolves to (torch's ``ProcessGroupGloo::createDefaultDevice``; loopback when the host name resolves to
    127.0.x.1, which other nodes cannot reach); and the route to MASTER_ADDR itself."""
    from dsdoctor.checks.network import interface_addresses, nccl_interfaces, route_to

    addresses = interface_addresses()
    try:
        master = socket.getaddrinfo(os.environ.get("MASTER_ADDR", "127.0.0.1"), None)[0][4][0]
    except OSError:
        master = None
    route = route_to(master, addresses) if master else None
    if backend == "nccl":
        chosen = nccl_interfaces(addresses, os.environ.get("NCCL_SOCKET_IFNAME"))
        interface = chosen[0] if chosen else None
    else:
        interface = os.environ.get("GLOO_SOCKET_IFNAME")
        if not interface:
            try:
                own = socket.getaddrinfo(socket.gethostname(), None)[0][4][0]
            except OSError:
                own = None
            interface = next((name for name, address in addresses if address == own), None)
    return {"interface": interface, "route_to_master": route}


def main(argv: list[str] | None = None) -> int:
    from dsdoctor.launch import tie_to_supervisor

    tie_to_supervisor()  # a SIGKILLed torchrun or dsdoctor must not leave this rank running as an orphan
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--sizes", default="1M,16M,64M")
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args(argv)

    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
    local_rank = int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0")))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / f"rank{rank}.jsonl", "w", buffering=1)  # this run only (a launcher may reuse the dir)

    current = {"stage": "rendezvous", "since": time.time()}

    def mark(stage: str, status: str, **extra) -> None:
        log.write(json.dumps({"stage": stage, "status": status, "t": time.time(), **extra}) + "\n")
        if status == "start":
            current.update(stage=stage, since=time.time())

    def watchdog() -> None:  # under any launcher: a stuck rank says where it is stuck, then leaves
        limit = args.timeout + 10
        while True:
            time.sleep(1)
            if current["stage"] != "done" and time.time() - current["since"] > limit:
                mark(current["stage"], "timeout")
                print(f"dsdoctor nccl: rank {rank} ({socket.gethostname()}) stuck in stage {current['stage']} "
                      f"for {limit:g} s", file=sys.stderr, flush=True)
                os._exit(3)

    import threading

    threading.Thread(target=watchdog, daemon=True).start()

    missing = os.environ.get("DSDOCTOR_NCCL_SIMULATE_MISSING")  # tests: this rank never joins
    if missing is not None and int(missing) == rank:
        mark("rendezvous", "start", host=socket.gethostname())
        time.sleep(3600)

    import torch
    import torch.distributed as dist

    device = torch.device("cpu")
    if args.backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    mark("rendezvous", "start", host=socket.gethostname(), local_rank=local_rank, world=world)
    try:
        dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=args.timeout))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which judges
        mark("rendezvous", "fail", error=f"{type(exc).__name__}: {str(exc)[:300]}")
        return 1
    info = {"backend": args.backend}
    if args.backend == "nccl":
        info["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        info["gpu"] = torch.cuda.get_device_name(local_rank)
    info["NCCL_vars"] = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    info.update(_interfaces_used(args.backend))
    mark("rendezvous", "ok", **info)

    def stage(name, fn):
        mark(name, "start")
        try:
            detail = fn() or {}
        except Exception as exc:  # noqa: BLE001
            mark(name, "fail", error=f"{type(exc).__name__}: {str(exc)[:300]}")
            raise
        mark(name, "ok", **detail)

    n = world

    def barrier():
        dist.barrier()

    def all_reduce():
        x = torch.full((1024,), float(rank + 1), device=device)
        dist.all_reduce(x)
        expected = n * (n + 1) / 2
        if not torch.all(x == expected):
            raise AssertionError(f"all_reduce gave {x[0].item()}, expected {expected}")

    def all_gather():
        x = torch.full((256,), float(rank), device=device)
        out_t = torch.empty(256 * n, device=device)
        dist.all_gather_into_tensor(out_t, x)
        expected = torch.arange(n, device=device, dtype=out_t.dtype).repeat_interleave(256)
        if not torch.equal(out_t, expected):
            raise AssertionError("all_gather gave wrong values")

    def reduce_scatter():
        x = torch.arange(n, device=device, dtype=torch.float32).repeat_interleave(256) * (rank + 1)
        out_t = torch.empty(256, device=device)
        dist.reduce_scatter_tensor(out_t, x)
        expected = rank * n * (n + 1) / 2
        if not torch.all(out_t == expected):
            raise AssertionError(f"reduce_scatter gave {out_t[0].item()}, expected {expected}")

    def broadcast():
        x = torch.full((1024,), 42.0 if rank == 0 else -1.0, device=device)
        dist.broadcast(x, src=0)
        if not torch.all(x == 42.0):
            raise AssertionError("broadcast gave wrong values")

    def sweep():
        """Each collective at each size, as nccl-tests sizes them: ``bytes`` is the whole buffer (all-gather's output,
        reduce-scatter's input); algbw = bytes / time, busbw = algbw x BUSBW_FACTOR. Every rank times its own calls:
        a slow link shows as the ranks whose time stands out."""
        rows = []
        for op in OPS:
            for size in [parse_size(s) for s in args.sizes.split(",") if s.strip()]:
                numel = max(size // 4 // n, 1) * n  # divisible by the ranks, for all-gather and reduce-scatter
                big = torch.ones(numel, device=device)
                part = torch.ones(numel // n, device=device)
                call = {"all_reduce": lambda: dist.all_reduce(big),
                        "all_gather": lambda: dist.all_gather_into_tensor(big, part),
                        "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, big),
                        "broadcast": lambda: dist.broadcast(big, src=0)}[op]
                call()  # warm-up
                if device.type == "cuda":
                    torch.cuda.synchronize()
                dist.barrier()
                start = time.perf_counter()
                for _ in range(args.iters):
                    call()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                seconds = (time.perf_counter() - start) / args.iters
                algbw = numel * 4 / seconds
                rows.append({"op": op, "bytes": numel * 4, "seconds": seconds, "algbw": algbw,
                             "busbw": algbw * BUSBW_FACTOR[op](n)})
        return {"sweep": rows}

    try:
        for name, fn in (("barrier", barrier), ("all_reduce", all_reduce), ("all_gather", all_gather),
                         ("reduce_scatter", reduce_scatter), ("broadcast", broadcast), ("sweep", sweep)):
            stage(name, fn)
    except Exception:  # noqa: BLE001 - already marked
        return 1
    finally:
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass
    current["stage"] = "done"
    mark("done", "ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
