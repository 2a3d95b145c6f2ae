"""Command line: parse, load config, call the library, render, exit.

Exit codes (the contract; see README):

* 0 - success: the scan ran (whatever it found); the gate passed.
* 1 - the gate failed (``forensics gate``, ``forensics diff`` as a regression gate).
* 2 - usage error: bad option, unknown format, invalid config file.
* 3 - input unreadable or invalid: missing file, unknown content, no usable rows, a malformed
  row under ``--strict``.

Only this module turns errors into exit codes; no traceback reaches a user (set
``FORENSICS_DEBUG=1`` to see one).
"""

from __future__ import annotations

import dataclasses
import json
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from . import __version__
from .config import (
    DIFF_TOLERANCE,
    Allowed,
    Config,
    RunMeta,
    allowed_of,
    load_config,
    run_field,
    scan_option,
    show_value,
)
from .errors import ConfigError, ForensicsError
from .io.output import Outputs

EXIT_OK, EXIT_GATE_FAILED, EXIT_USAGE, EXIT_INPUT = 0, 1, 2, 3

#: ``scan --metrics`` (forensics.report.files.METRICS_FORMATS, not imported: --help stays light).
METRICS_CHOICES = ("auto", "csv", "parquet", "both")


class Checked(click.ParamType):
    """A command-line number checked against the same schema as its config-file twin
    (:class:`forensics.config.Allowed`): ``--kl-target nan`` is refused like ``kl_target = nan``."""

    def __init__(self, allowed: Allowed) -> None:
        self.allowed = dataclasses.replace(allowed, optional=False)  # an option left out is unset
        self.name = "integer" if allowed.type is int else "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            try:
                value = int(value) if self.allowed.type is int else float(value)
            except ValueError:
                self.fail(f"{show_value(value)} is not {self.allowed.describe()}", param, ctx)
        try:
            return self.allowed.check(value, "value")
        except ConfigError:
            self.fail(f"{show_value(value)} is not {self.allowed.describe()}", param, ctx)


class _Group(click.Group):
    """Maps library errors to exit codes and hides tracebacks."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ForensicsError as exc:
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(130)
        except Exception as exc:
            if os.environ.get("FORENSICS_DEBUG"):
                traceback.print_exc()
            click.echo(f"Error: internal error while processing the input: {type(exc).__name__}: "
                       f"{exc} (set FORENSICS_DEBUG=1 for a traceback; please report it)", err=True)
            ctx.exit(EXIT_INPUT)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="forensics")
def main() -> None:
    """Find what went wrong in an RL/RLHF training run, where, and what to change.

    Exit codes: 0 success, 1 gate failed, 2 usage error, 3 input unreadable or invalid.
    """


def scan_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Options shared by every command that scans logs."""
    opts = [
        click.option("--samples", type=click.Path(path_type=Path),
                     help="Per-response sample stream (JSONL or Parquet)."),
        click.option("--meta", type=click.Path(path_type=Path),
                     help="Run metadata JSON (default: run.json beside steps.*)."),
        click.option("--config", "config_path", type=click.Path(path_type=Path),
                     help="TOML config: [run] metadata, tracker parameters, [scan] options."),
        click.option("--format", "fmt", help="Input format (default: detected from content)."),
        click.option("--kl-target", type=Checked(run_field("kl_target")),
                     help="Target KL (in the unit of --kl-unit)."),
        click.option("--kl-unit", type=click.Choice(["token", "sequence"]),
                     help="Unit of --kl-target (default token)."),
        click.option("--strict", is_flag=True, help="A malformed row is fatal (exit 3)."),
        click.option("--batch-rows", type=Checked(scan_option("batch_rows")),
                     help="Rows per batch (memory is bounded by the batch)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def build_config(config_path: Path | None, kl_target: float | None, kl_unit: str | None,
                 strict: bool, batch_rows: int | None) -> Config:
    cfg = load_config(config_path)
    overrides: dict[str, Any] = {}
    if kl_target is not None:
        overrides["kl_target"] = kl_target
    if kl_unit is not None:
        overrides["kl_target_unit"] = kl_unit
    if overrides:
        cfg.run = cfg.run.merged(RunMeta(**overrides))
    cfg.strict = strict or cfg.strict
    if batch_rows:
        cfg.batch_rows = batch_rows
    return cfg


def _inputs(*paths: Path | None) -> Outputs:
    """Where this command may write: never over one of ``paths`` (see forensics.io.output)."""
    return Outputs(paths)


def run_scan(path: Path, samples: Path | None, meta: Path | None, config_path: Path | None,
             fmt: str | None, kl_target: float | None, kl_unit: str | None, strict: bool,
             batch_rows: int | None, show_progress: bool = True):  # type: ignore[no-untyped-def]
    from .analysis.engine import run_inputs, scan_path
    from .progress import scan_progress

    cfg = build_config(config_path, kl_target, kl_unit, strict, batch_rows)
    tick, done = scan_progress(run_inputs(path, samples), enabled=show_progress)
    try:
        return scan_path(path, samples=samples, meta=meta, config=cfg, fmt=fmt, progress=tick)
    finally:
        done()


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=Path("reports"),
              show_default=True, help="Folder for analysis.json, summary.json, metrics.csv (or "
              "metrics.parquet), findings.csv and the reports.")
