"""The ``HANG9xx`` rules: what ``dsdoctor hang`` finds in a live job's snapshot (or in several nodes' snapshots,
merged)."""

from __future__ import annotations

from dsdoctor.rules import rule

_SOURCE = ("the ranks' Python stacks (py-spy dump) and /proc; torch/distributed/distributed_c10d.py (a blocking "
           "collective waits inside its API function; with NCCL the wait shows at the next synchronising call)")

HANG900 = rule(
    "HANG900", "info", "every rank is advancing: the job is not hung",
    what="Each rank moved during --interval: its main thread's stack changed between samples, or (a step that spends "
         "most of its time at one line) its main thread kept waking and its process kept reading and writing, which "
         "a rank blocked in a collective does not (/proc/PID/task/PID/status, /proc/PID/io).",
    why="A slow step, a long evaluation or a checkpoint being written looks like a hang from the outside (no log "
        "line, a flat GPU) but every rank still moves.",
    fix="Nothing to unblock. If it is slower than expected, profile it (py-spy record, torch.profiler); run "
        "`dsdoctor hang` again with a longer --interval to be sure.",
    source=_SOURCE)
HANG901 = rule(
    "HANG901", "error", "a rank has not reached the collective the others wait in",
    what="Some ranks wait inside a collective (all_reduce, broadcast, barrier, ...) while another is elsewhere: in "
         "its own code, reading data, or waiting on something else.",
    why="A collective completes only when every rank of its group calls it. One rank held up (a slow or blocked data "
        "read, a rank-0-only evaluation or save, a branch only some ranks take, a sleep, a lock) holds every other "
        "rank in the collective; NCCL then waits until its watchdog timeout (30 minutes by default).",
    fix="Look at the odd rank's frames in the evidence: make every rank take the same path to the collective (no "
        "collective inside `if rank == 0:`), move rank-0-only work after a barrier that every rank reaches, and fix "
        "or time out what it blocks on.",
    source=_SOURCE)
HANG902 = rule(
    "HANG902", "error", "ranks wait in different collectives (mismatched)",
    what="The ranks that wait are in different collectives, or in the same collective called from different lines.",
    why="Collectives must be called in the same order on every rank of a group. Ranks that reach different ones (a "
        "conditional collective, a different number of batches per rank, a layer skipped on some ranks under ZeRO-3) "
        "wait for each other forever, or exchange wrong data.",
    fix="Make every rank call the same collectives in the same order: give every rank the same number of batches "
        "(drop_last, a DistributedSampler), no collective in rank-dependent branches; under ZeRO-3 every rank must "
        "run the same modules' forward.",
    source=_SOURCE)
HANG903 = rule(
    "HANG903", "error", "a rank is gone; the others wait for it",
    what="A rank the job should have on this node has no process (or only a zombie); the others still run.",
    why="A rank that exited (an error, the OOM killer, a `sys.exit` on one rank, a finished rank with fewer batches) "
        "leaves the others waiting in their next collective; NCCL does not notice until its watchdog timeout.",
    fix="Read the gone rank's own log for its error (`dsdoctor explain RANK.log`); the kernel's log (`dmesg`) names an "
        "OOM kill. Give every rank the same number of steps, and set a shorter timeout "
        "(`init_process_group(timeout=...)`; with NCCL also `TORCH_NCCL_ASYNC_ERROR_HANDLING=1`) so that the job stops "
        "instead of hanging.",
    source=_SOURCE + "; /proc/PID/stat (a zombie's exit status); the kernel's log (OOM kills)")
HANG904 = rule(
    "HANG904", "error", "every rank waits for its DataLoader",
    what="No rank is in a collective: each waits for a batch from its DataLoader, whose workers do not deliver.",
    why="The data source stalls: a network dataset that stopped sending, a worker blocked on a lock or a file system, "
        "a tokenizer deadlocked after fork. Every rank waits, so the GPUs sit at 0%.",
    fix="Look at the workers' frames in the evidence; try num_workers=0 to see the error in the main process; use a "
        "local copy of the data; set `TOKENIZERS_PARALLELISM=false` when a fast tokenizer is used before fork; give "
        "the DataLoader a `timeout` so that a stall raises.",
    source=_SOURCE + "; torch/utils/data/dataloader.py (_try_get_data)")
