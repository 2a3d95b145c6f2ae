"""Webhook URLs as a careless or hostile user types them, against ``watch --notify``.

Families: a URL with a space, a control character or a CR LF (header injection), an unclosed
IPv6 bracket, a port that is not a number or out of range, no host, a scheme that is not http(s),
each with and without credentials: every one a usage error at start (exit 2), never a sending
thread that dies with the alerts uncounted.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from .case import Case

__all__ = ["generate"]

_BROKEN_HOSTS = ["a b", "host\r\nX-Injected: 1", "[::1", "host:port", "host:99999", "", "host\t", "ho\x00st",
                 "host:-1", "[::1]:x"]
_SCHEMES = ["http", "https", "ftp", "file", "javascript", "htttp"]


def _log() -> bytes:
    return "".join(json.dumps({"step": i, "loss": 1.0 - i / 100, "kl": 0.01, "reward": i / 100}) + "\n"
                   for i in range(30)).encode()


def generate(rng: random.Random, n: int) -> Iterator[Case]:
    """``n`` malformed webhook URLs, each refused at start (exit 2)."""
    log = _log()
    for i in range(n):
        if i % 4 == 3:  # a well-formed host under a scheme that does not post
            url = f"{rng.choice(_SCHEMES[2:])}://hooks.example.com/T0/B0/secret"
        else:
            creds = rng.choice(["", "alice:pw@", "user@", ":pw@"])
            scheme = rng.choice(_SCHEMES[:2])
            url = f"{scheme}://{creds}{rng.choice(_BROKEN_HOSTS)}/services/T0/{rng.randint(0, 10**6)}?token=x"
        yield Case(f"webhooks:malformed#{i}", {"steps.jsonl": log},
                   ("watch", "{dir}/steps.jsonl", "--once", "-q", "--notify", url), expect_exit=2)
