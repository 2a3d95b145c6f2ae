"""HTML and Markdown reports: structure, escaping of log text, no network, size on long runs."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from forensics.analysis.diagnosis.series import MAX_POINTS, envelope, plots_from_frame
from forensics.analysis.engine import scan_path
from forensics.cli import main
from forensics.report.files import to_json
from forensics.report.html import _json_script, _packed, build_figures, render_html
from forensics.report.markdown import render_markdown

from .conftest import FIXTURES, RLDK, healthy_rows, write_jsonl
from .test_timeline import cascade_rows

XSS_SCRIPT = "<script>alert(1)</script>"
XSS_IMG = '<img src=x onerror="alert(2)">'
STUB_JS = "/* plotly stub */"


class Tags(HTMLParser):
    """Collects start tags with their attributes, and the text of each script element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self._in_script: dict[str, str | None] | None = None
        self._buf: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script, self._buf = dict(attrs), []

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._in_script is not None:
            self.scripts.append((self._in_script, "".join(self._buf)))
            self._in_script = None

    def handle_data(self, data: str) -> None:
        if self._in_script is not None:
            self._buf.append(data)


def with_sections(d: dict) -> dict:
    """Add hand-made windows, recommendations and generation sections with hostile text."""
    d = json.loads(json.dumps(d))
    d["windows"] = [{"window": i, "first_step": 100 * i, "last_step": 100 * i + 99, "reward_mean": 0.1 * i,
                     "loss_mean": 0.5, "reward_var": 0.01, "reward_trend": "up", "loss_trend": "flat",
                     "status": "healthy" if i < 2 else "warning",
                     "issues": [] if i < 2 else [f"reward falls {XSS_IMG}"]} for i in range(4)]
    d["recommendations"] = {
        "adjustments": [{"parameter": "learning_rate", "current": 1e-5, "suggested": 8e-6,
                         "reason": f"grad.explode {XSS_SCRIPT}"}],
        "config_patch": {"learning_rate": 8e-6},
        "priorities": {"immediate": ["Lower the learning rate 20%"], "short_term": ["Clip at 1.0"],
                       "medium_term": []},
        "monitoring": ["grad_norm"]}
    d["generation"] = {"format_compliance": 0.9, "examples": {
        "best": [{"step": 10, "reward": 1.0, "prompt": "2+2?", "completion": "4 </script><b>bold</b>"}],
        "worst": [{"step": 20, "reward": -1.0, "prompt": XSS_IMG, "completion": XSS_SCRIPT + XSS_IMG}]}}
    d["findings"].append({"rule": "kl.spike", "severity": "warning", "tracker": "kl_schedule",
                          "first_step": 5, "last_step": 9, "onset_step": 5, "message": f"msg {XSS_SCRIPT}",
                          "remedy": XSS_IMG, "explanation": "", "evidence": {"note": XSS_SCRIPT}})
    d["inputs"][0]["path"] = f"/runs/{XSS_IMG}/steps.jsonl"
    return d


