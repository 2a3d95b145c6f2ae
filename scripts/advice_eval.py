"""Advice proven by re-training: apply the scan's config patch to each faulty TRL corpus run, train
it again with the same seed and data, scan it again, and say whether the fault is gone.

``make advice-eval`` runs this with the analyzer's environment; the trainings run in the TRL
environment (``--trl-python``, ``.venv-trl/bin/python``) through ``scripts/trl_corpus.py --run``,
which trains one run of its ``RUNS`` with ``--set`` overrides, one torch thread, ``nice``. For
every run of the corpus (``fixtures/trl``):

* **faulty runs**: the scan's recommendations on the committed run give the config patch (TRL's
  own keys, which are the corpus config's keys). The run is trained again with the *first*
  recommendation alone and, where the patch holds more, with the whole patch; each is scanned.
  Outcomes: *fixed* (none of the label's expected rules fires at warning or above, and the
  primary signal is not worse), *partly fixed* (fewer expected rules fire, or the primary signal
  improves), *not fixed*; *not fixable by config* where the corpus put the cause outside the
  config (:data:`OUTSIDE_CONFIG`: a reward function, a reward model's scale, a callback), and then
  whether the advice names that cause. A patch that leaves the config as it was is not trained
  (the run would be the same).
* **healthy runs**: the patch must be empty (applying nothing changes nothing: the same config
  and seed train the same run; ``--check-healthy`` trains one twice and compares the logs).

The primary signal, the mean of the last 10 logged values: the task's own reward (GRPO and RLOO
``rewards/sentiment/mean`` where it is logged, else ``reward``; PPO ``objective/scores``), DPO's
``rewards/accuracies`` and ``rewards/margins``, KTO's ``rewards/margins``. "Not worse" means at
least the lower of the faulty run's value and the healthy run's (same algorithm, seed 0, same
number of steps), less 0.05 (rewards, accuracies) or a fifth (margins): a reward the fault inflated
(a learning rate so high that every completion is a string of positive words) is not a bar a sound
run must reach. A run trained on another reward than the healthy runs' is held to its own start.

Runs are written outside the repository (``--work``, default ``.venv-trl/cache/advice-eval``) and
reused while their patch is unchanged; only the table is written into the repository
(``--report``, and docs/advice.md between its ``advice-eval`` markers with ``--docs``).

Usage: ``python scripts/advice_eval.py [--only NAME ...] [--steps N] [--report PATH] [--docs]``.
``--steps`` trains every run, the faulty one too, at N steps (for the test; the committed runs
then are not the "before").
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import trl_corpus  # noqa: E402  (the corpus' runs; importing it needs no torch)

CORPUS = ROOT / "fixtures" / "trl"
WORK = ROOT / ".venv-trl" / "cache" / "advice-eval"
TRL_PYTHON = ROOT / ".venv-trl" / "bin" / "python"
REPORT = ROOT / "reports" / "advice_quality.md"
PAGE = ROOT / "docs" / "advice.md"
MARK_BEGIN, MARK_END = "<!-- advice-eval:begin -->", "<!-- advice-eval:end -->"

#: Faults whose cause the corpus put outside the training config, and what it is.
OUTSIDE_CONFIG = {
    "length_reward": "the reward function pays 0.15 per word (`sentiment_plus_length`)",
    "reward_scale": "the reward model returns percent, not a fraction (x100)",
    "lr_jump": "a callback multiplies the learning rate by 100 after step 60 (a schedule bug): "
               "the config's learning_rate is already the sound 1e-4",
}
#: Words that show the advice names the cause of each outside-config fault.
NAMES_CAUSE = {"length_reward": "reward pays for length", "reward_scale": "reward",
               "lr_jump": "restore the learning rate"}
SEVERE = ("warning", "critical")


@dataclass
class Trial:
    """One training of a run with a patch, and what its scan found."""

    patch: dict[str, Any]
    rules: list[str] = field(default_factory=list)  # warning and critical rules
    primary: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    trained: bool = True


# -- the analyzer side -----------------------------------------------------------------------------
def scan(run_dir: Path) -> dict[str, Any]:
    from forensics.analysis.engine import scan_path

    return scan_path(run_dir).to_dict()


def severe_rules(d: dict[str, Any]) -> list[str]:
    return sorted({f["rule"] for f in d["findings"] if f["severity"] in SEVERE})


def first_patch(rec: dict[str, Any]) -> dict[str, Any]:
    """The config patch of the first recommendation alone (the first adjustment with a key)."""
    for a in rec["adjustments"]:
        if a.get("key") and a["key"] in rec["config_patch"]:
            return {a["key"]: rec["config_patch"][a["key"]]}
    return {}


# -- the training side -----------------------------------------------------------------------------
def primary_keys(algorithm: str, history: list[dict[str, Any]]) -> list[str]:
    if algorithm in ("grpo", "rloo"):
        return ["rewards/sentiment/mean"] if any("rewards/sentiment/mean" in r for r in history) else ["reward"]
    return {"ppo": ["objective/scores"], "dpo": ["rewards/accuracies", "rewards/margins"],
            "kto": ["rewards/margins"]}[algorithm]


def history_of(run_dir: Path) -> list[dict[str, Any]]:
    state = json.loads((run_dir / "trainer_state.json").read_text())
    return [r for r in state["log_history"] if "train_runtime" not in r]


def tail_mean(history: list[dict[str, Any]], key: str, upto: int | None = None) -> float:
    vals = [float(r[key]) for r in history if key in r and (upto is None or int(r["step"]) <= upto)]
    vals = [v for v in vals if math.isfinite(v)][-10:]
    return sum(vals) / len(vals) if vals else float("nan")


def train(name: str, patch: dict[str, Any], steps: int | None, work: Path, trl_python: Path) -> tuple[Path, float]:
    """Train corpus run ``name`` with ``patch`` applied (reused when already trained so)."""
    tag = "base" if not patch else "_".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                            for k, v in sorted(patch.items()))
    out = work / (f"steps{steps}" if steps else "full") / name / tag
    done = out / "done.json"
    if done.exists() and (out / name / "trainer_state.json").exists():
        return out / name, float(json.loads(done.read_text())["seconds"])
    out.mkdir(parents=True, exist_ok=True)
    run = next(r for r in trl_corpus.RUNS if r.name == name)
    sets = [f"{k}={json.dumps(v)}" for k, v in patch.items()] + ([f"steps={steps}"] if steps else [])
    cmd = ["nice", "-n", "10", str(trl_python), str(ROOT / "scripts" / "trl_corpus.py"), "--run", name,
           "--out", str(out), "--set", *sets]
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=trl_corpus._env(run), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    (out / "console.log").write_text(proc.stdout)
    if proc.returncode != 0:
        raise SystemExit(f"{name} with {patch}: training failed (exit {proc.returncode}); "
                         f"the log: {out / 'console.log'}\n{proc.stdout[-2000:]}")
    seconds = time.time() - t0
    for p in (out / name).iterdir():  # keep what a user keeps
        if p.is_dir():
            import shutil

            shutil.rmtree(p)
    done.write_text(json.dumps({"seconds": round(seconds, 1), "patch": patch}))
    return out / name, seconds


def trial(name: str, algorithm: str, patch: dict[str, Any], steps: int | None, args: argparse.Namespace) -> Trial:
    run_dir, seconds = train(name, patch, steps, args.work, args.trl_python)
    history = history_of(run_dir)
    return Trial(patch, severe_rules(scan(run_dir)),
                 {k: tail_mean(history, k) for k in primary_keys(algorithm, history)}, seconds)


# -- judging ---------------------------------------------------------------------------------------
def healthy_bar(algorithm: str, keys: list[str], steps: int, manifest: dict[str, Any]) -> dict[str, float]:
    """The healthy run's primary signal at the same step; a run trained on another reward (a
    hackable or length-paying one, a scaled one) has none to compare with: its bar is its own
    start (it must still improve on it)."""
    cfg, healthy = manifest["config"], json.loads((CORPUS / f"{algorithm}_healthy_s0" / "manifest.json").read_text())
    if (cfg.get("reward"), cfg.get("reward_scale")) != (healthy["config"].get("reward"),
                                                       healthy["config"].get("reward_scale")):
        history = history_of(CORPUS / manifest["name"])
        return {k: head_mean(history, k) for k in keys}
    history = history_of(CORPUS / f"{algorithm}_healthy_s0")
    return {k: tail_mean(history, k, upto=steps) for k in keys}


def head_mean(history: list[dict[str, Any]], key: str) -> float:
    vals = [float(r[key]) for r in history if key in r and math.isfinite(float(r[key]))][:10]
    return sum(vals) / len(vals) if vals else float("nan")


#: How far below its bar a primary signal may end and still count as not worse: rewards in [-1, 1]
#: and accuracies by 0.05, margins (a few hundredths in a healthy run of the corpus) by a fifth.
ABS_TOL, REL_TOL = {"rewards/margins": 0.0}, {"rewards/margins": 0.2}


def not_worse(after: dict[str, float], before: dict[str, float], healthy: dict[str, float]) -> bool:
    for k, v in after.items():
        bar = min(before[k], healthy.get(k, before[k]))
        tol = ABS_TOL.get(k, 0.05) + REL_TOL.get(k, 0.0) * abs(bar)
        if not v >= bar - tol:
            return False
    return True


def improves(after: dict[str, float], before: dict[str, float]) -> bool:
    return any(after[k] > before[k] + 0.02 for k in after)


def outcome(expected: list[str], before: Trial, after: Trial, healthy: dict[str, float]) -> str:
    """fixed: no expected rule at warning or above, no new one either, the primary signal not
    worse; partly fixed: fewer expected rules, or the primary signal improves; else not fixed."""
    left = [r for r in expected if r in after.rules]
    had = [r for r in expected if r in before.rules]
    new = [r for r in after.rules if r not in before.rules]
    ok = not_worse(after.primary, before.primary, healthy)
    if not left and not new and ok:
        return "fixed"
    if len(left) < len(had) or improves(after.primary, before.primary):
        return "partly fixed"
    return "not fixed"


def evaluate(manifest: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    name, algorithm, fault = manifest["name"], manifest["algorithm"], manifest["fault"]
    steps = args.steps or int(manifest["config"]["max_steps"])
    if args.steps:
        before = trial(name, algorithm, {}, args.steps, args)
        rec = scan(args.work / f"steps{args.steps}" / name / "base" / name)["recommendations"]
    else:
        d = scan(CORPUS / name)
        history = history_of(CORPUS / name)
        before = Trial({}, severe_rules(d), {k: tail_mean(history, k) for k in primary_keys(algorithm, history)},
                       trained=False)
        rec = d["recommendations"]
    row: dict[str, Any] = {"run": name, "fault": fault or "healthy", "expected": manifest["expected_rules"],
                           "first": _first_text(rec), "patch": rec["config_patch"], "before": before,
                           "root_cause": rec.get("root_cause"), "steps": steps}
    if not fault:
        row["outcome"] = "healthy: patch empty" if not rec["config_patch"] else "healthy: PATCH NOT EMPTY"
        if args.check_healthy and args.steps:  # nothing applied: the same config and seed, the same run
            again, _ = train(name, {}, args.steps, args.work / "repeat", args.trl_python)
            first = args.work / f"steps{args.steps}" / name / "base" / name
            row["repeat_identical"] = _metrics(history_of(again)) == _metrics(history_of(first))
            row["outcome"] += ", re-trained unchanged: " + ("identical" if row["repeat_identical"] else "DIFFERENT")
        return row
    healthy = healthy_bar(algorithm, list(before.primary), steps, manifest)
    row["healthy"] = healthy
    config = manifest["config"]
    variants = {"first": first_patch(rec), "full": rec["config_patch"]}
    for which, patch in variants.items():
        if which == "full" and patch == variants["first"]:
            row["full_trial"] = row.get("first_trial")
            continue
        if not patch or all(config.get(k) == v for k, v in patch.items()):
            row[f"{which}_trial"] = None  # nothing changes: the same run
            continue
        row[f"{which}_trial"] = trial(name, algorithm, patch, args.steps, args)
        print(f"  {name} {which} {patch}: {row[which + '_trial'].rules} {row[which + '_trial'].primary}",
              flush=True)
    row["full"] = row.get("full_trial", row.get("first_trial"))
    if fault in OUTSIDE_CONFIG:
        words = " ".join([*(p for ps in rec["priorities"].values() for p in ps), *rec.get("if_persists", [])])
        named = NAMES_CAUSE[fault].lower() in words.lower()
        row["outcome"] = "not fixable by config; the advice " + ("names the cause" if named else
                                                                 "does NOT name the cause")
        row["why"] = OUTSIDE_CONFIG[fault]
        for which in ("first", "full"):
            t = row.get(f"{which}_trial")
            row[f"{which}_outcome"] = outcome(manifest["expected_rules"], before, t, healthy) if t else "no change"
        return row
    for which in ("first", "full"):
        t = row.get(f"{which}_trial")
        row[f"{which}_outcome"] = outcome(manifest["expected_rules"], before, t, healthy) if t else (
            "no patch" if not variants[which] else "patch changes nothing")
    row["outcome"] = row["full_outcome"]
    return row


#: Logged keys that measure the machine, not the training (they differ between two identical runs).
_CLOCK = ("step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second", "eps")


def _metrics(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in _CLOCK} for r in history]


def _first_text(rec: dict[str, Any]) -> str:
    for pri in ("immediate", "short_term", "medium_term"):
        if rec["priorities"].get(pri):
            return str(rec["priorities"][pri][0])
    return "-"


# -- the table -------------------------------------------------------------------------------------
def _nums(p: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3g}" for k, v in p.items())


def _rules(t: Trial | None) -> str:
    if t is None:
        return "-"
    return ", ".join(f"`{r}`" for r in t.rules) or "none"


def _short(text: str, n: int = 150) -> str:
    text = text.replace("|", "/")
    return text if len(text) <= n else text[: n - 3] + "..."


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| run | fault | first recommendation | config patch | outcome (first / full patch) | "
            "warning+ rules before -> after | primary signal before -> after (bar) |\n"
            "|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        patch = json.dumps(r["patch"]) if r["patch"] else "{}"
        if r["fault"] == "healthy":
            lines.append(f"| {r['run']} | healthy | {_short(r['first'])} | {patch} | {r['outcome']} | "
                         f"{_rules(r['before'])} | {_nums(r['before'].primary)} |")
            continue
        first_o, full_o = r.get("first_outcome", "-"), r.get("full_outcome", "-")
        out = r["outcome"] if "fixable" in r["outcome"] else (first_o if first_o == full_o else f"{first_o} / {full_o}")
        if "fixable" in r["outcome"]:
            out += f" ({r['why']}; patch: {full_o})"
        t = r.get("full")
        after = _nums(t.primary) if t else "unchanged"
        lines.append(f"| {r['run']} | {r['fault']} | {_short(r['first'])} | {patch} | {out} | "
                     f"{_rules(r['before'])} -> {_rules(t) if t else 'unchanged'} | "
                     f"{_nums(r['before'].primary)} -> {after} ({_nums(r['healthy'])}) |")
    return head + "\n".join(lines) + "\n"


def summary(rows: list[dict[str, Any]]) -> str:
    faults = [r for r in rows if r["fault"] != "healthy"]
    in_config = [r for r in faults if r["fault"] not in OUTSIDE_CONFIG]
    first = sum(r.get("first_outcome") == "fixed" for r in in_config)
    full = sum(r.get("full_outcome") == "fixed" for r in in_config)
    partly = sum("partly" in str(r.get("full_outcome")) for r in in_config)
    named = sum("names the cause" in r["outcome"] for r in faults if r["fault"] in OUTSIDE_CONFIG)
    healthy = [r for r in rows if r["fault"] == "healthy"]
    empty = sum(r["outcome"] == "healthy: patch empty" for r in healthy)
    return (f"Faults whose cause is in the config: {len(in_config)}; fixed by the first recommendation "
            f"alone: {first}; by the full patch: {full}; partly fixed by it: {partly}. Faults outside "
            f"the config: {len(faults) - len(in_config)}, the advice names the cause in {named}. Healthy "
            f"runs with an empty patch: {empty} of {len(healthy)}.\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="corpus run names (default: all)")
    ap.add_argument("--skip", nargs="*", default=[], help="corpus run names to leave out")
    ap.add_argument("--steps", type=int, help="train every run (the faulty one too) at this many steps")
    ap.add_argument("--work", type=Path, default=WORK, help="where the runs are trained (outside the repository)")
    ap.add_argument("--trl-python", type=Path, default=TRL_PYTHON)
    ap.add_argument("--report", type=Path, help=f"write the table here (make advice-eval: {REPORT})")
    ap.add_argument("--docs", action="store_true", help="also write the table into docs/advice.md")
    ap.add_argument("--json", type=Path, help="write the rows as JSON")
    ap.add_argument("--check-healthy", action="store_true",
                    help="with --steps: train each healthy run twice (nothing applied) and compare the logs")
    args = ap.parse_args()
    if not args.trl_python.exists():
        raise SystemExit(f"{args.trl_python}: no TRL environment; `make .venv-trl/.installed` builds it")
    if not (trl_corpus.BUILD / "base" / "config.json").exists():
        subprocess.run(["nice", "-n", "10", str(args.trl_python), "-c",
                        "import sys; sys.path.insert(0, 'scripts'); import torch; torch.set_num_threads(1); "
                        "import trl_corpus as t; t.build_base(t.BUILD / 'base')"],
                       cwd=ROOT, env=dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1"), check=True)
    manifests = [json.loads(p.read_text()) for p in sorted(CORPUS.glob("*/manifest.json"))]
    manifests = [m for m in manifests if (not args.only or m["name"] in args.only) and m["name"] not in args.skip]
    manifests.sort(key=lambda m: m["algorithm"] == "ppo")  # PPO trains slowest: last
    rows = []
    for m in manifests:
        print(f"{m['name']}", flush=True)
        rows.append(evaluate(m, args))
        if args.report:  # the table so far, so a long evaluation leaves its partial result
            write(rows, args)
    write(rows, args)
    print(summary(rows))


def write(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    text = table(rows)
    note = summary(rows)
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        # the hand-written reading of the table (## Notes) is kept across runs
        kept = args.report.read_text().partition(NOTES)[2] if args.report.exists() else ""
        args.report.write_text(REPORT_HEAD + note + "\n" + text + (f"\n{NOTES}{kept}" if kept else ""))
    if args.docs:
        page = PAGE.read_text()
        if MARK_BEGIN in page and MARK_END in page:
            pre, rest = page.split(MARK_BEGIN, 1)
            post = rest.split(MARK_END, 1)[1]
            PAGE.write_text(pre + MARK_BEGIN + "\n" + note + "\n" + text + MARK_END + post)
    if args.json:
        args.json.write_text(json.dumps(rows, default=lambda o: o.__dict__, indent=1))


NOTES = "## Notes"
REPORT_HEAD = """# Advice quality: the recommended patch, re-trained

Written by `make advice-eval` (`scripts/advice_eval.py`, whose docstring defines the outcomes and
the primary signal). Each faulty run of the TRL corpus (`fixtures/trl`) was scanned; its config
patch (TRL's own keys) was applied to the run's training config, and the run trained again with the
same seed and data, then scanned again. "first" is the first recommendation's change alone, "full"
the whole config patch (the same where the patch holds one change). Rules: the warning and critical
rules the scan reports (the label's expected rules are in `fixtures/trl/README.md`).

"""


if __name__ == "__main__":
    main()
