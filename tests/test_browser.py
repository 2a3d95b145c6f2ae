"""The HTML report in a real browser: headless Chromium (Debian's package, driven by Playwright)
renders the demo report and two real-log reports at 1400 x 900 and 800 x 900 and checks that
nothing overflows the page sideways, that the first screen holds the verdict (and, for the demo,
the first domino's values and what to do), that every plot drew (with plotly.js's basic bundle),
that a finding's "show on the plot" link zooms its plot, that hovering a plot shows the step and
the values there, and that no rule id or parameter name is broken over two lines. A fleet's table fits
1400 px with its deciding columns in view, and its runs' pages draw with the one plotly.js the
fleet shares.

`make test` (and so CI) installs Chromium with apt where it may; the test is skipped, saying why,
only where no Chromium or no Playwright can be found. ``python -m tests.test_browser docs`` writes
the screenshots of the demo report's first screen committed under docs/.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import FIXTURES, REAL

#: Flags for a headless Chromium on a machine with a closed network (no background connections).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
SIZES = ((1400, 900), (800, 900))


def chromium_path() -> str | None:
    """The Chromium binary: $FORENSICS_CHROMIUM, or chromium / chromium-browser on the PATH."""
    for cand in (os.environ.get("FORENSICS_CHROMIUM"), shutil.which("chromium"),
                 shutil.which("chromium-browser"), "/usr/bin/chromium"):
        if cand and Path(cand).exists():
            return cand
    return None


def launch(playwright: Any, width: int = 1400, height: int = 900) -> Any:
    """A fresh persistent Chromium context (a new, empty profile) of the given viewport."""
    return playwright.chromium.launch_persistent_context(
        tempfile.mkdtemp(prefix="forensics-chromium-"), executable_path=chromium_path(), headless=True,
        args=FLAGS[1:], viewport={"width": width, "height": height})


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for the module (its viewport is set per check)."""
    exe = chromium_path()
    if exe is None:
        pytest.skip("no Chromium found (apt-get install chromium, or set FORENSICS_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install -e '.[dev]')")
    with sync_playwright() as p:
        ctx = launch(p)
        try:
            yield ctx
        finally:
            ctx.close()


def _report(tmp: Path, path: Path, name: str) -> Path:
    from forensics.analysis.engine import scan_path
    from forensics.report.files import write_reports

    return write_reports(scan_path(path), tmp / name)["html"]


REAL_LOGS = [REAL / "verl_v04_console_qwen2_7b_math_megatron.log", REAL / "rldk_grpo_synthetic_seed2.jsonl"]


def _source(name: str) -> Path:
    """The log a named report is made from: the demo run or one of the two real logs."""
    return {"demo": FIXTURES / "runs" / "ppo_lr_high", "verl": REAL_LOGS[0], "rldk": REAL_LOGS[1]}[name]

_LAYOUT = """() => {
  const w = window.innerWidth;
  const wide = Array.from(document.querySelectorAll('section, header, nav, table, pre, .fig'))
    .filter(e => e.getBoundingClientRect().right > w + 1).map(e => e.id || e.tagName);
  const head = document.querySelector('#verdict .headline');
  const box = head ? head.getBoundingClientRect() : null;
  const now = document.querySelector('#verdict .now');
  return {scroll: document.documentElement.scrollWidth, width: w, wide: wide,
          headline: head ? head.textContent.trim() : '', headlineBottom: box ? box.bottom : 1e9,
          nowTop: now ? now.getBoundingClientRect().top : null,
          firstScreen: document.body.innerText.slice(0, 4000),
          plots: document.querySelectorAll('.js-plotly-plot').length,
          divs: document.querySelectorAll('.plot').length};
}"""