@scan_options
@click.option("--top", type=click.IntRange(min=0), default=8, show_default=True,
              help="Findings shown in the terminal summary.")
@click.option("--metrics", "metrics_fmt", type=click.Choice(METRICS_CHOICES), default="auto",
              show_default=True, help="The per-step table: metrics.csv up to 100,000 steps and "
              "metrics.parquet above (auto), or csv, parquet or both.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the paths written (no progress).")
@click.option("--plotly-js", "plotly_js", type=click.Choice(["inline", "file"]), default="inline",
              show_default=True, help="inline: report.html is one self-contained file (~5 MB); "
              "file: plotly.min.js is written once per folder and report.html refers to it.")
def scan(path: Path, out_dir: Path, samples: Path | None, meta: Path | None,
         config_path: Path | None, fmt: str | None, kl_target: float | None,
         kl_unit: str | None, strict: bool, batch_rows: int | None, top: int,
         metrics_fmt: str, quiet: bool, plotly_js: str) -> None:
    """Scan a step log (file or run folder) and write reports.

    PATH is a steps.jsonl / steps.parquet file, any supported trainer log, or a run folder with
    steps.*, samples.* and run.json.
    """
    from .report import render_summary, write_reports
    from .report.files import REPORT_FILES

    outputs = _inputs(None if path.is_dir() else path, samples, meta, config_path)
    for name in REPORT_FILES:  # refuse before a long scan; checked again with the files it read
        outputs.check(out_dir / name)
    analysis = run_scan(path, samples, meta, config_path, fmt, kl_target, kl_unit, strict,
                        batch_rows, show_progress=not quiet)
    paths = write_reports(analysis, out_dir, script=plotly_js, metrics=metrics_fmt, outputs=outputs)
    if not quiet:
        click.echo(render_summary(analysis, top=top))
        click.echo("")
    click.echo("wrote " + ", ".join(str(p) for p in paths.values()))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--markdown", is_flag=True, help="The catalogue as Markdown (docs/rules.md).")
@click.option("--metrics", is_flag=True, help="List the canonical metric names instead.")
def rules(as_json: bool, markdown: bool, metrics: bool) -> None:
    """List every rule, and every tracker parameter with its default and meaning."""
    from .analysis.trackers import TRACKERS, all_rules, param_rows

    if metrics:
        from .schema import METRICS

        for m in METRICS.values():
            used = ", ".join(m.trackers) or "-"
            click.echo(f"{m.name:<24} [{m.stream}] {m.unit:<14} {m.meaning}  (read by: {used})")
        return

    if markdown:
        from .analysis.catalogue import rules_markdown

        click.echo(rules_markdown(), nl=False)
        return

    if as_json:
        data = {
            "rules": [
                {"id": r.id, "tracker": t, "severity": r.severity.value, "title": r.title,
                 "explanation": r.explanation, "remedy": r.remedy, "params": list(r.params),
                 "source": r.source}
                for t, r in all_rules()  # type: ignore[attr-defined]
            ],
            "params": {name: [{"name": n, "default": d, "doc": doc, "allowed": allowed}
                              for n, d, doc, allowed in param_rows(name)]
                       for name in TRACKERS},
            "run": [{"name": f.name, "doc": f.metadata.get("doc", ""),
                     "allowed": allowed_of(f).describe()} for f in dataclasses.fields(RunMeta)],
        }
        click.echo(json.dumps(data, indent=2))
        return
    by_tracker: dict[str, list[Any]] = {}
    for tracker, r in all_rules():
        by_tracker.setdefault(tracker, []).append(r)
    for tracker in [*TRACKERS, *[t for t in by_tracker if t not in TRACKERS]]:
        click.echo(f"\n== {tracker} ==")
        cls = TRACKERS.get(tracker)
        if cls is not None:
            click.echo(f"   parameters ([{tracker}] in a --config TOML file):")
            for n, d, doc, allowed in param_rows(tracker):
                click.echo(f"     {n} = {d!r}  - {doc} (allowed: {allowed})")
        for r in by_tracker.get(tracker, []):
            click.echo(f"  {r.id}  [{r.severity.value}]  {r.title}")
            click.echo(f"      {r.explanation}")
            click.echo(f"      remedy: {r.remedy}")
    click.echo("\n== run metadata ([run] in a config file, or run.json) ==")
    for f in dataclasses.fields(RunMeta):
        click.echo(f"  {f.name}  - {f.metadata.get('doc', '')} (allowed: {allowed_of(f).describe()})")




