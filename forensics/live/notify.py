"""Alerts where the team looks: each new or escalated finding posted to a webhook.

``forensics watch --notify URL`` and the trainer callback's ``notify=`` post every alert (the
dict ``forensics watch --jsonl`` writes) as JSON to ``URL``. The body suits the receiver
(``--notify-format``):

* ``json``: the alert itself, with ``source`` and ``run`` added (any webhook that takes JSON);
* ``slack``: ``{"text": ...}``, the body of a Slack incoming webhook (mrkdwn);
* ``discord``: ``{"content": ..., "username": "forensics"}``, a Discord webhook's body (at
  most 2,000 characters).

Posting never blocks the caller: :meth:`Notifier.send` puts the alert on a queue that one
background thread empties (standard library only: ``urllib``). A failed post is retried with
exponential back-off (a 4xx answer other than 408 and 429 is not retried: the request itself is
wrong); an alert that still cannot be delivered is counted, and the first such failure is
reported once through ``on_error``, never once per alert. :meth:`Notifier.close` waits a bounded
time for what is queued and reports how many alerts were not delivered.

A channel can bear what it gets: a rule's remedy is posted once (its later alerts say it stands),
and a rule posts at most once per ``rule_interval`` seconds, a rise in severity excepted (the
alerts held back are counted: ``suppressed``). :attr:`Notifier.none_delivered` says that alerts
were sent and not one arrived: ``forensics watch`` then fails (exit 3, documented).
"""

from __future__ import annotations

import base64
import http.client
import json
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from ..errors import UsageError

__all__ = ["NOTIFY_FORMATS", "Notifier", "notify_body", "shown_url"]

#: Bodies :func:`notify_body` writes (``--notify-format``).
NOTIFY_FORMATS = ("json", "slack", "discord")

#: Seconds before the first retry of a failed post (doubled for each further one).
BACKOFF = 1.0

#: Alerts held at most while the endpoint is slow; beyond it the oldest are dropped (and counted).
QUEUE_SIZE = 1000
#: Seconds between two alerts of one rule (a rise in severity always goes out).
RULE_INTERVAL = 60.0

_ICON = {"critical": ":red_circle:", "warning": ":warning:", "info": ":information_source:"}
_DISCORD_LIMIT = 2000
#: Bytes read at most of an endpoint's answer (its body is never used; an endless one is cut).
ANSWER_LIMIT = 4096


def _headline(alert: dict[str, Any], run: str) -> str:
    what = "escalated" if alert.get("event") == "escalated" else "new"
    steps = f"steps {alert.get('first_step')}-{alert.get('last_step')}"
    return (f"{what} {alert.get('severity', '?')} finding {alert.get('rule', '?')} at step "
            f"{alert.get('onset_step', '?')} ({steps})" + (f" in {run}" if run else ""))


def notify_body(alert: dict[str, Any], fmt: str = "json", run: str = "") -> dict[str, Any]:
    """The JSON body posted for ``alert`` in format ``fmt`` (see the module doc).

    >>> a = {"event": "new", "severity": "critical", "rule": "kl.spike", "onset_step": 120,
    ...      "first_step": 118, "last_step": 124, "message": "KL x5", "remedy": "lower the lr"}
    >>> notify_body(a, "slack", "run-7")["text"].splitlines()[0]
    ':red_circle: *new critical finding kl.spike at step 120 (steps 118-124) in run-7*'
    >>> notify_body(a, "discord")["content"].splitlines()[1]
    'KL x5'
    >>> notify_body(a, "json", "run-7")["rule"], notify_body(a, "json")["source"]
    ('kl.spike', 'forensics')
    """
    if fmt not in NOTIFY_FORMATS:
        raise UsageError(f"unknown notify format {fmt!r}; known: {', '.join(NOTIFY_FORMATS)}")
    if fmt == "json":
        return {"source": "forensics", "run": run, **alert}
    remedy = (f"\n-> {alert['remedy']}" if alert.get("severity") != "info" and alert.get("remedy") else
              "\n-> the remedy posted with its first alert stands" if alert.get("remedy_posted") else "")
    if fmt == "slack":
        icon = _ICON.get(str(alert.get("severity")), "")
        return {"text": f"{icon} *{_headline(alert, run)}*\n{alert.get('message', '')}{remedy}"}
    text = f"**{_headline(alert, run)}**\n{alert.get('message', '')}{remedy}"
    if len(text) > _DISCORD_LIMIT:
        text = text[: _DISCORD_LIMIT - 3] + "..."
    return {"content": text, "username": "forensics"}


