"""The verdicts on a machine's facts: :func:`diagnose`, and the environment block a bug report pastes."""

from __future__ import annotations

import platform
import re
from dataclasses import replace

from dsdoctor.report import Finding

from .facts import _numbers, arch_list_problems
from .rules import (ENV334, ENV301, ENV302, ENV303, ENV304, ENV305, ENV306, ENV307, ENV308, ENV309, ENV310, ENV311, ENV312,
                    ENV313, ENV314, ENV315, ENV316, ENV317, ENV318, ENV319, ENV320, ENV321, ENV322, ENV323, ENV325,
                    ENV326, ENV327, ENV328, ENV329, ENV330, ENV333, ENV336, GIB, KNOWN_BAD, THROTTLE_BAD)


def _python_minor(versions: dict | None) -> str:
    """'3.10' of the job's Python version (``versions['python']``, else this interpreter's)."""
    full = (versions or {}).get("python") or platform.python_version()
    return ".".join(str(full).split(".")[:2])


def diagnose(facts: dict, env: dict | None = None, live: bool = True) -> list[Finding]:
    """Findings for ``facts`` (from :func:`collect`, or a saved ``dsdoctor env --json`` result). ``env`` holds the
    distributed variables; ``live`` is False for saved facts (no port or name lookups on this machine then)."""
    from dsdoctor.checks.network import network_findings

    out: list[Finding] = []
    v, tc, gpu = facts.get("versions"), facts.get("toolchain"), facts.get("gpu") or {}
    host, net = facts.get("host"), facts.get("network")
    gpus = gpu.get("gpus") or []
    if v is not None:
        if not v.get("torch"):
            out.append(ENV301.finding("torch: not found"))
        elif gpus and not v.get("torch_cuda"):
            out.append(ENV302.finding(f"torch {v['torch']} (torch.version.cuda None); NVML: {len(gpus)} x "
                                      f"{gpus[0]['name']}"))
        if v.get("torch_cuda") and gpu.get("driver_cuda") and \
                _numbers(v["torch_cuda"], 1) > _numbers(gpu["driver_cuda"], 1):
            out.append(ENV303.finding(f"torch {v['torch']} is built for CUDA {v['torch_cuda']}; driver "
                                      f"{gpu.get('driver')} supports CUDA up to {gpu['driver_cuda']}"))
        if not v.get("deepspeed"):
            out.append(ENV309.finding("deepspeed: not found"))
        elif v.get("torch") and not v.get("torch_cuda") and gpu.get("nvml") is False and not gpus:
            out.append(ENV328.finding(f"torch {v['torch']} (no CUDA); no NVIDIA GPU seen"))
        built = v.get("deepspeed_built_with") or {}
        if v.get("deepspeed_prebuilt_ops") and v.get("torch") and built.get("version") not in (None, "0.0") and \
                _numbers(built.get("version"), 2) != _numbers(v["torch"], 2):
            out.append(ENV317.finding(f"prebuilt ops {', '.join(v['deepspeed_prebuilt_ops'])} built with torch "
                                      f"{built.get('version')} / CUDA {built.get('cuda_version')}; installed torch "
                                      f"{v['torch']} / CUDA {v.get('torch_cuda')}"))
        for pkg, first_bad, first_good, other, what, fix, source in KNOWN_BAD:
            have, have_other = v.get(pkg), v.get(other)
            if have and have_other and _numbers(first_bad, 3) <= _numbers(have, 3) < _numbers(first_good, 3):
                found = ENV310.finding(f"{pkg} {have} with {other} {have_other}: {what}", fix=fix)
                out.append(replace(found, source=source))
    if tc is not None:
        cuda_torch = (v or {}).get("torch_cuda")
        jit = not (v or {}).get("deepspeed_prebuilt_ops")
        if cuda_torch and tc.get("nvcc_cuda") and _numbers(tc["nvcc_cuda"], 1) != _numbers(cuda_torch, 1):
            out.append(ENV304.finding(f"nvcc ({tc.get('nvcc')}) is CUDA {tc['nvcc_cuda']}; torch is built for CUDA "
                                      f"{cuda_torch}",
                                      fix=f"Point CUDA_HOME at a CUDA {_numbers(cuda_torch, 1)[0]}.x toolkit (e.g. "
                                          f"/usr/local/cuda-{cuda_torch}), or install the torch build for CUDA "
                                          f"{tc['nvcc_cuda']}."))
        if cuda_torch and tc.get("CUDA_HOME") and tc.get("cuda_home_has_nvcc") is False:
            out.append(ENV327.finding(f"CUDA_HOME={tc['CUDA_HOME']}: no bin/nvcc there; torch CUDA {cuda_torch}"))
        if cuda_torch and jit and (v or {}).get("deepspeed") and not tc.get("nvcc"):
            out.append(ENV305.finding(f"torch CUDA {cuda_torch}; CUDA_HOME={tc.get('CUDA_HOME') or '(unset)'}; "
                                      f"no nvcc on PATH; DeepSpeed ops prebuilt: none"))
        if not tc.get("ninja") and (v or {}).get("deepspeed"):
            out.append(ENV306.finding("ninja: not on PATH"))
        if not tc.get("gcc"):
            out.append(ENV315.finding(f"{tc.get('cxx') or 'c++'}: not on PATH (torch compiles with $CXX or c++)"))
        if tc.get("python_h") is False and (v or {}).get("deepspeed"):
            out.append(ENV333.finding(f"{tc.get('python_include')}/Python.h: not found (Python "
                                      f"{(v or {}).get('python') or platform.python_version()})",
                                      fix=f"apt install python{_python_minor(v)}-dev (Debian, Ubuntu), or dnf install "
                                          f"python3-devel; or use a Python that ships its headers (conda, pyenv, uv)"))
        scripts = tc.get("scripts_dir")
        if (v or {}).get("deepspeed") and "deepspeed_cli" in tc and not tc.get("deepspeed_cli") and scripts:
            out.append(ENV334.finding(f"DeepSpeed {(v or {}).get('deepspeed')} is installed; `deepspeed` is not on PATH"
                                      f" (pip puts it in {scripts})",
                                      fix=f"export PATH={scripts}:$PATH (or activate that environment); or launch with "
                                          f"`python -m deepspeed.launcher.runner` and the same arguments"))
        if not tc.get("libaio"):
            out.append(ENV316.finding("libaio.h: not found in /usr/include or /usr/local/include"))
        for lock in tc.get("build_locks") or []:
            if isinstance(lock, dict) and lock.get("stale"):
                out.append(ENV329.finding(f"{lock.get('path')} (op {lock.get('op')}, {lock.get('age_s', 0):.0f} s "
                                          f"old): no live process holds it open and no compiler works on it",
                                          fix=f"rm {lock.get('path')}  # then run again: the op is rebuilt once"))
        arch = tc.get("TORCH_CUDA_ARCH_LIST")
        if arch:
            bad, good = arch_list_problems(arch)
            if bad:
                fixed = sorted({m for e in re.split(r"[;,\s]+", arch) for m in re.findall(r"\d+\.\d+", e)},
                               key=lambda e: _numbers(e, 2))
                out.append(ENV307.finding(f"TORCH_CUDA_ARCH_LIST={arch!r}: {', '.join(repr(b) for b in bad)}",
                                          fix=f'export TORCH_CUDA_ARCH_LIST="{";".join(fixed)}"' if fixed
                                          else ENV307.fix))
            caps = sorted({g["capability"] for g in gpus})
            covered = [c for c in caps if any(e.split("+")[0] == c or (e.endswith("+PTX") and
                                                                        _numbers(e, 2) <= _numbers(c, 2)) for e in good)]
            if caps and good and len(covered) < len(caps):
                out.append(ENV308.finding(f"TORCH_CUDA_ARCH_LIST={arch!r}; GPUs here: compute capability "
                                          f"{', '.join(caps)}"))
        listed = tc.get("nvcc_archs")
        if listed and jit:
            # what torch's _get_cuda_arch_flags builds for: the list's entries, else the GPUs here
            wanted = sorted({e.split("+")[0] for e in (arch_list_problems(arch)[1] if arch else [])}
                            or {g["capability"] for g in gpus if g.get("capability")})
            missing = [a for a in wanted if a not in listed]
            if missing:
                out.append(ENV330.finding(
                    f"nvcc ({tc.get('nvcc')}, CUDA {tc.get('nvcc_cuda') or '?'}) compiles for compute capability "
                    f"{listed[0]}-{listed[-1]}, not {', '.join(missing)} "
                    f"({'TORCH_CUDA_ARCH_LIST=' + repr(arch) if arch else 'the GPUs here'})"))
    deep = facts.get("deep")
    if deep:
        prebuilt = set((v or {}).get("deepspeed_prebuilt_ops") or [])
        ops = deep.get("deepspeed_ops_compatible") or {}
        accel = deep.get("deepspeed_accelerator")
        wanted = ("fused_adam", "cpu_adam") if accel != "cpu" else ("cpu_adam",)
        broken = [op for op in wanted if op in ops and not ops[op] and op not in prebuilt]
        if broken:
            out.append(ENV318.finding(f"not prebuilt and not JIT-compatible here: {', '.join(broken)} "
                                      f"(accelerator {accel})"))
        if gpus and (v or {}).get("torch_cuda") and deep.get("cuda_available") is False:
            out.append(ENV319.finding(f"torch {(v or {}).get('torch')}: torch.cuda.is_available() is False; NVML: "
                                      f"{len(gpus)} GPU(s)"))
        if gpus and accel == "cpu":
            out.append(ENV320.finding(f"get_accelerator() is cpu; NVML: {len(gpus)} x {gpus[0]['name']}"))
    if gpus:
        busy = [(g["index"], p) for g in gpus for p in g.get("processes", [])]
        if busy:
            shown = ", ".join(f"GPU {i}: PID {p['pid']} ({p['used'] / GIB:.1f} GiB)" for i, p in busy[:8])
            out.append(ENV311.finding(shown))
        rtx40 = [g for g in gpus if re.search(r"RTX 40\d\d", g.get("name", ""))]
        p2p_off = ((facts.get("network") or {}).get("NCCL_P2P_DISABLE") or (env or {}).get("NCCL_P2P_DISABLE")
                   or "").strip() == "1"
        if len(rtx40) >= 2 and not p2p_off:
            out.append(ENV321.finding(f"{len(rtx40)} x {rtx40[0]['name']}; NCCL_P2P_DISABLE is not 1"))
        ecc = [(g["index"], g["ecc_uncorrected"]) for g in gpus if (g.get("ecc_uncorrected") or 0) > 0]
        if ecc:
            out.append(ENV322.finding(", ".join(f"GPU {i}: {n} uncorrected" for i, n in ecc)))
        slow = [(g["index"], [t for bit, t in THROTTLE_BAD.items() if (g.get("throttle_reasons") or 0) & bit])
                for g in gpus]
        slow = [(i, reasons) for i, reasons in slow if reasons]
        if slow:
            out.append(ENV323.finding("; ".join(f"GPU {i}: {', '.join(r)}" for i, r in slow)))
        if len(gpus) >= 2 and all(g.get("nvlinks_active") == 0 for g in gpus):
            far = [f"GPU {t['gpus'][0]}-{t['gpus'][1]}" for t in gpu.get("topology") or [] if t["pcie_path"] == "SYS"]
            out.append(ENV326.finding(f"{len(gpus)} GPUs, no active NVLink" +
                                      (f"; across CPU sockets: {', '.join(far[:6])}" if far else "")))
        visible = gpu.get("CUDA_VISIBLE_DEVICES")
        if visible and visible.strip():
            indices = [x.strip() for x in visible.split(",") if x.strip()]
            missing = [x for x in indices if x.isdecimal() and int(x) >= len(gpus)]
            if missing:
                out.append(ENV314.finding(f"CUDA_VISIBLE_DEVICES={visible}; NVML sees {len(gpus)} GPU(s)"))
            twice = sorted({x for x in indices if indices.count(x) > 1})
            if twice:
                from dsdoctor.checks.network import NET415

                out.append(NET415.finding(f"CUDA_VISIBLE_DEVICES={visible}: {', '.join(twice)} listed twice",
                                          fix="List each GPU once (CUDA_VISIBLE_DEVICES=0,1,...)"))
    if host is not None:
        if host.get("dev_shm") is not None and host["dev_shm"] < GIB:
            out.append(ENV312.finding(f"/dev/shm: {host['dev_shm'] / 2 ** 20:.0f} MiB"))
        finding = stale_shm_finding(host.get("deepspeed_shm"), host.get("dev_shm"))
        if finding is not None:
            out.append(finding)
        if host.get("output_dir_free") is not None and host["output_dir_free"] < 50 * GIB:
            out.append(ENV325.finding(f"{host.get('output_dir')}: {host['output_dir_free'] / GIB:.1f} GiB free"))
        if host.get("memlock") is not None and host["memlock"] < 64 * GIB:
            out.append(ENV313.finding(f"ulimit -l: {host['memlock'] // 1024} KiB"))
    if net is not None:
        out.extend(network_findings(net, euid=net.get("euid", (host or {}).get("euid")), gpus=gpus, live=live))
        if "TORCH_FR_BUFFER_SIZE" in net:  # facts saved before dsdoctor read these say nothing of them
            from dsdoctor.checks.hang.flight import status
            from dsdoctor.checks.hang.rules import HANG908

            recorder = status({k: v for k, v in net.items() if isinstance(v, str)})
            if not recorder["on"]:
                out.append(HANG908.finding("TORCH_FR_BUFFER_SIZE and TORCH_NCCL_TRACE_BUFFER_SIZE: "
                                           + ", ".join(str(net.get(k)) for k in ("TORCH_FR_BUFFER_SIZE",
                                                                                 "TORCH_NCCL_TRACE_BUFFER_SIZE"))))
    return out


