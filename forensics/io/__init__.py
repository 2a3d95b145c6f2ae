"""Bytes in: readers of the canonical streams, adapters for the logs trainers write, format
detection, and ``convert`` (any log to the canonical Parquet step stream).

``inputs`` opens what a user points at (gzip by content, a gzip cut short, stdin and pipes read
once to their end, lines of bounded length); ``limits`` holds the bounds on one row (nesting,
digits, line and record length, cells per batch); ``canonical`` is where every value is kept,
parsed or set aside with its line, and every step is an exact int64; ``lean`` keeps the command
line's process to what its input needs (pyarrow without pandas, an exit without teardown)."""
