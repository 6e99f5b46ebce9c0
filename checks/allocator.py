"""A model of PyTorch's CUDA caching allocator, to replay a sequence of tensor allocations and frees and read the
reserved bytes (what ``nvidia-smi`` shows, less the CUDA context) that it leaves.

Mirrors ``c10/cuda/CUDACachingAllocator.cpp`` (``DeviceCachingAllocator::malloc`` / ``free``) with its default
configuration (no ``PYTORCH_CUDA_ALLOC_CONF``: ``max_split_size`` unlimited, no expandable segments, no garbage
collection threshold, no ``roundup_power2_divisions``), one stream:

- a request is rounded up to a multiple of 512 bytes (``round_size``, ``kMinBlockSize``);
- requests of at most 1 MiB (``kSmallSize``) come from the small pool, larger ones from the large pool; the pools
  never share a segment;
- the free block chosen is the smallest of the pool that holds the request, the lowest address first on a tie
  (``get_free_block``: ``lower_bound`` on the (size, address) order of ``BlockComparatorSize``);
- with none, a new segment (``cudaMalloc``) of ``get_allocation_size``: 2 MiB (``kSmallBuffer``) for a small
  request, 20 MiB (``kLargeBuffer``) for a request under 10 MiB (``kMinLargeAlloc``), else the request rounded up
  to 2 MiB (``kRoundLarge``);
- a block larger than the request is split when what remains is at least 512 bytes (small pool) or more than
  1 MiB (large pool, ``should_split``); the request takes the low addresses, the rest stays free;
- a freed block merges with the free blocks beside it in its segment (``free_block``, ``try_merge_blocks``);
- a segment goes back to CUDA only when ``cudaMalloc`` fails (then every free, unsplit segment is released and
  the request retried, ``release_cached_blocks``) or on ``torch.cuda.empty_cache()`` (:meth:`empty_cache`).

Streams: a block belongs to the stream it was allocated on, and a free block is reused only by a request on that
stream (the pools are ordered by stream first, ``BlockComparatorSize``); segments are never shared between streams.
A block freed while another stream still uses it (``record_stream``) is taken as free at once: the deferral until
that stream's events complete (``insert_events`` / ``process_events``) is not modelled.

Bytes throughout.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 << 20
K_SMALL_BUFFER = 2 << 20
K_LARGE_BUFFER = 20 << 20
K_MIN_LARGE_ALLOC = 10 << 20
K_ROUND_LARGE = 2 << 20


def round_size(size: int) -> int:
    """``round_size``: the block bytes a request of ``size`` bytes takes (a multiple of 512)."""
    return K_MIN_BLOCK if size < K_MIN_BLOCK else K_MIN_BLOCK * ((size + K_MIN_BLOCK - 1) // K_MIN_BLOCK)


def allocation_size(size: int) -> int:
    """``get_allocation_size``: the bytes of the segment ``cudaMalloc`` gets for a (rounded) request."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


@dataclass
class _Block:
    addr: int
    size: int
    segment: int  # the segment's base address
    small: bool
    stream: int = 0
    allocated: bool = False
    prev: _Block | None = field(default=None, repr=False)
    next: _Block | None = field(default=None, repr=False)


class OutOfMemory(Exception):
    """The request does not fit in ``capacity`` even after the free segments are released."""


class CachingAllocator:
    """The allocator (see the module docstring). ``capacity``: the device bytes ``cudaMalloc`` may take in all
    (None: unlimited). Counters: ``allocated`` / ``reserved`` now and their peaks, bytes."""

    def __init__(self, capacity: int | None = None):
        self.capacity = capacity
        self._free: dict[bool, list[tuple[int, int, int]]] = {True: [], False: []}  # pool -> sorted (stream, size, addr)
        self._blocks: dict[int, _Block] = {}  # addr -> block, allocated or free
        self._segments: dict[int, int] = {}  # base addr -> bytes
        self._next_addr = 1 << 40
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0
        self.segment_allocs = 0

    # -- pool bookkeeping
    def _insert_free(self, block: _Block) -> None:
        bisect.insort(self._free[block.small], (block.stream, block.size, block.addr))

    def _remove_free(self, block: _Block) -> None:
        pool = self._free[block.small]
        i = bisect.bisect_left(pool, (block.stream, block.size, block.addr))
        assert pool[i] == (block.stream, block.size, block.addr)
        del pool[i]

    def _new_segment(self, size: int, small: bool, stream: int = 0, addr: int | None = None) -> _Block:
        if self.capacity is not None and self.reserved + size > self.capacity:
            self._release_free_segments()
            if self.reserved + size > self.capacity:
                raise OutOfMemory(f"{size} bytes more than the {self.capacity - self.reserved} left")
        if addr is None:
            addr = self._next_addr
            self._next_addr += size + K_ROUND_LARGE
        self._segments[addr] = size
        self.reserved += size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        self.segment_allocs += 1
        block = _Block(addr, size, addr, small, stream=stream)
        self._blocks[addr] = block
        return block

    def _release_free_segments(self) -> None:
        for pool in (True, False):
            for _, size, addr in list(self._free[pool]):
                block = self._blocks[addr]
                if block.prev is None and block.next is None:  # a whole segment, free
                    self._remove_free(block)
                    del self._blocks[addr]
                    self.reserved -= self._segments.pop(addr)

    # -- the allocator's interface
    def malloc(self, size: int, stream: int = 0, segment_addr: int | None = None) -> int:
        """Allocate ``size`` bytes on ``stream`` (an id; 0 the default stream); the block's address (the handle
        :meth:`free` takes). ``segment_addr``: where a segment made for this request lies (a recorded run's own
        ``cudaMalloc`` address). By default segments lie in the order they are made, but CUDA's are not: the driver
        reuses freed ranges. Among free blocks of one size, the lowest address wins, so the order can change which
        block a request splits.

        Raises:
            OutOfMemory: past ``capacity``."""
        size = round_size(size)
        small = size <= K_SMALL_SIZE
        pool = self._free[small]
        i = bisect.bisect_left(pool, (stream, size, -1))
        if i < len(pool) and pool[i][0] == stream:
            block = self._blocks[pool[i][2]]
            del pool[i]
        else:
            block = self._new_segment(allocation_size(size), small, stream, segment_addr)
        remaining = block.size - size
        if (remaining >= K_MIN_BLOCK) if small else (remaining > K_SMALL_SIZE):
            rest = _Block(block.addr + size, remaining, block.segment, small, stream=stream, prev=block,
                          next=block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._blocks[rest.addr] = rest
            self._insert_free(rest)
        block.allocated = True
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block.addr

    def free(self, addr: int) -> None:
        """Free the block at ``addr`` (from :meth:`malloc`), merging it with free neighbours."""
        block = self._blocks[addr]
        assert block.allocated
        block.allocated = False
        self.allocated -= block.size
        for other in (block.prev, block.next):
            if other is not None and not other.allocated:
                self._remove_free(other)
                del self._blocks[other.addr]
                if other is block.prev:
                    block.addr, block.prev = other.addr, other.prev
                    if other.prev is not None:
                        other.prev.next = block
                else:
                    block.next = other.next
                    if other.next is not None:
                        other.next.prev = block
                block.size += other.size
        self._blocks.pop(addr, None)
        self._blocks[block.addr] = block
        self._insert_free(block)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()``: every free, unsplit segment back to CUDA."""
        self._release_free_segments()
