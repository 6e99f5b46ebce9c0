"""Replay the large-pool allocations a GPU run recorded through dsdoctor's model of the caching allocator
(``checks/allocator.py``), and compare the reserved bytes it leaves with those the run's own allocator reserved.

    python benchmarks/allocator_replay.py benchmarks/results/memory-loops/trace-t5/*.json.gz

Each record comes from ``memory_loops.py`` with ``"snapshot"`` set: ``large_pool_events`` holds every alloc / free of
a block over 1 MiB and every segment event, in the order the allocator made them. The model is fed the allocs and
frees only, on the stream each was made on where the record has a ``stream`` column; the run's segment events are
the answer it must reproduce: the peak of the large pool's reserved bytes and the number of ``cudaMalloc`` calls. A
segment the run released (``segment_free``: only ``empty_cache`` and the retry before an out-of-memory error release
one) is replayed as an ``empty_cache()`` at that point: the model is told when, not what. With ``--addresses`` each
segment the model makes is also put at the run's own address for it: where the default (segments in the order they
are made) and the run differ only by the driver's address order, this reproduces the run.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dsdoctor.checks.allocator import K_SMALL_SIZE, CachingAllocator, round_size  # noqa: E402

GIB = 2 ** 30


def replay(record: dict, addresses: bool = False) -> dict:
    """Measured and modelled peaks of the large pool (bytes) for one record. ``addresses``: each segment the model
    makes lies where the run's own ``segment_alloc`` just before the request put it (``--addresses``)."""
    events = record["large_pool_events"]["rows"]
    sim = CachingAllocator()
    handles: dict[int, int] = {}
    reserved = peak_reserved = segments = 0
    allocated = peak_allocated = 0
    sizes: dict[int, int] = {}
    streams: dict[int, int] = {0: 0}  # the trace's stream handle -> the model's id (0: the default stream)
    released = None  # time of the last segment_free seen: one empty_cache releases several segments at once
    segment_addr = None  # the run's segment made for the next request
    for time_us, action, addr, size, *rest in events:
        stream = streams.setdefault(rest[1], len(streams)) if len(rest) > 1 else 0
        if action == "S" and size > K_SMALL_SIZE * 2:
            segment_addr = addr if addresses else None
            reserved += size
            segments += 1
            peak_reserved = max(peak_reserved, reserved)
        elif action == "F" and size > K_SMALL_SIZE * 2:
            reserved -= size
            if released != time_us:
                sim.empty_cache()
                released = time_us
        elif action == "a" and round_size(size) > K_SMALL_SIZE:
            handles[addr] = sim.malloc(size, stream, segment_addr)
            segment_addr = None
            sizes[addr] = size
            allocated += size
            peak_allocated = max(peak_allocated, allocated)
        elif action == "f" and addr in handles:
            sim.free(handles.pop(addr))
            allocated -= sizes.pop(addr)
    return {"name": record["point"]["name"], "measured_reserved": peak_reserved, "model_reserved": sim.peak_reserved,
            "measured_segments": segments, "model_segments": sim.segment_allocs,
            "peak_allocated": peak_allocated, "model_allocated": sim.peak_allocated,
            "max_reserved_all_pools": record.get("max_reserved")}


def main() -> None:
    addresses = "--addresses" in sys.argv[1:]
    for path in [a for a in sys.argv[1:] if a != "--addresses"]:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            record = json.load(f)
        if "large_pool_events" not in record:
            continue
        r = replay(record, addresses)
        err = (r["model_reserved"] - r["measured_reserved"]) / r["measured_reserved"]
        print(f"{r['name']:44s} large-pool reserved: measured {r['measured_reserved'] / GIB:7.3f} GiB, model "
              f"{r['model_reserved'] / GIB:7.3f} GiB ({100 * err:+.2f}%); segments {r['measured_segments']} / "
              f"{r['model_segments']}; allocated peak {r['peak_allocated'] / GIB:.3f} / {r['model_allocated'] / GIB:.3f}"
              f" GiB; all pools reserved {r['max_reserved_all_pools'] / GIB:.3f} GiB")


if __name__ == "__main__":
    main()
