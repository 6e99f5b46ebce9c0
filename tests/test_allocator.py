"""The caching allocator model (checks/allocator.py) against the rules of c10/cuda/CUDACachingAllocator.cpp. The
model is checked against a real GPU run's own allocator in benchmarks/allocator_replay.py (results in
benchmarks/results/memory-loops/allocator-replay.txt); these tests pin the rules on sequences small enough to
follow by hand, and its invariants on random ones."""

from hypothesis import given, settings
from hypothesis import strategies as st

from dsdoctor.checks.allocator import CachingAllocator, OutOfMemory, allocation_size, round_size

MIB = 2 ** 20


def test_sizes_round_as_torch_does():
    assert round_size(1) == 512 and round_size(513) == 1024 and round_size(1024) == 1024
    assert allocation_size(512) == 2 * MIB  # small pool: 2 MiB segments
    assert allocation_size(MIB + 512) == 20 * MIB  # 1-10 MiB: a 20 MiB segment, split for later requests
    assert allocation_size(10 * MIB + 1) == 12 * MIB  # from 10 MiB: rounded up to 2 MiB


def test_a_freed_block_too_small_for_a_larger_request_stays_reserved():
    a = CachingAllocator()
    x = a.malloc(100 * MIB)
    a.malloc(100 * MIB)
    a.free(x)
    a.malloc(150 * MIB)  # the free 100 MiB block cannot hold it: a third segment
    assert (a.reserved, a.allocated, a.segment_allocs) == (350 * MIB, 250 * MIB, 3)


def test_the_best_fit_block_is_split_and_merges_back_when_freed():
    a = CachingAllocator()
    small, large = a.malloc(40 * MIB), a.malloc(100 * MIB)
    a.free(small)
    a.free(large)
    w = a.malloc(30 * MIB)  # the 40 MiB block is the best fit, split 30 + 10
    assert a.segment_allocs == 2
    a.free(w)  # merged back: 40 MiB whole again
    a.malloc(40 * MIB)
    assert (a.segment_allocs, a.reserved) == (2, 140 * MIB)


def test_a_remainder_of_at_most_1_mib_is_not_split_off_in_the_large_pool():
    a = CachingAllocator()
    x = a.malloc(20 * MIB)
    a.free(x)
    a.malloc(19 * MIB + 512)  # 512 KiB would remain: the whole 20 MiB block is handed out
    assert a.allocated == 20 * MIB


def test_requests_of_1_to_10_mib_share_a_20_mib_segment_and_small_ones_their_own_pool():
    a = CachingAllocator()
    for _ in range(6):
        a.malloc(3 * MIB)
    assert (a.segment_allocs, a.reserved) == (1, 20 * MIB)
    a.malloc(1000)  # small pool: its own 2 MiB segment even though the large segment has room
    assert (a.segment_allocs, a.reserved) == (2, 22 * MIB)


def test_out_of_memory_releases_free_segments_first():
    a = CachingAllocator(capacity=300 * MIB)
    x = a.malloc(200 * MIB)
    a.free(x)
    a.malloc(250 * MIB)  # the free 200 MiB segment is released, then the request fits
    assert a.reserved == 250 * MIB
    try:
        a.malloc(100 * MIB)
    except OutOfMemory:
        pass
    else:
        raise AssertionError("300 MiB of capacity cannot hold 350 MiB")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 64 * MIB)), min_size=1, max_size=120))
def test_invariants_over_random_sequences(ops):
    a = CachingAllocator()
    live = []
    for is_free, size in ops:
        if is_free and live:
            a.free(live.pop(size % len(live)))
        else:
            live.append(a.malloc(size))
        assert a.allocated <= a.reserved <= a.peak_reserved
        assert a.allocated == sum(a._blocks[h].size for h in live)
    for h in live:
        a.free(h)
    assert a.allocated == 0
    # every segment is one free block again: freed neighbours merged
    assert sorted(addr for _, _, addr in a._free[True] + a._free[False]) == sorted(a._segments)
    a.empty_cache()
    assert a.reserved == 0


def test_a_block_freed_on_one_stream_is_not_reused_by_another():
    """``BlockComparatorSize`` orders the pools by stream first: a request on the allgather stream gets a segment of
    its own even when the default stream has a free block that fits; the default stream reuses its own."""
    from dsdoctor.checks.allocator import CachingAllocator

    a = CachingAllocator()
    a.free(a.malloc(64 << 20))  # 64 MiB, freed on stream 0
    assert a.reserved == 64 << 20
    a.malloc(32 << 20, stream=1)
    assert a.reserved == 96 << 20 and a.segment_allocs == 2
    a.malloc(32 << 20)  # stream 0: the cached block, split
    assert a.reserved == 96 << 20 and a.segment_allocs == 2
