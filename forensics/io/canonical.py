"""Canonical batches: a source's raw batches under canonical names and units, with exact steps.

:class:`Canonicalizer` renames one source's keys to canonical names (:mod:`forensics.schema`) as
they appear, applies the unit transforms, and takes the step column apart. Its :class:`Batch`
is what the trackers, ``convert`` and ``watch`` read.

Nothing is lost on the way:

* **one source per canonical name**, decided by first appearance: the key that appears on the
  earliest row feeds the canonical column (on the same row, a canonical name beats an alias,
  and aliases go in :data:`~forensics.schema.ALIASES` order), whatever the batch boundaries. A
  key that arrives later for a canonical name already fed is carried through under
  ``shadowed/<key>`` when its own name is a canonical one (it never overwrites the column), and
  the report says so. The user's own map (``[columns]``, ``--map``) reserves its canonical
  name only for a key the log has: a map whose key is absent never shadows the log's own key
  (the scan warns about it instead);
* **a value that does not fit its column** (text in a numeric column) is parsed when it is a
  number in disguise (``"nan"``, ``"1e-3"``, ``tensor(0.5, device='cuda:0')``) and otherwise
  set aside for that row (read as missing, counted and located), the column kept;
* **steps are exact int64**: a row whose step is missing, not an integer, a boolean, NaN or
  infinite, or beyond int64 is skipped with its line and the reason; steps are never
  renumbered or rounded.
"""

from __future__ import annotations

import math
import re
from dataclasses import field
from decimal import Decimal
from typing import Any

import numpy as np

from ..records import record
from ..schema import METRICS, TRANSFORMS, ColumnMapping, UserColumn, alias_rank, canonical_name
from .limits import STEP_MAX, STEP_MIN
from .readers import RawBatch, ReadReport

__all__ = ["SHADOW_PREFIX", "Batch", "Canonicalizer", "parse_number", "step_value"]


@record
class Batch:
    """Consecutive rows of a stream as numpy columns under canonical names.

    ``columns`` are float64 with NaN where a value is missing *or* non-finite; ``missing`` holds,
    for columns that have gaps, a mask of the rows where the key was absent or null, so a logged
    NaN (a real non-finite value) can be told from a value that was never logged. ``text`` holds
    string columns. ``rows`` are global row indexes (0-based, counting kept rows only) and
    ``lines`` the source line (or record) numbers, for error messages.
    """

    steps: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    missing: dict[str, np.ndarray] = field(default_factory=dict)
    text: dict[str, np.ndarray] = field(default_factory=dict)
    row0: int = 0
    lines: np.ndarray | None = None
    stream: str = "step"

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def rows(self) -> np.ndarray:
        return np.arange(self.row0, self.row0 + len(self.steps), dtype=np.int64)

    def has(self, name: str) -> bool:
        """Whether the column has at least one value logged in this batch."""
        col = self.columns.get(name)
        if col is None:
            return False
        miss = self.missing.get(name)
        return bool(len(col)) and (miss is None or not bool(miss.all()))

    def col(self, name: str) -> np.ndarray:
        """The column, or all-NaN when this batch does not carry it."""
        col = self.columns.get(name)
        return col if col is not None else np.full(len(self.steps), np.nan)

    def logged(self, name: str) -> np.ndarray:
        """Mask of rows where the key had a value (finite or not)."""
        if name not in self.columns:
            return np.zeros(len(self.steps), dtype=bool)
        miss = self.missing.get(name)
        return np.ones(len(self.steps), dtype=bool) if miss is None else ~miss

    def nonfinite(self, name: str) -> np.ndarray:
        """Mask of rows where a NaN or an infinity was logged (not merely missing)."""
        return self.logged(name) & ~np.isfinite(self.col(name))

    def take(self, mask: np.ndarray) -> Batch:
        """Rows where ``mask`` is true (used by the step policy); ``row0`` is left to the caller."""
        return Batch(
            steps=self.steps[mask],
            columns={k: v[mask] for k, v in self.columns.items()},
            missing={k: v[mask] for k, v in self.missing.items()},
            text={k: v[mask] for k, v in self.text.items()},
            row0=self.row0,
            lines=None if self.lines is None else self.lines[mask],
            stream=self.stream,
        )


#: Where a key is carried when its own name is a canonical name that another key already feeds.
SHADOW_PREFIX = "shadowed/"

