"""Installable as the README says, set up as the Makefile says.

The documented CI workflow (docs/gate.md; the README shows its core steps) runs as written in a
clean venv: its install step builds and installs the wheel a user's pip builds from this
repository (a copy of the checkout's files stands in for the git URL), then its `run:` steps run
in bash as GitHub runs them, on a healthy and on a broken run. The venv gets the declared runtime
dependencies and nothing else: the installed ones are linked in (PIP_NO_DEPS, so no test
downloads 700 MB), and `pip check` proves they satisfy the wheel's own requirements. The
Makefile's two entry points are checked by their dry runs.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "fixtures" / "runs"
WORKFLOW = "# .github/workflows/rl-gate.yml"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="bash and a POSIX venv layout")


def workflow_text() -> str:
    """The documented GitHub workflow (docs/gate.md), as written."""
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "docs" / "gate.md").read_text(), flags=re.S)
    (block,) = [b for b in blocks if b.startswith(WORKFLOW)]
    return block


def ci_workflow() -> dict:
    """The documented GitHub workflow, parsed."""
    return yaml.safe_load(workflow_text())


def checkout_copy(dest: Path) -> Path:
    """The files a clone would have: tracked and untracked-but-not-ignored (git), else the package's own."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True)
    names = [n for n in listed.stdout.split("\0") if n] if listed.returncode == 0 else []
    if not names:
        names = ["pyproject.toml", "README.md", *(str(p.relative_to(ROOT)) for p in (ROOT / "forensics").rglob("*")
                                                   if p.is_file() and "__pycache__" not in p.parts)]
    for name in names:
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def runtime_closure() -> dict[str, md.Distribution]:
    """The installed distributions pyproject's runtime dependencies need, transitively (no extras)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    runtime = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    todo = [(r, frozenset[str]()) for r in runtime]
    found: dict[str, md.Distribution] = {}
    while todo:
        text, extras = todo.pop()
        req = Requirement(text)
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in {"", *extras}):
            continue
        key = canonicalize_name(req.name)
        if key not in found:
            found[key] = md.distribution(req.name)
            todo += [(r, frozenset(req.extras)) for r in found[key].requires or []]
    return found


def link_runtime(dest: Path) -> Path:
    """A folder of links to the runtime closure's files (packages, modules, dist-info), nothing else."""
    dest.mkdir()
    for dist in runtime_closure().values():
        assert dist.files, f"{dist.metadata['Name']}: no RECORD, cannot tell its files"
        for top in {f.parts[0] for f in dist.files} - {"..", "__pycache__"}:
            target = Path(str(dist.locate_file(top)))
            if target.exists() and not (dest / top).exists():
                (dest / top).symlink_to(target)
    return dest


def clean_venv(root: Path) -> Path:
    """A new venv with its own pip and the runtime dependencies linked in through a .pth file."""
    venv.EnvBuilder(with_pip=True).create(root / "venv")
    (site,) = (root / "venv" / "lib").glob("python3*/site-packages")
    (site / "_runtime_deps.pth").write_text(f"{link_runtime(root / 'deps')}\n")
    return root / "venv"


def github_env(venv_dir: Path, job_env: dict[str, str], summary: Path) -> dict[str, str]:
    """The step environment: the clean venv first on PATH (as setup-python), nothing of the test's venv."""
    ours = str(Path(sys.prefix) / "bin")
    path = [str(venv_dir / "bin"), *(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != ours)]
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
    return {**env, **job_env, "PATH": os.pathsep.join(path), "GITHUB_STEP_SUMMARY": str(summary),
            "PIP_NO_DEPS": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def run_steps(steps: list[dict], cwd: Path, env: dict[str, str]) -> list[tuple[str, int, str]]:
    """The `run:` steps in order, as GitHub runs them: bash -eo pipefail; after a failure only
    `if: always()` steps run. `(command, exit code or None when not run, output)` for each."""
    done: list[tuple[str, int, str]] = []
    failed = False
    for step in steps:
        if failed and step.get("if") != "always()":
            continue
        res = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=cwd,
                             env=env, capture_output=True, text=True, timeout=600)
        done.append((step["run"], res.returncode, res.stdout + res.stderr))
        failed = failed or res.returncode != 0
    return done