def check_url(url: str) -> str:
    """``url`` when it is an http(s) URL with a host, else a :class:`UsageError` (at start, so
    that a malformed URL never reaches the sending thread). The error names the URL as
    :func:`shown_url` does: a webhook URL is a credential."""
    try:
        if not isinstance(url, str):
            raise ValueError
        parts = urllib.parse.urlsplit(url)
        _ = parts.port  # a port that is not a number (or out of range) raises here
        host = parts.hostname
    except ValueError:
        parts, host = None, None
    if parts is None or parts.scheme not in ("http", "https") or not host:
        raise UsageError(f"--notify {shown_url(url)}: expected an http:// or https:// webhook URL")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise UsageError(f"--notify {shown_url(url)}: a webhook URL holds no spaces or control characters "
                         "(encode them: %20)")
    return url


def shown_url(url: object) -> str:
    """The part of a webhook URL that may be printed: scheme and host (and port). Its user and
    password, path (a Slack webhook's path is its token) and query are secrets.

    >>> shown_url("https://alice:pw@hooks.example.com/services/T0/B0/XyZ?token=1")
    'https://hooks.example.com/...'
    """
    try:
        parts = urllib.parse.urlsplit(str(url))
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "(a malformed URL)"
    if not parts.scheme or not host:
        return "(a malformed URL)"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}{port}/..."