# --- report, gate, diff ------------------------------------------------------------------

def _scan_options_for_output_format(f: Callable[..., Any]) -> Callable[..., Any]:
    """``scan_options`` with the input format renamed ``--input-format``: these commands'
    ``--format`` chooses the output."""
    f = scan_options(f)
    f.__click_params__ = [p for p in f.__click_params__ if p.name != "fmt"]  # type: ignore[attr-defined]
    return click.option("--input-format", "fmt",
                        help="Input log format (default: detected from content).")(f)


def _analysis_dict(path: Path, samples: Path | None, meta: Path | None, config_path: Path | None,
                   fmt: str | None, kl_target: float | None, kl_unit: str | None, strict: bool,
                   batch_rows: int | None) -> dict[str, Any]:
    """A saved analysis (analysis.json, or a report folder holding one), or a fresh scan of logs."""
    from .verdicts.diff import is_saved_analysis
    from .verdicts.saved import load_analysis

    if is_saved_analysis(path):
        return load_analysis(path / "analysis.json" if path.is_dir() else path)
    return run_scan(path, samples, meta, config_path, fmt, kl_target, kl_unit, strict,
                    batch_rows).to_dict()


@main.command()
@click.argument("analysis_path", metavar="ANALYSIS.json", type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path),
              help="Folder for report.html / report.md (default: beside ANALYSIS.json).")
@click.option("--format", "out_fmt", type=click.Choice(["html", "md", "both"]), default="both",
              show_default=True, help="What to render.")
@click.option("--plotly-js", "plotly_js", type=click.Choice(["inline", "file"]), default="inline",
              show_default=True, help="inline: report.html is one self-contained file (~5 MB); "
              "file: plotly.min.js is written once per folder and report.html refers to it.")
def report(analysis_path: Path, out_dir: Path | None, out_fmt: str, plotly_js: str) -> None:
    """Render report.html and report.md from a saved analysis.json (the logs are not re-read).

    ANALYSIS.json is the file `forensics scan` wrote, or the folder holding it.
    """
    from .report.files import write_rendered
    from .verdicts.saved import load_analysis

    file = analysis_path / "analysis.json" if analysis_path.is_dir() else analysis_path
    outputs = _inputs(file, file.parent / "metrics.csv")
    data = load_analysis(file)
    if not data.get("plots"):  # an analysis saved without plot series: use metrics.csv beside it
        from .analysis.series import plots_from_frame
        from .verdicts.diff import read_metrics_csv

        frame = read_metrics_csv(file.parent / "metrics.csv")
        if frame is not None:
            data["plots"] = plots_from_frame(frame)
    out_dir = outputs.folder(out_dir or file.parent)
    formats = ("html", "md") if out_fmt == "both" else (out_fmt,)
    paths = write_rendered(data, out_dir, formats, script=plotly_js, outputs=outputs)
    click.echo("wrote " + ", ".join(str(p) for p in paths.values()))


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--policy", "policy_path", required=True, type=click.Path(path_type=Path),
              help="Gate policy TOML (see examples/gate-policy.toml).")
@click.option("--format", "out_fmt", type=click.Choice(["text", "json", "junit", "github"]),
              default="text", show_default=True, help="Output: text, JSON, JUnit XML or GitHub "
              "Actions annotations.")
@click.option("--output", "output", type=click.Path(path_type=Path),
              help="Write the output to this file instead of stdout.")
