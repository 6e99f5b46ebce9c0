"""Fuzz `dsdoctor smoke`'s inputs (issue 12): --data lines of every shape (the three formats, mutated and hostile),
--deepspeed configs (generated valid and faulty ones, and junk), and its numeric flags. Everything smoke reads is
judged before any rank starts, so the launch is replaced by a run that wrote nothing (the judge then reads an empty
--out): the promises of tests/fuzzing.py hold for each input (no traceback, no internal error, exit 0/1/2, one line
on exit 2, the input unchanged)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from config_generator import generate
from fuzzing import budget, run


@pytest.fixture
def no_ranks(monkeypatch):
    from dsdoctor.commands import smoke

    def nothing_ran(cmd, env, out, steps, timeout_s, root):
        return smoke.Supervised(returncode=1, timed_out=False, wall_s=0.1)

    monkeypatch.setattr(smoke, "supervise", nothing_ran)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("MASTER_PORT", raising=False)


text = st.text(max_size=40)
junk = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(), text,
                 st.lists(text, max_size=3), st.dictionaries(text, text, max_size=2))
turn = st.fixed_dictionaries({}, optional={"role": st.one_of(st.sampled_from(["user", "assistant", "system", "bot"]),
                                                             junk),
                                           "content": st.one_of(text, junk), "from": st.sampled_from(["human", "gpt"]),
                                           "value": text})
records = st.one_of(
    st.fixed_dictionaries({"instruction": st.one_of(text, junk), "output": st.one_of(text, junk)},
                          optional={"input": st.one_of(text, junk)}),
    st.fixed_dictionaries({"prompt": st.one_of(text, junk), "response": st.one_of(text, junk)},
                          optional={"history": st.one_of(st.lists(st.lists(text, max_size=3), max_size=2), junk)}),
    st.fixed_dictionaries({"messages": st.one_of(st.lists(turn, max_size=4), junk)}),
    st.fixed_dictionaries({"conversations": st.one_of(st.lists(turn, max_size=4), junk)}),
    st.dictionaries(text, junk, max_size=3), junk)
lines = st.one_of(records.map(lambda r: json.dumps(r, ensure_ascii=False)), text,
                  st.sampled_from(["{", "[]", "[1, 2]", "\ufeff{}", "null", '{"instruction": "x", "output": "y"}']))


@budget()
@given(data=st.lists(lines, max_size=6), tail=st.sampled_from(["\n", "", "\r\n"]), raw=st.binary(max_size=20))
def test_smoke_data_never_crashes(tmp_path_factory, no_ranks, data, tail, raw):
    work = tmp_path_factory.mktemp("smoke")
    path = work / "d.jsonl"
    path.write_bytes(tail.join(data).encode("utf-8", "surrogatepass") + (raw if len(data) % 3 == 0 else b""))
    run(["smoke", "--data", path, "--out", work / "out", "--steps", "5", "--format", "json"], inputs=[path])


@budget()
@given(seed=st.integers(0, 2 ** 32), mode=st.sampled_from(["generated", "junk"]), value=junk)
def test_smoke_deepspeed_config_never_crashes(tmp_path_factory, no_ranks, seed, mode, value):
    work = tmp_path_factory.mktemp("smoke")
    path = work / "ds.json"
    if mode == "generated":
        config, _, _, _ = generate(random.Random(seed))
        path.write_text(json.dumps(config))
    else:
        path.write_text(json.dumps({"train_micro_batch_size_per_gpu": value, "optimizer": value}, default=str))
    run(["smoke", "--deepspeed", path, "--out", work / "out", "--steps", "5", "--format", "json"], inputs=[path])


numbers = st.one_of(st.integers(-10, 10 ** 6).map(str), st.sampled_from(["nan", "inf", "-inf", "1e400", "10" * 200,
                                                                         "0x10", "", " ", "1e-300", "abc", "-0"]),
                    st.floats(allow_nan=True).map(repr))


@budget()
@given(flag=st.sampled_from(["--steps", "--nproc", "--seq-len", "--timeout", "--lr", "--zero", "--micro-batch",
                             "--freeze-last"]), value=numbers)
def test_smoke_numeric_flags_never_crash(tmp_path_factory, no_ranks, flag, value):
    work = tmp_path_factory.mktemp("smoke")
    extra = ["--method", "freeze"] if flag == "--freeze-last" else []
    run(["smoke", flag, value, *extra, "--out", work / "out", "--format", "json"])
