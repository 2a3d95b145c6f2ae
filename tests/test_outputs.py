"""Outputs never touch inputs: no command writes over an input, a link or a special file.

Every refusal is a usage error (exit 2) before anything is written; every write goes to a
temporary file renamed into place, so a failed command leaves the old file as it was.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics.cli import main
from forensics.errors import UsageError
from forensics.io.output import Outputs

from .conftest import healthy_rows, write_jsonl


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def digest(*paths: Path) -> list[str]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "steps.jsonl", healthy_rows(80))


def refused(res, *words: str) -> None:
    assert res.exit_code == 2, res.output
    assert "refusing to write" in res.output or "cannot" in res.output, res.output
    for w in words:
        assert w in res.output, res.output
    assert "internal error" not in res.output


def test_scan_into_the_input_folder_never_replaces_an_input(tmp_path: Path) -> None:
    """`forensics scan wandb/metrics.csv -o wandb/` would replace the input with the table."""
    folder = tmp_path / "wandb"
    folder.mkdir()
    src = folder / "metrics.csv"
    src.write_text("step,kl\n" + "".join(f"{i},{0.05 + 0.001 * (i % 7)}\n" for i in range(60)))
    before = digest(src)
    res = run("scan", str(src), "-o", str(folder), "-q")
    refused(res, "metrics.csv")
    assert digest(src) == before
    assert sorted(p.name for p in folder.iterdir()) == ["metrics.csv"]  # nothing else written


def test_an_input_named_analysis_json_is_not_replaced(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "analysis.json", healthy_rows(60))  # a JSONL log with that name
    before = digest(src)
    refused(run("scan", str(src), "--format", "jsonl", "-o", str(tmp_path), "-q"), "analysis.json")
    assert digest(src) == before


def test_samples_meta_and_config_are_inputs_too(tmp_path: Path, log: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    samples = write_jsonl(out / "findings.csv", [{"step": i, "length": 10, "reward": 0.5} for i in range(80)])
    before = digest(samples)
    refused(run("scan", str(log), "--samples", str(samples), "-o", str(out), "-q"), "findings.csv")
    cfg = out / "summary.json"
    cfg.write_text("")
    refused(run("scan", str(log), "--config", str(cfg), "-o", str(out), "-q"), "summary.json")
    assert digest(samples) == before


def test_links_to_an_input_are_refused(tmp_path: Path, log: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    os.link(log, out / "metrics.csv")  # a hard link: the same inode
    before = digest(log)
    refused(run("scan", str(log), "-o", str(out), "-q"), "it is the input")
    (out / "metrics.csv").unlink()
    (out / "analysis.json").symlink_to(log)  # a symbolic link: never written through
    refused(run("scan", str(log), "-o", str(out), "-q"), "symbolic link")
    assert digest(log) == before and (out / "analysis.json").is_symlink()


def test_a_run_folder_rescanned_into_itself_keeps_its_logs(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_jsonl(run_dir / "steps.jsonl", healthy_rows(80))
    before = digest(run_dir / "steps.jsonl")
    for _ in range(2):  # the second scan replaces the first one's reports
        res = run("scan", str(run_dir), "-o", str(run_dir), "-q")
        assert res.exit_code == 0, res.output
    assert digest(run_dir / "steps.jsonl") == before
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]


def test_convert_onto_its_source_is_refused(tmp_path: Path, log: Path) -> None:
    before = digest(log)
    refused(run("convert", str(log), "-o", str(log)), "it is the input")
    refused(run("convert", str(log), "-o", str(tmp_path / "." / "steps.jsonl")), "steps.jsonl")
    assert digest(log) == before


def test_convert_into_a_parts_folder_never_replaces_a_part(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = tmp_path / "steps.parquet.parts"
    parts.mkdir()
    for i in range(2):
        pq.write_table(pa.table({"step": list(range(i * 50, i * 50 + 50)), "kl": [0.05] * 50}),
                       parts / f"part-{i:05d}.parquet")
    before = digest(parts / "part-00000.parquet")
    refused(run("convert", str(parts), "-o", str(parts / "part-00000.parquet")), "inside the input folder")
    assert digest(parts / "part-00000.parquet") == before
    assert run("convert", str(parts), "-o", str(tmp_path / "out.parquet"), "-q").exit_code == 0


@pytest.mark.parametrize("kind", ["fifo", "symlink", "folder", "device"])
def test_convert_writes_only_over_regular_files(tmp_path: Path, log: Path, kind: str) -> None:
    target = tmp_path / "out.parquet"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "symlink":
        (tmp_path / "elsewhere").write_text("keep me")
        target.symlink_to(tmp_path / "elsewhere")
    elif kind == "folder":
        target.mkdir()
    else:
        try:  # a device node of our own (never /dev/full: a regression would replace it)
            os.mknod(target, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        except (PermissionError, OSError):
            pytest.skip("cannot create a device node here")
    mode = target.lstat().st_mode
    refused(run("convert", str(log), "-o", str(target)))
    assert target.lstat().st_mode == mode
    if kind == "symlink":
        assert (tmp_path / "elsewhere").read_text() == "keep me"


def test_an_output_under_a_file_is_a_usage_error(tmp_path: Path, log: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    refused(run("convert", str(log), "-o", str(afile / "x.parquet")), "afile")
    refused(run("scan", str(log), "-o", str(afile / "reports"), "-q"), "afile")
    refused(run("scan", str(log), "-o", str(afile), "-q"), "afile is a file, not a folder")
    assert afile.read_text() == "x"


def test_report_and_gate_outputs_are_checked(tmp_path: Path, log: Path) -> None:
    assert run("scan", str(log), "-o", str(tmp_path / "r"), "-q").exit_code == 0
    analysis = tmp_path / "r" / "analysis.json"
    before = digest(analysis, log)
    policy = tmp_path / "p.toml"
    policy.write_text('fail_on = "critical"\n')
    # a report's own name (a link into its store): refused before the input is even compared
    refused(run("gate", str(analysis), "--policy", str(policy), "--output", str(analysis)), "a file of the report")
    refused(run("gate", str(log), "--policy", str(policy), "--output", str(log)), "it is the input")
    refused(run("gate", str(analysis), "--policy", str(policy), "--output", str(policy)), "p.toml")
    # the log the saved analysis was made from is protected too
    refused(run("gate", str(analysis), "--policy", str(policy), "--output", str(log)), "steps.jsonl")
    (tmp_path / "r" / "report.html").unlink()
    os.link(analysis.resolve(), tmp_path / "r" / "report.html")  # the file, not the link
    refused(run("report", str(analysis)), "it is the input")
    assert digest(analysis, log) == before
    res = run("gate", str(analysis), "--policy", str(policy), "--output", str(tmp_path / "gate.txt"))
    assert res.exit_code in (0, 1) and (tmp_path / "gate.txt").read_text().startswith("gate ")


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    out = tmp_path / "x.txt"
    out.write_text("old")
    outputs = Outputs()
    with pytest.raises(RuntimeError), outputs.open(out) as fh:
        fh.write("half")
        raise RuntimeError("killed mid-write")
    assert out.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["x.txt"]
    outputs.write_text(out, "new")
    assert out.read_text() == "new"
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~_umask()  # an ordinary file, not 0600


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_outputs_compares_files_not_names(tmp_path: Path) -> None:
    src = tmp_path / "a.jsonl"
    src.write_text("{}\n")
    outputs = Outputs([src, None, tmp_path / "missing"])
    with pytest.raises(UsageError, match="it is the input"):
        outputs.write_text(tmp_path / "sub" / ".." / "a.jsonl", "x")  # sub/ is made, then the path checked
    (tmp_path / "sub2").mkdir()
    with pytest.raises(UsageError, match="it is the input"):
        outputs.check(tmp_path / "sub2" / ".." / "a.jsonl")
    assert src.read_text() == "{}\n"
    outputs.check(tmp_path / "b.jsonl")  # a new file: fine
    (tmp_path / "c.jsonl").write_text("{}\n")
    outputs.check(tmp_path / "c.jsonl")  # another regular file: replaced
