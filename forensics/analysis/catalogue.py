"""The rules catalogue as Markdown, generated from the code (``forensics rules --markdown``)."""

from __future__ import annotations

import dataclasses
import textwrap

from ..config import RunMeta, allowed_of

__all__ = ["WINDOW_ISSUES_NOTE", "metrics_read_by", "readers", "rule_titles", "rules_markdown", "window_issues"]


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _flow(para: str) -> str:
    """A docstring paragraph as Markdown: lines joined, bullets kept one per line."""
    items = ("\n" + para.strip()).split("\n* ")
    joined = [" ".join(line.strip() for line in item.splitlines()) for item in items]
    return "\n".join(("* " + j) if i else j for i, j in enumerate(joined) if j or i).strip()


def _severity_principle() -> list[str]:
    """The severity principle, from the module that applies it (analysis.diagnosis.consequence)."""
    from .diagnosis import consequence

    doc = (consequence.__doc__ or "").strip().split("\n\n")
    excursions = ", ".join(f"`{r}`" for r in sorted(consequence.EXCURSIONS))
    damage = ", ".join(f"`{r}`" for r in sorted({*consequence.DAMAGE, *consequence.NON_FINITE_RULES}))
    return ["## Severity: from consequence", "",
            "**critical**: the run is damaged, and the finding names the damage (non-finite values, or a "
            "symptom sustained to the end whose consequence holds there: the reward pinned at its floor "
            "or falling, entropy or length collapsed while the reward does not improve, KL out of its "
            "band to the end, responses still cut at the cap). Only the consequence pass makes a finding "
            "critical; a tracker's own alarm is kept as `tracker_severity`. **warning**: a "
            "condition that will damage the run if it goes on. **info**: context, or a single "
            "excursion that recovered with nothing else moving.", "",
            *[line for para in doc[1:] for line in (_flow(para), "")],
            f"Excursion rules: {excursions}. Damage rules: {damage}.", "",
            "Each prior states the context it holds in (the algorithm family, a warm-up, the number "
            "of groups, a KL that is the objective); the rule texts below say when a prior is set "
            "aside, and the finding says why.", ""]


def _doc_markdown(doc: str) -> list[str]:
    """A module docstring's paragraphs as Markdown: ``::`` blocks as TOML code, the rest flowed."""
    out: list[str] = []
    for para in doc.strip().split("\n\n"):
        if para.startswith("    "):
            out += ["```toml", textwrap.dedent(para), "```", ""]
        else:
            text = _flow(para).replace("``", "`")
            out += [text[:-1] if text.endswith("::") else text, ""]
    return out


def _custom_rules() -> list[str]:
    """Your own rules: the custom tracker's docstring, its keys with what each allows, and how a
    config names rules files (all from the code that reads them)."""
    from ..config import RULES_FILES_DOC
    from .trackers import custom

    doc = (custom.__doc__ or "").split("\n\nThe tables can also live")[0]
    keys = [f"| `{k}` | {_cell(custom._RULE[k].describe())} | {_cell(v)} |" for k, v in custom.RULE_KEYS.items()]
    return ["## custom: your own rules", "", *_doc_markdown(doc),
            "| key | allowed | meaning |", "| --- | --- | --- |", *keys, "",
            "### Rules files", "", RULES_FILES_DOC, "",
            "```toml", "# forensics.toml", 'rules_files = ["team.rules.toml"]  # before any [table]', "",
            "[run]", 'algorithm = "grpo"', "```", "",
            "`forensics rules --config FILE` lists a config's rules (and its rules files') with the "
            "built-in ones; `scan`, `watch`, `gate` and the trainer callback run them.", ""]


#: What the window issues are, beside the rules (the catalogue's and ``forensics rules``' note).
WINDOW_ISSUES_NOTE = ("Window issues: the health check judges each window (an epoch or a block of rows) against "
                      "the earlier ones; an issue is listed in the window table (analysis.json windows[].issues) "
                      "and ranked in the recommendations, not raised as a finding. (*): only where the loss "
                      "is a progress signal (its window mean loss_level_sigmas standard deviations from zero, "
                      "and the algorithm not a critic-free group method: GRPO, RLOO, DAPO).")


def window_issues() -> list[dict[str, str]]:
    """The windows tracker's issues (the health check's :data:`RULE_TABLE`), as rules are listed:
    ``id``, ``priority``, ``title``, ``condition`` and ``remedy``."""
    from .trackers.health_check import RULE_TABLE

    return [{"id": r.issue, "priority": r.priority, "title": r.description, "condition": r.condition,
             "remedy": r.remedy} for r in RULE_TABLE]