_NUMPY_WRAP = re.compile(r"^(?:np|numpy)\.(?:float|int|uint|bool_?)\d*\((?P<v>.*)\)$")
_TORCH_WRAP = re.compile(r"^tensor\((?P<v>[^,()]*)(?:,.*)?\)$")
_SPECIAL = {"nan": math.nan, "+nan": math.nan, "-nan": math.nan, "inf": math.inf, "+inf": math.inf,
            "-inf": -math.inf, "infinity": math.inf, "+infinity": math.inf, "-infinity": -math.inf,
            "true": 1.0, "false": 0.0}
_INT_TEXT = re.compile(r"^[+-]?\d+$")
_DECIMAL_TEXT = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d{1,9})?$")
_DEC_MIN, _DEC_MAX = Decimal(STEP_MIN), Decimal(STEP_MAX)
_TEXT_METRICS = frozenset(m.name for m in METRICS.values() if m.unit == "text")


def parse_number(text: str) -> float | None:
    """A printed number as a float: plain, ``nan``/``inf``, or wrapped as ``np.float64(x)`` or
    ``tensor(x, device=...)``; ``None`` when it is not one.

    >>> parse_number("np.float64(0.0123)"), parse_number("0.000"), parse_number("nan")
    (0.0123, 0.0, nan)
    >>> parse_number("tensor(0.5, device='cuda:0')"), parse_number(" 1e-3 ")
    (0.5, 0.001)
    >>> parse_number("abc") is None, parse_number("1_000") is None
    (True, True)
    """
    s = text.strip()
    m = _NUMPY_WRAP.match(s) or _TORCH_WRAP.match(s)
    if m:
        s = m.group("v").strip()
    special = _SPECIAL.get(s.lower())
    if special is not None:
        return special
    if "_" in s:  # float() accepts "1_000"; a logger never prints it
        return None
    try:
        return float(s)
    except (ValueError, OverflowError):
        return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def step_value(value: Any) -> tuple[int | None, str]:
    """A step as an exact integer, or ``(None, why not)``.

    >>> step_value(7), step_value(7.0), step_value("12")
    ((7, ''), (7, ''), (12, ''))
    >>> step_value(True)[1], step_value(2.5)[1], step_value(float("nan"))[1]
    ('step True is a boolean, not an integer', 'step 2.5 is not an integer', 'step nan is not a number')
    >>> step_value(2**63)[1]
    'step 9223372036854775808 is beyond int64'
    """
    if isinstance(value, (bool, np.bool_)):
        return None, f"step {bool(value)} is a boolean, not an integer"
    if isinstance(value, (int, np.integer)):
        v = int(value)
        if STEP_MIN <= v <= STEP_MAX:
            return v, ""
        return None, f"step {_shown(v) if len(str(v)) <= 40 else str(v)[:20] + '...'} is beyond int64"
    if isinstance(value, str):
        s = value.strip()
        if _INT_TEXT.match(s):
            if len(s.lstrip("+-")) > 19:
                return None, f"step {_shown(value)} is beyond int64"
            return step_value(int(s))
        if _DECIMAL_TEXT.match(s):
            return _decimal_step(s)
        num = parse_number(s)
        if num is None:
            return None, f"step {_shown(value)} is not a number"
        return step_value(num)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if math.isnan(f):
            return None, "step nan is not a number"
        if math.isinf(f):
            return None, f"step {f} is infinite"
        if f != math.floor(f):
            return None, f"step {f!r} is not an integer"
        if not (-(2.0**63) <= f < 2.0**63):
            return None, f"step {f!r} is beyond int64"
        return int(f), ""
    return None, f"step {_shown(value)} is a {type(value).__name__}, not an integer"


def _decimal_step(text: str) -> tuple[int | None, str]:
    """A step printed as a decimal (``1.0``, ``1e3``, ``4611686018427387905.0``), exactly: never
    through float64."""
    d = Decimal(text)
    shown = text if len(text) <= 40 else text[:37] + "..."
    if not (_DEC_MIN <= d <= _DEC_MAX):
        return None, f"step {shown} is beyond int64"
    if d != d.to_integral_value():
        return None, f"step {shown} is not an integer"
    return int(d), ""


def _to_float(values: np.ndarray) -> np.ndarray:
    if values.dtype == np.float64:
        return values
    if values.dtype != object:
        return values.astype(np.float64)
    out = np.empty(len(values), dtype=np.float64)
    for i, v in enumerate(values):
        try:
            out[i] = float(v)
        except OverflowError:  # an integer beyond float64: its sign survives
            out[i] = math.inf if v > 0 else -math.inf
    return out


