"""The trainer callback on transformers 4.40 through 5.x, and findings exported onto the run they describe.

Unit tests use fakes of what each transformers/TRL version leaves (they run everywhere); the real
Trainer tests train a tiny random model with ``scripts/callback_smoke.py`` in the environments they
find, and skip, saying which, when one is absent:

* transformers 4.40 (the oldest supported): ``$FORENSICS_TF440_PYTHON``, else ``../venv-tf440``
  beside the repository, else ``.venv-tf440``;
* transformers 5 with TRL: ``$FORENSICS_TF5_PYTHON``, else ``../venv-tf5``, else ``.venv-trl``.

``make test`` builds ``.venv-trl`` and ``.venv-tf440`` (``make .venv-trl/.installed
.venv-tf440/.installed`` alone): venvs over ``.venv`` that add only the Hugging Face packages (torch,
tensorboard and the analyzer's dependencies are ``.venv``'s), so in CI these tests run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from forensics.cli import main
from forensics.live.trainer_outputs import CompletionTables, algorithm_of, tensorboard_dir
from forensics.live.transformers import meta_from_args
from forensics.report.export import episode_series

from .conftest import FIXTURES, ROOT

WANDB_RUN = next((FIXTURES / "formats" / "wandb_offline" / "wandb").glob("offline-run-*"))
#: What the smoke run needs, looked up (not imported: collecting the tests stays fast).
NEEDS = ("import importlib.util as u, sys; missing = [m for m in sys.argv[1:] if u.find_spec(m) is None]; "
         "sys.exit('lacks ' + ', '.join(missing) if missing else 0)")
#: transformers, torch, tensorboard and the analyzer's runtime dependencies (pyproject.toml's, each
#: imported by its distribution's name)
MODULES = ["transformers", "torch", "tensorboard",
           *(re.match(r"[A-Za-z0-9_]+", d)[0] for d in  # type: ignore[index]
             tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])]


# --- the algorithm from the class hierarchy ---------------------------------------------------

class GRPOConfig(SimpleNamespace):
    pass


class MyGRPOConfig(GRPOConfig):
    pass


class OnlineDPOConfig(SimpleNamespace):
    pass


class XPOConfig(OnlineDPOConfig):
    pass


class GRPOStyleArgs(SimpleNamespace):
    """Named like a GRPO config, but not one."""


def test_algorithm_from_the_class_hierarchy_not_the_name() -> None:
    assert algorithm_of(MyGRPOConfig()) == "grpo" and algorithm_of(XPOConfig()) == "online_dpo"
    assert algorithm_of(GRPOStyleArgs()) is None and algorithm_of(SimpleNamespace()) is None
    m = meta_from_args(MyGRPOConfig(beta=0.04, num_generations=8, learning_rate=1e-6))
    assert (m.algorithm, m.kl_coef_init, m.group_size) == ("grpo", 0.04, 8)
    assert meta_from_args(GRPOStyleArgs(beta=0.04)).algorithm is None


# --- where the Trainer's TensorBoard scalars are -----------------------------------------------

class TensorBoardCallback:
    """What each transformers version's callback holds once training began."""

    def __init__(self, logging_dir: str | None = None, writer_dir: str | None = None) -> None:
        if logging_dir is not None:  # transformers 5
            self.logging_dir = logging_dir
        self.tb_writer = SimpleNamespace(log_dir=writer_dir) if writer_dir else None  # transformers 4


def trainer_with(*callbacks: object) -> SimpleNamespace:
    return SimpleNamespace(callback_handler=SimpleNamespace(callbacks=[object(), *callbacks]))


def test_tensorboard_folder_on_each_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    v5 = SimpleNamespace(output_dir=str(tmp_path))  # transformers 5: no logging_dir argument
    assert tensorboard_dir(v5, trainer_with(TensorBoardCallback(logging_dir="/a/runs/x"))) == Path("/a/runs/x")
    assert tensorboard_dir(v5, trainer_with(TensorBoardCallback(writer_dir="/b"))) == Path("/b")
    v4 = SimpleNamespace(output_dir=str(tmp_path), logging_dir=str(tmp_path / "runs" / "v4"))
    assert tensorboard_dir(v4) == tmp_path / "runs" / "v4"
    # transformers 5 without the trainer: nothing yet, then the newest runs/<time>_<host> with events
    assert tensorboard_dir(v5) == tmp_path / "runs"
    for name in ("Nov01_10-00-00_host", "Nov02_10-00-00_host"):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "events.out.tfevents.1.host.1.0").write_bytes(b"")
        time.sleep(0.01)
    os.utime(tmp_path / "runs" / "Nov01_10-00-00_host", (1e9, 1e9))
    (tmp_path / "runs" / "empty").mkdir()  # no events: not the Trainer's
    assert tensorboard_dir(v5) == tmp_path / "runs" / "Nov02_10-00-00_host"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", "~/tb")
    assert tensorboard_dir(v5) == Path.home() / "tb"


