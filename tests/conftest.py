"""Session-wide test setup.

A shell that starts a command in the background without job control (``cmd &`` in a script, or CI runners that do
so) sets SIGINT to "ignored" for it, and an ignored signal stays ignored across exec: every ``dsdoctor smoke`` or
``nccl`` a test starts would then ignore the Ctrl-C the lifecycle tests send, as a user's terminal never does. The
test process restores Python's own handler, so the processes it starts get the default disposition, as from a
terminal. (Seen on this machine: three Ctrl-C tests timed out when the suite ran from a background script.)
"""

import signal

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import os

import pytest


@pytest.fixture(autouse=True)
def _reap_what_the_test_started(request):
    """After a test that used ``tmp_path``, SIGTERM every process whose command line names that directory (a smoke or
    nccl the test launched), so that a test that fails on a timeout leaves nothing training behind it: one that did
    (a Ctrl-C test whose SIGINT was ignored) kept torchrun and two ranks busy for 30 minutes here. dsdoctor stops its
    ranks on SIGTERM. A test that passes has already asserted that nothing is left; this only cleans up failures."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    tmp = str(request.getfixturevalue("tmp_path")).encode()  # the test asked for it: the same directory
    yield
    for pid in filter(str.isdecimal, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if tmp in f.read():
                    os.kill(int(pid), signal.SIGTERM)
        except OSError:
            pass


_SESSION_START = __import__("time").time()


def pytest_sessionfinish(session, exitstatus):
    """Delete the DeepSpeed all-reduce segments this session's CPU runs left in /dev/shm (DeepSpeed never unlinks
    them: ``dsdoctor/shm.py``): those created since the session started that no live process maps. Over many CI runs
    they had filled this machine's RAM (272 segments, 18 GiB)."""
    from dsdoctor.shm import deepspeed_segments

    for segment in deepspeed_segments():
        try:
            if not segment.mapped and segment.path.stat().st_mtime >= _SESSION_START - 1:
                segment.path.unlink()
        except OSError:
            pass