@_scan_options_for_output_format
def gate(path: Path, policy_path: Path, out_fmt: str, output: Path | None, samples: Path | None,
         meta: Path | None, config_path: Path | None, fmt: str | None, kl_target: float | None,
         kl_unit: str | None, strict: bool, batch_rows: int | None) -> None:
    """Pass or fail a run against a policy: exit 0 pass, 1 fail, 2 bad policy, 3 unreadable input.

    PATH is a log file or run folder (scanned) or a saved analysis.json / report folder.
    """
    from .verdicts.gate import evaluate, load_policy, render_github, render_json, render_junit, render_text

    outputs = _inputs(path, policy_path, samples, meta, config_path)
    if output is not None:
        outputs.check(output)
    policy = load_policy(policy_path)
    data = _analysis_dict(path, samples, meta, config_path, fmt, kl_target, kl_unit, strict,
                          batch_rows)
    result = evaluate(data, policy)
    render = {"text": render_text, "json": render_json, "junit": render_junit,
              "github": render_github}[out_fmt]
    text = render(result)
    if output is not None:
        outputs.add(*(i.get("path") for i in data.get("inputs") or []))
        outputs.write_text(output, text if text.endswith("\n") else text + "\n")
        click.echo(f"gate {'passed' if result.passed else 'FAILED'}; wrote {output}")
    else:
        click.echo(text.rstrip("\n"))
    if not result.passed:
        click.get_current_context().exit(EXIT_GATE_FAILED)


@main.command()
@click.argument("run_a", type=click.Path(path_type=Path))
@click.argument("run_b", type=click.Path(path_type=Path))
@click.option("--format", "out_fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--tolerance", type=Checked(DIFF_TOLERANCE), default=0.05, show_default=True,
              help="Largest health-score drop that is not a regression.")
@_scan_options_for_output_format
def diff(run_a: Path, run_b: Path, out_fmt: str, tolerance: float, samples: Path | None,
         meta: Path | None, config_path: Path | None, fmt: str | None, kl_target: float | None,
         kl_unit: str | None, strict: bool, batch_rows: int | None) -> None:
    """Compare run B against run A; exit 1 when B regresses (usable as a regression gate).

    Each run is a log file or run folder (scanned), or a saved analysis.json / report folder
    (metrics.csv beside it gives the full per-step series).
    """
    from .verdicts.diff import diff_runs, is_saved_analysis, load_saved, render_text, run_from_analysis

    runs = []
    for p in (run_a, run_b):
        if is_saved_analysis(p):
            runs.append(load_saved(p))
        else:
            runs.append(run_from_analysis(run_scan(p, samples, meta, config_path, fmt, kl_target,
                                                   kl_unit, strict, batch_rows), str(p)))
    result = diff_runs(runs[0], runs[1], tolerance)
    if out_fmt == "json":
        from .report.files import to_json

        click.echo(to_json(result).rstrip("\n"))
    else:
        click.echo(render_text(result))
    if result["regression"]["regressed"]:
        click.get_current_context().exit(EXIT_GATE_FAILED)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), required=True,
              help="Folder for each run's reports (OUT/<run>/) and fleet.csv, fleet.json, fleet.html.")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: a process pool on this machine; ray: Ray tasks (extra rl-forensics[ray]).")
@click.option("--address", help="Ray cluster address (default: start a local Ray instance).")
@click.option("--policy", "policy_path", type=click.Path(path_type=Path),
              help="Gate policy TOML: each run gets a verdict; exit 1 if any run fails.")
@click.option("--workers", type=click.IntRange(min=1),
              help="Runs scanned at once (default: one per CPU; with a Ray cluster, Ray decides).")
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="TOML config for every run: [run] metadata, tracker parameters, [scan].")
@click.option("--strict", is_flag=True, help="A malformed row makes that run unreadable.")
@click.option("--metrics", "metrics_fmt", type=click.Choice(METRICS_CHOICES), default="auto",
              show_default=True, help="Each run's per-step table (as for scan).")
@click.option("--no-html", is_flag=True, help="No report.html/report.md per run (thousands of "
              "runs); `forensics report OUT/<run>` renders one later.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the paths written (no progress).")