# --- completions from TRL's completions tables ----------------------------------------------

def write_table(folder: Path, step: int, **columns: list) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    n = len(next(iter(columns.values())))
    pq.write_table(pa.table({"step": [step] * n, **columns}), folder / f"completions_{step:05d}.parquet")


def test_completion_tables_are_read_once_with_weighted_rewards(tmp_path: Path) -> None:
    folder = tmp_path / "completions"
    tables = CompletionTables(folder, reward_weights=[1.0, 0.5])
    assert list(tables.new_tables()) == []  # no folder yet
    write_table(folder, 2, prompt=["a", "b"], completion=["x", "y"], acc=[1.0, 0.0], fmt=[1.0, float("nan")],
                note=[0.3, 0.3], advantage=[0.5, -0.5])
    tables.note_logs(["loss", "rewards/acc/mean", "rewards/fmt/mean", "rewards/fmt/std"])
    (step, rows), = tables.new_tables()
    assert step == 2 and rows[0] == {"completion": "x", "prompt": "a", "reward/acc": 1.0, "reward/fmt": 1.0,
                                     "reward": 1.5, "advantage": 0.5}
    assert rows[1]["reward"] == 0.0 and "reward/note" not in rows[1]  # an extra column is not a reward
    assert list(tables.new_tables()) == []  # each table once
    (folder / "completions_00003.parquet").write_bytes(b"not parquet")
    write_table(folder, 4, prompt=["c"], completion=["z"], acc=[1.0], fmt=[0.0], advantage=[0.0])
    assert [s for s, _ in tables.new_tables()] == [4] and "completions_00003.parquet" in tables.errors[0]


# --- TensorBoard: each episode a range ---------------------------------------------------------

def analysis_with_episodes() -> dict:
    return {"steps": {"first": 1, "last": 3000, "rows": 3000},
            "health": {"overall": 0.4}, "findings_by_severity": {"critical": 1, "warning": 1, "info": 0},
            "findings": [
                {"rule": "kl.spike", "severity": "critical", "first_step": 100, "last_step": 1500, "onset_step": 100,
                 "message": "2 episodes", "remedy": "r", "episodes": [
                     {"first_step": 100, "last_step": 120, "onset_step": 100, "severity": "warning", "message": "a"},
                     {"first_step": 400, "last_step": 1500, "onset_step": 400, "severity": "critical",
                      "message": "b"}]},
                {"rule": "reward.flat", "severity": "warning", "first_step": 2000, "last_step": 3000,
                 "onset_step": 2000, "message": "flat", "remedy": "r"}]}


def test_episode_series_draw_each_episode_as_a_range() -> None:
    series = episode_series(analysis_with_episodes())
    kl = dict(series["forensics/episodes/kl.spike"])
    assert kl[1] == 0 and kl[99] == 0 and kl[100] == kl[120] == 2.0 and kl[121] == 0
    assert kl[399] == 0 and kl[400] == kl[1500] == 3.0 and kl[1501] == 0 and kl[3000] == 0
    assert all(v == 3.0 for s, v in kl.items() if 400 <= s <= 1500)
    assert len([s for s in kl if 400 <= s <= 1500]) <= 501  # a long episode is sampled, its ends kept
    flat = series["forensics/episodes/reward.flat"]
    assert flat[0] == (1, 0.0) and flat[1] == (1999, 0.0) and flat[-1] == (3000, 2.0)
    assert [s for s, _ in flat] == sorted(s for s, _ in flat)


