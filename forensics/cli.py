"""Command line: parse, load config, call the library, render, exit.

Exit codes (the contract; see README):

* 0 - success: the scan ran (whatever it found); the gate passed.
* 1 - the gate failed (``forensics gate``, ``forensics diff`` as a regression gate, ``forensics
  watch --fail-on``).
* 2 - usage error: bad option, unknown format, invalid config file.
* 3 - input unreadable or invalid: missing file, unknown content, no usable rows, a malformed
  row under ``--strict``.
* 4 - internal error: a bug in forensics (an unexpected exception), never bad input; the message
  asks for a bug report with the version.
* 130 - interrupted (Ctrl-C, SIGINT): nothing was written, "Interrupted." on stderr, a progress
  bar left where it was (128 + the signal's number, as a shell reports it).

Only this module turns errors into exit codes; no traceback reaches a user (set
``FORENSICS_DEBUG=1`` to see one).

One vocabulary across commands: ``--input-format`` (or ``--from``) names what is read,
``--format`` what is written, ``-o/--output`` where; ``-q`` prints nothing on success, ``-v``
adds the column mapping and the tracker plan. Colour on a terminal, off with ``NO_COLOR``. A
closed pipe (``forensics rules | head -1``) ends the output quietly. Old spellings still work,
hidden from ``--help``: ``--out`` for ``--output``; ``rules --json``/``--markdown``; ``--format``
as the input format of ``scan``, ``convert`` and ``watch`` (with a deprecation warning naming
``--input-format``; on ``gate``, ``diff`` and ``report`` an input format given to ``--format`` is a
usage error that names ``--input-format``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from . import __version__
from .config import DIFF_TOLERANCE, Allowed, RunMeta, allowed_of, run_field, scan_option, show_value
from .errors import ConfigError, ForensicsError, InputError, UsageError
from .io.output import Outputs

EXIT_OK, EXIT_GATE_FAILED, EXIT_USAGE, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130

#: ``scan --metrics`` (forensics.report.files.METRICS_FORMATS, not imported: --help stays light).
METRICS_CHOICES = ("auto", "csv", "parquet", "both")


# --- output: a closed pipe, colour ---------------------------------------------------------

def _stdout_closed() -> None:
    """The reader went away (``| head``): send the rest of the output nowhere, quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor (a test runner's buffer)
        pass


def echo(text: str = "", *, err: bool = False, nl: bool = True) -> None:
    """``click.echo`` that survives a closed pipe: the rest of the output is dropped."""
    try:
        click.echo(text, err=err, nl=nl)
    except BrokenPipeError:
        _stdout_closed()


def colour_on() -> bool:
    """Colour on a terminal unless ``NO_COLOR`` is set (https://no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _warning_lines(default: Callable[..., None]) -> Callable[..., None]:
    """``warnings.showwarning`` for the CLI: a deprecation the user should act on (an old rule id
    read) as one ``warning:`` line on stderr; other warnings as ``default`` shows them."""
    from .analysis.findings import RuleRenamed

    def show(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if issubclass(category, RuleRenamed):
            echo(f"warning: {message}", err=True)
        else:
            default(message, category, *args, **kwargs)
    return show


class _Group(click.Group):
    """Maps library errors to exit codes and hides tracebacks."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.showwarning = _warning_lines(warnings.showwarning)
                return super().invoke(ctx)
        except ForensicsError as exc:
            echo(f"Error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except BrokenPipeError:
            _stdout_closed()
            ctx.exit(EXIT_OK)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt:
            echo("Interrupted.", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except OSError as exc:
            if exc.filename is None:  # not about a path the user named: a bug
                _internal(exc)
                ctx.exit(EXIT_INTERNAL)
            # a path the system refused (a name too long, a folder that cannot be searched)
            echo(f"Error: {show_value(str(exc.filename), 240)}: cannot use this path: "
                 f"{exc.strerror or type(exc).__name__}", err=True)
            ctx.exit(InputError.exit_code)
        except Exception as exc:
            _internal(exc)
            ctx.exit(EXIT_INTERNAL)


def _internal(exc: BaseException) -> None:
    """Say that ``exc`` is a bug in forensics (exit 4), with what a bug report needs."""
    if os.environ.get("FORENSICS_DEBUG"):
        import traceback

        traceback.print_exc()
    echo(f"Error: internal error (a bug in forensics, not in your input): {type(exc).__name__}: "
         f"{show_value(str(exc), 300)}. Please file a bug report with the version (forensics "
         f"{__version__}, Python {sys.version.split()[0]}), the command you ran and the traceback "
         "that FORENSICS_DEBUG=1 prints.", err=True)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="forensics")
def main() -> None:
    """Find what went wrong in an RL/RLHF training run, where, and what to change.

    Options mean the same in every command: --input-format (or --from) is what is read,
    --format what is written, -o/--output where; -q prints nothing on success, -v adds the
    column mapping and the tracker plan. Colour on a terminal; NO_COLOR=1 turns it off.

    Exit codes: 0 success, 1 gate failed, 2 usage error, 3 input unreadable or invalid,
    4 internal error (a bug: please report it), 130 interrupted (Ctrl-C).
    """
    from .io.inputs import set_stream_limit

    set_stream_limit(None)  # each command starts from the default (--max-bytes sets its own)


# --- option types --------------------------------------------------------------------------

class _HiddenAliases(click.Option):
    """An option whose old spellings (``hidden_aliases``) work but are left out of ``--help``."""

    def __init__(self, *args: Any, hidden_aliases: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hidden_aliases = tuple(hidden_aliases)

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        opts, secondary = self.opts, self.secondary_opts
        self.opts = [o for o in opts if o not in self.hidden_aliases]
        self.secondary_opts = [o for o in secondary if o not in self.hidden_aliases]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts, self.secondary_opts = opts, secondary


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


#: Input formats, listed in --help without importing the readers (a test checks this list against
#: forensics.io.formats.FORMATS).
INPUT_FORMATS = ("hf-trainer-state", "verl-jsonl", "rldk-events", "llamafactory", "wandb-history", "wandb-csv",
                 "wandb-offline", "tensorboard", "column-json", "openrlhf-console", "deepspeed-chat", "verl-console",
                 "hf-console", "csv", "parquet-parts", "parquet", "jsonl", "kv-console")


class _OutputChoice(click.Choice):
    """An output ``--format``: a value that is an input format gets a hint to ``--input-format``."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value not in self.choices and value in INPUT_FORMATS:
            self.fail(f"{value!r} is an input format: --format chooses what is written "
                      f"({', '.join(map(str, self.choices))}); name the input format with --input-format {value}",
                      param, ctx)
        return super().convert(value, param, ctx)


def _input_format_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--input-format", "--from", "fmt", type=click.Choice(INPUT_FORMATS),
                        metavar="NAME", help="What is read (default: detected from content): "
                        + ", ".join(INPUT_FORMATS) + ".")(f)


def _deprecated_format_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--format NAME`` as the input format, the old spelling on scan/convert/watch (hidden)."""
    return click.option("--format", "old_fmt", hidden=True, type=click.Choice(INPUT_FORMATS))(f)


def _resolve_format(fmt: str | None, old_fmt: str | None) -> str | None:
    if old_fmt is None:
        return fmt
    if fmt is not None and fmt != old_fmt:
        raise click.UsageError(f"--format {old_fmt} and --input-format {fmt} disagree: give --input-format only")
    echo(f"warning: --format as the input format is deprecated here; use --input-format {old_fmt} "
         "(--format chooses what is written)", err=True)
    return old_fmt


def _verbosity(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("-v", "--verbose", is_flag=True,
                     help="Also print the column mapping and the tracker plan.")(f)
    return click.option("-q", "--quiet", is_flag=True, help="Print nothing on success (errors still go "
                        "to stderr; the exit code tells the outcome).")(f)


# The options several commands take, declared once (each decorator makes a fresh option).
_CONFIG = click.option("--config", "config_path", type=click.Path(path_type=Path),
                       help="TOML config: [run] metadata, [columns] key names, tracker parameters, [scan] options.")
_MAP = click.option("--map", "maps", multiple=True, metavar="SRC=CANONICAL[:UNIT]",
                    help="Your own key name for a canonical metric (repeatable; before the built-in "
                    "aliases; e.g. --map iteration=step --map gnorm=grad_norm --map kl_sum=kl:sequence). "
                    "`forensics rules --metrics` lists the names.")
_KL_TARGET = click.option("--kl-target", type=Checked(run_field("kl_target")),
                          help="Target KL (in the unit of --kl-unit).")
_KL_UNIT = click.option("--kl-unit", type=click.Choice(["token", "sequence"]),
                        help="Unit of --kl-target (default token).")
_STRICT = click.option("--strict", is_flag=True, help="A malformed row is fatal (exit 3; in a fleet, that "
                       "run is a row with the error).")
_META = click.option("--meta", type=click.Path(path_type=Path),
                     help="Run metadata JSON (default: run.json beside steps.*).")
_RUN = click.option("--run", "run", metavar="NAME", help="The run to read in a file that holds several (a "
                    "W&B chart export; default: the first, and the summary names the others).")

#: The options that mean the same to every command reading logs the way scan does (scan, gate,
#: diff, fleet, watch): the config, the input format, your key names, the KL target.
COMMON_OPTIONS = (_CONFIG, _input_format_option, _MAP, _KL_TARGET, _KL_UNIT)


def _apply(f: Callable[..., Any], options: Sequence[Callable[[Callable[..., Any]], Callable[..., Any]]]
           ) -> Callable[..., Any]:
    """``f`` with ``options`` (listed in ``--help`` in this order)."""
    for opt in reversed(options):
        f = opt(f)
    return f


def common_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """:data:`COMMON_OPTIONS` (passed on as keyword arguments)."""
    return _apply(f, COMMON_OPTIONS)


def scan_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Options shared by every command that scans one log (passed on as ``**opts``)."""
    return _apply(f, [
        click.option("--samples", type=click.Path(path_type=Path),
                     help="Per-response sample stream (JSONL or Parquet)."),
        _META,
        *COMMON_OPTIONS,
        _STRICT,
        click.option("--gpus", type=Checked(run_field("gpus")), help="GPUs the run used: the cost of "
                     "waste in GPU-hours (the log's wall clock x GPUs)."),
        click.option("--gpu-hours", type=Checked(run_field("gpu_hours")), help="GPU-hours the whole run "
                     "used (when the log has no clock)."),
        click.option("--gpu-price", type=Checked(run_field("gpu_price")), help="Price of one GPU-hour: "
                     "the cost of waste in money."),
        click.option("--batch-rows", type=Checked(scan_option("batch_rows")),
                     help="Rows per batch (memory is bounded by the batch)."),
        click.option("--max-bytes", type=click.IntRange(min=1), metavar="N",
                     help="Most bytes read from stdin, a pipe, a FIFO or a device (default 1 GiB); past it "
                     "the scan stops with exit 3."),
    ])


#: What each ``--plotly-js`` choice means (scan and report offer inline and file; fleet all three).
_PLOTLY_HELP = {"inline": "report.html is one self-contained file (~1.3 MB)",
                "file": "plotly-basic.min.js is written once per folder and report.html refers to it",
                "shared": "one plotly-basic.min.js in the output folder serves every run's report.html"}


def plotly_js_option(*choices: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--plotly-js``: how report.html carries plotly.js; the first choice is the default."""
    return click.option("--plotly-js", "plotly_js", type=click.Choice(choices), default=choices[0],
                        show_default=True, help="; ".join(f"{c}: {_PLOTLY_HELP[c]}" for c in choices) + ".")


def build_config(config_path: Path | None, kl_target: float | None, kl_unit: str | None,
                 strict: bool, batch_rows: int | None, maps: Sequence[str] = (), **run: Any) -> Any:
    from .config import make_config

    return make_config(config_path=config_path, kl_target=kl_target, kl_unit=kl_unit, strict=strict,
                       batch_rows=batch_rows, maps=maps, **run)


def run_scan(path: Path, opts: dict[str, Any], show_progress: bool = True):  # type: ignore[no-untyped-def]
    """Scan ``path`` with the scan options of a command (``scan_options``)."""
    from .analysis.engine import scan_path
    from .io.inputs import compressed_offset, set_stream_limit
    from .io.locate import locate
    from .progress import scan_progress

    set_stream_limit(opts.get("max_bytes"))
    cfg = build_config(opts.get("config_path"), opts.get("kl_target"), opts.get("kl_unit"),
                       bool(opts.get("strict")), opts.get("batch_rows"), opts.get("maps") or (),
                       gpus=opts.get("gpus"), gpu_hours=opts.get("gpu_hours"), gpu_price=opts.get("gpu_price"))
    files = locate(path)  # once: the progress bar sizes what the scan reads
    tick, done = scan_progress(files.inputs(opts.get("samples")), enabled=show_progress,
                               offset=compressed_offset)
    try:
        analysis = scan_path(files, samples=opts.get("samples"), meta=opts.get("meta"), config=cfg,
                             fmt=opts.get("fmt"), progress=tick, run=opts.get("run"))
    except BaseException:  # Ctrl-C (exit 130) or an error: the bar stays short of 100%
        done(finished=False)
        raise
    done()
    return analysis


def _inputs(*paths: Path | None, reports: bool = False) -> Outputs:
    """Where this command may write: never over one of ``paths`` (see forensics.io.output);
    ``reports``: the command writes a report's own files (scan, report)."""
    return Outputs(paths, reports=reports)


def _write_text(path: Path, text: str, outputs: Outputs | None = None) -> None:
    """Write a command's output file: never over an input, a link or a special file; atomically."""
    (outputs or Outputs()).write_text(path, text if text.endswith("\n") else text + "\n")


def _emit(text: str, output: Path | None, quiet: bool, what: str = "", outputs: Outputs | None = None) -> None:
    """Print ``text``, or write it to ``output`` (then say so unless quiet), never over one of
    ``outputs``' inputs."""
    if output is not None:
        _write_text(output, text, outputs)
        if not quiet:
            echo(f"{what}wrote {output}")
    elif not quiet:
        echo(text.rstrip("\n"))


# --- scan ----------------------------------------------------------------------------------

@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("-o", "--output", "--out", "out_dir", cls=_HiddenAliases, hidden_aliases=("--out",),
              type=click.Path(path_type=Path), default=Path("reports"), show_default=True,
              help="Folder for analysis.json, summary.json, metrics.csv (or metrics.parquet), findings.csv "
              "and the reports. The scan owns the files it writes there: an earlier scan's files that "
              "this one does not write are removed, nothing else is touched.")
@scan_options
@_RUN
@_deprecated_format_option
@click.option("--top", type=click.IntRange(min=0), default=8, show_default=True,
              help="Findings shown in the terminal summary.")
@click.option("--metrics", "metrics_fmt", type=click.Choice(METRICS_CHOICES), default="auto",
              show_default=True, help="The per-step table: metrics.csv up to 100,000 steps and "
              "metrics.parquet above (auto), or csv, parquet or both.")
@_verbosity
@plotly_js_option("inline", "file")
def scan(path: Path, out_dir: Path, top: int, metrics_fmt: str, quiet: bool, verbose: bool, plotly_js: str,
         old_fmt: str | None, **opts: Any) -> None:
    """Scan a training log and write reports (analysis.json, CSVs, report.html, ...).

    PATH is a log file of any supported format (--input-format lists them), a run folder
    (steps.*, samples.*, run.json), a transformers/TRL output_dir (trainer_state.json at its
    root or in the newest checkpoint-*/, preferred over a TensorBoard runs/ folder beside it), a
    TensorBoard folder, a W&B run folder (wandb/run-*/), or a folder holding one log (a veRL
    train.log).
    """
    from .report import render_summary, write_reports
    from .report.files import REPORT_FILES
    from .report.terminal import render_plan

    opts["fmt"] = _resolve_format(opts.get("fmt"), old_fmt)
    outputs = _inputs(None if path.is_dir() else path, opts.get("samples"), opts.get("meta"),
                      opts.get("config_path"), reports=True)
    for name in REPORT_FILES:  # refuse before a long scan; checked again with the files it read
        outputs.check(out_dir / name)
    analysis = run_scan(path, opts, show_progress=not quiet)
    paths = write_reports(analysis, out_dir, script=plotly_js, metrics=metrics_fmt, outputs=outputs)
    if quiet:
        return
    echo(render_summary(analysis, top=top, colour=colour_on()))
    if verbose:
        echo("")
        echo(render_plan(analysis))
    echo("")
    echo(f"wrote {len(paths)} files to {out_dir}: " + ", ".join(p.name for p in paths.values()))


# --- rules ---------------------------------------------------------------------------------

def _all_rules(custom: Sequence[Any] = ()) -> list[tuple[str, Any]]:
    """Every built-in rule, then the config's own ``[[rules]]`` (tracker ``custom``)."""
    from .analysis.trackers import all_rules

    return [*all_rules(), *(("custom", r.spec) for r in custom)]


def _rules_data(custom: Sequence[Any] = ()) -> dict[str, Any]:
    from .analysis.catalogue import window_issues
    from .analysis.trackers import TRACKERS, param_rows

    return {
        "rules": [
            {"id": r.id, "tracker": t, "severity": r.severity.value, "title": r.title,
             "explanation": r.explanation, "remedy": r.remedy, "params": list(r.params),
             "source": r.source, "formerly": list(r.formerly)}
            for t, r in _all_rules(custom)
        ],
        "window_issues": window_issues(),
        "params": {name: [{"name": n, "default": d, "doc": doc, "allowed": allowed}
                          for n, d, doc, allowed in param_rows(name)]
                   for name in TRACKERS},
        "run": [{"name": f.name, "doc": f.metadata.get("doc", ""),
                 "allowed": allowed_of(f).describe()} for f in dataclasses.fields(RunMeta)],
    }


def _rules_text(custom: Sequence[Any] = ()) -> str:
    from .analysis.catalogue import WINDOW_ISSUES_NOTE, window_issues
    from .analysis.trackers import TRACKERS, param_rows

    out: list[str] = []
    by_tracker: dict[str, list[Any]] = {}
    for tracker, r in _all_rules(custom):
        by_tracker.setdefault(tracker, []).append(r)
    for tracker in [*TRACKERS, *[t for t in by_tracker if t not in TRACKERS]]:
        out.append(f"\n== {tracker} ==")
        cls = TRACKERS.get(tracker)
        if cls is not None:
            out.append(f"   parameters ([{tracker}] in a --config TOML file):")
            for n, d, doc, allowed in param_rows(tracker):
                out.append(f"     {n} = {d!r}  - {doc} (allowed: {allowed})")
        for r in by_tracker.get(tracker, []):
            out.append(f"  {r.id}  [{r.severity.value}]  {r.title}")
            if r.formerly:
                out.append(f"      formerly: {', '.join(r.formerly)} (still read, with a warning)")
            out.append(f"      {r.explanation}")
            out.append(f"      remedy: {r.remedy}")
        if tracker == "windows":
            out.append(f"   {WINDOW_ISSUES_NOTE}")
            for i in window_issues():
                out.append(f"  {i['id']}  [{i['priority']}]  {i['title']}")
                out.append(f"      {i['condition']}")
                out.append(f"      remedy: {i['remedy']}")
    out.append("\n== run metadata ([run] in a config file, or run.json) ==")
    for f in dataclasses.fields(RunMeta):
        out.append(f"  {f.name}  - {f.metadata.get('doc', '')} (allowed: {allowed_of(f).describe()})")
    return "\n".join(out)


_METRICS_PAGE_HEAD = """# Metrics and the keys read

Generated by `forensics rules --metrics --format markdown` (`tests/test_cli.py` fails when this
page and the code differ). A log's keys are renamed to these canonical names on the way in, by
one resolver for `scan`, `watch`, `fleet` and the trainer callback; a key the table does not know
is carried through under its own name and listed as not recognised, with the `--map` line that
would read it. A logger's `train/` prefix is stripped and dots are read as `/`; per-reward-function
means (`rewards/<name>/mean`) become `reward/<name>`. Where one row holds two keys of one canonical
name, the one listed first below wins and the other is kept as shadowed. The sources each trainer's
keys were read from are in [trainer keys](trainer-keys.md) and the shared FORMATS.md.

## Canonical names
"""


def _cell(text: str) -> str:
    """Text for a Markdown table cell (a bar would end the cell)."""
    return text.replace("|", "\\|")


def _metrics(out_fmt: str) -> str:
    from .analysis.catalogue import readers
    from .schema import ALIASES, METRICS

    read_by = {name: readers(name) for name in METRICS}  # each tracker's requires, turned around
    if out_fmt == "json":
        return json.dumps([{"name": m.name, "stream": m.stream, "unit": m.unit, "meaning": m.meaning,
                            "trackers": read_by[m.name],
                            "aliases": [{"key": a.source, "trainer": a.framework, "transform": a.transform,
                                         "note": a.note} for a in ALIASES if a.canonical == m.name]}
                           for m in METRICS.values()], indent=2)
    if out_fmt == "markdown":
        rows = [_METRICS_PAGE_HEAD, "| name | stream | unit | meaning | read by |", "| --- | --- | --- | --- | --- |"]
        rows += [f"| `{m.name}` | {m.stream} | {m.unit} | {m.meaning} | {', '.join(read_by[m.name]) or '-'} |"
                 for m in METRICS.values()]
        rows += ["", "## Keys read, by trainer", "",
                 "Each trainer's keys in the order they are tried; a transform converts the unit on the way in."]
        for trainer in dict.fromkeys(a.framework for a in ALIASES):
            rows += ["", f"### {trainer}", "", "| key | canonical | transform | note |", "| --- | --- | --- | --- |"]
            rows += [f"| `{a.source}` | `{a.canonical}` | {a.transform or ''} | {_cell(a.note)} |"
                     for a in ALIASES if a.framework == trainer]
        return "\n".join(rows)
    return "\n".join(f"{m.name:<24} [{m.stream}] {m.unit:<14} {m.meaning}  "
                     f"(read by: {', '.join(read_by[m.name]) or '-'})" for m in METRICS.values())


@main.command()
@click.option("--format", "out_fmt", type=_OutputChoice(["text", "json", "markdown"]),
              default=None, help="What is written: text (default), json, markdown (docs/rules.md is this).")
@click.option("--json", "as_json", is_flag=True, hidden=True)
@click.option("--markdown", is_flag=True, hidden=True)
@click.option("--metrics", is_flag=True, help="List the canonical metric names (and units) instead, with "
              "every trainer key read as each in json and markdown (docs/metrics.md is the markdown).")
@click.option("-o", "--output", "output", type=click.Path(path_type=Path), help="Write to this file.")
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="Also list this config's own [[rules]] (tracker 'custom'), checked as a scan checks them.")
def rules(out_fmt: str | None, as_json: bool, markdown: bool, metrics: bool, output: Path | None,
          config_path: Path | None) -> None:
    """List every rule, and every tracker parameter with its default and meaning."""
    from .analysis.trackers.custom import config_rules
    from .config import load_config

    custom = config_rules(load_config(config_path)) if config_path else ()
    chosen = [x for x in (out_fmt, "json" if as_json else None, "markdown" if markdown else None) if x]
    if len(set(chosen)) > 1:
        raise click.UsageError("give one of --format text|json|markdown (--json and --markdown are its "
                               "old spellings)")
    fmt = chosen[0] if chosen else "text"
    if metrics:
        text = _metrics(fmt)
    elif fmt == "markdown":
        from .analysis.catalogue import rules_markdown

        text = rules_markdown()
        if output is None:
            echo(text, nl=False)
            return
    elif fmt == "json":
        text = json.dumps(_rules_data(custom), indent=2)
    else:
        text = _rules_text(custom)
    _emit(text, output, False)


# --- report, gate, diff ------------------------------------------------------------------

def _analysis_dict(path: Path, opts: dict[str, Any], quiet: bool = False) -> dict[str, Any]:
    """A saved analysis (analysis.json, or a report folder holding one), or a fresh scan of logs."""
    from .verdicts.saved import is_saved_analysis, load_analysis

    if is_saved_analysis(path):
        return load_analysis(path / "analysis.json" if path.is_dir() else path)
    return run_scan(path, opts, show_progress=not quiet).to_dict()


def _not_an_analysis(path: Path) -> str | None:
    """Why ``path`` is a training log rather than a saved analysis (None: it may be one)."""
    from .verdicts.saved import is_saved_analysis

    if is_saved_analysis(path):
        return None
    if path.is_dir():
        return "this folder holds no analysis.json" + (" (it holds a log)" if any(path.iterdir()) else "")
    if not path.is_file():
        return None
    try:
        from .io.formats import detect_format

        fmt = detect_format(path)
    except ForensicsError:
        return None
    return f"this is a {fmt} log, not a saved analysis"


def _not_an_analysis_error(path: Path) -> type[ForensicsError]:
    """A folder without analysis.json is an absent input (exit 3); a log where an analysis is
    expected is a usage error (exit 2: the message says which command reads it)."""
    return InputError if path.is_dir() else UsageError


@main.command()
@click.argument("analysis_path", metavar="ANALYSIS", type=click.Path(path_type=Path))
@click.option("-o", "--output", "--out", "out_dir", cls=_HiddenAliases, hidden_aliases=("--out",),
              type=click.Path(path_type=Path),
              help="Folder for report.html / report.md (default: beside ANALYSIS).")
@click.option("--format", "out_fmt", type=_OutputChoice(["html", "md", "both"]), default="both",
              show_default=True, help="What is written.")
@plotly_js_option("inline", "file")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
def report(analysis_path: Path, out_dir: Path | None, out_fmt: str, plotly_js: str, quiet: bool) -> None:
    """Render report.html and report.md from a saved analysis (the logs are not re-read).

    ANALYSIS is the analysis.json `forensics scan` wrote, or the folder holding it. For a
    training log, run `forensics scan LOG -o DIR`: it writes the reports too.
    """
    from .report.files import write_rendered
    from .verdicts.saved import load_analysis

    why = _not_an_analysis(analysis_path)
    if why is not None:
        raise _not_an_analysis_error(analysis_path)(
            f"{analysis_path}: {why}. `forensics report` renders a saved analysis; to analyse a "
            f"log run `forensics scan {analysis_path} -o DIR` (it writes report.html and report.md), "
            "then `forensics report DIR` renders them again")
    file = analysis_path / "analysis.json" if analysis_path.is_dir() else analysis_path
    outputs = _inputs(file, file.parent / "metrics.csv", reports=True)  # renders its pages again, in place
    data = load_analysis(file)
    if not data.get("plots"):  # an analysis saved without plot series: use metrics.csv beside it
        from .analysis.diagnosis.series import plots_from_frame
        from .verdicts.diff import read_metrics_csv

        frame = read_metrics_csv(file.parent / "metrics.csv")
        if frame is not None:
            data["plots"] = plots_from_frame(frame)
    out_dir = outputs.folder(out_dir or file.parent)
    formats = ("html", "md") if out_fmt == "both" else (out_fmt,)
    paths = write_rendered(data, out_dir, formats, script=plotly_js, outputs=outputs)
    if not quiet:
        echo("wrote " + ", ".join(str(p) for p in paths.values()))


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--policy", "policy_path", type=click.Path(path_type=Path),
              help="Gate policy TOML (see examples/gate-policy.toml). Default: fail on a critical "
              "finding, and when nothing was checked.")
@click.option("--format", "out_fmt", type=_OutputChoice(["text", "json", "junit", "github"]),
              default="text", show_default=True, help="What is written: text, JSON, JUnit XML or GitHub "
              "Actions annotations.")
@click.option("-o", "--output", "output", type=click.Path(path_type=Path),
              help="Write the output to this file instead of stdout.")
@scan_options
@_RUN
@_verbosity
def gate(path: Path, policy_path: Path | None, out_fmt: str, output: Path | None, quiet: bool,
         verbose: bool, **opts: Any) -> None:
    """Pass or fail a run against a policy: exit 0 pass, 1 fail, 2 bad policy, 3 unreadable input.

    PATH is a log file or run folder (scanned) or a saved analysis.json / report folder.
    """
    from .verdicts.gate import (
        default_policy,
        evaluate,
        load_policy,
        render_github,
        render_json,
        render_junit,
        render_text,
    )

    outputs = _inputs(path, policy_path, opts.get("samples"), opts.get("meta"), opts.get("config_path"))
    if output is not None:
        outputs.check(output)
    policy = load_policy(policy_path) if policy_path is not None else default_policy()
    data = _analysis_dict(path, opts, quiet)
    result = evaluate(data, policy)
    render = {"text": render_text, "json": render_json, "junit": render_junit,
              "github": render_github}[out_fmt]
    text = render(result)
    if output is not None:
        outputs.add(*(i.get("path") for i in data.get("inputs") or []))
        _write_text(output, text, outputs)
        if not quiet:
            echo(f"gate {'passed' if result.passed else 'FAILED'}; wrote {output}")
    elif not quiet:
        if out_fmt == "text" and colour_on():
            from .report.terminal import paint

            head, _, rest = text.partition("\n")
            text = paint(head, "ok" if result.passed else "bad", True) + ("\n" + rest if rest else "")
        echo(text.rstrip("\n"))
    if verbose and not quiet and result.skipped:
        echo("rules that could not run on this log:")
        for rule, why in sorted(result.skipped.items()):
            echo(f"  {rule}: {why}")
    if not result.passed:
        click.get_current_context().exit(EXIT_GATE_FAILED)


@main.command()
@click.argument("run_a", type=click.Path(path_type=Path))
@click.argument("run_b", type=click.Path(path_type=Path))
@click.option("--format", "out_fmt", type=_OutputChoice(["text", "json"]), default="text",
              show_default=True, help="What is written.")
@click.option("-o", "--output", "output", type=click.Path(path_type=Path),
              help="Write the comparison to this file instead of stdout.")
@click.option("--tolerance", type=Checked(DIFF_TOLERANCE), default=0.05, show_default=True,
              help="Largest health-score drop that is not a regression.")
@scan_options
@click.option("-q", "--quiet", is_flag=True, help="Print nothing (the exit code tells a regression).")
def diff(run_a: Path, run_b: Path, out_fmt: str, output: Path | None, tolerance: float, quiet: bool,
         **opts: Any) -> None:
    """Compare run B against run A; exit 1 when B regresses (usable as a regression gate).

    Each run is a log file or run folder (scanned), or a saved analysis.json / report folder
    (metrics.csv beside it gives the full per-step series).
    """
    from .verdicts.diff import diff_runs, load_saved, render_text, run_from_analysis
    from .verdicts.saved import is_saved_analysis

    outputs = _inputs(run_a, run_b, opts.get("samples"), opts.get("meta"), opts.get("config_path"))
    runs = []
    for p in (run_a, run_b):
        if is_saved_analysis(p):
            file = p / "analysis.json" if p.is_dir() else p
            outputs.add(file, file.parent / "metrics.csv")
            runs.append(load_saved(p))
        else:
            analysis = run_scan(p, opts, show_progress=not quiet)
            outputs.add(*(r.path for r in analysis.inputs))
            runs.append(run_from_analysis(analysis, str(p)))
        if output is not None:
            outputs.check(output)  # before the next scan: an output that is an input fails early
    result = diff_runs(runs[0], runs[1], tolerance)
    if out_fmt == "json":
        from .report.files import to_json

        text = to_json(result)
    else:
        text = render_text(result)
    _emit(text, output, quiet, outputs=outputs)
    if result["regression"]["regressed"]:
        click.get_current_context().exit(EXIT_GATE_FAILED)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", "--out", "out_dir", cls=_HiddenAliases, hidden_aliases=("--out",),
              type=click.Path(path_type=Path), required=True,
              help="Folder for each run's reports (OUTPUT/<run>/) and fleet.csv, fleet.json, fleet.html.")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: a process pool on this machine; ray: Ray tasks (extra rl-forensics[ray]).")
@click.option("--address", help="Ray cluster address (default: start a local Ray instance).")
@click.option("--policy", "policy_path", type=click.Path(path_type=Path),
              help="Gate policy TOML: each run gets a verdict; exit 1 if any run fails.")
@click.option("--workers", type=click.IntRange(min=1),
              help="Runs scanned at once (default: one per CPU; with a Ray cluster, Ray decides).")
@common_options
@_STRICT
@click.option("--metrics", "metrics_fmt", type=click.Choice(METRICS_CHOICES), default="auto",
              show_default=True, help="Each run's per-step table (as for scan).")
@click.option("--reports", type=click.Choice(["html", "none", "all"]), default="html", show_default=True,
              help="Each run's reports besides its data files (analysis.json, summary.json, the tables): "
              "html: report.html, linked from fleet.html; none: no page (thousands of runs; `forensics "
              "report OUTPUT/<run>` renders one later); all: report.html and report.md.")
@click.option("--no-html", is_flag=True, hidden=True)
@plotly_js_option("shared", "file", "inline")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success (no progress, on either engine; the "
              "exit code tells the gate's verdict).")
def fleet(paths: tuple[Path, ...], out_dir: Path, engine: str, address: str | None,
          policy_path: Path | None, workers: int | None, config_path: Path | None, fmt: str | None,
          maps: tuple[str, ...], kl_target: float | None, kl_unit: str | None, strict: bool,
          metrics_fmt: str, reports: str, no_html: bool, plotly_js: str, quiet: bool) -> None:
    """Scan every run under PATH... and write one table of them all, worst first.

    A run is a run folder, read as scan reads it (steps.*, a transformers/TRL output_dir, a
    TensorBoard or W&B folder), or a log file of a known format in any other folder; a W&B chart
    export that holds several runs is a row per run. A run that cannot be read is a row with its
    error. The options read every run as scan reads one. Exit 0, or with --policy the gate's
    verdict over the fleet: 1 if any run fails it (or cannot be read); 3 when not one run could be
    read (the table is written, with each run's error).
    """
    from .fleet import find_runs, run_fleet, sort_rows
    from .io.lean import resume_collection
    from .progress import FleetProgress
    from .verdicts.gate import load_policy

    resume_collection()  # a fleet runs long in this process: collect as usual from here

    policy = load_policy(policy_path) if policy_path is not None else None
    cfg = build_config(config_path, kl_target, kl_unit, strict, None, maps)
    runs = find_runs(paths, exclude=[out_dir], fmt=fmt)
    progress = FleetProgress(len(runs), enabled=not quiet)
    try:
        result = run_fleet(paths, out_dir, engine=engine, address=address, workers=workers, config=cfg,
                           policy=policy, metrics=metrics_fmt, reports="none" if no_html else reports,
                           plotly_js=plotly_js, fmt=fmt, runs=runs, on_result=progress,
                           policy_name=str(policy_path) if policy_path else None)
    finally:
        progress.close()
    if not quiet:
        rows = sort_rows(result.rows)
        gate = ""
        if policy is not None:
            gate = f"; gate: {sum(r['gate'] == 'passed' for r in rows)} passed, " \
                   f"{sum(r['gate'] in ('failed', 'error') for r in rows)} failed"
        peak = max((w.peak_rss for w in result.workers.values()), default=0)
        workers_note = f", {len(result.workers)} workers, at most {peak / 2**20:.0f} MB each" if result.workers else ""
        echo(f"{len(rows)} runs scanned ({engine}{workers_note}): {result.unreadable} could not be read{gate}")
        for r in rows[:5]:
            what = f"error: {r['error']}" if r["error"] else (
                ("not judged, " if r["health"] is None else f"health {r['health']:.2f}, ")
                + f"{r['findings']['critical']} critical, "
                f"{r['findings']['warning']} warning"
                + (f", first domino {r['first_domino_rule']} @ {r['first_domino_step']}"
                   if r["first_domino_rule"] else ""))
            echo(f"  {r['run']}: {what}" + (f" [gate {r['gate']}]" if r["gate"] else ""))
        echo("wrote " + ", ".join(str(p) for p in result.paths.values()))
    if result.rows and result.unreadable == len(result.rows):
        first = next(r for r in result.rows if r.get("error"))
        raise InputError(f"not one of the {len(result.rows)} run(s) could be read (the first: {first['error']}); "
                         f"each run's error is in {out_dir}")
    if result.gate_failed:
        click.get_current_context().exit(EXIT_GATE_FAILED)


@main.command()
@click.argument("src", type=click.Path(path_type=Path))
@click.option("-o", "--output", "--out", "out_path", cls=_HiddenAliases, hidden_aliases=("--out",),
              type=click.Path(path_type=Path), required=True,
              help="Parquet file to write (the canonical step stream).")
@_input_format_option
@_deprecated_format_option
@click.option("--strict", is_flag=True, help="A malformed row is fatal (exit 3).")
@_verbosity
def convert(src: Path, out_path: Path, fmt: str | None, old_fmt: str | None, strict: bool, quiet: bool,
            verbose: bool) -> None:
    """Convert a trainer log (any supported format) to the canonical step stream in Parquet.

    Keys are renamed to canonical names with their units normalised; unknown keys are kept under
    their own names. The read report and the column mapping go into the file's metadata.
    """
    from .io.convert import convert as convert_log

    result = convert_log(src, out_path, fmt=_resolve_format(fmt, old_fmt), strict=strict)
    if quiet:
        return
    r = result.report
    echo(f"{src} [{r.format}]: {r.rows_read} rows read, {r.rows_skipped} skipped")
    for note in r.notes:
        echo(f"  note: {note}")
    for src_key, dst in sorted(result.mapping.mapping.items()):
        if src_key != dst or verbose:
            echo(f"  {src_key} -> {dst}")
    if result.mapping.unmapped:
        echo(f"  unmapped (kept as is): {', '.join(sorted(result.mapping.unmapped))}")
    echo(result.summary())


# --- watch ---------------------------------------------------------------------------------

@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@_deprecated_format_option
@_META
@common_options
@click.option("--interval", type=Checked(Allowed(float, ge=0.01, le=86400)), default=2.0, show_default=True,
              help="Seconds between polls.")
@click.option("--once", is_flag=True, help="Read what is there now, report, and exit.")
@click.option("--timeout", type=Checked(Allowed(float, ge=0)), help="Stop after this many seconds.")
@click.option("--wait", is_flag=True, help="Wait for a path that does not exist yet (without it, a "
              "missing or unusable path exits 3 at once).")
@click.option("--min-severity", type=click.Choice(["info", "warning", "critical"]), default="info",
              show_default=True, help="Print findings of at least this severity.")
@click.option("--jsonl", "jsonl_path", type=click.Path(path_type=Path),
              help="Append each alert (new or escalated finding) to this file as a JSON line.")
@click.option("--fail-on", type=click.Choice(["info", "warning", "critical"]),
              help="Exit 1 once a finding reaches this severity (stops watching then).")
@click.option("--notify", "notify_url", metavar="URL", help="Post each alert (new or escalated finding) "
              "to this webhook, from a background thread with retries; a failing endpoint is reported once.")
@click.option("--notify-format", type=click.Choice(["json", "slack", "discord"]), default="json",
              show_default=True, help="Body of each --notify post: the alert as JSON, or a Slack or "
              "Discord webhook message.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the alerts (no start and stop lines).")
def watch(path: Path, fmt: str | None, old_fmt: str | None, meta: Path | None, config_path: Path | None,
          maps: tuple[str, ...], kl_target: float | None, kl_unit: str | None, interval: float, once: bool,
          timeout: float | None, wait: bool, min_severity: str, jsonl_path: Path | None, fail_on: str | None,
          notify_url: str | None, notify_format: str, quiet: bool) -> None:
    """Follow a growing log and print each finding when it appears, and again when it escalates.

    PATH is a log file, a run folder (its steps.* and run.json) or a trainer's output_dir, as
    for scan. Line-oriented logs are read incrementally, others re-read when they change. Stop
    with Ctrl-C (or --once / --timeout).
    """
    from .analysis.findings import Severity
    from .io.lean import resume_collection
    from .live.notify import Notifier
    from .live.watch import Watcher

    resume_collection()  # a watch runs until stopped: collect as usual from here
    cfg = build_config(config_path, kl_target, kl_unit, False, None, maps)
    say = (lambda s: None) if quiet else echo
    notify = None if notify_url is None else Notifier(
        notify_url, notify_format, run=cfg.run.name or str(path),
        on_error=lambda text: echo(f"warning: {text}", err=True))
    watcher = Watcher(path, fmt=_resolve_format(fmt, old_fmt), config=cfg, echo=echo, status=say,
                      min_severity=Severity.parse(min_severity), meta_path=meta, wait=wait,
                      jsonl=jsonl_path, fail_on=Severity.parse(fail_on) if fail_on else None, notify=notify)
    try:
        watcher.run(interval=interval, once=once, timeout=timeout)
    except KeyboardInterrupt:
        watcher.close_notify(timeout=2.0)
        say(f"stopped: {watcher.scan.rows} step rows analysed, {len(watcher.findings)} alert(s)")
        echo("Interrupted.", err=True)
        click.get_current_context().exit(EXIT_INTERRUPTED)
    if watcher.failed is not None:
        echo(f"failing: {watcher.failed.severity.value} {watcher.failed.rule} reached --fail-on {fail_on}", err=True)
        click.get_current_context().exit(EXIT_GATE_FAILED)
    if notify is not None and notify.none_delivered:
        # every alert lost: the watch did not do its job, and says so in its exit status
        raise InputError(f"none of the {notify.failed + notify.dropped} alert(s) could be delivered to "
                         f"{notify.shown}", path=str(path))


# --- export --------------------------------------------------------------------------------

@main.command()
@click.argument("analysis_path", metavar="ANALYSIS", type=click.Path(path_type=Path))
@click.option("--to", "target", type=click.Choice(["tensorboard", "wandb", "wandb-offline"]), required=True,
              help="tensorboard: forensics/* scalars, each episode as a range and a text summary in an event "
              "file; wandb: the analysed W&B run itself, resumed (summary values, findings and episodes tables, "
              "alerts); wandb-offline: the same as an offline run that `wandb sync` uploads into it.")
@click.argument("out_dir", metavar="[DIR]", required=False, type=click.Path(path_type=Path))
@click.option("-o", "--output", "output", type=click.Path(path_type=Path),
              help="Folder to write into (the same as DIR; as -o/--output in every other command). "
              "For --to wandb: W&B's local folder (default: the current folder).")
@click.option("--run-id", help="W&B: the id of the run the findings describe (default: from the analysed "
              "run folder, run-<date>-<id>); without one, a new run is made.")
@click.option("--project", help="W&B: that run's project (default: from the run folder's .wandb file, "
              "else $WANDB_PROJECT).")
@click.option("--entity", help="W&B: that run's entity (default: from the run folder, else $WANDB_ENTITY "
              "or your default).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
def export(analysis_path: Path, target: str, out_dir: Path | None, output: Path | None, run_id: str | None,
           project: str | None, entity: str | None, quiet: bool) -> None:
    """Send a saved analysis to where you look at runs: TensorBoard or the W&B run it describes.

    ANALYSIS is an analysis.json (or the folder a scan wrote); DIR (or -o DIR) the folder to write
    into. For TensorBoard, write into a folder inside the run's TensorBoard folder (runs/X/forensics)
    and `tensorboard --logdir runs/X` shows both. For W&B, the analysed run is resumed when it is
    known (a scanned W&B run folder, or --run-id); with wandb-offline, `wandb sync
    DIR/wandb/offline-run-*` uploads into it.
    """
    from .report.export import export_analysis
    from .verdicts.saved import load_analysis

    if out_dir is not None and output is not None and out_dir != output:
        raise UsageError(f"two output folders given: {out_dir} and -o {output}; give one")
    out_dir = out_dir or output or (Path(".") if target == "wandb" else None)
    if out_dir is None:
        raise UsageError("no output folder: give DIR or -o DIR")
    if target == "tensorboard" and (run_id or project or entity):
        raise UsageError("--run-id, --project and --entity name a W&B run: use them with --to wandb or wandb-offline")

    why = _not_an_analysis(analysis_path)
    if why is not None:
        raise _not_an_analysis_error(analysis_path)(
            f"{analysis_path}: {why}; run `forensics scan {analysis_path} -o DIR` first, then "
            f"`forensics export DIR --to {target} ...`")
    file = analysis_path / "analysis.json" if analysis_path.is_dir() else analysis_path
    written = export_analysis(load_analysis(file), target, out_dir, Outputs([file]), run_id=run_id,
                              project=project, entity=entity)
    if target != "tensorboard":
        # run.finish() can return before W&B's service has written the run's last records; its
        # teardown waits for them, so the folder is complete when the command returns (as at the
        # exit of a process), also when the command runs inside another one
        import wandb

        wandb.teardown()
    if not quiet:
        echo(f"wrote {written}")


def entry() -> None:
    """The ``forensics`` program: :func:`main` in a process that loads only what a command needs
    (:mod:`forensics.io.lean`) and leaves as soon as its work is done (:func:`leave`)."""
    import signal

    from .io.lean import leave, pause_collection, pyarrow_without_pandas

    # a job started in the background of a non-interactive shell (a CI runner's step) inherits
    # SIGINT ignored: restore Python's handler, so `kill -INT` (a cancelled job) stops every
    # command as Ctrl-C does (exit 130), watch and fleet included
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    pyarrow_without_pandas()
    pause_collection()  # until the work on the input begins (a scan's or watch's first rows)
    try:
        main()
    except SystemExit as exc:
        leave(exc.code)


if __name__ == "__main__":  # pragma: no cover
    entry()
