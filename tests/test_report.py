"""The report model (dsdoctor/report.py) and its renderers (dsdoctor/render.py)."""

from __future__ import annotations

import io
import json

import pytest

from dsdoctor import __version__
from dsdoctor.render import render_json, render_markdown, render_table
from dsdoctor.report import SEVERITIES, Finding, Report

FINDING_KEYS = {"id", "severity", "title", "evidence", "fix", "source"}


def make(*severities: str) -> Report:
    return Report("test", [Finding(f"X{i}", s, f"title {i}", f"ev {i}", f"fix {i}", f"src {i}")
                           for i, s in enumerate(severities)], result={"n": len(severities)})


# ----------------------------------------------------------------------------------------------- Finding
@pytest.mark.parametrize("bad", ["fatal", "ERROR", "warn", ""])
def test_finding_rejects_unknown_severity(bad):
    with pytest.raises(ValueError, match="unknown severity"):
        Finding("X1", bad, "t")


@pytest.mark.parametrize("sev", SEVERITIES)
def test_finding_accepts_every_known_severity(sev):
    assert Finding("X1", sev, "t").severity == sev


def test_finding_is_frozen():
    f = Finding("X1", "ok", "t")
    with pytest.raises(Exception):
        f.severity = "error"  # type: ignore[misc]


# ----------------------------------------------------------------------------------------------- Report
@pytest.mark.parametrize("severities, worst", [
    ((), "ok"),
    (("ok",), "ok"),
    (("ok", "info"), "info"),
    (("warning", "ok", "info"), "warning"),
    (("info", "error", "warning", "ok"), "error"),
])
def test_worst(severities, worst):
    assert make(*severities).worst() == worst


@pytest.mark.parametrize("severities, fail_on, code", [
    ((), "error", 0), ((), "warning", 0), ((), "info", 0),
    (("ok",), "error", 0), (("ok",), "warning", 0), (("ok",), "info", 0),
    (("ok", "info"), "error", 0), (("ok", "info"), "warning", 0), (("ok", "info"), "info", 1),
    (("info", "warning"), "error", 0), (("info", "warning"), "warning", 1), (("info", "warning"), "info", 1),
    (("ok", "error"), "error", 1), (("ok", "error"), "warning", 1), (("ok", "error"), "info", 1),
])
def test_exit_code_for_each_fail_on_level(severities, fail_on, code):
    assert make(*severities).exit_code(fail_on) == code


def test_exit_code_default_is_error():
    assert make("warning").exit_code() == 0
    assert make("error").exit_code() == 1


def test_ids_filters_by_severity_in_order():
    r = make("ok", "error", "info", "warning")
    assert r.ids() == ["X0", "X1", "X2", "X3"]
    assert r.ids("warning") == ["X1", "X3"]
    assert r.ids("error") == ["X1"]


def test_add_returns_and_appends():
    r = Report("c")
    f = r.add(Finding("A1", "info", "t"))
    assert r.findings == [f]


def test_to_dict_has_exactly_the_stable_keys():
    d = make("ok", "error").to_dict()
    assert set(d) == {"command", "dsdoctor_version", "findings", "result"}
    assert d["command"] == "test"
    assert d["dsdoctor_version"] == __version__
    assert d["result"] == {"n": 2}
    assert len(d["findings"]) == 2
    for f in d["findings"]:
        assert set(f) == FINDING_KEYS
    assert d["findings"][1] == {"id": "X1", "severity": "error", "title": "title 1", "evidence": "ev 1",
                                "fix": "fix 1", "source": "src 1"}


# ----------------------------------------------------------------------------------------------- render
def test_render_json_round_trips():
    r = make("ok", "warning", "error")
    r.result.update(text="héllo | 日本", nested={"a": [1, 2.5, None]})
    text = render_json(r)
    assert json.loads(text) == r.to_dict()
    assert "日本" in text  # ensure_ascii=False keeps it readable


def test_render_json_serialises_non_json_values_as_strings():
    from pathlib import Path

    r = Report("c", result={"path": Path("/tmp/x")})
    assert json.loads(render_json(r))["result"]["path"] == "/tmp/x"


def test_render_markdown_escapes_pipes_and_newlines():
    r = Report("c", [Finding("P1", "error", "a | b", "x|y\nz", "use `a | b`")], result={"k": "v|w"})
    md = render_markdown(r)
    row = next(line for line in md.splitlines() if "P1" in line)
    assert row == "| FAIL | P1 | a \\| b | x\\|y<br>z | use `a \\| b` |"
    # an unescaped pipe would add columns: this row has exactly the header's 5 cells
    assert row.replace("\\|", "").count("|") == 6
    assert "| k | v\\|w |" in md
    assert md.startswith("## dsdoctor c\n")


def test_render_markdown_status_words():
    md = render_markdown(make("ok", "info", "warning", "error"))
    for word in ("PASS", "INFO", "WARN", "FAIL"):
        assert f"| {word} |" in md


def test_render_table_has_status_words():
    buf = io.StringIO()
    render_table(make("ok", "error", "warning"), file=buf)
    out = buf.getvalue()
    assert "PASS" in out and "FAIL" in out and "WARN" in out
    assert "\x1b[" not in out  # no colour codes when not a terminal
    assert "1 PASS, 1 WARN, 1 FAIL" in out
    assert "X0" in out and "X1" in out


def test_render_table_empty_report():
    buf = io.StringIO()
    render_table(Report("empty"), file=buf)
    assert "no findings" in buf.getvalue()


@pytest.mark.parametrize("evidence", ["missing key [lora_A.weight]", "file [/tmp/x] gone"])
def test_render_table_prints_brackets_literally(evidence):
    buf = io.StringIO()
    render_table(Report("c", [Finding("B1", "error", "t", evidence, "f")]), file=buf)
    bracketed = evidence[evidence.index("["):evidence.index("]") + 1]
    assert bracketed in buf.getvalue()


def test_bytes_read_as_gib_in_table_and_markdown_but_stay_bytes_in_json():
    import io
    import json as _json

    from dsdoctor.render import render_json, render_markdown, render_table

    report = Report("smoke", result={"peak_allocated_bytes": [560644096, 3 * 2**30], "steps": 100})
    buf = io.StringIO()
    render_table(report, buf)
    assert "0.52 GiB, 3.00 GiB" in buf.getvalue() and "560644096" not in buf.getvalue()
    assert "| peak_allocated_bytes | 0.52 GiB, 3.00 GiB |" in render_markdown(report)
    assert _json.loads(render_json(report))["result"]["peak_allocated_bytes"] == [560644096, 3 * 2**30]


def test_render_markdown_keeps_a_frames_angle_brackets_as_text():
    """`<module>` in a hang's frame was taken by GitHub for an HTML tag and the function vanished."""
    r = Report("hang", findings=[Finding(id="HANG901", severity="error", title="rank 1 is at <module> at tr.py:50",
                                         evidence="a & b", fix="")])
    md = render_markdown(r)
    assert "&lt;module&gt; at tr.py:50" in md and "a &amp; b" in md