HANG905 = rule(
    "HANG905", "warning", "every rank seen waits in the same collective",
    what="Every rank snapshotted waits in the same collective, called from the same line, and none of them is odd.",
    why="Either the rank they wait for is not among them (on another node: snapshot it and merge; or not a rank this "
        "node launched), or every rank of the job has arrived and the collective itself is slow (a large tensor; the "
        "evidence says whether the ranks burn CPU) or stuck in its transport (a firewall, a wrong interface, "
        "InfiniBand or P2P trouble).",
    fix="Ranks missing from the snapshot: run `dsdoctor hang --json NODE.json` on every node (pdsh or srun) and "
        "`dsdoctor hang --merge *.json`. All ranks here: run `dsdoctor hang` again with a longer --interval (a slow "
        "collective advances), `dsdoctor nccl` for the transport, and rerun with `NCCL_DEBUG=INFO`.",
    source=_SOURCE)
HANG906 = rule(
    "HANG906", "warning", "a rank's Python stack could not be read",
    what="py-spy could not attach to a rank: ptrace refused (a container without SYS_PTRACE, kernel.yama.ptrace_scope, "
         "another user's process), py-spy missing, or the dump timed out.",
    why="Without the stack, where the rank waits is unknown; /proc still gives its state and what it waits on in the "
        "kernel.",
    fix="Run dsdoctor hang as the job's user or as root; in Docker add `--cap-add SYS_PTRACE`; or allow ptrace with "
        "`sudo sysctl kernel.yama.ptrace_scope=0`; `pip install py-spy` if it is missing.",
    source="py-spy's documentation (docker and ptrace); the kernel's Yama documentation")
HANG907 = rule(
    "HANG907", "warning", "no rank is in a collective: the ranks are stuck elsewhere",
    what="No rank waits in a torch.distributed collective; the ranks' main threads are at the lines in the evidence.",
    why="With NCCL a collective returns at once and the wait shows later, at the next call that synchronises with "
        "the GPU (`loss.item()`, `torch.cuda.synchronize()`, a copy to the CPU); otherwise the ranks wait on a lock, "
        "a file, a subprocess or a network call of their own.",
    fix="If every rank sits at a GPU-synchronising line, an NCCL collective is stuck: rerun with the Flight Recorder "
        "(`TORCH_FR_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/tmp/fr_pipe_`) and "
        "`NCCL_DEBUG=INFO`, and run `dsdoctor hang --native` to see the NCCL frames; otherwise fix what the frames "
        "wait on.",
    source=_SOURCE)
HANG908 = rule(
    "HANG908", "info", "the Flight Recorder is off for the next run",
    what="Neither TORCH_FR_BUFFER_SIZE nor TORCH_NCCL_TRACE_BUFFER_SIZE is set above 0 here: the ranks of a run "
         "started from this environment keep no record of their collectives.",
    why="When a run hangs, the Flight Recorder's records say which collective (sequence number, op, sizes, process "
        "group) each rank enqueued last and completed last: with NCCL, where a rank's stack shows only the next "
        "synchronising line, that is what names the late rank. It costs a few MB per rank.",
    fix="export TORCH_FR_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_FR_DUMP_TEMP_FILE=/tmp/fr_rank_ "
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/tmp/fr_pipe_ before launching (torch before 2.8: TORCH_NCCL_TRACE_BUFFER_SIZE "
        "and TORCH_NCCL_DEBUG_INFO_TEMP_FILE); `dsdoctor hang` then reads (and through the pipe, asks for) each "
        "rank's dump.",
    source="torch/distributed/distributed_c10d.py (TORCH_FR_BUFFER_SIZE, TORCH_NCCL_TRACE_BUFFER_SIZE); PyTorch's "
           "Flight Recorder documentation (dump on timeout, the debug-info pipe)")
HANG909 = rule(
    "HANG909", "error", "a rank is stopped (SIGSTOP, Ctrl-Z, a debugger)",
    what="A rank's process is in the stopped state: a SIGSTOP or SIGTSTP (Ctrl-Z in the terminal that started it), or "
         "a debugger that holds it.",
    why="A stopped rank runs nothing until it is continued: the others wait for it in their next collective. py-spy "
        "cannot read a stopped process either.",
    fix="kill -CONT PID (or `fg` in the shell that started the job); detach the debugger.",
    source="/proc/PID/stat (state T, t); the kernel's job control")