def registry_reachable(venv_dir: Path, tmp: Path) -> bool:
    probe = subprocess.run([str(venv_dir / "bin" / "python"), "-m", "pip", "download", "--no-deps", "-q",
                            "-d", str(tmp / "probe"), "setuptools>=77"], capture_output=True, text=True, timeout=600)
    return probe.returncode == 0


def test_the_documented_ci_workflow_is_valid(tmp_path: Path) -> None:
    """A complete workflow (a trigger, a job, steps), valid against GitHub's workflow schema as
    check-jsonschema ships it, installing forensics from a ref that exists (the main branch)."""
    pytest.importorskip("check_jsonschema")
    block = workflow_text()
    wf = tmp_path / "rl-gate.yml"
    wf.write_text(block)
    res = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                          str(wf)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    parsed = ci_workflow()
    assert parsed[True] or parsed.get("on")  # PyYAML reads the key `on` as True
    assert parsed["jobs"]["rl-gate"]["env"]["FORENSICS_SRC"].endswith("@main")
    # a workflow without a trigger is refused by the same check (the old README example)
    wf.write_text(block.replace("on:\n  push:\n  pull_request:\n  workflow_dispatch:\n", ""))
    bad = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                          str(wf)], capture_output=True, text=True)
    assert bad.returncode != 0


def test_the_readme_gate_steps_are_the_documented_workflows() -> None:
    """The README's ten lines are the workflow's own steps, in its order, with its install URL:
    the short form cannot drift from the complete one that is validated and run."""
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    (short,) = [yaml.safe_load(b) for b in blocks if "forensics gate" in b]
    job = ci_workflow()["jobs"]["rl-gate"]
    src = job["env"]["FORENSICS_SRC"]
    full = [{k: v.replace("$FORENSICS_SRC", src) if k == "run" else v
             for k, v in s.items() if k in ("uses", "with", "run")} for s in job["steps"]]
    assert short[0] == full[0] and short[-1]["run"].startswith("forensics gate")
    it = iter(full)
    assert all(any(step == s for s in it) for step in short), (short, full)


def workspace(root: Path, run: str) -> Path:
    """The user's repository as actions/checkout leaves it: the training logs at runs/latest."""
    shutil.copytree(RUNS / run, root / "runs" / "latest")
    return root