@pytest.mark.parametrize("name", ["demo", "verl", "rldk"])
def test_report_fits_the_page_and_opens_with_the_verdict(browser: Any, tmp_path: Path, name: str) -> None:
    page_path = _report(tmp_path, _source(name), name)
    page = browser.new_page()
    for width, height in SIZES:
        try:
            page.set_viewport_size({"width": width, "height": height})
            page.goto(page_path.as_uri())
            page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length > 0", timeout=20000)
            got = page.evaluate(_LAYOUT)
            assert got["scroll"] <= got["width"], (name, width, got["scroll"], got["wide"])
            assert got["wide"] == [], (name, width, got["wide"])
            assert got["headline"] and got["headlineBottom"] <= height, (name, width, got)
            assert got["plots"] == got["divs"] >= 3  # every figure drew
            if name == "demo":
                assert got["headline"].startswith("Broken: it starts with learning rate x30 at step 100")
                assert got["nowTop"] is not None and got["nowTop"] < height, (width, got["nowTop"])
                visible = page.evaluate("""() => {
                  const out = [];
                  document.querySelectorAll('#verdict *').forEach(e => {
                    const r = e.getBoundingClientRect();
                    if (r.bottom <= window.innerHeight && e.children.length === 0) out.push(e.textContent);
                  });
                  return out.join(' ');
                }""")
                assert "learning rate x30 at step 100: 0.001 -> 0.03" in visible
                assert "0.03 -> 0.001" in visible  # what to do: restore the learning rate
                if width == 1400:
                    _hover_shows_the_values(page)
                    _zoom_link_works(page)
        finally:
            if width == SIZES[-1][0]:
                page.close()


#: Every rule id, parameter name, config key and metric name (``.rule``) after opening every
#: ``<details>``: the text of each whose line boxes lie on more than one line, and the page's width.
_NAMES = """() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const broken = [], names = [];
  document.querySelectorAll('.rule').forEach(e => {
    const range = document.createRange();
    range.selectNodeContents(e);
    const tops = Array.from(range.getClientRects()).filter(b => b.width > 0).map(b => b.top);
    if (!tops.length) { return; }
    names.push(e.textContent.trim());
    const line = parseFloat(getComputedStyle(e).lineHeight) || 16;
    if (Math.max(...tops) - Math.min(...tops) > line / 2) { broken.push(e.textContent.trim()); }
  });
  return {names: names, broken: broken, scroll: document.documentElement.scrollWidth,
          width: window.innerWidth};
}"""


@pytest.mark.parametrize("name", ["demo", "verl", "rldk"])
def test_rule_ids_and_parameter_names_never_break(browser: Any, tmp_path: Path, name: str) -> None:
    """At 800 and 1400 px, with every <details> open, each element holding a rule id or a
    parameter name (findings, first domino, chain, links, windows, changes, monitoring, notes)
    renders on one line, and the page does not scroll sideways."""
    from forensics.analysis.engine import scan_path
    from forensics.report.files import write_reports

    analysis = scan_path(_source(name))
    page_path = write_reports(analysis, tmp_path / name)["html"]
    d = analysis.to_dict()
    wanted = {f["rule"] for f in d["findings"]}
    rec = d.get("recommendations") or {}
    wanted |= {a["parameter"] for a in rec.get("adjustments") or []}
    page = browser.new_page()
    try:
        for width, height in SIZES:
            page.set_viewport_size({"width": width, "height": height})
            page.goto(page_path.as_uri())
            got = page.evaluate(_NAMES)
            assert wanted <= set(got["names"]), (name, wanted - set(got["names"]))
            assert got["broken"] == [], (name, width, got["broken"])
            assert got["scroll"] <= got["width"], (name, width, got["scroll"])
    finally:
        page.close()


def _hover_shows_the_values(page: Any) -> None:
    """Hovering a plot shows the step and each line's value there (plotly's unified hover)."""
    drag = page.locator("#fig-grad .nsewdrag").first
    drag.scroll_into_view_if_needed()
    box = drag.bounding_box()
    for dx in (0.30, 0.31):  # two moves: plotly shows the hover on a move within the plot
        page.mouse.move(box["x"] + box["width"] * dx, box["y"] + box["height"] * 0.5)
    page.wait_for_timeout(300)
    texts = page.evaluate("Array.from(document.querySelectorAll('#fig-grad .hoverlayer text'))"
                          ".map(t => t.textContent)")
    assert texts and texts[0].isdigit(), texts  # the step
    values = dict(t.split(" : ") for t in texts[1:])
    assert {"policy", "learning rate"} <= set(values), texts
    assert all(float(v) > 0 for v in values.values()), texts


def _zoom_link_works(page: Any) -> None:
    link = page.locator("#findings a.zoom").first
    fig = link.get_attribute("data-fig")
    x0, x1 = float(link.get_attribute("data-x0")), float(link.get_attribute("data-x1"))
    link.click()
    page.wait_for_timeout(300)
    rng = page.evaluate(f"document.getElementById('{fig}').layout.xaxis.range")
    assert rng == pytest.approx([x0, x1])