def paste_block(facts: dict) -> list[tuple[str, str]]:
    """The ``- key: value`` lines for a bug report, in a stable order (``accelerate env`` style)."""
    rows: list[tuple[str, str]] = []
    v = facts.get("versions") or {}
    for key in ("python", "platform", "torch", "torch_cuda", "deepspeed", "transformers", "peft", "accelerate",
                "nvidia-ml-py", "cudnn_wheel", "nccl_wheel"):
        if key in v:
            rows.append((key, str(v[key])))
    if v:
        rows.append(("deepspeed_prebuilt_ops", ", ".join(v.get("deepspeed_prebuilt_ops") or []) or "none (JIT)"))
        built = v.get("deepspeed_built_with") or {}
        if built.get("version") not in (None, "0.0"):
            rows.append(("deepspeed_built_with", f"torch {built.get('version')}, CUDA {built.get('cuda_version')}"))
    for key, value in (facts.get("toolchain") or {}).items():
        if key == "build_locks":
            value = ", ".join(f"{lock.get('path')} ({'stale' if lock.get('stale') else 'building'})"
                              for lock in value if isinstance(lock, dict)) or "none"
        rows.append((key, str(value)))
    gpu = facts.get("gpu") or {}
    if gpu:
        rows.append(("driver", f"{gpu.get('driver')} (CUDA {gpu.get('driver_cuda')})" if gpu.get("nvml") else
                     "no NVML / no NVIDIA GPU"))
        for g in gpu.get("gpus", []):
            rows.append((f"gpu{g['index']}", f"{g['name']}, {g['memory_total'] / GIB:.1f} GiB, "
                                             f"cc {g['capability']}, {len(g.get('processes', []))} process(es)"))
        rows.append(("CUDA_VISIBLE_DEVICES", str(gpu.get("CUDA_VISIBLE_DEVICES"))))
    host = facts.get("host") or {}
    for key in ("cores", "ram", "dev_shm", "memlock", "output_dir_free"):
        if key in host:
            value = host[key]
            if isinstance(value, int) and key != "cores":
                rows.append((key, f"{value / GIB:.1f} GiB" if value >= GIB else f"{value / 2 ** 20:.0f} MiB"))
            else:
                rows.append((key, "unlimited" if key == "memlock" and value is None else str(value)))
    for key, value in (facts.get("deep") or {}).items():
        if key == "deepspeed_ops_compatible":
            rows.append(("deepspeed_ops_jit_compatible", ", ".join(k for k, ok in value.items() if ok) or "none"))
        else:
            rows.append((key, str(value)))
    for key, value in (facts.get("network") or {}).items():
        if key == "euid":
            continue
        if key == "interfaces":
            rows.append((key, ", ".join(value)))
        elif key == "addresses":
            rows.append((key, ", ".join(f"{name} {address}" for name, address in value)))
        elif key == "route_to_master" and value:
            rows.append((key, f"{value[0]} ({value[1]})"))
        elif value is not None:
            rows.append((key, str(value)))
    return rows