def test_the_documented_ci_workflow_runs_as_written_from_a_wheel_in_a_clean_venv(tmp_path: Path) -> None:
    job = ci_workflow()["jobs"]["rl-gate"]
    steps = [s for s in job["steps"] if "run" in s]
    install, gate_steps = steps[0], steps[1:]
    assert install["run"] == 'pip install "rl-forensics @ $FORENSICS_SRC"' and "FORENSICS_SRC" in job["env"]
    assert not any("examples/" in s["run"] for s in steps), "the example names only the user's own files"
    venv_dir = clean_venv(tmp_path)
    # the workflow's variable, pointed at a copy of this checkout (what pip clones from the git URL)
    src = checkout_copy(tmp_path / "src")
    env = github_env(venv_dir, {**job["env"], "FORENSICS_SRC": src.as_uri()}, tmp_path / "summary.md")
    ((_, rc, out),) = run_steps([install], tmp_path, env)
    if rc != 0 and not registry_reachable(venv_dir, tmp_path):
        pytest.skip("the package registry is unreachable: pip cannot fetch setuptools to build the wheel")
    assert rc == 0 and "rl-forensics" in out, out[-3000:]
    py = str(venv_dir / "bin" / "python")
    where = subprocess.run([py, "-c", "import forensics; print(forensics.__file__)"], env=env,
                           capture_output=True, text=True, cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(venv_dir), where  # the wheel's copy, not the checkout
    check = subprocess.run([py, "-m", "pip", "check"], env=env, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr  # the linked runtime meets the wheel's requirements

    healthy = run_steps(gate_steps, workspace(tmp_path / "healthy", "ppo_healthy_s0"), env)
    assert [rc for _, rc, _ in healthy] == [0] * len(gate_steps), healthy
    assert "::notice title=forensics gate::gate passed" in healthy[1][2]
    suite = ET.parse(tmp_path / "healthy" / "reports" / "latest" / "gate.xml").getroot()
    assert suite.tag == "testsuites" and suite.findall(".//testcase") and not suite.findall(".//failure")
    report = (tmp_path / "healthy" / "reports" / "latest" / "report.md").read_text()
    assert (tmp_path / "summary.md").read_text() == report

    # the default policy fails a damaged run: annotations and JUnit say so, the summary still runs
    broken = run_steps(gate_steps, workspace(tmp_path / "broken", "ppo_lr_high"), env)
    assert [rc for _, rc, _ in broken] == [0, 1, 1, 0], broken
    assert "::error title=forensics reward.decline" in broken[1][2]
    suite = ET.parse(tmp_path / "broken" / "reports" / "latest" / "gate.xml").getroot()
    assert suite.findall(".//failure")


# --- the Makefile's entry points, by their dry runs -------------------------------------------

def make_dry_run(target: str, tmp: Path, *args: str) -> str:
    """`make -n TARGET` with a venv that does not exist yet: the commands a fresh clone would run."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    res = subprocess.run(["make", "-n", "-C", str(ROOT), target, f"VENV={tmp / 'venv'}", *args],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout


def pip_installs(commands: str) -> list[str]:
    return [ln for ln in commands.splitlines() if "-m pip install" in ln and "--upgrade pip" not in ln]


def test_make_demo_installs_the_runtime_only_and_says_how_long(tmp_path: Path) -> None:
    out = make_dry_run("demo", tmp_path)
    assert [ln.split("install --quiet ")[1] for ln in pip_installs(out)] == ["-e ."]
    assert not re.search(r"dev|ray|torch", " ".join(pip_installs(out))) and "apt-get" not in out
    said = out.index("minutes on a first run")
    assert said < out.index("-m venv") < out.index("forensics scan fixtures/runs/ppo_lr_high")
    # after the demo, the command to run next works in a fresh shell (no activated venv needed)
    assert f"{tmp_path / 'venv'}/bin/forensics scan YOUR_LOG" in out and "bin/activate" in out


def test_make_test_adds_dev_tools_ray_torch_from_the_cpu_index_and_chromium(tmp_path: Path) -> None:
    out = make_dry_run("test", tmp_path)
    installs = pip_installs(out)
    assert any("-e ." in ln and "'.[dev,ray]'" not in ln for ln in installs)  # the runtime first, as demo
    assert any("'.[dev,ray]'" in ln for ln in installs)
    (torch,) = [ln for ln in installs if "torch==" in ln]
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in torch
    assert "--extra-index-url" not in " ".join(pip_installs(make_dry_run("test", tmp_path, "TORCH_INDEX=")))
    assert "apt-get install -y -qq chromium" in out and "tests/test_browser.py will be skipped" in out
    assert "pytest -rs" in out


def test_make_eval_writes_tracked_figures_only_with_every_corpus(tmp_path: Path) -> None:
    missing = make_dry_run("eval", tmp_path, f"REAL_LOGS={tmp_path / 'none'}")
    assert "--json build/eval/detection_quality.json" in missing and "reports/detection_quality" in missing
    assert "--json reports/" not in missing and "--txt reports/" not in missing
    assert "not found" in missing
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "build"], capture_output=True, text=True)
    assert tracked.stdout == ""  # build/ holds nothing tracked
    real_logs = ROOT.parent / "shared" / "real-logs"
    if (real_logs / "calibration").is_dir():
        assert "--json reports/detection_quality.json" in make_dry_run("eval", tmp_path)
