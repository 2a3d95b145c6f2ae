"""Peers side by side: forensics, rldoctor and rlwatch on the same files (issue 25, item 6).

The peers are installed from the package registry into their own environment (``.venv-peers``,
never a dependency of forensics) and each is run with the command it documents:

* **forensics**: ``forensics scan LOG -o DIR`` (reports included).
* **rldoctor**: ``rl-doctor diagnose LOG --format json`` (a ``.jsonl``/``.json``/``.csv`` log or a
  TensorBoard folder; a TRL run is its ``trainer_state.json``).
* **rlwatch**: it reads no log file: its documented path for a run it did not watch live is its
  manual API (``rlwatch.attach(framework="manual")`` and ``monitor.log_step(step, entropy=...,
  kl_divergence=..., ...)`` per row), then ``rlwatch diagnose --format json``. The replay below
  feeds it the rows of a JSONL log or of a trainer_state.json's ``log_history``, its metric
  names looked up in :data:`RLWATCH_KEYS`; any other format is listed as one it cannot read.

Measured: wall clock and peak memory (the child's maximum resident set, ``wait4``) of each run on
step logs of 1,000, 10,000 and 100,000 rows (JSONL, 20 metrics, the files of ``make bench``), a
10,000-row Parquet and gzip copy (formats a peer may not read); a run is stopped at ``--timeout``
seconds or ``--mem-gb`` GB resident (polled every 50 ms) and listed as killed. On the TRL corpus
(fixtures/trl, labelled by manifest.json) and the real-log corpus (fixtures/real/labels.json; the
logs under ../shared/real-logs/calibration, skipped with a note when absent): a run is *flagged*
when the tool reports at least one finding (alert) of warning or critical severity; faults found
are the faulty runs flagged, false alarms the healthy runs flagged, and runs a tool cannot read
are counted apart (never as found).

Usage: ``python bench/bench_peers.py [--venv .venv-peers] [--sizes N ...] [--timeout S]
[--mem-gb G] [--docs]`` (``--docs`` writes the table into docs/peers.md between its markers).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
TOOLS = ("forensics", "rldoctor", "rlwatch")
PEER_PACKAGES = ("rldoctor", "rlwatch")
MARK_BEGIN, MARK_END = "<!-- bench-peers:begin -->", "<!-- bench-peers:end -->"
#: The docs page that holds the table, relative to the checkout
PAGE = Path("docs") / "peers.md"

#: rlwatch's ``log_step`` fields and the log keys (first present wins) replayed into each.
RLWATCH_KEYS = {
    "entropy": ("entropy", "objective/entropy", "policy/entropy_avg", "actor/entropy"),
    "kl_divergence": ("kl", "objective/kl", "actor/ppo_kl", "actor/kl_loss", "approx_kl"),
    "reward_mean": ("reward_mean", "reward", "objective/scores", "env/reward_mean", "critic/score/mean",
                    "rewards/margins"),
    "reward_std": ("reward_std", "critic/score/std"),
    "advantage_std": ("advantage_std", "critic/advantages/std"),
    "loss": ("loss", "policy_loss", "loss/policy_avg", "actor/pg_loss"),
    "learning_rate": ("learning_rate", "lr", "actor/lr"),
    "clip_fraction": ("clip_frac", "policy/clipfrac_avg", "actor/pg_clipfrac", "clip_ratio/region_mean"),
    "grad_norm": ("grad_norm", "actor/grad_norm"),
}

#: Run in the peers' environment: ``replay LOG`` feeds rlwatch the rows of LOG (exit 3: a format
#: it cannot read).
RLWATCH_REPLAY = r"""
import json, math, sys
from pathlib import Path
keys = json.loads(sys.argv[2])
path = Path(sys.argv[1])
if path.suffix == ".jsonl":
    rows = (json.loads(line) for line in open(path) if line.strip())
elif path.name == "trainer_state.json":
    rows = iter(json.load(open(path)).get("log_history") or [])
else:
    sys.exit(3)