@pytest.fixture(scope="module")
def analysis(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("html")
    rows = cascade_rows()
    for r in rows:
        r["loss"], r["step_time"], r["gen_tokens_per_s"] = 0.5, 10.0, 2000.0
        r["reward/format"] = 0.5
        r[f"reward/{XSS_IMG}"] = 0.1  # a hostile column name reaches the plot legends
    d = scan_path(write_jsonl(base / "steps.jsonl", rows)).to_dict()
    return json.loads(to_json(d))


def test_sections_present_and_log_text_escaped(analysis: dict) -> None:
    d = with_sections(analysis)
    page = render_html(d, plotly_js=STUB_JS)
    for section in ("summary", "health", "findings", "timeline", "plots", "windows", "recommendations",
                    "generation", "inputs"):
        assert f'id="{section}"' in page, section
    for fig in ("fig-kl", "fig-grad", "fig-adv", "fig-length", "fig-length_reward", "fig-reward", "fig-loss",
                "fig-throughput", "fig-timeline"):
        assert f'id="{fig}"' in page, fig
    assert "First domino" in page and "hyperparams.lr_change" in page
    # hostile text only ever appears escaped
    assert XSS_SCRIPT not in page and "<img" not in page and "<b>bold" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=" in page
    parser = Tags()
    parser.feed(page)
    scripts = parser.scripts
    assert len(scripts) == 3
    assert scripts[0] == ({}, STUB_JS)
    assert scripts[1][0] == {"type": "application/json", "id": "forensics-data"}
    assert "Plotly.newPlot" in scripts[2][1] and "alert" not in scripts[2][1]
    # no inline event handlers, no external resources
    for tag, attrs in parser.tags:
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)
        assert "src" not in attrs, tag
        assert not str(attrs.get("href") or "").startswith(("http", "//")), tag
        assert tag not in ("link", "iframe", "object", "embed", "img")
    assert not re.search(r"https?://", page.replace(STUB_JS, ""))
    # the data block is plain JSON with no raw '<' (so no log text can close it)
    data_text = scripts[1][1]
    assert "<" not in data_text and "</" not in data_text
    data = json.loads(data_text)
    ids = [f["id"] for f in data["figures"]]
    assert "fig-kl" in ids and "fig-timeline" in ids
    names = [t.get("name", "") for f in data["figures"] for t in f["data"]]
    assert any("&lt;img" in n for n in names)  # plotly labels are escaped too
    kl = next(f for f in data["figures"] if f["id"] == "fig-kl")
    assert any(s["type"] == "rect" and s["yref"] == "paper" for s in kl["layout"]["shapes"])  # shaded
    grad = next(f for f in data["figures"] if f["id"] == "fig-grad")
    assert grad["layout"]["yaxis"]["type"] == "log"


def test_missing_sections_are_skipped() -> None:
    d = json.loads(to_json(scan_path(RLDK).to_dict()))
    for k in ("windows", "recommendations", "generation", "plots", "timeline"):
        d.pop(k, None)
    page = render_html(d, plotly_js=STUB_JS)
    for section in ("windows", "recommendations", "generation"):
        assert f'id="{section}"' not in page
    assert 'id="findings"' in page and "kl.spike" in page
    assert "carries no plot series" in page
    assert 'id="fig-timeline"' in page  # rebuilt from the findings


def test_kl_target_band_drawn(analysis: dict) -> None:
    d = json.loads(json.dumps(analysis))
    d["run"]["kl_target"] = 0.05
    page = render_html(d, plotly_js=STUB_JS)
    assert "band [0.025, 0.075]" in page


def test_envelope_keeps_spikes() -> None:
    n = 100_000
    rng = np.random.default_rng(0)
    steps = np.arange(n)
    v = rng.normal(0, 1, n)
    v[54_321], v[77_777] = 80.0, -60.0
    x, y = envelope(steps, v)
    assert len(x) <= MAX_POINTS
    assert y.max() == 80.0 and x[y.argmax()] == 54_321
    assert y.min() == -60.0 and x[y.argmin()] == 77_777
    assert np.all(np.diff(x) > 0)
    v[::7] = np.nan  # NaN rows are skipped, not plotted as gaps that hide the spike
    x, y = envelope(steps, v)
    assert y.max() == 80.0


