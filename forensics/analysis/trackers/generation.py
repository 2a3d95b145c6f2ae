"""Generation quality from a sample stream with response text (``completion``).

Per response: format compliance (``format_pattern``, default ``<think>...</think><answer>...</answer>``),
lengths (characters and whitespace words of the response, its think and answer parts, and the
logged ``length`` in tokens when present), reasoning indicators (occurrences of
``reasoning_words`` plus numbered steps), and repetition (share of repeated word ``ngram``-grams:
``1 - distinct / total``). Per window of ``window_steps`` steps: the rates and means, and the best
and worst response by reward with its reward breakdown (``reward/<name>`` columns) and its text
cut to ``example_chars`` characters. Text is untrusted: it is stored as plain strings; escaping is
the renderer's job.

Counts are integers and each window's means come from that window's values only, so the section
does not depend on batching. Rules run on per-step rates (rows are sample-stream steps):

* ``generation.format_regression`` (warning): the compliance level (responses pooled over
  ``smooth`` steps) fell ``format_drop`` (plus 2.5 binomial standard errors) below the best level
  the run reached, sustained.
* ``generation.repetition`` (warning): the pooled repeated-n-gram share exceeds
  ``repetition_share``, sustained (degenerate, looping generations; SIGNATURES #11, #28).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import numpy as np

from ...config import Relations, param
from ...io.canonical import Batch
from ...records import record
from ...schema import REWARD_COMPONENT_PREFIX
from ..findings import RuleSpec, Severity
from ..spans import step_span
from ..stats.episodes import Episodes
from ..stats.grouping import StepGrouper
from ..stats.trailing import Context
from .base import Tracker, TrackerResult

__all__ = ["Generation", "response_features"]

DEFAULT_FORMAT = r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$"


@record
class GenerationParams:
    """The generation tracker's thresholds (``[generation]`` in a config)."""

    format_pattern: str = param(DEFAULT_FORMAT, "Regex (DOTALL) a compliant response matches.", regex=True)
    think_pattern: str = param(r"<think>(.*?)</think>", "Regex whose group 1 is the reasoning part.", regex=True)
    answer_pattern: str = param(r"<answer>(.*?)</answer>", "Regex whose group 1 is the answer part.", regex=True)
    reasoning_words: str = param("because,therefore,thus,hence,since,first,second,then,next,finally,"
                                 "step,so", "Comma-separated words counted as reasoning indicators.")
    step_pattern: str = param(r"(?m)(?:^|(?<=>))\s*(?:\d+[.)]\s|step\s*\d+\b)", "Regex (case-insensitive) of a "
                              "numbered step (at a line start or after a tag), counted as a reasoning indicator.",
                              regex=True)
    ngram: int = param(3, "Word n-gram size of the repetition measure.")
    window_steps: int = param(50, "Steps per window of the per-window table and examples.", le=10**12)
    example_chars: int = param(300, "Characters of an example's text kept in the report.")
    probation: int = param(10, "Steps at the start on which no rule fires.", ge=0)
    smooth: int = param(10, "Steps pooled (responses summed) for the compliance and repetition "
                        "levels.")
    format_drop: float = param(0.2, "Fall of the compliance level below its best that is a "
                               "regression, plus 2.5 binomial standard errors of the pooled rate "
                               "(at most sqrt(0.25 / responses)), so small groups do not fire.", le=1)
    repetition_share: float = param(0.5, "Repeated n-gram share above this is degenerate repetition.", le=1)
    persist_k: int = param(5, "Persistence: steps out of persist_m.")
    persist_m: int = param(8, "Persistence window (steps).")
    relations: ClassVar[Relations] = (("persist_k", "<=", 1, "persist_m"),)
    #: patterns whose group 1 is read: they need at least one group
    regex_groups: ClassVar[tuple[str, ...]] = ("think_pattern", "answer_pattern")