@record
class _Stored:
    """Where one source key goes: ``name`` (its column) and its mapping ``kind``."""

    name: str
    kind: str  # "mapped", "unmapped" or "shadowed"


class Canonicalizer:
    """Renames one source's keys to canonical names as keys appear, applies unit transforms,
    converts values to float64 metrics and an int64 step (see the module doc).

    ``columns`` is the user's own map (``[columns]`` in a config, ``--map``): it is applied before
    the aliases, and the canonical names it gives are reserved for its keys (a log's own key of
    that name is carried through as shadowed, with a note).
    """

    def __init__(self, stream: str = "step", columns: dict[str, UserColumn] | None = None) -> None:
        self.stream = stream
        self.columns = dict(columns or {})
        self._reserved = {c.canonical: c.source for c in self.columns.values()}
        self.mapping = ColumnMapping()
        self.step_from_rows: bool | None = None
        self.next_row_step = 0
        self._stored: dict[str, _Stored] = {}
        self._taken: dict[str, str] = {}  # canonical name -> the source key feeding it
        self._numeric_keys: set[str] = set()  # keys that held numbers: their text is parsed
        self._first_line: dict[str, int] = {}
        self._text_noted: set[str] = set()

    # -- mapping ------------------------------------------------------------------------------
    @staticmethod
    def _first_row(raw: RawBatch, key: str) -> int:
        """Index of the first row of the batch where ``key`` has a value (len when none)."""
        n = len(raw)
        if key in raw.numeric:
            miss = raw.missing.get(key)
            first = 0 if miss is None else (int(np.argmin(miss)) if not miss.all() else n)
            stray = raw.stray.get(key)
            if stray:
                first = min(first, stray[0][0])
            return first
        col = raw.text[key]
        hits = np.flatnonzero(col != None)  # noqa: E711  (elementwise on an object array)
        return int(hits[0]) if len(hits) else n

    def _resolve(self, raw: RawBatch, report: ReadReport) -> None:
        new = [k for k in (*raw.numeric, *raw.text) if k not in self._stored]
        if new:
            firsts = {k: self._first_row(raw, k) for k in new}
            self._place(new, firsts, raw.lines, report)

    def _place(self, new: list[str], firsts: dict[str, int], lines: np.ndarray, report: ReadReport) -> None:
        """Decide where each new key goes: in the order its first value appears (``firsts``: the
        row of ``lines``, or ``len(lines)`` when it has none), then by :meth:`_rank`."""
        m = self.mapping
        present = set(self._stored) | set(new)
        for key in sorted(new, key=lambda k: (firsts[k], *self._rank(k))):
            line = int(lines[firsts[key]]) if firsts[key] < len(lines) else 0
            user = self.columns.get(key)
            if user is not None and user.canonical in self._taken:  # the log's own key came first
                self._shadow(key, user.canonical, f"the log's {self._taken[user.canonical]} already feeds "
                             "(it came first)", report)
                continue
            if user is not None:
                self._taken[user.canonical] = key
                self._first_line[key] = line
                self._stored[key] = _Stored(user.canonical, "mapped")
                m.map_user(key, user)
                continue
            hit = canonical_name(key, self.stream)
            if hit is None:
                self._stored[key] = _Stored(key, "unmapped")
                m.unmapped.append(key)
                continue
            canonical, alias = hit
            mine = self._reserved.get(canonical)
            if mine is not None and mine != key and mine in present:  # a map whose key is absent reserves nothing
                self._shadow(key, canonical, f"your column map gives to {mine}", report)
                continue
            owner = self._taken.get(canonical)
            if owner is not None:
                m.shadowed.append(key)
                name = SHADOW_PREFIX + key if key in METRICS else key
                self._stored[key] = _Stored(name, "shadowed")
                where = f" (first at line {line})" if line else ""
                report.notes.append(
                    f"{key}{where} also means {canonical}, which {owner} (first at line "
                    f"{self._first_line.get(owner, 0)}) already feeds: one source per canonical name, "
                    f"the first to appear; {key} is carried through as {name}")
                continue
            self._taken[canonical] = key
            self._first_line[key] = line
            self._stored[key] = _Stored(canonical, "mapped")
            m.map_alias(key, canonical, alias)

    def _shadow(self, key: str, canonical: str, why: str, report: ReadReport) -> None:
        """Carry ``key`` through under its own name: ``canonical`` is fed by another key (``why``)."""
        self.mapping.shadowed.append(key)
        name = SHADOW_PREFIX + key if key in METRICS else key
        self._stored[key] = _Stored(name, "shadowed")
        report.notes.append(f"{key} also means {canonical}, which {why}: {key} is carried through as {name}")

    def _rank(self, key: str) -> tuple[int, str]:
        if key in self.columns:
            return (-2, key)
        hit = canonical_name(key, self.stream)
        if hit is None:  # after every key that maps
            return (2**31, key)
        return (alias_rank(key, hit[1]), key)

    def rename(self, row: dict[str, Any], report: ReadReport, line: int = 0) -> dict[str, Any]:
        """One row as a live logger hands it over (a Trainer's ``logs``) under the names a scan gives
        its keys, numbers in canonical units; values are otherwise kept as given.

        The trainer callback writes its rows with it, so a key is resolved one way whether it is
        read live, from the callback's file or from the trainer's own log: the first to appear
        feeds a canonical name, a later key that also means it is carried through as shadowed.

        >>> from forensics.io.readers import ReadReport
        >>> canon, report = Canonicalizer(), ReadReport("live")
        >>> canon.rename({"step": 1, "grad_norm_policy": 0.5, "policy/sqrt_kl": 0.5}, report)
        {'step': 1, 'grad_norm': 0.5, 'kl_seq': 0.25}
        >>> canon.rename({"step": 2, "grad_norm_policy": 0.4, "grad_norm": 9.0}, report)
        {'step': 2, 'grad_norm': 0.4, 'shadowed/grad_norm': 9.0}
        """
        new = [k for k in row if k not in self._stored]
        if new:  # one row: a key with no value comes after those with one, as in a batch
            self._place(new, {k: int(row[k] is None) for k in new}, np.array([line], dtype=np.int64), report)
        transforms = self.mapping.transforms
        out: dict[str, Any] = {}
        for key, value in row.items():
            how = transforms.get(key)
            if how is not None and not isinstance(value, bool):
                number = parse_number(value) if isinstance(value, str) else value
                if isinstance(number, (int, float)):
                    value = float(TRANSFORMS[how](np.array([float(number)]))[0])
            out[self._stored[key].name] = value
        return out

    # -- values -------------------------------------------------------------------------------
    def _numeric(self, raw: RawBatch, key: str, report: ReadReport) -> tuple[np.ndarray, np.ndarray | None]:
        values = _to_float(raw.numeric[key])
        miss = raw.missing.get(key)
        stray = raw.stray.get(key)
        if stray:
            values = values.copy()
            miss = np.zeros(len(values), dtype=bool) if miss is None else miss.copy()
            for i, v in stray:
                num = parse_number(v) if isinstance(v, str) else None
                if num is None:
                    what = (f"{_shown(v)} is not a number" if isinstance(v, str)
                            else f"a {type(v).__name__} ({_shown(v)}), not a number")
                    report.set_aside(int(raw.lines[i]), key, what)
                else:
                    values[i], miss[i] = num, False
        return values, miss

    def _parse_text(self, raw: RawBatch, key: str, report: ReadReport) -> tuple[np.ndarray, np.ndarray]:
        col = raw.text[key]
        values = np.full(len(col), np.nan)
        miss = np.ones(len(col), dtype=bool)
        for i in np.flatnonzero(col != None):  # noqa: E711
            v = col[i]
            num = parse_number(v) if isinstance(v, str) else None
            if num is None:
                report.set_aside(int(raw.lines[i]), key, f"{_shown(v)} is not a number")
            else:
                values[i], miss[i] = num, False
        return values, miss

    def _steps(self, raw: RawBatch, key: str, report: ReadReport) -> tuple[np.ndarray, np.ndarray]:
        """``(int64 steps, rows that have one)``; every other row is skipped with its reason."""
        n = len(raw)
        lines = raw.lines
        miss = raw.missing.get(key)
        odd: dict[int, Any] = {}  # row -> a value to check one by one
        if key in raw.numeric:
            values = raw.numeric[key]
            for i, v in raw.stray.get(key, ()):
                odd[i] = v
        else:
            col = raw.text[key]
            values = np.zeros(n, dtype=np.int64)
            miss = np.asarray(col == None, dtype=bool)  # noqa: E711
            odd = {int(i): col[i] for i in np.flatnonzero(~miss)}
        ok = np.ones(n, dtype=bool) if miss is None else ~miss
        if values.dtype == np.int64:
            steps = values if not odd else values.copy()
        elif values.dtype == np.float64:
            good = np.isfinite(values) & (values == np.floor(values)) & (values >= -(2.0**63)) & (values < 2.0**63)
            steps = np.where(good, values, 0).astype(np.int64)
            for i in np.flatnonzero(ok & ~good).tolist():
                odd[i] = float(values[i])
        else:  # bool or object: one by one
            steps = np.zeros(n, dtype=np.int64)
            for i in np.flatnonzero(ok).tolist():
                odd[i] = values[i].item() if isinstance(values[i], np.generic) else values[i]
        reasons: dict[int, str] = {}
        for i in odd:
            step, why = step_value(odd[i])
            if step is None:
                ok[i] = False
                reasons[i] = why
            else:
                steps[i], ok[i] = step, True
        for j in np.flatnonzero(~ok).tolist():  # in line order
            reason = reasons.get(j)
            if reason is None:
                report.bad_step(int(lines[j]), "row has no step", "row has no step")
            else:
                report.bad_step(int(lines[j]), reason, "step is not an integer")
        return steps, ok

    def _step_key(self, raw: RawBatch) -> str | None:
        """The key of ``raw`` the step is read from (None: the rows are numbered)."""
        stored = self._stored
        return next((k for k in (*raw.numeric, *raw.text)
                     if stored[k].name == "step" and stored[k].kind == "mapped"), None)

    def steps(self, raw: RawBatch, report: ReadReport) -> tuple[np.ndarray, np.ndarray] | None:
        """``(int64 steps, rows that have one)`` of ``raw``, its keys resolved as a scan resolves
        them (``forensics watch`` picks a re-read's new rows with it); None when ``raw`` has no
        step key."""
        self._resolve(raw, report)
        key = self._step_key(raw)
        return None if key is None else self._steps(raw, key, report)

    def __call__(self, raw: RawBatch, report: ReadReport) -> tuple[Batch, np.ndarray]:
        self._resolve(raw, report)
        set_aside = sum(report.values_set_aside.values())
        stored = self._stored
        transforms = self.mapping.transforms
        n = len(raw)
        step_key = self._step_key(raw)
        if self.step_from_rows is None:
            self.step_from_rows = step_key is None
            if self.step_from_rows:
                report.notes.append("no step column: rows are numbered 0, 1, 2, ... in file order")
        columns: dict[str, np.ndarray] = {}
        missing: dict[str, np.ndarray] = {}
        text: dict[str, np.ndarray] = {}
        for key in raw.numeric:
            if key == step_key and not self.step_from_rows:
                continue
            name = stored[key].name
            if name == "step":  # a late step column in a stream numbered by rows
                name = SHADOW_PREFIX + key
            values, miss = self._numeric(raw, key, report)
            if key in transforms:
                values = TRANSFORMS[transforms[key]](values)
            if miss is None or not miss.all():
                self._numeric_keys.add(key)
            if name in _TEXT_METRICS:  # a number where text belongs (a completion "42")
                text[name] = np.array([None if miss is not None and miss[i] else repr(float(v))
                                       for i, v in enumerate(values)], dtype=object)
                continue
            columns[name] = values
            if miss is not None:
                missing[name] = miss
        for key in raw.text:
            if key == step_key and not self.step_from_rows:
                continue
            name = stored[key].name
            if name == "step":
                name = SHADOW_PREFIX + key
            numeric_metric = name in METRICS and name not in _TEXT_METRICS
            if numeric_metric or key in self._numeric_keys:
                if key not in self._text_noted:
                    self._text_noted.add(key)
                    report.notes.append(f"{key}: values stored as text read as numbers (a value that is not "
                                        "one is set aside)")
                values, miss = self._parse_text(raw, key, report)
                if key in transforms:
                    values = TRANSFORMS[transforms[key]](values)
                columns[name], missing[name] = values, miss
            else:
                text[name] = raw.text[key]
        keep = np.ones(n, dtype=bool)
        if self.step_from_rows:
            steps = np.arange(self.next_row_step, self.next_row_step + n, dtype=np.int64)
            self.next_row_step += n
        elif step_key is None:
            steps = np.zeros(n, dtype=np.int64)
            keep[:] = False
            for ln in raw.lines:
                report.bad_step(int(ln), "row has no step", "row has no step")
        else:
            steps, keep = self._steps(raw, step_key, report)
        if sum(report.values_set_aside.values()) != set_aside:
            report.note_values_set_aside()
        batch = Batch(steps=steps, columns=columns, missing=missing, text=text, lines=raw.lines)
        return batch, keep
