"""What ``--fix`` writes: each edit (:class:`Change`) and the corrected copy they make."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from .values import MISSING, delete_path, set_path


@dataclass
class Change:
    """One edit of ``--fix``: set ``path`` to ``new`` (``new is MISSING``: delete it), and why."""

    path: str
    old: Any
    new: Any
    rule: str
    why: str

    def to_dict(self) -> dict:
        return {"path": self.path, "old": None if self.old is MISSING else self.old,
                "new": None if self.new is MISSING else self.new, "action": "delete" if self.new is MISSING
                else ("add" if self.old is MISSING else "set"), "rule": self.rule, "why": self.why}



def apply_changes(config: dict, changes: list[Change]) -> dict:
    """A corrected copy of ``config`` with ``changes`` applied in order (the input is not modified): a change whose
    ``new`` is MISSING deletes its path (a top-level key with dots in its name first, else the nested path)."""
    fixed = copy.deepcopy(config)
    for c in changes:
        if c.new is MISSING:
            if c.path in fixed:  # a top-level key, even one with dots in its name
                del fixed[c.path]
            else:
                delete_path(fixed, c.path)
        else:
            set_path(fixed, c.path, copy.deepcopy(c.new))
    return fixed
