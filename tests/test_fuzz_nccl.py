"""Fuzz `dsdoctor nccl`'s flags and launcher environment (issue 12): --nproc, --timeout, --sizes, --iters, --backend,
and RANK/WORLD_SIZE/LOCAL_WORLD_SIZE as a launcher would set them (or a broken launch line would). A flag set that
passes validation launches nothing here (the launch is replaced by ranks that exited at once), so each example is
milliseconds; the promises of tests/fuzzing.py hold for each."""

from __future__ import annotations

import contextlib
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzing import EXAMPLES, budget, run


@pytest.fixture
def no_ranks(monkeypatch):
    from dsdoctor import launch

    @contextlib.contextmanager
    def exited_at_once(cmd, env, log, grace_s=10.0, before_stop=None):
        proc = subprocess.Popen(["true"])
        proc.wait()
        proc.tag = "fuzz"
        yield proc

    monkeypatch.setattr(launch, "launched", exited_at_once)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "SLURM_PROCID", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)


number = st.one_of(st.integers(-5, 10 ** 5).map(str), st.sampled_from(["nan", "inf", "1e400", "10" * 100, "", "abc",
                                                                       "0", "-1", "2.5"]))
size = st.one_of(st.sampled_from(["1M", "16M", "1G", "infM", "nanG", "1e400K", "0", "-1M", "4", "3", "17G", "1.5M",
                                  "M", "", "1MB", "1KB", "9" * 30]), st.text(max_size=6))


@budget()
@given(nproc=number, timeout=number, iters=number, sizes=st.lists(size, max_size=4))
def test_nccl_flags_never_crash(no_ranks, nproc, timeout, iters, sizes):
    run(["nccl", "--backend", "gloo", "--nproc", nproc, "--timeout", timeout, "--iters", iters, "--sizes",
         ",".join(sizes), "--format", "json"])


@budget(max(40, EXAMPLES // 4))
@given(rank=number, world=number, local=number)
def test_nccl_launcher_environment_never_crashes(no_ranks, rank, world, local):
    """Under a launcher this process is a rank: broken variables are one line; valid ones would need real peers, so
    only the refusals are exercised (a world of 1 runs alone, for real, in a second)."""
    import os

    env = {"RANK": rank, "WORLD_SIZE": world, "LOCAL_WORLD_SIZE": local, "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "1"}
    r, w = rank.strip(), world.strip()
    valid = r.isdigit() and w.isdigit() and len(r) <= 7 and len(w) <= 7 and int(w) >= 1 and int(r) < int(w)
    if valid:  # a real rendezvous with absent peers would wait for its timeout: not a fuzz case
        return
    result = run(["nccl", "--backend", "gloo", "--timeout", "5"], env={**os.environ, **env})
    assert result.exit_code == 2 or not (rank and world), result.stderr