def test_tensorboard_export_reads_back_as_ranges(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from forensics.report.export import export_analysis

    export_analysis(analysis_with_episodes(), "tensorboard", tmp_path / "tb")
    ea = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    kl = {e.step: e.value for e in ea.Scalars("forensics/episodes/kl.spike")}
    assert (kl[99], kl[100], kl[120], kl[121], kl[400], kl[1500], kl[1501]) == (0, 2, 2, 0, 3, 3, 0)
    assert ea.Scalars("forensics/health/overall")[0].value == pytest.approx(0.4)
    assert [e.value for e in ea.Scalars("forensics/episodes/reward.flat")][-1] == 2.0


# --- W&B: findings on the run they describe ---------------------------------------------------

def wandb_records(out: Path) -> tuple[dict, dict, Path]:
    """The run record and the summary of the offline run written under ``out``."""
    from forensics.io.adapters.wandb_offline import _record_class, read_records
    from forensics.io.readers.base import ReadReport

    wb = next((out / "wandb").glob("offline-run-*/*.wandb"))
    run, summary = {}, {}
    for _, data in read_records(wb, ReadReport(str(wb))):
        rec = _record_class()()
        rec.ParseFromString(data)
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            run = {"id": rec.run.run_id, "project": rec.run.project, "entity": rec.run.entity,
                   "resume": bool(rec.run.resume), "name": rec.run.display_name}
        elif kind == "summary":
            summary.update({(u.key or "/".join(u.nested_key)): json.loads(u.value_json) for u in rec.summary.update})
    return run, summary, wb.parent


def run_cli(*args: str) -> object:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def scanned_wandb_run(tmp_path: Path) -> Path:
    pytest.importorskip("wandb")
    assert run_cli("scan", str(WANDB_RUN), "-o", str(tmp_path / "rep"), "-q").exit_code == 0
    return tmp_path / "rep"


def test_wandb_offline_export_resumes_the_analysed_run(scanned_wandb_run: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    res = run_cli("export", str(scanned_wandb_run), "--to", "wandb-offline", "-o", str(tmp_path / "wb"))
    assert res.exit_code == 0, res.output
    run, summary, folder = wandb_records(tmp_path / "wb")
    # the id and project recorded in the analysed folder's .wandb file; never the project "forensics"
    assert (run["id"], run["project"], run["resume"]) == ("fx0grpo1", "forensics-fixture", True)
    assert folder.name.endswith("-fx0grpo1")
    d = json.loads((scanned_wandb_run / "analysis.json").read_text())
    assert summary["forensics/health/overall"] == pytest.approx(d["health"]["overall"])
    assert summary["forensics/findings/critical"] == d["findings_by_severity"]["critical"]
    table = json.loads((folder / "files" / summary["forensics/episodes"]["path"]).read_text())
    rules = {row[0] for row in table["data"]}
    assert rules == {f["rule"] for f in d["findings"]} and table["columns"][:4] == ["rule", "severity",
                                                                                   "first_step", "last_step"]


def test_wandb_export_options_name_the_run(scanned_wandb_run: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    res = run_cli("export", str(scanned_wandb_run), "--to", "wandb-offline", "-o", str(tmp_path / "a"),
                  "--run-id", "other7", "--project", "mine", "--entity", "team")
    assert res.exit_code == 0, res.output
    assert wandb_records(tmp_path / "a")[0] | {"name": ""} == {"id": "other7", "project": "mine", "entity": "team",
                                                               "resume": True, "name": ""}
    # --to wandb resumes the same way (offline here, as W&B's own WANDB_MODE says)
    monkeypatch.setenv("WANDB_MODE", "offline")
    res = run_cli("export", str(scanned_wandb_run), "--to", "wandb", "-o", str(tmp_path / "b"))
    assert res.exit_code == 0, res.output
    assert wandb_records(tmp_path / "b")[0]["id"] == "fx0grpo1"


def test_wandb_export_of_a_run_without_a_known_project_or_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    from .conftest import healthy_rows, write_jsonl

    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    log = write_jsonl(tmp_path / "s.jsonl", healthy_rows(200))
    assert run_cli("scan", str(log), "-o", str(tmp_path / "rep"), "-q").exit_code == 0
    res = CliRunner().invoke(main, ["export", str(tmp_path / "rep"), "--to", "wandb-offline", "-o",
                                    str(tmp_path / "x"), "--run-id", "abc"])
    assert res.exit_code == 2 and "give --project" in res.output
    res = CliRunner().invoke(main, ["export", str(tmp_path / "rep"), "--to", "tensorboard", "-o",
                                    str(tmp_path / "y"), "--run-id", "abc"])
    assert res.exit_code == 2 and "--to wandb" in res.output
    # nothing known: a new run, in the project "forensics"
    assert run_cli("export", str(tmp_path / "rep"), "--to", "wandb-offline", "-o", str(tmp_path / "z")).exit_code == 0
    run = wandb_records(tmp_path / "z")[0]
    assert run["project"] == "forensics" and run["id"] and not run["resume"]


# --- stop_on_critical in the Trainer's order of calls -----------------------------------------

def trainer_loop(cb: object, out: Path, *, best: bool, steps: int = 30, nan_from: int = 12) -> list[int]:
    """transformers' loop, reduced to what decides a save (4.47 through 5.x): per step ``on_log``,
    an evaluation after which ``save_strategy="best"`` sets ``should_save`` to "a new best" (never,
    here), the save; leaving the loop ``on_epoch_end`` and a save again. The steps saved."""
    args = SimpleNamespace(output_dir=str(out), report_to=[])
    state = SimpleNamespace(global_step=0, is_world_process_zero=True)
    control = SimpleNamespace(should_save=False, should_training_stop=False)
    saved: list[int] = []

    def maybe_save() -> None:
        if control.should_save:
            saved.append(state.global_step)
            control.should_save = False
            cb.on_save(args, state, control)  # type: ignore[attr-defined]

    cb.on_train_begin(args, state, control)  # type: ignore[attr-defined]
    for step in range(1, steps + 1):
        state.global_step = step
        logs = {"loss": 1.0, "grad_norm": float("nan") if step >= nan_from else 1.0, "learning_rate": 1e-5}
        cb.on_log(args, state, control, logs=logs)  # type: ignore[attr-defined]
        if best:
            control.should_save = False  # the evaluation found no new best
        maybe_save()
        if control.should_training_stop:
            break
    cb.on_epoch_end(args, state, control)  # type: ignore[attr-defined]
    maybe_save()
    return saved


@pytest.mark.parametrize("best", [False, True])
def test_the_stop_saves_its_step_once_whatever_the_save_strategy(tmp_path: Path, best: bool) -> None:
    """With ``save_strategy="best"`` the step's request is overwritten by the evaluation and the
    stop's checkpoint is saved on the way out, at the same step; otherwise at the step, once."""
    from forensics.live.transformers import ForensicsCallback

    cb = ForensicsCallback(stop_on_critical=True)
    saved = trainer_loop(cb, tmp_path, best=best)
    assert cb.stop_reason is not None and saved == [12]
    assert cb.stop_checkpoint == tmp_path / "checkpoint-12"
    # no stop: nothing asked for
    assert trainer_loop(ForensicsCallback(stop_on_critical=False), tmp_path / "b", best=best) == []


# --- a real Trainer at both ends ------------------------------------------------------------

def _python(env_var: str, candidates: list[Path]) -> tuple[Path | None, str]:
    """The first Python that has what the smoke run needs, or None and why none does."""
    tried = []
    paths = [Path(os.environ[env_var])] if os.environ.get(env_var) else candidates
    for py in paths:
        if not py.exists():
            tried.append(f"{py} is absent")
            continue
        ok = subprocess.run([str(py), "-c", NEEDS, *MODULES], capture_output=True, text=True, timeout=60)
        if ok.returncode == 0:
            return py, ""
        tried.append(f"{py} {ok.stderr.strip() or 'cannot run'}")
    return None, (f"no environment for this test (${env_var}): " + "; ".join(tried)
                  + "; `make test` builds .venv-trl and .venv-tf440")


TF440, TF440_WHY = _python("FORENSICS_TF440_PYTHON", [ROOT.parent / "venv-tf440" / "bin" / "python",
                                                      ROOT / ".venv-tf440" / "bin" / "python"])
TF5, TF5_WHY = _python("FORENSICS_TF5_PYTHON", [ROOT.parent / "venv-tf5" / "bin" / "python",
                                                ROOT / ".venv-trl" / "bin" / "python"])


def smoke(python: Path, trainer: str, out: Path) -> dict:
    proc = subprocess.run([str(python), str(ROOT / "scripts" / "callback_smoke.py"), "--trainer", trainer,
                           "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=out.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "smoke.json").read_text())


def check_stop_and_tensorboard(r: dict, out: Path) -> None:
    """Stopped by a critical finding, on a checkpoint the log names; TensorBoard beside the Trainer's
    (a run of its own in the Trainer's folder: one event file per folder, which TensorBoard follows)."""
    assert r["stop_checkpoint"] == str(out / f"checkpoint-{r['global_step']}")
    assert r["global_step"] < 30
    assert {"model.safetensors", "trainer_state.json", "forensics"} <= set(r["checkpoint_files"])
    assert any(m.endswith(f"saving checkpoint {r['stop_checkpoint']}") for m in r["log"])
    trainer_dir, ours = (Path(d) for d in r["event_dirs"])
    assert trainer_dir.parent == out / "runs" and Path(r["forensics_tb"]).parent == ours == trainer_dir / "forensics"
    assert len(r["event_files"]) == 2
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = {}
    for folder in (trainer_dir, ours):
        ea = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        ea.Reload()
        tags[folder] = set(ea.Tags()["scalars"])
    assert "train/loss" in tags[trainer_dir] and "forensics/health/overall" in tags[ours]
    assert any(t.startswith("forensics/episodes/") for t in tags[ours])


@pytest.mark.skipif(TF440 is None, reason=TF440_WHY)
def test_real_trainer_on_transformers_4_40(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = smoke(TF440, "plain", out)  # type: ignore[arg-type]
    assert r["transformers"].startswith("4.40") and r["has_logging_dir_arg"]
    assert r["args"] == "MyArgs" and r["algorithm"] is None
    assert r["stop_reason"].startswith("grad.nonfinite")
    check_stop_and_tensorboard(r, out)


@pytest.mark.skipif(TF5 is None, reason=TF5_WHY)
def test_real_trainer_on_transformers_5_without_the_trainer(tmp_path: Path) -> None:
    """No ``logging_dir`` argument and a callback that does not know the trainer: the folder the
    Trainer's TensorBoard callback made (``runs/<time>_<host>``) is found."""
    out = tmp_path / "run"
    r = smoke(TF5, "plain", out)  # type: ignore[arg-type]
    assert r["transformers"].startswith("5.") and not r["has_logging_dir_arg"]
    assert r["stop_reason"].startswith("grad.nonfinite")
    check_stop_and_tensorboard(r, out)


@pytest.mark.skipif(TF5 is None, reason=TF5_WHY)
def test_real_trainer_stop_saves_with_save_strategy_best(tmp_path: Path) -> None:
    """``save_strategy="best"`` with an evaluation at every step: after each evaluation the Trainer
    sets ``should_save`` to "a new best", over the stop's request; the stop's checkpoint is saved all
    the same (the score is best at the first evaluation only, so the Trainer itself saves no other)."""
    out = tmp_path / "run"
    r = smoke(TF5, "best", out)  # type: ignore[arg-type]
    assert r["stop_reason"].startswith("grad.nonfinite")
    step = r["global_step"]
    assert r["evaluations"] == step  # the stopping step was evaluated too (and was no new best)
    assert r["best_checkpoint"] == str(out / "checkpoint-1")
    assert r["checkpoints"] == ["checkpoint-1", f"checkpoint-{step}"]
    assert any(m.endswith(f"saved {out / f'checkpoint-{step}'} before stopping (stop_on_critical)") for m in r["log"])
    check_stop_and_tensorboard(r, out)


@pytest.mark.skipif(TF5 is None, reason=TF5_WHY)
def test_real_grpo_trainer_on_transformers_5(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = smoke(TF5, "grpo", out)  # type: ignore[arg-type]
    assert r["transformers"].startswith("5.") and not r["has_logging_dir_arg"]
    assert (r["trainer"], r["args"], r["algorithm"]) == ("GRPOTrainer", "MyGRPOConfig", "grpo")
    check_stop_and_tensorboard(r, out)
    # every completions table TRL wrote is in the sample stream, the stopping step's included
    assert r["completion_tables"] == r["global_step"] and r["samples"] == 4 * r["global_step"]
    rows = [json.loads(x) for x in (out / "forensics" / "samples.jsonl").read_text().splitlines()]
    assert {"prompt", "completion", "reward", "advantage"} <= set(rows[0]) and rows[-1]["step"] == r["global_step"]


def test_callback_puts_its_findings_into_the_active_wandb_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``report_to=["wandb"]``: the run the Trainer's W&B callback started gets the findings
    (summary values and tables) at the end of training."""
    wandb = pytest.importorskip("wandb")
    from .test_interfaces import GRPOConfig as Args
    from .test_interfaces import drive, spiky

    monkeypatch.setenv("WANDB_SILENT", "true")
    run = wandb.init(mode="offline", dir=str(tmp_path), project="mine", id="live1")
    try:
        from forensics.live.transformers import ForensicsCallback

        cb = ForensicsCallback(check_every=10)
        drive(cb, Args(output_dir=str(tmp_path / "out"), beta=0.04, report_to=["wandb"]), spiky())
    finally:
        run.finish()
        wandb.teardown()
    info, summary, folder = wandb_records(tmp_path)
    assert info["id"] == "live1" and summary["forensics/findings/critical"] >= 1
    table = json.loads((folder / "files" / summary["forensics/findings"]["path"]).read_text())
    assert "kl.spike" in {row[1] for row in table["data"]}
