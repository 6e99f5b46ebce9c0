"""A small distributed job (gloo, CPU) that stalls the way real runs stall, for ``dsdoctor hang``'s tests.

    torchrun --nproc-per-node N tests/hang_job.py MODE WORKDIR

Every rank appends ``rank R step S loss L`` to WORKDIR/loss-R.log after each step's all_reduce, so a test sees the
job go on after its snapshot. Modes (the stall is on the last rank, ``odd``, unless said otherwise):

- ``sleep``: ``odd`` waits in ``wait_for_release`` (train step 3) until WORKDIR/release exists; the others wait in
  all_reduce.
- ``mismatch``: from step 3, ranks below N/2 call all_reduce, the others broadcast.
- ``exit``: ``odd`` exits (status 0, so the launcher keeps the others) before step 3's all_reduce. A forked child
  keeps its gloo sockets open (and waits for the release), so that the others wait for the gone rank in all_reduce,
  as NCCL ranks do, instead of seeing gloo's "Connection reset by peer".
- ``dataloader``: from step 3 every rank waits for a batch its DataLoader worker never produces until release.
- With ``TORCH_FR_BUFFER_SIZE`` set, in ``sleep`` mode each rank also writes its Flight Recorder buffer to
  ``TORCH_FR_DUMP_TEMP_FILE`` + rank once it stalls (after enqueueing step 3's all_reduce, or before the odd rank's
  wait), as NCCL's watchdog does on a timeout (gloo has no watchdog to do it).
- With ``HANG_JOB_BACKEND=nccl`` the ranks use NCCL on their GPU (``cuda:LOCAL_RANK``) instead of gloo on the CPU.
- ``advance``: steps go on, each 0.1 s in ``load`` and 0.1 s in ``compute``, until WORKDIR/release exists.
- ``straggler``: steps go on; after each all_reduce ``odd`` computes for 2.5 s (a Python loop burning CPU) while the
  others wait for it in the next all_reduce, until WORKDIR/release exists: healthy, with steps longer than --interval.
- ``nap``: steps go on, each an all_reduce and then one 12 s ``time.sleep`` on every rank, until WORKDIR/release
  exists: healthy, with every rank asleep longer than a snapshot.
- ``evaluate``: steps go on; every step ``odd`` waits 12 s for a subprocess (an evaluation run as a command) while the
  others wait for it in the next all_reduce, until WORKDIR/release exists: healthy, with a wait longer than a snapshot.
- ``steady``: steps go on, each an all_reduce and then 0.05 s in ``time.sleep`` on one line (a step that spends most
  of its time at one line: every sample of a rank may find it there), until WORKDIR/release exists.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist


class SlowData(torch.utils.data.Dataset):
    """Items 0-2 at once; from item 3 a worker waits for the release file (a network dataset that stopped)."""

    def __init__(self, workdir: Path):
        self.workdir = workdir

    def __len__(self):
        return 10_000

    def __getitem__(self, index):
        if index >= 3:
            while not (self.workdir / "release").exists():
                time.sleep(0.05)
        return torch.ones(4)


def wait_for_release(workdir: Path) -> None:
    while not (workdir / "release").exists():
        time.sleep(0.05)


def fr_dump(rank: int) -> None:
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    if prefix and os.environ.get("TORCH_FR_BUFFER_SIZE"):
        import torch._C._distributed_c10d as c10d

        Path(f"{prefix}{rank}").write_bytes(c10d._dump_fr_trace())


def load() -> None:
    time.sleep(0.1)


def compute() -> None:
    time.sleep(0.1)


def crunch(seconds: float) -> int:
    """Burn CPU in Python for ``seconds`` (a long step of one rank)."""
    end, total = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        total += sum(range(10_000))
    return total


def main() -> None:
    mode, workdir = sys.argv[1], Path(sys.argv[2])
    backend = os.environ.get("HANG_JOB_BACKEND", "gloo")
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    odd = world - 1
    loader = iter(torch.utils.data.DataLoader(SlowData(workdir), batch_size=None, num_workers=1)) \
        if mode == "dataloader" else None
    log = (workdir / f"loss-{rank}.log").open("a", buffering=1)
    (workdir / f"ready-{rank}").write_text(str(os.getpid()))
    step = 0
    while step < 10_000:
        step += 1
        x = (next(loader) if loader is not None else torch.ones(4)).to(device)
        if step == 3:
            if mode == "sleep" and rank == odd:
                fr_dump(rank)
                wait_for_release(workdir)
            elif mode == "sleep" and os.environ.get("TORCH_FR_BUFFER_SIZE"):
                work = dist.all_reduce(x, async_op=True)
                fr_dump(rank)
                work.wait()
                log.write(f"rank {rank} step {step} loss {float(x.sum()) / (step + 1):.4f}\n")
                continue
            if mode == "exit" and rank == odd:
                log.close()
                if os.fork() == 0:  # the sockets' holder, outside the launcher's tree once its parent is gone
                    wait_for_release(workdir)
                os._exit(0)
        if mode == "mismatch" and step >= 3 and rank >= world // 2:
            dist.broadcast(x, src=world - 1)
        else:
            dist.all_reduce(x)
        log.write(f"rank {rank} step {step} loss {float(x.sum()) / (step + 1):.4f}\n")
        if mode in HEALTHY:  # steps that go on until the release, each ending the way the mode says
            if (workdir / "release").exists():
                break
            HEALTHY[mode](rank == odd)
        elif step >= 6 and (workdir / "release").exists():
            break
        elif step >= 3 and mode != "sleep" and not (workdir / "release").exists():
            time.sleep(0.05)
    log.close()
    dist.destroy_process_group()


def evaluate(odd: bool) -> None:
    """The last rank runs a 12 s evaluation as a subprocess (the others wait for it in the next all_reduce)."""
    if odd:
        import subprocess

        subprocess.run([sys.executable, "-c", "import time; time.sleep(12)"], check=True)


#: the modes whose steps go on until the release: what each step does after its all_reduce (given whether this rank
#: is the last one)
HEALTHY = {
    "advance": lambda odd: (load(), compute()),
    "evaluate": evaluate,
    "nap": lambda odd: time.sleep(12),
    "straggler": lambda odd: crunch(2.5) if odd else None,
    "steady": lambda odd: time.sleep(0.05),
}


if __name__ == "__main__":
    main()
