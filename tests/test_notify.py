"""Alerts where the team looks: ``watch --notify`` and the callback's ``notify=`` post each alert
to a webhook (a local HTTP server here), in a background thread with retries; a failing endpoint
is reported once."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from forensics.cli import main
from forensics.errors import UsageError
from forensics.live.notify import Notifier, notify_body
from forensics.live.transformers import ForensicsCallback

from .conftest import healthy_rows, write_jsonl

ALERT = {"event": "new", "severity": "critical", "rule": "kl.spike", "onset_step": 300, "first_step": 300,
         "last_step": 304, "message": "KL x6 its baseline", "remedy": "lower the learning rate"}


class Hook:
    """A webhook on 127.0.0.1: records each body; answers ``status`` (a list: one per request,
    the last repeated); ``gate`` (when set) holds every request until it is released."""

    def __init__(self, status: list[int] | None = None) -> None:
        self.bodies: list[dict] = []
        self.auth: list[str | None] = []
        self.status = status or [200]
        self.gate: threading.Event | None = None
        self.arrived = threading.Event()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hook.arrived.set()
                if hook.gate is not None:
                    hook.gate.wait(10)
                code = hook.status[min(len(hook.bodies), len(hook.status) - 1)]
                hook.bodies.append(body)
                hook.auth.append(self.headers.get("Authorization"))
                self.send_response(code)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Hook]:
    h = Hook()
    yield h
    h.close()


def test_the_bodies_suit_json_slack_and_discord() -> None:
    assert notify_body(ALERT, "json", "r1") == {"source": "forensics", "run": "r1", **ALERT}
    slack = notify_body(ALERT, "slack", "r1")
    assert set(slack) == {"text"} and "*new critical finding kl.spike at step 300" in slack["text"]
    assert "-> lower the learning rate" in slack["text"]
    discord = notify_body({**ALERT, "message": "x" * 5000}, "discord")
    assert set(discord) == {"content", "username"} and len(discord["content"]) == 2000


def test_each_alert_is_posted_and_a_bad_url_is_a_usage_error(hook: Hook) -> None:
    n = Notifier(hook.url, "slack", backoff=0.01, timeout=5)
    n.send({**ALERT, "severity": "warning"})
    n.send({**ALERT, "event": "escalated", "severity": "critical"})
    assert n.close(10) is None and n.delivered == 2
    assert [b["text"].split()[1] for b in hook.bodies] == ["*new", "*escalated"]
    for bad in ("ftp://x/y", "not a url", "http://"):
        with pytest.raises(UsageError, match="webhook URL"):
            Notifier(bad)
    with pytest.raises(UsageError, match="known: json, slack, discord"):
        Notifier(hook.url, "teams")


def test_a_failed_post_is_retried_with_back_off(hook: Hook) -> None:
    hook.status = [503, 503, 200]
    n = Notifier(hook.url, backoff=0.01, retries=3)
    n.send(ALERT)
    assert n.close(10) is None and n.delivered == 1 and len(hook.bodies) == 3


def test_a_failing_endpoint_is_reported_once_not_per_alert(hook: Hook) -> None:
    hook.status = [500]
    errors: list[str] = []
    n = Notifier(hook.url, backoff=0.01, retries=1, on_error=errors.append, rule_interval=0)
    for i in range(4):
        n.send({**ALERT, "onset_step": i})
    lost = n.close(10)
    assert len(errors) == 1 and "HTTP 500" in errors[0] and "not reported again" in errors[0]
    assert lost is not None and lost.startswith("4 alert(s) not delivered") and len(hook.bodies) == 8


def test_a_client_error_is_not_retried(hook: Hook) -> None:
    hook.status = [404]
    n = Notifier(hook.url, backoff=0.01, retries=3)
    n.send(ALERT)
    assert n.close(10) is not None and len(hook.bodies) == 1


def test_sending_never_waits_for_the_endpoint(hook: Hook) -> None:
    hook.gate = threading.Event()  # the endpoint holds every request until released
    n = Notifier(hook.url, backoff=0.01, rule_interval=0)
    n.send(ALERT)
    assert hook.arrived.wait(10)  # the first post is in flight, held by the endpoint
    for i in range(5):  # and sending goes on regardless
        n.send({**ALERT, "onset_step": i})
    assert hook.bodies == []
    hook.gate.set()
    assert n.close(10) is None and len(hook.bodies) == 6


def spiky(tmp_path: Path) -> Path:
    rows = healthy_rows(400, seed=3)
    for r in rows[300:308]:  # eight rows: longer than an isolated excursion, so a warning
        r["kl"] *= 6.0
    return write_jsonl(tmp_path / "steps.jsonl", rows)


def test_watch_notify_posts_each_alert(hook: Hook, tmp_path: Path) -> None:
    log = spiky(tmp_path)
    res = CliRunner().invoke(main, ["watch", str(log), "--once", "-q", "--notify", hook.url,
                                    "--notify-format", "discord", "--min-severity", "warning"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert any("kl.spike" in b["content"] for b in hook.bodies)
    assert all(set(b) == {"content", "username"} for b in hook.bodies)
    assert len(hook.bodies) == res.output.count("[step ")


def test_watch_reports_a_dead_endpoint_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import forensics.live.notify as notify

    monkeypatch.setattr(notify, "BACKOFF", 0.01)
    dead = Hook()
    url = dead.url
    dead.close()  # nothing listens there now: connection refused
    log = spiky(tmp_path)
    res = CliRunner().invoke(main, ["watch", str(log), "--once", "-q", "--notify", url],
                             catch_exceptions=False)
    # not one alert arrived: the watch fails loudly (exit 3), after saying so once
    assert res.exit_code == 3, res.output
    assert res.output.count("cannot deliver alerts") == 1 and "alert(s) not delivered" in res.output
    assert "alert(s) could be delivered to" in res.output


def test_a_channel_gets_one_alert_per_finding_and_rise_and_each_remedy_once(hook: Hook) -> None:
    """A rule posts at most once per interval unless its severity rises; its remedy goes out once."""
    now = [0.0]
    warn = {**ALERT, "severity": "warning"}
    n = Notifier(hook.url, backoff=0.01, rule_interval=60.0, clock=lambda: now[0])
    n.send(warn)                                                      # new: posted, with its remedy
    for i in range(5):                                                # the same rule again and again
        n.send({**warn, "event": "escalated", "onset_step": 200 + i})
    n.send({**warn, "event": "escalated", "severity": "critical"})    # a rise: posted, remedy not repeated
    now[0] = 120.0
    n.send({**warn, "event": "escalated", "onset_step": 300})          # a later one, past the interval
    assert n.close(10) is None and n.delivered == 3 and n.suppressed == 5
    assert [b.get("severity") for b in hook.bodies] == ["warning", "critical", "warning"]
    assert hook.bodies[0]["remedy"] and not hook.bodies[1]["remedy"] and hook.bodies[1]["remedy_posted"]
    slack = notify_body({**ALERT, "remedy": "", "remedy_posted": True}, "slack")
    assert "the remedy posted with its first alert stands" in slack["text"]


def test_watch_posts_a_finding_once_and_its_rises(hook: Hook, tmp_path: Path) -> None:
    """A KL that keeps spiking in new episodes is one alert on the channel (the terminal and
    --jsonl still list each episode)."""
    rows = healthy_rows(400, seed=3)
    for start in (150, 220, 300):
        for r in rows[start:start + 8]:
            r["kl"] *= 6.0
    from forensics.analysis.findings import Severity
    from forensics.live.watch import Watcher

    log = write_jsonl(tmp_path / "steps.jsonl", rows[:200])
    jsonl = tmp_path / "alerts.jsonl"
    w = Watcher(log, echo=lambda s: None, min_severity=Severity.WARNING, jsonl=jsonl,
                notify=Notifier(hook.url, backoff=0.01), batch_rows=1)
    w.poll()
    for a, b in ((200, 280), (280, 400)):  # the log grows: each poll sees a new spike episode
        with open(log, "a") as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in rows[a:b]))
        w.poll()
    assert w.notify is not None and w.notify.close(10) is None
    posted = [b["rule"] for b in hook.bodies if b["rule"] == "kl.spike"]
    written = [x for x in jsonl.read_text().splitlines() if '"kl.spike"' in x]
    assert len(posted) == 1 and len(written) >= 2, (posted, len(written))


def test_the_trainer_callback_notifies(hook: Hook, tmp_path: Path) -> None:
    args = SimpleNamespace(output_dir=str(tmp_path), run_name="t")
    state = SimpleNamespace(global_step=0, is_world_process_zero=True)
    control = SimpleNamespace()
    cb = ForensicsCallback(check_every=25, notify=hook.url, report_to=())
    cb.on_train_begin(args, state, control)
    rows = healthy_rows(400, seed=3)
    for r in rows[300:308]:  # eight rows: longer than an isolated excursion, so a warning
        r["kl"] *= 6.0
    for i, r in enumerate(rows):
        state.global_step = i + 1
        cb.on_log(args, state, control, logs={"loss": 0.1, "grad_norm": r["grad_norm"], "kl": r["kl"],
                                              "reward": r["reward_mean"], "learning_rate": 1e-6})
    cb.on_train_end(args, state, control)
    assert len(hook.bodies) == len(cb.alerts) > 0
    assert any(b["rule"] == "kl.spike" and b["source"] == "forensics" for b in hook.bodies)


def test_the_documented_notify_example_posts_to_a_webhook(hook: Hook, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The `watch --notify` line of docs/live.md, its URL pointed at the local server (and --once:
    the example follows a live run until Ctrl-C)."""
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "live.md").read_text()
    (line,) = [ln for ln in re.findall(r"^forensics watch .*--notify .*$", text, flags=re.M)]
    argv = [hook.url if a.startswith("https://") else a for a in line.split()[1:]]
    folder = tmp_path / "runs" / "my-run"
    folder.mkdir(parents=True)
    spiky(folder)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, [*argv, "--once", "-q"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert hook.bodies and all(set(b) == {"text"} for b in hook.bodies)


MALFORMED = ("http://a b/hook", "http://host/hook\r\nX-Injected: 1", "http://[::1/hook", "http://host:port/hook",
             "http://host:99999/hook", "http:///hook", "https://alice:pw@/hook")


@pytest.mark.parametrize("url", MALFORMED)
def test_a_malformed_url_is_refused_at_start_without_printing_it(url: str, tmp_path: Path) -> None:
    """Each of these killed the sending thread (alerts lost, uncounted); now a usage error at
    start (exit 2) that names the URL by scheme and host only."""
    with pytest.raises(UsageError, match="webhook URL") as err:
        Notifier(url)
    assert "pw" not in str(err.value) and "/hook" not in str(err.value)
    res = CliRunner().invoke(main, ["watch", str(spiky(tmp_path)), "--once", "-q", "--notify", url])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output


def test_a_webhook_url_is_a_secret_and_its_userinfo_is_basic_auth(hook: Hook) -> None:
    """Password, path token and query token never appear in a message; user:password is sent as
    basic auth (urllib took it for part of the host and sent nothing)."""
    secret = hook.url.replace("http://", "http://alice:s3cret@") + "/T0SECRETPATH?token=QTOKEN"
    n = Notifier(secret, timeout=5)
    n.send(ALERT)
    assert n.close(10) is None and n.delivered == 1
    assert hook.auth == ["Basic " + base64.b64encode(b"alice:s3cret").decode()]
    hook.status = [500]
    lines: list[str] = []
    n = Notifier(secret, backoff=0.01, retries=1, on_error=lines.append)
    n.send(ALERT)
    lines.append(n.close(10) or "")
    text = "\n".join(lines)
    assert "cannot deliver alerts to http://127.0.0.1:" in text and "not delivered to http://127.0.0.1:" in text
    for leaked in ("alice", "s3cret", "SECRETPATH", "QTOKEN", "/hook"):
        assert leaked not in text, text


def test_an_endless_answer_is_read_no_further_than_a_few_kilobytes() -> None:
    """An endpoint that answers without end: the post is delivered (the answer is cut after
    ``ANSWER_LIMIT`` bytes), never read whole."""

    class Endless(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.end_headers()  # no length: the body ends when the connection does
            try:
                while True:
                    self.wfile.write(b"x" * 65536)
            except OSError:
                pass

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        n = Notifier(f"http://127.0.0.1:{server.server_address[1]}/", timeout=5)
        n.send(ALERT)
        assert n.close(10) is None and n.delivered == 1
    finally:
        server.shutdown()
        server.server_close()


def test_an_error_in_a_post_never_ends_the_sender(hook: Hook, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever one post raises, the thread goes on: the alert is counted failed, the next sent."""
    import forensics.live.notify as notify

    real = notify.notify_body
    calls = iter([RuntimeError("boom"), None])

    def flaky(alert: dict, fmt: str = "json", run: str = "") -> dict:
        exc = next(calls, None)
        if exc is not None:
            raise exc
        return real(alert, fmt, run)

    n = Notifier(hook.url, timeout=5)
    monkeypatch.setattr(notify, "notify_body", flaky)
    n.send(ALERT)
    n.send({**ALERT, "rule": "grad.spike"})
    assert n.close(10) is not None and (n.failed, n.delivered) == (1, 1) and len(hook.bodies) == 1