def _window_issues_markdown() -> list[str]:
    return [WINDOW_ISSUES_NOTE, "", "| issue | priority | when | what to change |", "| --- | --- | --- | --- |",
            *[f"| `{i['id']}` | {i['priority']} | **{_cell(i['title'])}.** {_cell(i['condition'])} | "
              f"{_cell(i['remedy'])} |" for i in window_issues()], ""]


def _ranges_section() -> list[str]:
    """The usual learning rates and KL coefficients with their sources (analysis.ranges)."""
    from . import ranges

    doc = (ranges.__doc__ or "").strip().split("\n\n")
    return ["## Learning rates and KL coefficients: the usual ranges", "",
            *[line for para in doc[1:] for line in (_flow(para), "")], *ranges.ranges_tables()]


def rules_markdown() -> str:
    """Every tracker with its parameters and rules; run metadata fields at the end."""
    from .trackers import TRACKERS, all_rules, param_rows

    by_tracker: dict[str, list] = {}
    for tracker, r in all_rules():
        by_tracker.setdefault(tracker, []).append(r)
    out = ["# Rules catalogue", "",
           "Generated by `forensics rules --format markdown`; do not edit by hand.", "",
           *_severity_principle()]
    for name in [*TRACKERS, *[t for t in by_tracker if t not in TRACKERS]]:
        cls = TRACKERS.get(name)
        out.append(f"## {name}")
        out.append("")
        if cls is not None and cls.__doc__:
            out.append(cls.__doc__.strip().splitlines()[0])
            out.append("")
        rules = by_tracker.get(name, [])
        if rules:
            out += ["| rule | severity | what it means | remedy |", "| --- | --- | --- | --- |"]
            out += [f"| `{r.id}` | {r.severity.value} | **{_cell(r.title)}.** {_cell(r.explanation)}"
                    f" | {_cell(r.remedy)} |" for r in rules]
            out.append("")
        if name == "windows":
            out += _window_issues_markdown()
        if cls is not None:
            out += [f"Parameters (`[{name}]` in a config file):", "",
                    "| parameter | default | allowed | meaning |", "| --- | --- | --- | --- |"]
            out += [f"| `{n}` | `{d!r}` | {_cell(allowed)} | {_cell(doc)} |"
                    for n, d, doc, allowed in param_rows(name)]
            out.append("")
    out += _custom_rules()
    out += _renamed_rules()
    out += _ranges_section()
    out += ["## Run metadata", "", "`run.json` beside the logs, or `[run]` in a config file.", "",
            "| field | allowed | meaning |", "| --- | --- | --- |"]
    out += [f"| `{f.name}` | {_cell(allowed_of(f).describe())} | {_cell(f.metadata.get('doc', ''))} |"
            for f in dataclasses.fields(RunMeta)]
    return "\n".join(out) + "\n"


def _renamed_rules() -> list[str]:
    """The table of old rule ids and the ids they have now."""
    from .trackers import renamed_rules

    renamed = renamed_rules()
    if not renamed:
        return []
    return ["## Renamed rules", "",
            "A rule id's prefix names the module that holds the rule (`hyperparams.*` in "
            "`trackers/hyperparams.py`). The old ids still work in gate policies (a glob matches a "
            "rule by its old id too) and in saved analyses read by `diff`, `gate`, `report` and "
            "`export`; each one read prints a `warning:` line naming the new id.", "",
            "| old id | id now |", "| --- | --- |",
            *[f"| `{old}` | `{new}` |" for old, new in sorted(renamed.items())], ""]


def rule_titles() -> dict[str, str]:
    """Every rule's id and title (the trackers' and the stream's)."""
    from .trackers import all_rules

    return {r.id: r.title for _, r in all_rules()}


def readers(metric: str) -> list[str]:
    """The trackers that read canonical ``metric``, in registry order (from their ``requires``).

    >>> readers("grad_norm")
    ['grad_norms', 'signal']
    """
    from .trackers import TRACKERS

    return [name for name, cls in TRACKERS.items() if metric in cls.requires]


def metrics_read_by(tracker: str) -> tuple[str, ...]:
    """The canonical metrics ``tracker`` reads: its ``requires`` (none for a name outside the
    registry: the config's own rules)."""
    from .trackers import TRACKERS

    cls = TRACKERS.get(tracker)
    return cls.requires if cls is not None else ()
