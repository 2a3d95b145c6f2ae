"""Bytes in: readers of the canonical streams, adapters for the logs trainers write, format
detection, and ``convert`` (any log to the canonical Parquet step stream)."""