_FLEET_LAYOUT = """() => {
  const heads = {};
  document.querySelectorAll('#runs th').forEach(th => {
    heads[th.textContent.trim()] = th.getBoundingClientRect().right;
  });
  return {scroll: document.documentElement.scrollWidth, width: window.innerWidth, heads: heads};
}"""


def test_fleet_table_fits_1400_px_with_verdict_gate_and_first_domino_in_view(browser: Any, tmp_path: Path) -> None:
    """fleet.html at 1400 px: the page does not scroll sideways, and the columns that decide
    (verdict, health, gate, first domino) are on screen; the area scores scroll inside the table.
    A run's report.html draws its plots with the one plotly.js the fleet shares."""
    from forensics.fleet import run_fleet

    runs = tmp_path / "runs"
    for name in ("ppo_lr_high", "ppo_nan_overflow", "grpo_healthy_s0"):
        shutil.copytree(FIXTURES / "runs" / name, runs / "sweep_with_a_long_name" / f"{name}_lr3e-4_seed0_long")
    out = tmp_path / "fleet"
    policy = Path(__file__).resolve().parents[1] / "examples" / "gate-policy.toml"
    from forensics.verdicts.gate import load_policy

    run_fleet([runs], out, workers=1, policy=load_policy(policy), policy_name=str(policy))
    page = browser.new_page()
    try:
        page.set_viewport_size({"width": 1400, "height": 900})
        page.goto((out / "fleet.html").as_uri())
        got = page.evaluate(_FLEET_LAYOUT)
        assert got["scroll"] <= got["width"], got
        for col in ("run", "verdict", "health", "gate", "first domino", "critical"):
            assert got["heads"][col] <= got["width"], (col, got["heads"])
        assert "critical" in page.locator("#runs tbody tr").first.inner_text()
        page.locator("#runs tbody a").first.click()
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length > 0", timeout=20000)
        assert page.url.endswith("/report.html")
    finally:
        page.close()
    assert sorted(p.name for p in out.rglob("plotly-basic.min.js")) == ["plotly-basic.min.js"]  # one copy


def _first_screen(page: Any, report: Path, width: int, height: int) -> bytes:
    """The report's first screen as PNG bytes, once its plots have drawn."""
    page.set_viewport_size({"width": width, "height": height})
    page.goto(report.as_uri())
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length > 0")
    return page.screenshot()


def screenshots(out: Path) -> list[Path]:
    """The demo report's first screen at 1400 and 800 px, as PNG files in ``out``."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        page_path = _report(Path(tmp), FIXTURES / "runs" / "ppo_lr_high", "demo")
        done = []
        with sync_playwright() as p:
            for width, height in SIZES:
                ctx = launch(p, width, height)
                target = out / f"report-first-screen-{width}.png"
                target.write_bytes(_first_screen(ctx.new_page(), page_path, width, height))
                ctx.close()
                done.append(target)
    return done


def _changed_share(png: bytes, committed: Path) -> float:
    """The share of pixels that differ visibly (a channel by more than 40 of 255) between a
    screenshot and a committed picture; 1.0 when their sizes differ. Font smoothing moves single
    pixels by less; a changed word, number or plot moves thousands."""
    import io

    import numpy as np
    from PIL import Image

    a = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)
    b = np.asarray(Image.open(committed).convert("RGB"), dtype=np.int16)
    if a.shape != b.shape:
        return 1.0
    return float((np.abs(a - b).max(axis=2) > 40).mean())


def test_the_pictures_in_the_docs_are_the_report_as_it_is(browser: Any, tmp_path: Path) -> None:
    """The README's picture of the report's first screen (and the narrow one) is what the demo
    report looks like now: a report change that shows on the first screen fails here until
    `make screenshots` takes them again."""
    docs = Path(__file__).resolve().parents[1] / "docs"
    report = _report(tmp_path, _source("demo"), "demo")
    page = browser.new_page()
    try:
        for width, height in SIZES:
            committed = docs / f"report-first-screen-{width}.png"
            share = _changed_share(_first_screen(page, report, width, height), committed)
            assert share < 0.01, (f"{committed.name} is stale ({share:.1%} of its pixels differ from the "
                                  "report as it renders now): run `make screenshots` and commit docs/*.png")
    finally:
        page.close()


if __name__ == "__main__":
    for written in screenshots(Path(sys.argv[1] if len(sys.argv) > 1 else "docs")):
        print(written)