import rlwatch
monitor = rlwatch.attach(framework="manual", run_id="replay")
for i, row in enumerate(rows):
    if not isinstance(row, dict):
        continue
    fields = {}
    for name, aliases in keys.items():
        for key in aliases:
            value = row.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                fields[name] = float(value)
                break
    if fields:
        monitor.log_step(int(row.get("step", i)), **fields)
monitor.stop()
"""


@dataclass
class Outcome:
    """One run of one tool: seconds, peak MB, what it said, or why it has no answer."""

    seconds: float = 0.0
    peak_mb: float = 0.0
    failure: str = ""  # "cannot read", "killed at 6 GB", "timeout after 300 s", "exit 2: ..."
    flagged: bool | None = None
    findings: list[str] = field(default_factory=list)

    def cell(self) -> str:
        if self.failure:
            return self.failure
        return f"{self.seconds:.2f} s, {self.peak_mb:,.0f} MB"


# --- running a child, bounded ----------------------------------------------------------------

def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def measure(cmd: list[str], *, timeout: float, mem_gb: float, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> tuple[Outcome, str]:
    """Run ``cmd``; (its outcome, its stdout). Killed past ``timeout`` seconds or ``mem_gb`` GB."""
    env = env or {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as a user's
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=cwd, env=env, start_new_session=True)
        killed, peak = "", 0.0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, _rss_mb(proc.pid))
            elapsed = time.perf_counter() - t0
            if not killed and peak > mem_gb * 1024:
                killed = f"killed at {mem_gb:g} GB resident after {elapsed:.0f} s"
            elif not killed and elapsed > timeout:
                killed = f"stopped after {timeout:g} s"
            if killed:
                os.killpg(proc.pid, 9)
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        text, why = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    outcome = Outcome(seconds, max(peak, usage.ru_maxrss / 1024), killed)
    if not killed and proc.returncode != 0:
        last = (why.strip().splitlines() or [""])[-1][:160]
        outcome.failure = f"exit {proc.returncode}: {last}"
    return outcome, text


# --- the tools ---------------------------------------------------------------------------------

@dataclass
class Tools:
    venv: Path
    timeout: float
    mem_gb: float

    def run(self, tool: str, log: Path) -> Outcome:
        return {"forensics": self.forensics, "rldoctor": self.rldoctor, "rlwatch": self.rlwatch}[tool](log)

    def forensics(self, log: Path) -> Outcome:
        with tempfile.TemporaryDirectory(prefix="peers-forensics-") as out:
            res, _ = measure([sys.executable, "-m", "forensics", "scan", str(log), "-o", out, "-q"],
                             timeout=self.timeout, mem_gb=self.mem_gb, cwd=ROOT)
            if res.failure.startswith("exit 3"):
                res.failure = "cannot read: " + res.failure.split(": ", 1)[-1]
            if not res.failure:
                findings = json.loads((Path(out) / "analysis.json").read_text())["findings"]
                res.findings = [f["rule"] for f in findings if f["severity"] in ("warning", "critical")]
                res.flagged = bool(res.findings)
        return res

    def rldoctor(self, log: Path) -> Outcome:
        target = log / "trainer_state.json" if (log / "trainer_state.json").is_file() else log
        res, text = measure([str(self.venv / "bin" / "rl-doctor"), "diagnose", str(target), "--format", "json"],
                            timeout=self.timeout, mem_gb=self.mem_gb)
        if res.failure and ("cannot infer format" in res.failure or "could not load" in res.failure):
            res.failure = "cannot read this format"
        if not res.failure:
            findings = json.loads(text)["findings"]
            res.findings = [f["detector"] for f in findings if f["severity"] in ("WARNING", "CRITICAL")]
            res.flagged = bool(res.findings)
        return res

    def rlwatch(self, log: Path) -> Outcome:
        target = log / "trainer_state.json" if (log / "trainer_state.json").is_file() else log
        with tempfile.TemporaryDirectory(prefix="peers-rlwatch-") as work:
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            env["RLWATCH_LOG_DIR"] = str(Path(work) / "logs")
            replay = Path(work) / "replay.py"
            replay.write_text(RLWATCH_REPLAY)
            fed, _ = measure([str(self.venv / "bin" / "python"), str(replay), str(target), json.dumps(RLWATCH_KEYS)],
                             timeout=self.timeout, mem_gb=self.mem_gb, cwd=Path(work), env=env)
            if fed.failure.startswith("exit 3"):
                return Outcome(failure="cannot read log files (this format not replayed)")
            if fed.failure:
                return fed
            diag, text = measure([str(self.venv / "bin" / "rlwatch"), "diagnose", "--log-dir", env["RLWATCH_LOG_DIR"],
                                  "--format", "json"],
                                 timeout=self.timeout, mem_gb=self.mem_gb, cwd=Path(work), env=env)
        if diag.failure:
            return diag
        report = json.loads(text)
        res = Outcome(fed.seconds + diag.seconds, max(fed.peak_mb, diag.peak_mb))
        res.findings = sorted({a.get("detector", "?") for a in report.get("alerts", [])})
        res.flagged = bool(report.get("critical_alerts") or report.get("warning_alerts"))
        return res


def ensure_peers(venv: Path) -> dict[str, str]:
    """The peers' environment (created and filled from the registry when missing): versions."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    missing = subprocess.run([str(python), "-c", "import rldoctor, rlwatch"], capture_output=True).returncode
    if missing:
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PEER_PACKAGES], check=True)
    out = subprocess.run([str(python), "-c", "import importlib.metadata as m, json; print(json.dumps("
                          f"{{p: m.version(p) for p in {PEER_PACKAGES!r}}}))"],
                         capture_output=True, text=True, check=True)
    from forensics import __version__

    return {"forensics": __version__, **json.loads(out.stdout)}


