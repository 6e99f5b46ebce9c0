"""The fuzz harness every input surface shares (issue 12): run the real CLI in-process on generated input and assert
the promises a user relies on, whatever the input:

- no Python traceback reaches the user, and no internal error (the catch-all "internal error" line is a bug);
- the exit code is 0, 1 or 2;
- exit 2 prints exactly one line on stderr, ``dsdoctor: error: ...``, with no raw control character;
- no input file changed (bytes and mtime).

Each surface's test (tests/test_fuzz_*.py) draws its inputs with hypothesis and calls :func:`run`. Budgets are set per
test with :data:`FUZZ`, so that all of them together stay about a minute on CI's 2 cores; ``DSDOCTOR_FUZZ_EXAMPLES``
raises the count for a long local run (the corpus sizes reported in the issue note).
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, settings

from dsdoctor.cli import cli

#: examples per surface in CI (all the fuzz tests together: about 35 s on 2 cores); ``DSDOCTOR_FUZZ_EXAMPLES=2000 pytest
#: tests/test_fuzz_*.py`` for a long run
EXAMPLES = int(os.environ.get("DSDOCTOR_FUZZ_EXAMPLES", "150"))


def budget(examples: int | None = None):
    """hypothesis settings for a fuzz test: no deadline (the 2-core CI machine is slow and shared), no database
    (CI starts clean), ``examples`` (default :data:`EXAMPLES`) examples."""
    return settings(max_examples=examples or EXAMPLES, deadline=None, database=None, derandomize=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large, HealthCheck.filter_too_much])


def _runner() -> CliRunner:
    if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters:  # click < 8.2
        return CliRunner(mix_stderr=False)
    return CliRunner()


_RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\u2028\u2029]")


def _fingerprint(paths) -> dict[str, tuple[bytes, int] | None]:
    out = {}
    for p in paths:
        p = Path(p)
        for f in ([p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else []):
            out[str(f)] = (hashlib.sha256(f.read_bytes()).digest(), f.stat().st_mtime_ns)
    return out


def run(args: list[str], inputs=(), input_text: str | bytes | None = None, env: dict | None = None):
    """Invoke ``dsdoctor ARGS`` in-process and assert the promises above. ``inputs``: files or directories that must
    not change. Returns click's Result (``exit_code``, ``stdout``, ``stderr``)."""
    before = _fingerprint(inputs)
    result = _runner().invoke(cli, [str(a) for a in args], input=input_text, env=env, catch_exceptions=True)
    shown = f"args={args!r}\nexit={result.exit_code}\nstderr={result.stderr[-2000:]!r}"
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        f"uncaught {type(result.exception).__name__}: {result.exception}\n{shown}"
    assert "Traceback (most recent call last)" not in result.output + result.stderr, shown
    assert result.exit_code in (0, 1, 2), shown
    assert "internal error" not in result.stderr, shown
    if result.exit_code == 2:
        lines = result.stderr.strip("\n").split("\n")
        assert len(lines) == 1 and lines[0].startswith("dsdoctor: error: "), shown
        assert not _RAW_CONTROL.search(lines[0]), shown
    assert _fingerprint(inputs) == before, f"an input changed\n{shown}"
    return result