def _split_credentials(url: str) -> tuple[str, str | None]:
    """``url`` without its ``user:password@`` and the basic-auth header those make (None when the
    URL has none): urllib takes userinfo for part of the host and sends nothing."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    netloc = parts.netloc.rpartition("@")[2]
    pair = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
    auth = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), auth


class Notifier:
    """Posts alerts to ``url`` from a background thread (see the module doc).

    ``retries`` further tries after the first, ``backoff`` seconds before the first retry
    (doubled each time), ``timeout`` seconds per request. ``on_error`` receives one line the
    first time an alert cannot be delivered (after its retries). ``delivered`` and ``failed``
    count alerts.
    """

    def __init__(self, url: str, fmt: str = "json", *, run: str = "", retries: int = 3,
                 backoff: float | None = None, timeout: float = 10.0,
                 on_error: Callable[[str], None] | None = None, rule_interval: float = RULE_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.url = check_url(url)
        #: where the posts go (the URL less its credentials) and the basic-auth header they make
        self._target, self._auth = _split_credentials(url)
        #: the URL as messages name it (scheme and host: the rest is a secret)
        self.shown = shown_url(url)
        notify_body({}, fmt)  # an unknown format is an error now, not in the thread
        self.fmt = fmt
        self.run = run
        self.retries = max(0, int(retries))
        self.backoff = BACKOFF if backoff is None else backoff
        self.timeout = timeout
        self.on_error = on_error
        self.delivered = 0
        self.failed = 0
        self.dropped = 0
        self.suppressed = 0
        self.rule_interval = rule_interval
        self.clock = clock
        #: rule -> (when it last posted, the severity rank it posted, whether its remedy went out)
        self._posted: dict[str, tuple[float, int, bool]] = {}
        self.reported = False
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(QUEUE_SIZE)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def none_delivered(self) -> bool:
        """Alerts were sent and not one was delivered (read after :meth:`close`)."""
        return self.delivered == 0 and (self.failed + self.dropped) > 0

    def _admit(self, alert: dict[str, Any]) -> dict[str, Any] | None:
        """The alert as it goes out, or None when its rule posted within ``rule_interval`` and its
        severity did not rise; a remedy already posted for the rule is not posted again."""
        rule = str(alert.get("rule", ""))
        rank = {"info": 0, "warning": 1, "critical": 2}.get(str(alert.get("severity")), 0)
        now = self.clock()
        last = self._posted.get(rule)
        rose = last is not None and (rank > last[1] or alert.get("why") == "severity")
        if last is not None and not rose and now - last[0] < self.rule_interval:
            self.suppressed += 1
            return None
        remedy_sent = last is not None and last[2]
        self._posted[rule] = (now, max(rank, last[1] if last else 0), remedy_sent or bool(alert.get("remedy")))
        if remedy_sent and alert.get("remedy"):
            alert = {**alert, "remedy": "", "remedy_posted": True}
        return alert

    def send(self, alert: dict[str, Any]) -> None:
        """Queue ``alert`` for posting; returns at once (the oldest alert is dropped when the
        queue is full; an alert of a rule that posted within ``rule_interval`` is held back)."""
        admitted = self._admit(alert)
        if admitted is None:
            return
        alert = admitted
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="forensics-notify", daemon=True)
                self._thread.start()
        while True:
            try:
                self._queue.put_nowait(alert)
                return
            except queue.Full:
                try:
                    self._queue.get_nowait()
                    self.dropped += 1
                except queue.Empty:
                    pass

    def close(self, timeout: float = 10.0) -> str | None:
        """Wait at most ``timeout`` seconds for the queued alerts; a line saying how many could
        not be delivered (None when every one was)."""
        if self._thread is not None:
            try:
                self._queue.put(None, timeout=timeout)
            except queue.Full:
                pass
            self._thread.join(timeout)
        pending = 0
        if self._thread is not None and self._thread.is_alive():
            pending = self._queue.qsize()
        else:
            self._thread = None  # a later send starts a new thread
        lost = self.failed + self.dropped + pending
        held = (f"; {self.suppressed} held back by the per-rule limit ({self.rule_interval:g} s)"
                if self.suppressed else "")
        if not lost:
            return None
        return (f"{lost} alert(s) not delivered to {self.shown} ({self.failed} failed, {self.dropped} dropped, "
                f"{pending} still queued); {self.delivered} delivered{held}")

    # -- the background thread ------------------------------------------------------------
    def _work(self) -> None:
        while (alert := self._queue.get()) is not None:
            try:
                error = self._post(alert)
            except Exception as exc:  # the thread must outlive any one alert
                error = f"{type(exc).__name__}: {exc}"
            error = None if error is None else self._redact(error)
            if error is None:
                self.delivered += 1
                continue
            self.failed += 1
            if not self.reported:
                self.reported = True
                if self.on_error is not None:
                    self.on_error(f"cannot deliver alerts to {self.shown}: {error} (after {self.retries + 1} "
                                  "tries; later failures are not reported again, the count comes at the end)")

    def _post(self, alert: dict[str, Any]) -> str | None:
        """Post one alert with retries; None on success, else the last error."""
        data = json.dumps(notify_body(alert, self.fmt, self.run), default=str).encode("utf-8")
        error = "not tried"
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            headers = {"Content-Type": "application/json", "User-Agent": "forensics"}
            if self._auth is not None:
                headers["Authorization"] = self._auth
            request = urllib.request.Request(self._target, data=data, method="POST", headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    response.read(ANSWER_LIMIT)
                return None
            except urllib.error.HTTPError as exc:
                error = f"HTTP {exc.code} {exc.reason}"
                if 400 <= exc.code < 500 and exc.code not in (408, 429):
                    return error
            except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
                error = str(getattr(exc, "reason", None) or exc) or type(exc).__name__
        return error

    def _redact(self, text: str) -> str:
        """``text`` with the URL (and its credentials) replaced by :attr:`shown`."""
        for whole in (self.url, self._target):
            text = text.replace(whole, self.shown)
        parts = urllib.parse.urlsplit(self.url)
        for secret in (parts.password, parts.path if len(parts.path) > 1 else None, parts.query):
            if secret:
                text = text.replace(secret, "...")
        return text