def stale_shm_finding(segments: list | None, dev_shm: int | None = None) -> Finding | None:
    """ENV336 for the DeepSpeed all-reduce segments (``dsdoctor.shm.Segment.to_dict()`` each) that no live process
    maps, or None. The fix deletes only the ports none of whose segments is mapped. ``dev_shm``: the size of /dev/shm
    in bytes, for the share they take."""
    from pathlib import Path

    from dsdoctor.shm import Segment, removal_command

    try:
        segs = [Segment(**{**s, "path": Path(s["path"])}) for s in segments or [] if isinstance(s, dict)]
    except (TypeError, KeyError):
        return None
    live_ports = {(s.addr, s.port) for s in segs if s.mapped}
    stale = [s for s in segs if not s.mapped and (s.addr, s.port) not in live_ports]
    if not stale:
        return None
    size = sum(s.size for s in stale)
    share = f" ({size / dev_shm:.0%} of /dev/shm's {dev_shm / GIB:.1f} GiB)" if dev_shm else ""
    ports = sorted({s.port for s in stale})
    return ENV336.finding(f"/dev/shm: {len(stale)} DeepSpeed all-reduce segment(s) that no live process maps, "
                          f"{size / GIB:.2f} GiB{share}, from {len(ports)} run(s) (MASTER_PORT "
                          f"{', '.join(map(str, ports[:6]))}{', ...' if len(ports) > 6 else ''})",
                          fix=removal_command(stale))