def fleet(paths: tuple[Path, ...], out_dir: Path, engine: str, address: str | None,
          policy_path: Path | None, workers: int | None, config_path: Path | None, strict: bool,
          metrics_fmt: str, no_html: bool, quiet: bool) -> None:
    """Scan every run under PATH... and write one table of them all, worst first.

    A run is a folder with steps.* or trainer_state.json (or a TensorBoard folder), or a log
    file of a known format. A run that cannot be read is a row with its error. Exit 0, or with
    --policy the gate's verdict over the fleet: 1 if any run fails it (or cannot be read).
    """
    from .fleet import find_runs, run_fleet, sort_rows
    from .progress import FleetProgress
    from .verdicts.gate import load_policy

    policy = load_policy(policy_path) if policy_path is not None else None
    cfg = build_config(config_path, None, None, strict, None)
    runs = find_runs(paths, exclude=[out_dir])
    progress = FleetProgress(len(runs), enabled=not quiet)
    try:
        result = run_fleet(paths, out_dir, engine=engine, address=address, workers=workers,
                           config=cfg, policy=policy, metrics=metrics_fmt, html=not no_html, runs=runs,
                           policy_name=str(policy_path) if policy_path else None, on_result=progress)
    finally:
        progress.close()
    if not quiet:
        rows = sort_rows(result.rows)
        gate = ""
        if policy is not None:
            gate = f"; gate: {sum(r['gate'] == 'passed' for r in rows)} passed, " \
                   f"{sum(r['gate'] in ('failed', 'error') for r in rows)} failed"
        click.echo(f"{len(rows)} runs scanned ({engine}): {result.unreadable} could not be read{gate}")
        for r in rows[:5]:
            what = f"error: {r['error']}" if r["error"] else (
                f"health {r['health']:.2f}, {r['findings']['critical']} critical, "
                f"{r['findings']['warning']} warning"
                + (f", first domino {r['first_domino_rule']} @ {r['first_domino_step']}"
                   if r["first_domino_rule"] else ""))
            click.echo(f"  {r['run']}: {what}" + (f" [gate {r['gate']}]" if r["gate"] else ""))
    click.echo("wrote " + ", ".join(str(p) for p in result.paths.values()))
    if result.gate_failed:
        click.get_current_context().exit(EXIT_GATE_FAILED)


@main.command()
@click.argument("src", type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_path", type=click.Path(path_type=Path), required=True,
              help="Parquet file to write (the canonical step stream).")
@click.option("--format", "fmt", help="Input format (default: detected from content).")
@click.option("--strict", is_flag=True, help="A malformed row is fatal (exit 3).")
@click.option("-q", "--quiet", is_flag=True, help="Print only the path written.")
def convert(src: Path, out_path: Path, fmt: str | None, strict: bool, quiet: bool) -> None:
    """Convert a trainer log (any supported format) to the canonical step stream in Parquet.

    Keys are renamed to canonical names with their units normalised; unknown keys are kept under
    their own names. The read report and the column mapping go into the file's metadata.
    """
    from .io.convert import convert as convert_log

    result = convert_log(src, out_path, fmt=fmt, strict=strict)
    if not quiet:
        r = result.report
        click.echo(f"{src} [{r.format}]: {r.rows_read} rows read, {r.rows_skipped} skipped")
        for note in r.notes:
            click.echo(f"  note: {note}")
        for src_key, dst in sorted(result.mapping.mapping.items()):
            if src_key != dst:
                click.echo(f"  {src_key} -> {dst}")
        if result.mapping.unmapped:
            click.echo(f"  unmapped (kept as is): {', '.join(sorted(result.mapping.unmapped))}")
    click.echo(result.summary() if not quiet else str(result.path))


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--format", "fmt", help="Input format (default: detected from content).")
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="TOML config: [run] metadata, tracker parameters.")
@click.option("--kl-target", type=Checked(run_field("kl_target")), help="Target KL (in the unit of --kl-unit).")
@click.option("--kl-unit", type=click.Choice(["token", "sequence"]), help="Unit of --kl-target.")
@click.option("--interval", type=Checked(Allowed(float, ge=0.01, le=86400)), default=2.0, show_default=True,
              help="Seconds between polls.")
@click.option("--once", is_flag=True, help="Read what is there now, report, and exit.")
@click.option("--timeout", type=Checked(Allowed(float, ge=0)), help="Stop after this many seconds.")
@click.option("--min-severity", type=click.Choice(["info", "warning", "critical"]), default="info",
              show_default=True, help="Print findings of at least this severity.")
def watch(path: Path, fmt: str | None, config_path: Path | None, kl_target: float | None,
          kl_unit: str | None, interval: float, once: bool, timeout: float | None,
          min_severity: str) -> None:
    """Follow a growing log and print each finding once, when it appears.

    Works on every supported format; line-oriented logs are read incrementally, others re-read
    when they change. Stop with Ctrl-C (or --once / --timeout).
    """
    from .analysis.findings import Severity
    from .live.watch import Watcher

    cfg = build_config(config_path, kl_target, kl_unit, False, None)
    watcher = Watcher(path, fmt=fmt, config=cfg, echo=click.echo,
                      min_severity=Severity.parse(min_severity))
    try:
        watcher.run(interval=interval, once=once, timeout=timeout)
    except KeyboardInterrupt:
        click.echo(f"stopped: {watcher.scan.rows} step rows analysed, {len(watcher.findings)} finding(s) "
                   "reported")


if __name__ == "__main__":  # pragma: no cover
    main()