_R = RuleSpec
RULES = (
    _R("generation.format_regression", Severity.WARNING, "Format compliance regressed",
       "The share of responses that follow the required format fell well below the best the run "
       "reached: the policy is unlearning the format (or the format reward was outweighed).",
       "Inspect non-compliant samples; raise the format reward weight 15% or gate the task reward "
       "on format; check the chat template and stop tokens.",
       ("format_pattern", "format_drop", "smooth", "persist_k", "persist_m")),
    _R("generation.repetition", Severity.WARNING, "Repetitive generations",
       "A large share of each response's word n-grams repeat: generations loop or degenerate.",
       "Lower the temperature 10% or add a repetition penalty reward; check entropy for a "
       "blow-up and length for truncation.",
       ("repetition_share", "ngram", "persist_k", "persist_m"), "SIGNATURES #11, #28"),
)

_FEATURES = ("ok", "chars", "words", "think_chars", "answer_chars", "indicators", "ngrams", "repeated")


def response_features(texts: list[str], fmt: re.Pattern[str], think: re.Pattern[str],
                      answer: re.Pattern[str], words: re.Pattern[str], steps: re.Pattern[str],
                      n: int) -> dict[str, np.ndarray]:
    """Integer features of each response (see the module docstring).

    >>> import re
    >>> f = response_features(
    ...     ["<think>First, x because y</think><answer>4</answer>", "no no no no no"],
    ...     re.compile(r"^\\s*<think>.*?</think>\\s*<answer>.*?</answer>\\s*$", re.S),
    ...     re.compile(r"<think>(.*?)</think>", re.S), re.compile(r"<answer>(.*?)</answer>", re.S),
    ...     re.compile(r"\\b(?:because|first)\\b", re.I), re.compile(r"(?m)^\\s*\\d+[.)]\\s", re.I), 2)
    >>> {k: v.tolist() for k, v in f.items()}["ok"], f["indicators"].tolist(), f["repeated"].tolist()
    ([1, 0], [2, 0], [0, 3])
    """
    out = {k: np.zeros(len(texts), dtype=np.int64) for k in _FEATURES}
    for i, t in enumerate(texts):
        out["ok"][i] = fmt.search(t) is not None
        out["chars"][i] = len(t)
        toks = t.split()
        out["words"][i] = len(toks)
        m = think.search(t)
        out["think_chars"][i] = len(m.group(1)) if m else 0
        m = answer.search(t)
        out["answer_chars"][i] = len(m.group(1)) if m else 0
        out["indicators"][i] = len(words.findall(t)) + len(steps.findall(t))
        total = max(len(toks) - n + 1, 0)
        out["ngrams"][i] = total
        if total:
            out["repeated"][i] = total - len({tuple(toks[j:j + n]) for j in range(total)})
    return out


