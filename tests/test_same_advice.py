"""The same advice everywhere (issue 37): the terminal summary, report.md and report.html show
what :func:`forensics.report.verdict.advice` decides, on real runs of the reference trainer: the
do-now list with the patch of exactly its changes, then the rest with a patch of its own (to
apply if the fault persists); none prints the whole patch as one."""

from __future__ import annotations

import html
import json
import re

import pytest

from forensics.analysis.diagnosis.timeline import timeline_from_dict
from forensics.analysis.engine import scan_path
from forensics.report.files import to_json
from forensics.report.html import render_html
from forensics.report.markdown import render_markdown
from forensics.report.terminal import render_summary
from forensics.report.verdict import LATER, verdict

from .conftest import FIXTURES


def _terminal(text: str) -> dict:
    block = re.search(r"^recommended after the do-now changes.*?\n(.*?)(?:\n\n|\Z)", text, re.M | re.S)
    later = re.findall(r"^  \[([^\]]+)\] (.*)$", block.group(1), re.M) if block else []
    return {"now": re.findall(r"^  do now: (.*)$", text, re.M),
            "now_patch": [json.loads(p) for p in re.findall(r"^  do now, config patch: (.*)$", text, re.M)],
            "later": later,
            "later_patch": [json.loads(p) for p in re.findall(r"^  if it persists, config patch: (.*)$", text, re.M)],
            "patches": len(re.findall(r"config patch: ", text))}


def _unmd(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _markdown(text: str) -> dict:
    def block(title: str) -> list[str]:
        if title not in text:
            return []
        lines = text[text.index(title) + len(title):].lstrip("\n").split("\n")
        return [_unmd(x[2:]) for x in lines[:next((i for i, x in enumerate(lines) if not x.startswith("- ")),
                                                  len(lines))]]

    later = [tuple(x.split(": ", 1)) for x in block("**After the do-now changes:**")]
    return {"now": block("**Do now:**"),
            "now_patch": [json.loads(p) for p in re.findall(r"^Config patch of these changes \([^)]*\): `(.*)`$",
                                                            text, re.M)],
            "later": later,
            "later_patch": [json.loads(p) for p in re.findall(r"^Config patch if it persists \([^)]*\): `(.*)`$",
                                                              text, re.M)],
            "patches": len(re.findall(r"^Config patch", text, re.M))}


def _html(page: str) -> dict:
    head = page[:page.index('id="findings"')]
    section = page[page.index('<section id="recommendations">'):] if 'id="recommendations"' in page else ""
    section = section[:section.index("</section>")] if section else ""
    at = head.find('class="todo"')
    todo = head[at:head.index("</ol>", at)] if at >= 0 else ""
    pres = re.findall(r'<pre id="(do-now-patch|later-patch)">(.*?)</pre>', page, re.S)
    later = [(words.lower(), html.unescape(item))
             for words, items in re.findall(r"<h3>([^<]+)</h3><ul class=\"plain\">(.*?)</ul>", section, re.S)
             if words.lower() in {w for _, w in LATER} and words != "Now"
             for item in re.findall(r"<li>(.*?)</li>", items)]
    return {"now": [html.unescape(x) for x in re.findall(r"<li>(.*?)</li>", todo)],
            "now_patch": [json.loads(html.unescape(p)) for k, p in pres if k == "do-now-patch"],
            "later": later,
            "later_patch": [json.loads(html.unescape(p)) for k, p in pres if k == "later-patch"],
            "section_now": [html.unescape(x) for words, items in
                            re.findall(r"<h3>([^<]+)</h3><ul class=\"plain\">(.*?)</ul>", section, re.S)
                            if words == "Now" for x in re.findall(r"<li>(.*?)</li>", items)],
            "patches": len(re.findall(r"Config patch", page))}


@pytest.mark.parametrize("run", ["ppo_lr_high", "grpo_max_length_small", "ppo_kl_off", "ppo_grad_explosion"])
def test_terminal_markdown_and_html_give_the_same_advice(run: str) -> None:
    analysis = scan_path(FIXTURES / "runs" / run)
    d = json.loads(to_json(analysis.to_dict()))
    v = verdict(d["findings"], timeline_from_dict(d), d.get("recommendations"), d.get("coverage"))
    term, md, page = (_terminal(render_summary(analysis)), _markdown(render_markdown(d)),
                      _html(render_html(d, plotly_js="/* plotly stub */")))
    now = [v["do_now_patch"]] if v["do_now_patch"] else []
    later = [v["later_patch"]] if v["later_patch"] else []
    for shown in (term, md, page):
        assert shown["now"] == v["do_now"]
        assert shown["now_patch"][:1] == now and shown["later_patch"] == later
        assert shown["later"] == [(words, item) for words, items in v["later"] for item in items]
    assert page["section_now"] == v["do_now"]  # the page's recommendations say it again, the same
    # two patches at most, never the whole one: what waits is not applied now
    assert term["patches"] == md["patches"] == len(now) + len(later)
    full = (d.get("recommendations") or {}).get("config_patch") or {}
    if later and full:
        assert full not in term["now_patch"] + md["now_patch"] + page["now_patch"]


def test_a_run_with_changes_for_later_is_among_them() -> None:
    """The runs above cover both cases: a patch of the do-now changes alone, and one that waits."""
    d = scan_path(FIXTURES / "runs" / "grpo_max_length_small").to_dict()
    v = verdict(d["findings"], timeline_from_dict(d), d.get("recommendations"), d.get("coverage"))
    assert v["do_now_patch"] == {"max_grad_norm": 1.6}
    assert set(v["later_patch"]) == {"kl_coef_init", "config", "max_length"}
