"""Bounds on what one row of input may hold, so that hostile or broken input cannot crash,
hang or exhaust a scan. A row past a bound is skipped and reported (file, line, which bound),
never a crash; the bounds are far above anything a trainer writes.

* :data:`MAX_DEPTH`: JSON nesting depth of a row. pyarrow's JSON reader overflows its stack on
  about 20,000 levels (SIGSEGV) and Python's ``json`` raises ``RecursionError`` near 1,000;
  loggers nest a few levels (W&B histograms: 3).
* :data:`MAX_NUMBER_DIGITS`: digits of one number. Python refuses to turn a longer digit string
  into an ``int`` (its 4,300-digit guard against quadratic conversion).
* :data:`MAX_LINE_BYTES`: bytes of one line of a text log (a JSONL row, a console line); a longer
  line is skipped without being held in memory.
* :data:`MAX_RECORD_BYTES`: bytes of one TensorBoard record; a record header that claims more,
  or more than the rest of the file, is a corrupt or truncated record.
* :data:`MAX_ROW_KEYS`: keys of one row (a JSONL object). A row of a million keys would cost
  gigabytes as columns; trainers log hundreds.
* :data:`MAX_KEY_BYTES`: bytes of one key or tag name (a TensorBoard tag); names are tens of
  bytes, and a name is held once per row it appears in.
* :data:`MAX_HEAD_BYTES`: how far format detection reads to see one whole first line.
* :data:`CELL_BUDGET`: rows x columns of one raw batch. A log whose rows keep adding keys would
  otherwise cost rows x keys (quadratic); batches are cut so that each holds at most about this
  many cells, which keeps the cost per row bounded.
"""

from __future__ import annotations

__all__ = ["CELL_BUDGET", "MAX_DEPTH", "MAX_HEAD_BYTES", "MAX_KEY_BYTES", "MAX_LINE_BYTES", "MAX_NUMBER_DIGITS",
           "MAX_RECORD_BYTES", "MAX_ROW_KEYS", "STEP_MAX", "STEP_MIN"]

MAX_DEPTH = 256
MAX_NUMBER_DIGITS = 4300
MAX_LINE_BYTES = 64 << 20
MAX_RECORD_BYTES = 256 << 20
MAX_HEAD_BYTES = 1 << 20
MAX_ROW_KEYS = 1 << 14
MAX_KEY_BYTES = 1 << 16
CELL_BUDGET = 1 << 22

#: Steps are int64: the exact range a step may take.
STEP_MIN, STEP_MAX = -(2**63), 2**63 - 1