def test_100k_steps_weigh_at_most_1_5_mb_inline(analysis: dict, tmp_path: Path) -> None:
    n = 100_000
    rng = np.random.default_rng(1)
    frame = {"step": np.arange(n, dtype=np.int64)}
    for name in ("kl", "kl_coef", "grad_norm", "grad_norm_value", "advantage_mean", "advantage_std",
                 "reward_mean", "reward/format", "reward/correct", "response_length_mean",
                 "truncation_rate", "loss", "policy_loss", "value_loss", "entropy", "step_time",
                 "gen_tokens_per_s", "learning_rate"):
        frame[name] = np.exp(rng.normal(0, 0.2, n)).astype(np.float32)
    frame["grad_norm"][61_234] = 1e4
    plots = plots_from_frame(frame)
    assert max(plots["series"]["grad_norm"]["y"]) == 1e4
    d = json.loads(json.dumps(analysis))
    d["plots"] = plots
    d["steps"].update(first=0, last=n - 1, rows=n)
    section = len(to_json({"plots": plots}))
    page = render_html(d)
    out = tmp_path / "report.html"
    out.write_text(page, encoding="utf-8")
    size = out.stat().st_size
    print(f"100k steps: plots section {section / 1e6:.2f} MB, HTML {size / 1e6:.2f} MB")
    assert section < 1.5e6
    assert size <= 1.5e6  # every plot drawn, plotly.js inlined
    assert len(re.findall(r'<div class="plot" id="fig-', page)) == len(build_figures(d)) + 1 >= 10  # + timeline
    data = json.loads(_data_block(page))
    grad = next(f for f in data["figures"] if f["id"] == "fig-grad")
    policy = grad["data"][0]
    assert max(policy["y"]) == 1e4 and len(policy["y"]) <= MAX_POINTS  # the spike survives thinning
    steps = np.cumsum(policy["xd"])  # steps are stored as differences, added up by the page
    assert steps[int(np.argmax(policy["y"]))] == 61_234 and np.all(np.diff(steps) > 0)


def test_traces_sharing_their_steps_are_differenced_once_and_only_integer_steps_are() -> None:
    """A page's traces mostly share their steps: the differences of equal integer steps are
    reused, never for steps that merely compare equal (floats), nor for other steps."""
    last: list = []
    steps = [0, 1, 3, 7, 20]
    a = _packed({"x": list(steps), "y": [1.0] * 5}, last)
    b = _packed({"x": list(steps), "y": [2.0] * 5}, last)
    floats = _packed({"x": [float(s) for s in steps], "y": [3.0] * 5}, last)  # == steps, not integers
    other = _packed({"x": [0, 2, 3, 7, 20], "y": [4.0] * 5}, last)
    again = _packed({"x": list(steps), "y": [5.0] * 5}, last)
    assert a["xd"] == b["xd"] == again["xd"] == [0, 1, 2, 4, 13] and "x" not in a and "x" not in b
    assert b["xd"] is a["xd"]  # the work not done again
    assert floats["x"] == [0.0, 1.0, 3.0, 7.0, 20.0] and "xd" not in floats
    assert other["xd"] == [0, 2, 1, 4, 13]
    for t, x in ((a, steps), (other, [0, 2, 3, 7, 20]), (again, steps)):
        assert np.cumsum(t["xd"]).tolist() == x  # what the page's script adds back up


def test_the_data_block_escapes_markup_and_line_separators() -> None:
    """No log text can close the script element or break it (U+2028/U+2029 end a line in older
    JavaScript); ASCII text, the usual case, is left as orjson wrote it."""
    text = _json_script({"name": "</script><b>&\u2028\u2029é", "y": [1.5]})
    assert not any(c in text for c in "<>&\u2028\u2029")
    assert json.loads(text) == {"name": "</script><b>&\u2028\u2029é", "y": [1.5]}
    assert _json_script({"name": "plain", "y": [1.5]}) == '{"name":"plain","y":[1.5]}'


def _data_block(page: str) -> str:
    start = page.index('id="forensics-data">') + len('id="forensics-data">')
    return page[start: page.index("</script>", start)]


def test_markdown_summary(analysis: dict) -> None:
    md = render_markdown(with_sections(analysis))
    assert md.startswith("## forensics: ")
    assert "| overall |" in md and "First domino:" in md and "`hyperparams.lr_change`" in md
    assert "<script" not in md and "<img" not in md
    assert "&lt;script&gt;" in md
    assert "**Do now:**" in md


