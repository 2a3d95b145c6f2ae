"""Step ranges in words: one place decides how a finding says where it happened.

A range of one step is "step 100", never "100-100"; a longer one is "steps 101-149". Renderers
that print a range beside a message use :func:`with_span`, which leaves a message that already
states its range alone, so no range is said twice.
"""

from __future__ import annotations

import re

__all__ = ["append_span", "step_span", "with_span"]


def step_span(first: int, last: int) -> str:
    """The range in words.

    >>> step_span(100, 100), step_span(101, 149)
    ('step 100', 'steps 101-149')
    """
    first, last = int(first), int(last)
    return f"step {first}" if first == last else f"steps {first}-{last}"


def with_span(message: str, first: int, last: int) -> str:
    """``message`` with its range in front, unless the message already states that range.

    >>> with_span("KL spiked to 10.3, steps 101-149", 101, 149)
    'KL spiked to 10.3, steps 101-149'
    >>> with_span("gradient norm spiked at step 12", 12, 14)
    'steps 12-14: gradient norm spiked at step 12'
    >>> with_span("learning rate x30 at step 1000", 100, 100)
    'step 100: learning rate x30 at step 1000'
    """
    text = step_span(first, last)
    said = re.search(r"(?<![\w-])" + re.escape(text) + r"(?![\w-])", message)
    return message if said else f"{text}: {message}"


def append_span(head: str, first: int, last: int) -> str:
    """``head, <range>``, unless ``head`` already states the range (a one-step episode at the step
    its peak was named: "KL spiked to 0.8 at step 116", not "... at step 116, step 116").

    >>> append_span("KL spiked at step 116", 116, 116), append_span("KL spiked at step 112", 101, 149)
    ('KL spiked at step 116', 'KL spiked at step 112, steps 101-149')
    """
    return head if with_span(head, first, last) == head else f"{head}, {step_span(first, last)}"