# --- inputs ------------------------------------------------------------------------------------

def size_inputs(sizes: list[int]) -> list[tuple[str, Path]]:
    """(label, file): the step logs of ``make bench`` at each size, and a Parquet and a gzip copy
    of the 10,000-row one."""
    sys.path.insert(0, str(ROOT))
    from bench.bench_scan import Case, prepare

    out = [(f"JSONL {n:,} rows", prepare(Case("step", "jsonl", n))[0]) for n in sizes]
    if 10_000 in sizes:
        out.append(("Parquet 10,000 rows", prepare(Case("step", "parquet", 10_000))[0]))
        gz = DATA / "steps_20m_noepoch_10000.jsonl.gz"
        if not gz.exists():
            import gzip

            gz.write_bytes(gzip.compress(prepare(Case("step", "jsonl", 10_000))[0].read_bytes()))
        out.append(("JSONL.gz 10,000 rows", gz))
    return out


def trl_corpus() -> list[tuple[str, Path, str | None]]:
    """(name, run folder, fault or None) of fixtures/trl."""
    runs = []
    for manifest in sorted((ROOT / "fixtures" / "trl").glob("*/manifest.json")):
        runs.append((manifest.parent.name, manifest.parent, json.loads(manifest.read_text()).get("fault")))
    return runs


def real_corpus() -> tuple[list[tuple[str, Path, str | None]], str]:
    """(name, log, fault or None) of the labelled real logs (unlabelled ones left out), and a note
    when the logs are absent."""
    labels_file = ROOT / "fixtures" / "real" / "labels.json"
    labels = json.loads(labels_file.read_text())
    root = (labels_file.parent / labels["root"]).resolve()
    if not root.is_dir():
        return [], f"real-log corpus skipped: {root} is absent"
    runs = [(r["file"], root / r["file"], r.get("fault")) for r in labels["runs"] if r.get("fault") != "unlabelled"]
    return runs, ""


# --- the tables --------------------------------------------------------------------------------

def size_table(tools: Tools, inputs: list[tuple[str, Path]]) -> list[str]:
    rows = ["| input | " + " | ".join(TOOLS) + " |", "| --- |" + " --- |" * len(TOOLS)]
    for label, path in inputs:
        cells = []
        for tool in TOOLS:
            res = tools.run(tool, path)
            cells.append(res.cell())
            print(f"  {label:24} {tool:10} {res.cell()}", flush=True)
        rows.append(f"| {label} ({path.stat().st_size / 1e6:,.1f} MB) | " + " | ".join(cells) + " |")
    return rows


