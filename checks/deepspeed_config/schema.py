"""The key schema generated from the installed DeepSpeed's pydantic models (``dsdoctor/schemas/generate.py``),
and the installed version of a package, read without importing it."""

from __future__ import annotations

import json
from pathlib import Path

import dsdoctor.schemas

#: where the generated key schemas are installed (an empty package; package-data ``*.json``)
SCHEMA_DIR = Path(dsdoctor.schemas.__file__).resolve().parent


def installed_version(package: str) -> str | None:
    """The installed version of ``package``, or None: the name of its ``<package>-<version>.dist-info`` folder on
    ``sys.path`` (no import of the package, and not importlib.metadata, whose import alone costs 17 ms of the
    check's 0.3 s budget); importlib.metadata only when no such folder is found (eggs, odd layouts)."""
    import os
    import sys

    prefix = package.replace("-", "_").lower() + "-"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info") and name.lower().startswith(prefix):
                return name[len(prefix):-len(".dist-info")]
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _version_key(version: str) -> tuple:
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isascii() and ch.isdigit())[:19]
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def load_schema(version: str | None = None) -> tuple[dict, str]:
    """The key schema for DeepSpeed ``version`` (default: the installed one).

    Returns ``(schema, note)``: the exact version's schema when bundled, else the newest bundled one not newer
    than it (or the oldest), with a note saying which was used.
    """
    bundled = {p.stem.removeprefix("deepspeed-"): p for p in SCHEMA_DIR.glob("deepspeed-*.json")}
    if not bundled:
        raise FileNotFoundError(f"no DeepSpeed key schema in {SCHEMA_DIR}")
    wanted = version or installed_version("deepspeed")
    ordered = sorted(bundled, key=_version_key)
    if wanted in bundled:
        chosen, note = wanted, f"DeepSpeed {wanted} (installed)" if version is None else f"DeepSpeed {wanted}"
    else:
        older = [v for v in ordered if wanted and _version_key(v) <= _version_key(wanted)]
        chosen = older[-1] if older else ordered[0]
        note = (f"DeepSpeed {chosen} schema (DeepSpeed {wanted} is installed; no schema for it is bundled)"
                if wanted else f"DeepSpeed {chosen} schema (DeepSpeed is not installed here)")
    return json.loads(bundled[chosen].read_text()), note
