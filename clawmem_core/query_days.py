"""The calendar days a query names, for the daily-note prior of the calibrated fusion.

A daily note is named for its day (``memory/2026-03-05.md``); a question that names that day
("What did we decide on 5 March 2026?", "2026年3月5日的会议", "2026-03-05") asks about it. Only a
whole date with its year counts: a bare year or month names many notes, and a day without a
year is ambiguous. Recognised forms:

- ISO and its kin: ``2026-03-05``, ``2026/3/5``, ``2026.03.05``;
- Chinese and Japanese: ``2026年3月5日`` (or ``号``);
- English, day first or month first, full or abbreviated month names, with or without an
  ordinal suffix, ``of`` and commas: ``5 March 2026``, ``5th of Mar, 2026``, ``March 5, 2026``,
  ``Mar. 5th 2026``.

Numeric day/month orders other than year first (``3/5/2026``) are left out: they read
differently in the US and elsewhere. Impossible dates (``2026-02-30``) name nothing. Text is
NFKC-normalised first, so full-width digits count.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import date

__all__ = ["named_days"]

#: At most this many days are taken from one query (a query listing dates names each; a flood of
#: them is not a question about a day).
MAX_NAMED_DAYS = 16

_MONTHS = {name: i for i, names in enumerate((
    ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",),
    ("june", "jun"), ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"),
    ("october", "oct"), ("november", "nov"), ("december", "dec")), start=1) for name in names}
_MONTH = "(?P<{}>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<{}>\d{{1,2}})(?:st|nd|rd|th)?"
_YEAR = r"(?P<{}>\d{{4}})"

_FORMS = re.compile("|".join((
    # 2026-03-05, 2026/3/5, 2026.03.05 (not inside a longer run of digits)
    r"(?<!\d)(?P<iy>\d{4})(?P<sep>[-/.])(?P<im>\d{1,2})(?P=sep)(?P<id>\d{1,2})(?!\d)",
    # 2026年3月5日
    r"(?<!\d)(?P<cy>\d{4})\s*年\s*(?P<cm>\d{1,2})\s*月\s*(?P<cd>\d{1,2})\s*[日号號]",
    # 5 March 2026, 5th of March, 2026
    r"\b" + _DAY.format("ed") + r"\s+(?:of\s+)?" + _MONTH.format("em") + r",?\s+" + _YEAR.format("ey") + r"\b",
    # March 5, 2026; Mar. 5th 2026
    r"\b" + _MONTH.format("am") + r"\s+" + _DAY.format("ad") + r",?\s+" + _YEAR.format("ay") + r"\b",
)), re.IGNORECASE)


def named_days(text: str) -> frozenset[date]:
    """The whole dates (year, month and day) ``text`` names, in the forms the module lists."""
    if not text or not any(c.isdigit() for c in text):
        return frozenset()
    text = unicodedata.normalize("NFKC", text)
    days: set[date] = set()
    for m in _FORMS.finditer(text):
        g = m.groupdict()
        if g["iy"]:
            y, mo, d = g["iy"], g["im"], g["id"]
        elif g["cy"]:
            y, mo, d = g["cy"], g["cm"], g["cd"]
        elif g["ey"]:
            y, mo, d = g["ey"], str(_MONTHS[g["em"].lower()]), g["ed"]
        else:
            y, mo, d = g["ay"], str(_MONTHS[g["am"].lower()]), g["ad"]
        try:
            days.add(date(int(y), int(mo), int(d)))
        except ValueError:  # 2026-02-30, month 13, year 0000
            continue
        if len(days) >= MAX_NAMED_DAYS:
            break
    return frozenset(days)