def corpus_row(tools: Tools, name: str, runs: list[tuple[str, Path, str | None]]) -> list[str]:
    """One line per tool: faults found, false alarms, runs it could not read."""
    faulty = sum(f is not None for _, _, f in runs)
    healthy = len(runs) - faulty
    lines = []
    for tool in TOOLS:
        found = alarms = unread = 0
        for run, path, fault in runs:
            res = tools.run(tool, path)
            print(f"  {name:6} {tool:10} {run:58} {res.failure or ('flagged' if res.flagged else 'quiet')}",
                  flush=True)
            if res.flagged is None:
                unread += 1
            elif res.flagged and fault is not None:
                found += 1
            elif res.flagged:
                alarms += 1
        lines.append(f"| {name} | {tool} | {found} of {faulty} | {alarms} of {healthy} | "
                     f"{unread or '-'} |")
    return lines


def render(versions: dict[str, str], sizes: list[str], corpora: list[str], notes: list[str],
           args: argparse.Namespace) -> str:
    today = datetime.date.today().isoformat()
    head = (f"Measured {today} by `make bench-peers` (bench/bench_peers.py) on this machine "
            f"({os.cpu_count()} cores, shared with other jobs: times move by up to 2x between runs): "
            + ", ".join(f"{k} {v}" for k, v in versions.items())
            + f". Each run is stopped at {args.timeout:g} s or {args.mem_gb:g} GB resident. "
            "Time and peak memory (maximum resident set) of one run, each tool's own outputs included "
            "(forensics: every report, report.html with plotly.js inlined):")
    corpus_head = ("Faults found (faulty runs with at least one warning or critical finding: rldoctor's "
                   "WARNING/CRITICAL findings, rlwatch's warning/critical alerts) and false alarms "
                   "(healthy runs with one), with the command each tool documents; runs a tool cannot "
                   "read are counted apart. The real logs are the corpus forensics' thresholds were "
                   "calibrated on (../shared/real-logs/calibration): its figures there are not out of "
                   "sample; the TRL corpus is written by TRL itself (fixtures/trl):")
    parts = [MARK_BEGIN, head, "", *sizes, "", corpus_head, "",
             "| corpus | tool | faults found | false alarms | cannot read |", "| --- | --- | --- | --- | --- |",
             *corpora, *([""] + [f"- {n}" for n in notes] if notes else []), MARK_END]
    return "\n".join(parts)


def write_page(table: str) -> None:
    page = ROOT / PAGE
    text = page.read_text()
    start, end = text.find(MARK_BEGIN), text.find(MARK_END)
    if start < 0 or end < 0:
        raise SystemExit(f"{PAGE} has no {MARK_BEGIN} ... {MARK_END} markers")
    page.write_text(text[:start] + table + text[end + len(MARK_END):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", type=Path, default=ROOT / ".venv-peers")
    ap.add_argument("--sizes", type=int, nargs="*", default=[1_000, 10_000, 100_000])
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds before a run is stopped")
    ap.add_argument("--mem-gb", type=float, default=6.0, help="resident memory at which a run is killed")
    ap.add_argument("--no-corpora", action="store_true", help="the sizes only")
    ap.add_argument("--docs", action="store_true", help=f"write the table into {PAGE}")
    args = ap.parse_args()
    versions = ensure_peers(args.venv)
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()), flush=True)
    tools = Tools(args.venv, args.timeout, args.mem_gb)
    sizes = size_table(tools, size_inputs(args.sizes))
    corpora: list[str] = []
    notes = ["rlwatch reads no log file: it is fed each row through its documented manual API "
             "(`rlwatch.attach(framework=\"manual\")`, `log_step`) and asked `rlwatch diagnose`; "
             "its time is the two together. Replayed: JSONL and trainer_state.json."]
    if not args.no_corpora:
        corpora += corpus_row(tools, "TRL", trl_corpus())
        real, note = real_corpus()
        corpora += corpus_row(tools, "real", real) if real else []
        notes += [note] if note else []
    table = render(versions, sizes, corpora, notes, args)
    print(table)
    if args.docs:
        write_page(table)
        print(f"wrote the table into {PAGE}")


if __name__ == "__main__":
    main()
