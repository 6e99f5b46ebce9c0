"""The evidence's small pieces shared by the describers of :mod:`.signatures` and :mod:`.network`: a log's numbers
(never trusted with memory: bounded digits), a match's "line N (rank R): " prefix, and the first line as evidence."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lines import Line, where

if TYPE_CHECKING:
    from .signatures import Match


#: the largest world size a log's number is taken as (a larger one is not used to list ranks)
MAX_WORLD = 1 << 20


def _int(text: str | None, digits: int = 18) -> int | None:
    """The number ``text`` when it has at most ``digits`` digits, else None: a number from a log is shown as text
    beyond that (Python refuses int() of 4,300+ digits, and no batch size or rank has 19)."""
    return int(text) if text and len(text) <= digits and text.isdecimal() else None


def _shown_number(text: str) -> str:
    """A number from the log for evidence: as is, or its first digits and its length when it is very long."""
    return text if len(text) <= 24 else f"{text[:12]}...({len(text):,} digits)"


def _where(match: Match) -> str:
    """'rank R: ' for a line whose rank is known, else ''."""
    return where(match.line)


def _first_line(match: Match, lines: list[Line]) -> tuple[str, str]:
    return _where(match) + match.line.text.strip()[:300], ""
