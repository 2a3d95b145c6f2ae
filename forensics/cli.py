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
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from . import __version__
from .config import Config, RunMeta, load_config, params_doc
from .errors import ForensicsError

EXIT_OK, EXIT_GATE_FAILED, EXIT_USAGE, EXIT_INPUT = 0, 1, 2, 3

#: Files at least this large get a progress line on an interactive terminal.
PROGRESS_BYTES = 32 << 20


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


def _progress(path: Path) -> tuple[Callable[[int], None] | None, Callable[[], None]]:
    try:
        size = path.stat().st_size if path.is_file() else 0
    except OSError:
        size = 0
    if size < PROGRESS_BYTES or not sys.stderr.isatty():
        return None, lambda: None
    state = {"rows": 0}

    def tick(n: int) -> None:
        state["rows"] += n
        click.echo(f"\rscanning {path.name}: {state['rows']:,} rows", err=True, nl=False)

    def done() -> None:
        click.echo("", err=True)

    return tick, done


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
        click.option("--kl-target", type=float, help="Target KL (in the unit of --kl-unit)."),
        click.option("--kl-unit", type=click.Choice(["token", "sequence"]),
                     help="Unit of --kl-target (default token)."),
        click.option("--strict", is_flag=True, help="A malformed row is fatal (exit 3)."),
        click.option("--batch-rows", type=click.IntRange(min=1),
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
        if kl_target <= 0:
            raise click.BadParameter("must be positive", param_hint="--kl-target")
        overrides["kl_target"] = kl_target
    if kl_unit is not None:
        overrides["kl_target_unit"] = kl_unit
    if overrides:
        cfg.run = cfg.run.merged(RunMeta(**overrides))
    cfg.strict = strict or cfg.strict
    if batch_rows:
        cfg.batch_rows = batch_rows
    return cfg


def run_scan(path: Path, samples: Path | None, meta: Path | None, config_path: Path | None,
             fmt: str | None, kl_target: float | None, kl_unit: str | None, strict: bool,
             batch_rows: int | None, show_progress: bool = True):  # type: ignore[no-untyped-def]
    from .engine import scan_path

    cfg = build_config(config_path, kl_target, kl_unit, strict, batch_rows)
    tick, done = _progress(path) if show_progress else (None, lambda: None)
    try:
        return scan_path(path, samples=samples, meta=meta, config=cfg, fmt=fmt, progress=tick)
    finally:
        done()


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=Path("reports"),
              show_default=True, help="Folder for analysis.json, summary.json, metrics.csv, "
              "findings.csv.")
@scan_options
@click.option("--top", type=click.IntRange(min=0), default=8, show_default=True,
              help="Findings shown in the terminal summary.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the paths written.")
def scan(path: Path, out_dir: Path, samples: Path | None, meta: Path | None,
         config_path: Path | None, fmt: str | None, kl_target: float | None,
         kl_unit: str | None, strict: bool, batch_rows: int | None, top: int,
         quiet: bool) -> None:
    """Scan a step log (file or run folder) and write reports.

    PATH is a steps.jsonl / steps.parquet file, any supported trainer log, or a run folder with
    steps.*, samples.* and run.json.
    """
    from .report import render_summary, write_reports

    analysis = run_scan(path, samples, meta, config_path, fmt, kl_target, kl_unit, strict,
                        batch_rows)
    paths = write_reports(analysis, out_dir)
    if not quiet:
        click.echo(render_summary(analysis, top=top))
        click.echo("")
    click.echo("wrote " + ", ".join(str(p) for p in paths.values()))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def rules(as_json: bool) -> None:
    """List every rule, and every tracker parameter with its default and meaning."""
    from .trackers import TRACKERS, all_rules

    if as_json:
        data = {
            "rules": [
                {"id": r.id, "tracker": t, "severity": r.severity.value, "title": r.title,
                 "explanation": r.explanation, "remedy": r.remedy, "params": list(r.params),
                 "source": r.source}
                for t, r in all_rules()  # type: ignore[attr-defined]
            ],
            "params": {name: [{"name": n, "default": d, "doc": doc}
                              for n, d, doc in params_doc(cls.Params)]
                       for name, cls in TRACKERS.items()},
            "run": [{"name": f.name, "doc": f.metadata.get("doc", "")}
                    for f in dataclasses.fields(RunMeta)],
        }
        click.echo(json.dumps(data, indent=2))
        return
    current = None
    for tracker, r in all_rules():
        if tracker != current:
            current = tracker
            click.echo(f"\n== {tracker} ==")
            cls = TRACKERS.get(tracker)
            if cls is not None:
                click.echo(f"   parameters ([{tracker}] in a --config TOML file):")
                for n, d, doc in params_doc(cls.Params):
                    click.echo(f"     {n} = {d!r}  - {doc}")
        click.echo(f"  {r.id}  [{r.severity.value}]  {r.title}")  # type: ignore[attr-defined]
        click.echo(f"      {r.explanation}")  # type: ignore[attr-defined]
        click.echo(f"      remedy: {r.remedy}")  # type: ignore[attr-defined]
    click.echo("\n== run metadata ([run] in a config file, or run.json) ==")
    for f in dataclasses.fields(RunMeta):
        click.echo(f"  {f.name}  - {f.metadata.get('doc', '')}")


if __name__ == "__main__":  # pragma: no cover
    main()
