"""The README is a front page and the documentation a site that builds.

The site (mkdocs.yml, docs/) builds with MkDocs in strict mode: a broken link, a page missing
from the navigation or an API docstring that does not render fails the build, and so this test.
The README stays a front page (at most 12 KB) whose links resolve and whose first scan is what
the scan prints today. The examples of the README and the docs run in tests/test_interfaces.py,
the CI workflow in tests/test_install.py and the picture is checked in tests/test_browser.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"  # no -q: mkdocs counts the warnings strict mode fails on only when it logs them
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                          "-d", str(site)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    api = (site / "api.html").read_text()
    for name in ("scan_path", "Analysis", "RunWriter", "ForensicsCallback", "write_reports"):
        assert name in api, name
    assert not re.search(r":(mod|class|func|meth):<code>", api)  # Sphinx roles shown as code (scripts/mkdocs_hooks.py)
    assert "hyperparams.lr_change" in (site / "rules.html").read_text()


def test_the_readme_is_a_front_page() -> None:
    text = README.read_text()
    assert len(text.encode()) <= 12 * 1024, f"README.md is {len(text.encode()):,} bytes: move detail into docs/"
    head = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [ln.split()[:2] for ln in head] == [["make", "demo"], ["make", "test"]]  # the two set-up commands


def test_the_readme_links_resolve() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    assert len(links) >= 10
    missing = [ln for ln in links if "://" not in ln and not (ROOT / ln).exists()]
    assert not missing, missing


def test_the_readme_first_scan_is_what_the_scan_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each line of the README's console block (``...`` stands for lines left out) is a line of
    the scan's output today, in the same order."""
    block = re.search(r"```console\n\$ forensics (.*?)\n(.*?)```", README.read_text(), flags=re.S)
    assert block is not None
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("NO_COLOR", "1")
    argv = block.group(1).split()
    argv[argv.index("-o") + 1] = str(tmp_path / "out")
    res = CliRunner().invoke(main, argv)
    assert res.exit_code == 0, res.output
    printed = iter(ln.rstrip() for ln in res.output.splitlines())
    for line in block.group(2).splitlines():
        if line.strip() != "...":
            assert any(got == line.rstrip() for got in printed), f"not printed (or out of order): {line}"
