"""PyTorch's Flight Recorder: each rank's ring buffer of the collectives it enqueued, started and completed, with
their sequence numbers, ops, sizes and process groups.

It is on when ``TORCH_FR_BUFFER_SIZE`` (torch 2.8+, any backend; gloo records too) or ``TORCH_NCCL_TRACE_BUFFER_SIZE``
(the older name, which torch 2.11 warns is deprecated) is above 0 (``torch/distributed/distributed_c10d.py`` reads
both). A rank writes its buffer to ``<prefix><rank>``
(prefix ``TORCH_FR_DUMP_TEMP_FILE`` or ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``, by default ``/tmp/nccl_trace_rank_``):
NCCL's watchdog does on a timeout when ``TORCH_NCCL_DUMP_ON_TIMEOUT=1``, and on demand when
``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` is set and a line is written to ``<that>``+``<rank>.pipe``. The dump is a pickle of
``{"version", "pg_config", "pg_status", "entries": [{"collective_seq_id", "profiling_name" ("nccl:all_reduce"),
"input_sizes", "process_group": [id, name], "state": "scheduled" | "started" | "completed", ...}]}``
(``torch/distributed/flight_recorder/components/loader.py`` reads it so); ``_dump_fr_trace_json`` gives the same as
JSON.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import stat

BUFFER_KEYS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
DUMP_KEYS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
DEFAULT_PREFIX = "/tmp/nccl_trace_rank_"
PIPE_KEY = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"
#: the settings `dsdoctor env` proposes and `smoke`/`nccl` give their own ranks
RECOMMENDED = {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
#: a dump larger than this is not read (a full buffer of 2000 entries with stacks is a few MB)
MAX_DUMP_BYTES = 256 << 20


def status(env: dict[str, str]) -> dict:
    """Whether the Flight Recorder is on in ``env`` (a rank's environment, or this shell's for the next run):
    ``{"on", "buffer_size", "dump_prefix", "dump_on_timeout", "pipe"}``."""
    size = 0
    for key in BUFFER_KEYS:
        try:
            size = max(size, int(str(env.get(key, "0")).strip() or 0))
        except ValueError:
            continue
    prefix = next((env[k] for k in DUMP_KEYS if env.get(k)), DEFAULT_PREFIX)
    return {"on": size > 0, "buffer_size": size, "dump_prefix": prefix,
            "dump_on_timeout": str(env.get("TORCH_NCCL_DUMP_ON_TIMEOUT", "")).strip() in ("1", "true", "True"),
            "pipe": env.get(PIPE_KEY) or None}


def trigger(env: dict[str, str], rank: int) -> bool:
    """Ask a rank for a dump through its debug-info pipe (``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` + rank + ``.pipe``,
    made by ProcessGroupNCCL's heartbeat monitor); True when a line was written to it. Never blocks: a pipe that no
    rank reads is left alone."""
    pipe = env.get(PIPE_KEY)
    if not pipe:
        return False
    path = f"{pipe}{rank}.pipe"
    try:
        if not stat.S_ISFIFO(os.stat(path).st_mode):
            return False
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        os.write(fd, b"1\n")
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


class _PlainUnpickler(pickle.Unpickler):
    """A dump holds dicts, lists, strings and numbers only: any class in it is refused, so a file another user wrote
    into /tmp cannot run code in dsdoctor."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"a class ({module}.{name}) in a Flight Recorder dump")


def read_dump(path: str) -> dict:
    """A dump file (pickle, or JSON) as a dict.

    Raises:
        ValueError: not a Flight Recorder dump (one line), or too large. OSError: unreadable."""
    size = os.path.getsize(path)
    if size > MAX_DUMP_BYTES:
        raise ValueError(f"{path}: {size} bytes, more than a Flight Recorder dump holds")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        data = json.loads(raw) if raw[:1] in (b"{", b"[") else _PlainUnpickler(io.BytesIO(raw)).load()
    except (ValueError, pickle.UnpicklingError, EOFError, TypeError, AttributeError, IndexError) as exc:
        raise ValueError(f"{path}: not a Flight Recorder dump ({type(exc).__name__})") from None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise ValueError(f"{path}: not a Flight Recorder dump (no entries)")
    return data


def _op(entry: dict) -> dict:
    name = str(entry.get("profiling_name") or "?")
    group = entry.get("process_group")
    return {"seq": entry.get("collective_seq_id"), "op": name.split(":", 1)[-1], "backend": name.split(":", 1)[0]
            if ":" in name else None, "sizes": entry.get("input_sizes"),
            "group": group[1] if isinstance(group, (list, tuple)) and len(group) > 1 else group,
            "state": entry.get("state")}


def summary(dump: dict) -> dict:
    """Per process group, the last collective the rank enqueued and the last it completed: ``{group name:
    {"last_enqueued": {"seq", "op", "backend", "sizes", "group", "state"}, "last_completed": ... or None}}``
    (point-to-point records, whose sequence numbers count apart, are left out)."""
    groups: dict[str, dict] = {}
    for entry in dump.get("entries") or []:
        if not isinstance(entry, dict) or entry.get("is_p2p"):
            continue
        op = _op(entry)
        if not isinstance(op["seq"], int):
            continue
        slot = groups.setdefault(str(op["group"]), {"last_enqueued": None, "last_completed": None})
        if slot["last_enqueued"] is None or op["seq"] >= slot["last_enqueued"]["seq"]:
            slot["last_enqueued"] = op
        # NCCL's watchdog marks "completed"; gloo's records are only "retired" once their work is done
        completed = entry.get("state") == "completed" or (entry.get("time_discovered_completed_ns") or 0) > 0 \
            or entry.get("retired") is True
        if completed and (slot["last_completed"] is None or op["seq"] >= slot["last_completed"]["seq"]):
            slot["last_completed"] = op
    return groups


def of_ranks(ranks: list[tuple[dict, int | None, float | None]],
             wait_s: float = 15.0) -> tuple[list[dict], dict | None]:
    """What the Flight Recorder says of each rank, given as (its environment, its rank, when its process started in
    seconds since the epoch): ``[{"on", "path", "triggered", "groups": summary or None, "error"}]``, in order, and
    torch's own analysis of all the dumps read (:func:`torch_analysis`; None without a dump). Every
    rank with a debug-info pipe is asked for a dump first, then the dumps are awaited together for up to ``wait_s``
    (on an H200, NCCL's heartbeat monitor wrote one 6 s after the request: it includes the C++ stacks). A dump older
    than its rank's process is a previous run's and not read."""
    import time

    out, before = [], []  # before: each dump's time before the request, to see the new one arrive
    for env, rank, _ in ranks:
        state = status(env)
        item = {"on": state["on"], "path": None, "triggered": False, "groups": None, "error": None}
        if state["on"] and rank is not None:
            item["path"] = f"{state['dump_prefix']}{rank}"
        before.append(_mtime(item["path"]))
        item["triggered"] = item["path"] is not None and trigger(env, rank)
        out.append(item)
    deadline = time.monotonic() + wait_s
    while any(i["triggered"] and _mtime(i["path"]) == b for i, b in zip(out, before)) and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    if any(i["triggered"] for i in out):
        time.sleep(0.3)  # a dump being written is complete a moment after it appears
    dumps: dict[int, dict] = {}
    for item, (_, rank, started) in zip(out, ranks):
        if item["path"] is None:
            continue
        try:
            if started is not None and os.path.getmtime(item["path"]) < started:
                item["error"] = "the dump there is older than the rank (a previous run's)"
                continue
            data = read_dump(item["path"])
            item["groups"] = summary(data)
            if rank is not None:
                dumps[rank] = data
        except FileNotFoundError:
            item["error"] = ("no dump" + (f" {wait_s:g} s after asking through the pipe" if item["triggered"] else
                                          f" yet (NCCL writes one on a timeout with TORCH_NCCL_DUMP_ON_TIMEOUT=1, or on "
                                          f"demand through {PIPE_KEY})"))
        except (OSError, ValueError) as exc:
            item["error"] = str(exc)[:200]
    return out, torch_analysis(dumps) if dumps else None


def torch_analysis(dumps: dict[int, dict]) -> dict | None:
    """PyTorch's own Flight Recorder analysis (``torch/distributed/flight_recorder``: ``fr_trace``'s ``build_db``,
    which matches each collective across the ranks and names the ranks missing from it, or a mismatch of op, sizes
    or dtypes) run on the dumps dsdoctor read itself as plain data (``read_dump``; torch's own loader unpickles any
    class). ``dumps``: {rank: dump}. Gloo's dumps name their default group '' in ``pg_config`` and '0' in the
    entries: the config is given the entries' name, as NCCL's dumps have it. Returns ``{"problems": [{"seq", "op",
    "group", "missing_ranks", "mismatch", "called_from"}], "collectives": how many it matched}``, ``{"error": ...}``
    when its analysis fails, ``{"skipped": why}`` for dumps that are not one job's, or None where the installed torch
    has none."""
    import contextlib
    import logging

    try:
        # it warns 'tabulate is not installed' on import (logging's last resort: stderr)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            from torch.distributed.flight_recorder.components.builder import build_db
            from torch.distributed.flight_recorder.components.config_manager import JobConfig
    except Exception:  # torch before 2.6, or no torch: nothing of torch's to run
        return None
    import ast

    details = {}
    for rank, data in sorted(dumps.items()):
        config = data.get("pg_config") if isinstance(data.get("pg_config"), dict) else {}
        for group in config.values():  # each group a dump lists holds its rank, or the dumps are not one job's
            try:
                members = ast.literal_eval(str(group.get("ranks"))) if isinstance(group, dict) else None
            except (ValueError, SyntaxError):
                members = None
            if isinstance(members, (list, tuple)) and members and rank not in members:
                return {"skipped": f"the dump of rank {rank} lists a group without it ({str(members)[:40]}): dumps "
                                   "of different jobs, or files numbered otherwise than the ranks"}
        names = {tuple(e["process_group"]) for e in data["entries"]
                 if isinstance(e, dict) and isinstance(e.get("process_group"), (list, tuple))
                 and len(e["process_group"]) == 2}
        if list(config) == [""] and len(names) == 1 and isinstance(config[""], dict):
            (name, desc), = names
            config = {str(name): {**config[""], "name": str(name), "desc": str(desc)}}
        details[f"rank{rank}"] = {"host_name": f"host_rank{rank}", "rank": rank, "entries": data["entries"],
                                  "version": data.get("version"), "pg_config": config}
    logger = logging.getLogger("Flight Recorder")
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.CRITICAL)  # its own report goes to stdout/stderr: dsdoctor reports from the result
    logger.propagate = False
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            args = JobConfig().parse_args(["--allow-incomplete-ranks", "."])
            db = build_db(details, args, str(next(iter(details.values()))["version"]))
    except (Exception, SystemExit) as exc:  # a dump format this torch's analysis does not know
        return {"error": f"{type(exc).__name__}: {str(exc)[:160]}"}
    finally:
        logger.setLevel(level)
        logger.propagate = propagate
    problems = []
    for c in db.collectives:
        if c.missing_ranks or c.type_of_mismatch or not c.pass_check:
            frames = [f for f in (c.collective_frames or []) if isinstance(f, dict)]
            user = next((f for f in frames if "/torch/" not in str(f.get("filename"))), None)
            problems.append({"seq": c.collective_seq_id, "op": str(c.collective_name).split(":")[-1],
                             "group": str(c.pg_desc), "missing_ranks": sorted(c.missing_ranks or []),
                             "mismatch": str(c.type_of_mismatch) if c.type_of_mismatch else None,
                             "called_from": f"{user['name']} at {os.path.basename(str(user['filename']))}:"
                                            f"{user['line']}" if user else None})
    return {"problems": problems[:8], "collectives": len(db.collectives)}


def valid_summary(item) -> bool:
    """Whether ``item`` has the shape :func:`of_ranks` gives a rank (a snapshot read back by ``--merge`` may have been
    edited): ``groups`` None or {name: {"last_enqueued", "last_completed": None or an op with an int ``seq`` and a str
    ``op``}}."""
    if not isinstance(item, dict):
        return False
    groups = item.get("groups")
    if groups is None:
        return True
    if not isinstance(groups, dict):
        return False
    for slot in groups.values():
        if not isinstance(slot, dict):
            return False
        for key in ("last_enqueued", "last_completed"):
            op = slot.get(key)
            if op is not None and not (isinstance(op, dict) and isinstance(op.get("seq"), int)
                                       and not isinstance(op.get("seq"), bool) and isinstance(op.get("op"), str)):
                return False
    return True


def _mtime(path: str | None) -> float | None:
    try:
        return os.path.getmtime(path) if path else None
    except OSError:
        return None