class Generation(Tracker):
    """Format compliance, lengths, reasoning indicators, repetition and examples per window."""

    name = "generation"
    area = "generation"
    streams = ("sample",)
    requires = ("completion", "reward", "length")
    starts_on = ("completion",)
    rules = RULES
    Params = GenerationParams

    def __init__(self, params: GenerationParams | None = None, meta=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(params, meta)
        p: GenerationParams = self.params
        self.p = p
        self.fmt = re.compile(p.format_pattern, re.S)
        self.think = re.compile(p.think_pattern, re.S)
        self.answer = re.compile(p.answer_pattern, re.S)
        words = [w.strip() for w in p.reasoning_words.split(",") if w.strip()]
        self.words = re.compile(r"\b(?:" + "|".join(re.escape(w) for w in words) + r")\b", re.I) \
            if words else re.compile(r"(?!x)x")
        self.steps_re = re.compile(p.step_pattern, re.I)
        self.grouper = StepGrouper()
        self.components: list[str] = []
        self.first_step: int | None = None
        self.win_key: int | None = None
        self.win: dict[str, Any] = {}
        self.table: list[dict[str, Any]] = []
        self.totals = {k: 0 for k in (*_FEATURES, "responses")}
        self.length_sum = 0.0
        self.length_n = 0
        self.sample_steps = 0
        self.ctx = Context(p.smooth)
        self.best_rate = -np.inf
        self.ep = {"generation.format_regression": Episodes(p.persist_k, p.persist_m, gap=p.window_steps,
                                                            mode="max"),
                   "generation.repetition": Episodes(p.persist_k, p.persist_m, gap=p.window_steps,
                                                     mode="max")}

    def update(self, batch: Batch) -> dict[str, np.ndarray] | None:
        if batch.stream != "sample" or ("completion" not in batch.text and not self.active):
            return None
        self.active = True
        for c in sorted(batch.columns):
            if c.startswith(REWARD_COMPONENT_PREFIX) and c not in self.components:
                self.components.append(c)
        # a response without text (null, or a chunk where the key is absent) is not counted
        raw = batch.text.get("completion")
        text = np.array([None] * len(batch) if raw is None else
                        [None if t is None else str(t) for t in raw], dtype=object)
        cols = {"text": text, "reward": batch.col("reward"), "length": batch.col("length"),
                **{c: batch.col(c) for c in self.components}}
        for steps, groups in self.grouper.push(batch.steps, cols):
            self._steps_done(steps, groups)
        return None

    def _steps_done(self, steps: np.ndarray, groups: list[dict[str, np.ndarray]]) -> None:
        p = self.p
        counts: list[tuple[int, int, int, int]] = []
        for step, g in zip(steps, groups):
            step = int(step)
            if self.first_step is None:
                self.first_step = step
            key = (step - self.first_step) // max(p.window_steps, 1)
            if self.win_key is not None and key != self.win_key:
                self._close()
            self.win_key = key
            has = np.array([t is not None for t in g["text"]], dtype=bool)
            if not has.all():
                g = {k: v[has] for k, v in g.items()}
            texts = [str(t) for t in g["text"]]
            f = response_features(texts, self.fmt, self.think, self.answer, self.words, self.steps_re,
                                  p.ngram)
            self._absorb(step, g, texts, f)
            counts.append((int(f["ok"].sum()), len(texts), int(f["repeated"].sum()),
                           int(f["ngrams"].sum())))
        self._rules(steps, np.array(counts, dtype=np.int64).reshape(-1, 4))

    def _rules(self, steps: np.ndarray, counts: np.ndarray) -> None:
        p = self.p
        rows = np.arange(self.sample_steps, self.sample_steps + len(steps), dtype=np.int64)
        self.sample_steps += len(steps)
        self.rows = self.sample_steps
        full, n0 = self.ctx.extend(ok=counts[:, 0], n=counts[:, 1], rep=counts[:, 2], ng=counts[:, 3])
        pooled = {}
        for k, v in full.items():  # integer sums over the last `smooth` steps: exact
            c = np.concatenate([[0], np.cumsum(v)])
            idx = np.arange(1, len(v) + 1)
            pooled[k] = (c[idx] - c[np.maximum(idx - p.smooth, 0)])[n0:]
        with np.errstate(invalid="ignore", divide="ignore"):
            lvl = np.where(pooled["n"] > 0, pooled["ok"] / np.maximum(pooled["n"], 1), np.nan)
            rlvl = np.where(pooled["ng"] > 0, pooled["rep"] / np.maximum(pooled["ng"], 1), np.nan)
        tol = p.format_drop + 2.5 * np.sqrt(0.25 / np.maximum(pooled["n"], 1))
        best = np.maximum.accumulate(np.concatenate([[self.best_rate],
                                                     np.where(np.isfinite(lvl), lvl, -np.inf)]))[1:]
        self.best_rate = float(best[-1])
        after = rows >= p.probation
        with np.errstate(invalid="ignore"):
            drop = best - lvl
        reg = after & np.isfinite(drop) & (drop > tol)
        self.ep["generation.format_regression"].update(rows, steps, reg, drop,
                                                       {"rate": lvl, "best": best})
        rp = after & np.isfinite(rlvl) & (rlvl > p.repetition_share)
        self.ep["generation.repetition"].update(rows, steps, rp, rlvl, {"rate": lvl})

    def _absorb(self, step: int, g: dict[str, np.ndarray], texts: list[str],
                f: dict[str, np.ndarray]) -> None:
        w = self.win
        if not w:
            w.update(first_step=step, steps=0, feats={k: 0 for k in (*_FEATURES, "responses")},
                     lengths=[], best=None, worst=None)
        w["steps"] += 1
        w["last_step"] = step
        for k in _FEATURES:
            s = int(f[k].sum())
            w["feats"][k] += s
            self.totals[k] += s
        w["feats"]["responses"] += len(texts)
        self.totals["responses"] += len(texts)
        w["lengths"].append(g["length"])
        r = g["reward"]
        if np.isfinite(r).any():
            rr = np.where(np.isfinite(r), r, -np.inf)
            i = int(np.argmax(rr))
            if w["best"] is None or rr[i] > w["best"]["reward"]:
                w["best"] = self._example(step, g, texts, f, i)
            rr = np.where(np.isfinite(r), r, np.inf)
            i = int(np.argmin(rr))
            if w["worst"] is None or rr[i] < w["worst"]["reward"]:
                w["worst"] = self._example(step, g, texts, f, i)

    def _example(self, step: int, g: dict[str, np.ndarray], texts: list[str],
                 f: dict[str, np.ndarray], i: int) -> dict[str, Any]:
        t = texts[i]
        cut = self.p.example_chars
        comps = {c[len(REWARD_COMPONENT_PREFIX):]: float(g[c][i]) for c in self.components
                 if c in g and np.isfinite(g[c][i])}
        return {"step": step, "reward": float(g["reward"][i]), "reward_components": comps,
                "format_ok": bool(f["ok"][i]), "chars": int(f["chars"][i]),
                "text": t[:cut], "truncated_text": len(t) > cut}

    def _close(self) -> None:
        w = self.win
        if not w:
            return
        f = w["feats"]
        n = max(f["responses"], 1)
        lengths = np.concatenate(w["lengths"]) if w["lengths"] else np.zeros(0)
        lengths = lengths[np.isfinite(lengths)]
        self.length_sum += float(lengths.sum())
        self.length_n += len(lengths)
        self.table.append({
            "window": self.win_key, "first_step": w["first_step"], "last_step": w["last_step"],
            "steps": w["steps"], "responses": f["responses"],
            "format_rate": f["ok"] / n,
            "mean_chars": f["chars"] / n, "mean_words": f["words"] / n,
            "mean_think_chars": f["think_chars"] / n, "mean_answer_chars": f["answer_chars"] / n,
            "mean_length_tokens": float(lengths.mean()) if len(lengths) else None,
            "reasoning_indicators_per_response": f["indicators"] / n,
            "repetition": f["repeated"] / f["ngrams"] if f["ngrams"] else None,
            "best": w["best"], "worst": w["worst"],
        })
        self.win = {}

    def close(self) -> None:
        for steps, groups in self.grouper.flush():
            self._steps_done(steps, groups)
        self._close()

    def conclude(self) -> TrackerResult:
        p = self.p
        t = self.totals
        n = max(t["responses"], 1)
        summary: dict[str, Any] = {"responses": t["responses"], "steps": self.sample_steps}
        sections: dict[str, Any] = {}
        if self.active and t["responses"]:
            summary.update({
                "format_rate": t["ok"] / n, "mean_chars": t["chars"] / n, "mean_words": t["words"] / n,
                "mean_think_chars": t["think_chars"] / n, "mean_answer_chars": t["answer_chars"] / n,
                "mean_length_tokens": self.length_sum / self.length_n if self.length_n else None,
                "reasoning_indicators_per_response": t["indicators"] / n,
                "repetition": t["repeated"] / t["ngrams"] if t["ngrams"] else None,
            })
            sections["generation"] = {"summary": dict(summary), "windows": self.table,
                                      "format_pattern": p.format_pattern, "ngram": p.ngram,
                                      "reasoning_words": p.reasoning_words,
                                      "window_steps": p.window_steps}
        for ep in self.ep["generation.format_regression"].finish():
            self.emit("generation.format_regression", ep,
                      f"format compliance fell to {ep.extras.get('rate', float('nan')):.0%} from a best "
                      f"of {ep.extras.get('best', float('nan')):.0%}, {step_span(ep.first_step, ep.last_step)}",
                      {"drop": ep.peak, "rate": ep.extras.get("rate"), "best_rate": ep.extras.get("best"),
                       "threshold": p.format_drop, "metrics": ["completion"]})
        for ep in self.ep["generation.repetition"].finish():
            self.emit("generation.repetition", ep,
                      f"{ep.peak:.0%} of word {p.ngram}-grams repeat within responses, "
                      f"{step_span(ep.first_step, ep.last_step)}",
                      {"repeated_share": ep.peak, "threshold": p.repetition_share,
                       "metrics": ["completion"]})
        return self.result(summary, [], None, sections)
