"""Fuzz `dsdoctor explain LOG...` (issue 12): generated logs made of the corpus's real lines (cases/logs/*/log.txt),
spliced, wrapped in rank prefixes (small, large, absurd), truncated, with ANSI codes, huge numbers, long runs of one
character, binary bytes, as UTF-8, UTF-16 (with and without a byte-order mark) or empty; one file, several (named per
rank) or stdin. Every example must keep the CLI's promises (tests/fuzzing.py: no traceback, no internal error, exit 0,
1 or 2, one line on stderr for 2, inputs unchanged), give a report with a first finding when it does not exit 2, suggest
only commands that parse (tests/test_explain_trial.py's check: placeholders made real), and take at most 2 s: a pattern
that backtracks over a long run shows up as a slow example.

    DSDOCTOR_FUZZ_EXAMPLES=2000 python -m pytest tests/test_fuzz_explain.py -q     # a long run
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import time
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import test_explain_trial as trial
from fuzzing import budget, run
from test_explain_trial import SUGGESTED, TB, assert_parses
from dsdoctor.rules import catalogue

LOGS = Path(__file__).resolve().parents[1] / "cases" / "logs"
#: the corpus's lines, and those of the issue-12 tests' logs (the fp16 loss scaler's forms, import failures, an
#: out-of-memory with the launcher's and DeepSpeed's start-up lines)
CORPUS_LINES = sorted({line for text in [p.read_text() for p in sorted(LOGS.glob("*/log.txt"))]
                       + [log for _, log in trial.LOG_CASES] + [TB + v[0] for v in trial.IMPORT_LINES]
                       + trial.FLOOR_FORMS for line in text.splitlines() if line})
#: the lines that name a failure (and their cascade) come more often than the noise around them
FAILURE_LINES = [ln for ln in CORPUS_LINES if any(w in ln for w in ("Error", "error", "Exception", "Traceback",
                                                                   "exit", "signal", "WARN", "Watchdog", "memory"))]
#: one second per example is the benchmark's goal for a 10,000-line log; two is the fuzz limit
#: every rule ID explain may name (PRE rules too: a line's own refusals, PRE014, PRE021)
RULE_IDS = set(catalogue())
SECONDS = 2.0

ranks = st.one_of(st.integers(0, 7), st.integers(0, 10 ** 6), st.integers(10 ** 6, 10 ** 30))
prefixes = st.one_of(
    st.just(""),
    ranks.map(lambda r: f"[rank{r}]: "),
    ranks.map(lambda r: f"[default{r}]:"),
    st.integers(0, 99999).map(lambda r: f"{r}: "),
    st.sampled_from(["node0: ", "worker-1: ", "node1: [rank3]: ", "ValueError: "]),
)
ansi = st.sampled_from(["\x1b[31m", "\x1b[0m", "\x1b[1;32;40m", "\x1b]0;title\x07", "\x1b]", "\x1b[", "\x1b[999999"])
runs = st.builds(lambda c, n: c * n, st.sampled_from(list("0a. _-[]:'(\x1b\t9") + ["a.", "0.", "1 * ", "%|", "\r",
                                                                                  "Error", "GiB "]),
                 st.integers(1, 40_000))
huge_numbers = st.integers(1, 6000).map(lambda n: "9" * n)


@st.composite
def log_line(draw) -> str:
    """One line: a real one, spliced with another, cut, coloured, prefixed, or with a long run or a huge number in
    it."""
    line = draw(st.sampled_from(FAILURE_LINES) if draw(st.booleans()) else st.sampled_from(CORPUS_LINES))
    kind = draw(st.integers(0, 9))
    if kind == 0:  # spliced with another line
        other = draw(st.sampled_from(CORPUS_LINES))
        cut = draw(st.integers(0, len(line)))
        line = line[:cut] + other[draw(st.integers(0, len(other))):]
    elif kind == 1:  # truncated
        line = line[:draw(st.integers(0, len(line)))]
    elif kind == 2:  # a long run of one character, after the line or inside it
        cut = draw(st.integers(0, len(line)))
        line = line[:cut] + draw(runs) + line[cut:]
    elif kind == 3:  # every number in it made huge
        number = draw(huge_numbers)
        line = "".join(number if c.isdigit() else c for c in line[:300])
    elif kind == 4:  # colours around and inside
        cut = draw(st.integers(0, len(line)))
        line = draw(ansi) + line[:cut] + draw(ansi) + line[cut:] + draw(ansi)
    return draw(prefixes) + line


@st.composite
def log_file(draw) -> bytes:
    """A log's bytes: lines as above (some of them binary), in one of the encodings a log arrives in."""
    lines = draw(st.lists(log_line(), min_size=0, max_size=40))
    if draw(st.integers(0, 5)) == 0:  # binary bytes among the lines
        lines.insert(draw(st.integers(0, len(lines))), draw(st.binary(max_size=200)).decode("latin-1"))
    if draw(st.integers(0, 7)) == 0:  # a dsdoctor report in (or as) the log
        lines.insert(0, "## dsdoctor smoke\n\n| result | value |\n|---|---|\n| log | runs/x/train.log |")
    text = "\n".join(lines) + draw(st.sampled_from(["\n", "", "\r\n"]))
    encoding = draw(st.sampled_from(["utf-8"] * 6 + ["utf-16", "utf-16-le", "latin-1", "nul-prefixed"]))
    if encoding == "nul-prefixed":
        return b"\x00" * draw(st.integers(1, 5000)) + text.encode("utf-8", "surrogatepass")
    return text.encode(encoding, errors="replace")


#: the suggested commands already proven to parse (most examples suggest the same few), and where their
#: placeholders are made real
PARSED: set[str] = set()
SUGGESTED_DIR = Path(tempfile.mkdtemp(prefix="dsdoctor-suggested-"))
atexit.register(shutil.rmtree, SUGGESTED_DIR, True)

NAMES = ["rank{r}.log", "node1-rank{r}.txt", "20240101103000_rank{r}.log", "train{r}.log", "{r}/stdout.log"]


@given(files=st.lists(log_file(), min_size=1, max_size=3), names=st.lists(st.sampled_from(NAMES), min_size=3,
                                                                         max_size=3),
       stdin=st.booleans())
@budget()
def test_explain_any_log(files, names, stdin):
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for index, data in enumerate(files[1:] if stdin else files):
            path = Path(tmp) / names[index].format(r=index)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            paths.append(str(path))
        args = ["explain", *paths, *(["-"] if stdin else []), "--json", "-"]
        start = time.perf_counter()
        result = run(args, inputs=paths, input_text=files[0] if stdin else None)
        took = time.perf_counter() - start
        assert took <= SECONDS, f"{took:.2f} s for {args} ({[len(f) for f in files]} bytes)"
        if result.exit_code != 2:
            report = json.loads(result.stdout)
            assert report["findings"] and report["findings"][0]["id"] in RULE_IDS  # a rule of the catalogue
            for finding in report["findings"]:  # every command it suggests runs, whatever the log put in it
                for command in SUGGESTED.findall(finding["fix"] + " " + finding["evidence"]):
                    if command not in PARSED:
                        assert_parses(command, SUGGESTED_DIR)
                        PARSED.add(command)
            assert report["result"]["log"] == (paths + (["-"] if stdin else []) if len(files) > 1 else
                                               (paths or ["-"])[0])