def test_report_command_renders_saved_analysis(tmp_path: Path) -> None:
    rows = healthy_rows(200)
    log = write_jsonl(tmp_path / "run.jsonl", rows)
    res = CliRunner().invoke(main, ["scan", str(log), "-o", str(tmp_path / "out"), "-q"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "out" / "report.html").stat().st_size > 0
    assert (tmp_path / "out" / "report.md").stat().st_size > 0
    log.unlink()  # the report command never reads the logs again
    res = CliRunner().invoke(main, ["report", str(tmp_path / "out" / "analysis.json"), "-o",
                                    str(tmp_path / "again"), "--format", "md"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "again" / "report.md").exists() and not (tmp_path / "again" / "report.html").exists()
    res = CliRunner().invoke(main, ["report", str(tmp_path / "out"), "-o", str(tmp_path / "h"),
                                    "--format", "html"])
    assert res.exit_code == 0 and (tmp_path / "h" / "report.html").exists()
    assert CliRunner().invoke(main, ["report", str(tmp_path / "nope.json")]).exit_code == 3
    assert CliRunner().invoke(main, ["report", str(tmp_path / "out" / "analysis.json"),
                                     "--format", "pdf"]).exit_code == 2


def test_timeline_chart_stays_readable_with_many_findings(analysis: dict) -> None:
    d = json.loads(json.dumps(analysis))
    d.pop("timeline", None)
    d["findings"] = [{"rule": "reward.trend", "severity": "info", "first_step": i, "last_step": i + 3,
                      "onset_step": i, "message": "m", "remedy": "", "tracker": "rewards"} for i in range(200)]
    d["findings"].append({"rule": "grad.explode", "severity": "critical", "first_step": 50, "last_step": 60,
                          "onset_step": 50, "message": "boom", "remedy": "", "tracker": "grad_norms"})
    page = render_html(d, plotly_js=STUB_JS)
    fig = next(f for f in json.loads(_data_block(page))["figures"] if f["id"] == "fig-timeline")
    assert len(fig["data"][0]["y"]) <= 40
    assert any("grad.explode" in t for t in fig["layout"]["yaxis"]["ticktext"])


def test_report_without_plots_section_uses_metrics_csv(tmp_path: Path) -> None:
    log = write_jsonl(tmp_path / "run.jsonl", healthy_rows(120))
    assert CliRunner().invoke(main, ["scan", str(log), "-o", str(tmp_path / "out"), "-q"]).exit_code == 0
    path = tmp_path / "out" / "analysis.json"
    d = json.loads(path.read_text())
    del d["plots"]
    renamed = tmp_path / "out" / "old-analysis.json"
    renamed.write_text(to_json(d))
    res = CliRunner().invoke(main, ["report", str(renamed), "-o", str(tmp_path / "r"), "--format", "html"])
    assert res.exit_code == 0, res.output
    assert 'id="fig-kl"' in (tmp_path / "r" / "report.html").read_text()
    # a renamed analysis is recognised by content by gate and diff too
    pol = tmp_path / "p.toml"
    pol.write_text('fail_on = "critical"\n')
    assert CliRunner().invoke(main, ["gate", str(renamed), "--policy", str(pol)]).exit_code == 0


def test_a_recurring_first_domino_starts_the_headline_with_its_first_episode() -> None:
    """The headline says what the run starts with: a root finding of several episodes is told by
    its first (the finding's own message names the largest, which may come much later)."""
    from forensics.analysis.diagnosis.timeline import timeline_from_dict
    from forensics.report.verdict import verdict

    def headline(path: Path) -> str:
        d = scan_path(path).to_dict()
        return verdict(d["findings"], timeline_from_dict(d), d["recommendations"], d["coverage"])["headline"]

    assert headline(FIXTURES / "runs" / "ppo_grad_explosion").startswith(
        "Broken: it starts with learning rate x1,000 at step 100: 0.001 -> 1, the first and largest of 2 "
        "episodes; then ")
    real = FIXTURES.parent.parent / "shared" / "real-logs" / "calibration" / \
        "trl_dpo_gams9b-translation_overoptimisation.log"
    if real.exists():  # a real DPO run whose margin grows in nine bursts from step 166
        said = headline(real)
        assert said.startswith("Warning: it starts with implicit-reward margin (median of 20 rows) grew to 11.1 "
                               "at step 175")
        assert "from step 166, the first of 9 episodes (the largest: " in said and "at step 500" in said


# -- the first screen, the plots, the script option ----------------------------------------------
@pytest.fixture(scope="module")
def demo() -> dict:
    return json.loads(to_json(scan_path(FIXTURES / "runs" / "ppo_lr_high").to_dict()))


def test_first_screen_says_what_broke_and_what_to_do(demo: dict) -> None:
    page = render_html(demo, plotly_js=STUB_JS)
    head = page[:page.index('id="findings"')]  # the header and the verdict come before everything else
    assert "<strong>PPO</strong>" in head and "canonical streams (run.json)" in head
    assert "Broken: it starts with learning rate x30 at step 100: 0.001 -&gt; 0.03" in head
    assert '<div class="evidence-words">learning rate x30 at step 100: 0.001 -&gt; 0.03</div>' in head
    assert "<th>before</th><td>0.001</td>" in head and "<th>after</th><td>0.03</td>" in head
    assert "What to do now" in head and "learning rate: 0.03 -&gt; 0.001 (restore)" in head
    assert "&#34;lr&#34;: 0.001" in head  # the config patch, in run.json's own key
    # evidence is a small table everywhere, never raw JSON
    blocks = re.findall(r"<summary>why and evidence</summary>(.*?)</details>", page, re.S)
    assert blocks and all("<pre>" not in b and '<table class="ev">' in b for b in blocks)


def _leaves(patch: dict, prefix: str = "") -> dict[str, object]:
    """A config patch as ``{dotted key: value}``."""
    out: dict[str, object] = {}
    for k, v in patch.items():
        out.update(_leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
    return out


@pytest.mark.parametrize("run, now, later", [
    ("grpo_max_length_small", {"max_grad_norm": 1.6}, {"kl_coef_init", "config.lr", "max_length"}),
    ("ppo_kl_off", {"kl_coef_init": 0.164631}, {"config.lr"}),
    ("ppo_lr_high", {"config.lr": 0.001}, set())])
def test_first_screen_patch_holds_only_the_do_now_changes(run: str, now: dict, later: set) -> None:
    """The full patch also holds the changes for later ("next, if it persists"); the first screen's
    patch holds those the do-now list names, and every one of them."""
    d = json.loads(to_json(scan_path(FIXTURES / "runs" / run).to_dict()))
    page = render_html(d, plotly_js=STUB_JS)
    head = page[:page.index('id="findings"')]
    todo = [html.unescape(li) for li in re.findall(r"<li>(.*?)</li>", head[head.index('class="todo"'):])]
    shown = json.loads(html.unescape(re.search(r'<pre id="do-now-patch">(.*?)</pre>', head, re.S).group(1)))
    assert _leaves(shown) == now
    rec = d["recommendations"]
    assert set(_leaves(rec["config_patch"])) - set(now) == later  # the full patch: also what waits
    for a in rec["adjustments"]:
        named = any(line.startswith(a["text"]) for line in todo)
        assert (a["key"] in now) == (named and a["key"] is not None), (a["parameter"], a["priority"])


def test_plots_log_axes_own_reward_axis_true_captions(demo: dict) -> None:
    figs = {f["id"]: f for f in build_figures(demo)}
    log = figs["fig-loss_log"]
    assert log["layout"]["yaxis"]["type"] == "log" and [t["name"] for t in log["data"]] == ["value loss"]
    assert "value loss" not in [t["name"] for t in figs["fig-loss"]["data"]]
    reward = figs["fig-reward"]
    pen = next(t for t in reward["data"] if t["name"] == "reward − β·KL")
    assert pen["yaxis"] == "y2" and all(t["yaxis"] == "y" for t in reward["data"] if t is not pen)
    kl = figs["fig-kl"]
    assert kl["layout"]["yaxis"]["title"]["text"] == "nats/sequence" and "per-token" not in kl["caption"]
    grad = figs["fig-grad"]
    lr = next(t for t in grad["data"] if t["name"] == "learning rate")
    assert lr["line"]["dash"] == "dot" and "learning rate" in grad["caption"]
    clip = [s for s in grad["layout"]["shapes"] if s["type"] == "line"]
    assert clip and clip[0]["line"]["dash"] == "dash" and "clip threshold max_grad_norm = 2" in grad["caption"]


def test_shading_merges_and_labels_do_not_overlap(demo: dict) -> None:
    span = demo["steps"]["last"] - demo["steps"]["first"]
    for f in build_figures(demo):
        rects = [s for s in f["layout"]["shapes"] if s["type"] == "rect" and s["xref"] == "x"]
        for color in {r["fillcolor"] for r in rects}:
            same = sorted((r["x0"], r["x1"]) for r in rects if r["fillcolor"] == color)
            assert all(a[1] < b[0] for a, b in pairwise(same)), f["id"]  # never stacked
        rows: dict[float, list] = {}
        for n in f["layout"]["annotations"]:
            rows.setdefault(n["y"], []).append((n["x"], len(n["text"])))
        for labels in rows.values():
            labels.sort()
            for (x0, n0), (x1, _) in pairwise(labels):
                assert x1 - x0 >= (n0 + 2) * span / 90.0, f["id"]  # the next label starts after this one


def test_findings_link_to_their_plot_range(demo: dict) -> None:
    page = render_html(demo, plotly_js=STUB_JS)
    links = re.findall(r'<a class="zoom" href="#([\w-]+)" data-fig="([\w-]+)" data-x0="([-\d.]+)" '
                       r'data-x1="([-\d.]+)">', page)
    figs = {f["id"] for f in build_figures(demo)}
    assert len(links) >= len([f for f in demo["findings"] if f["rule"].startswith(("kl.", "loss.", "hyperparams.lr_"))])
    assert all(a == b and b in figs and float(x0) < float(x1) for a, b, x0, x1 in links)


def test_plotly_shared_once_per_folder(demo: dict, tmp_path: Path) -> None:
    from forensics.report.html import PLOTLY_FILE, write_html

    a = write_html(demo, tmp_path / "a.html", script="file")
    lib = tmp_path / PLOTLY_FILE
    first = lib.stat().st_mtime_ns
    write_html(demo, tmp_path / "b.html", script="file")
    assert lib.stat().st_mtime_ns == first  # written once, shared
    page = a.read_text()
    parser = Tags()
    parser.feed(page)
    assert next(attrs.get("src") for tag, attrs in parser.tags if tag == "script") == PLOTLY_FILE
    assert a.stat().st_size < 400_000 < lib.stat().st_size
    inline = Tags()
    inline.feed(render_html(demo))
    assert all("src" not in attrs for tag, attrs in inline.tags if tag == "script")
    nested = Tags()
    nested.feed(render_html(demo, script="file", plotly_src=f"../{PLOTLY_FILE}"))  # a page in a sub-folder
    assert next(attrs.get("src") for tag, attrs in nested.tags if tag == "script") == f"../{PLOTLY_FILE}"
    lib_text = inline.scripts[0][1]
    assert "plotly.js (basic - minified)" in lib_text[:200] and len(lib_text) > 1_000_000  # inlined


def test_generation_section_says_what_each_rate_measures(demo: dict) -> None:
    page = render_html(demo, plotly_js=STUB_JS)
    gen = page[page.index('id="generation"'):page.index('id="health"')]
    assert "responses matching the tag format" in gen
    assert "the run&#39;s own reward reward/format" in gen
    assert "&#39;summary&#39;" not in gen and "format_rate" not in gen  # no raw nested dict


def test_the_page_written_is_the_rendered_page_in_utf8(demo: dict, tmp_path: Path) -> None:
    """report.html is written from bytes (the vendored plotly.js spliced in undecoded): the same
    bytes as the string page encoded, inlined or with the shared file, and what write_html and
    a scan's reports write."""
    from forensics.report.files import write_rendered
    from forensics.report.html import PLOTLY_SOURCE, render_html_bytes, write_html

    inline = render_html_bytes(demo)
    assert inline == render_html(demo).encode("utf-8")
    assert inline.count(PLOTLY_SOURCE.read_bytes()) == 1
    assert render_html_bytes(demo, script="file") == render_html(demo, script="file").encode("utf-8")
    assert write_html(demo, tmp_path / "w.html").read_bytes() == inline
    assert write_rendered(demo, tmp_path, ("html",))["html"].read_bytes() == inline
