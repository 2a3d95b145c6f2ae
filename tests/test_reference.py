"""Reference trainer: valid run folders, the exact KL controller law, what each fault changes."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from forensics.config import load_run_meta  # noqa: E402 - after the importorskip
from forensics.schema import METRICS, REWARD_COMPONENT_PREFIX  # noqa: E402
from forensics.trainer.reference import FAULTS, AdaptiveKLController, FixedKLController  # noqa: E402
from forensics.trainer.reference.__main__ import main  # noqa: E402
from forensics.trainer.reference.trainer import TrainConfig, train  # noqa: E402

#: A small, fast configuration: a short warm start and small batches.
SMALL: dict[str, Any] = {"sft_steps": 30, "batch_size": 16, "ppo_epochs": 2,
                         "prompts_per_step": 4, "group_size": 4, "grpo_epochs": 2,
                         "samples_per_step": 4, "flush_every": 5}
ONSET = 6
TIMING = {"timestamp", "step_time", "gen_tokens_per_s", "train_tokens_per_s", "samples_per_s",
          "mfu", "ram_gb"}


def _run(tmp_path: Path, algo: str, steps: int = 12, **kwargs: Any) -> Path:
    torch.set_num_threads(1)
    cfg = TrainConfig(algo=algo, steps=steps, **{**SMALL, **kwargs})
    name = f"{algo}-{kwargs.get('fault') or 'healthy'}-{kwargs.get('seed', 0)}"
    return train(cfg, tmp_path / name)


def _steps(folder: Path) -> pd.DataFrame:
    rows = [json.loads(line) for line in (folder / "steps.jsonl").read_text().splitlines()]
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory.mktemp("ppo"), "ppo")


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory.mktemp("grpo"), "grpo")


def _assert_canonical(columns: list[str]) -> None:
    unknown = [c for c in columns if c not in METRICS
               and not c.startswith(REWARD_COMPONENT_PREFIX)]
    assert not unknown, f"non-canonical columns: {unknown}"


def test_ppo_writes_a_valid_run_folder(ppo_run: Path) -> None:
    steps = _steps(ppo_run)
    assert steps["step"].tolist() == list(range(12))
    _assert_canonical(list(steps.columns))
    for col in ("kl", "kl_seq", "kl_coef", "entropy", "grad_norm", "grad_norm_value",
                "grad_norm_clipped", "advantage_std", "advantage_kurtosis", "value_loss",
                "explained_variance", "reward/correctness", "reward/format", "mfu"):
        assert steps[col].notna().all(), col
    assert np.allclose(steps["advantage_mean"], 0.0, atol=1e-5)
    meta = load_run_meta(ppo_run / "run.json")
    assert (meta.algorithm, meta.kl_controller, meta.kl_target_unit) == ("ppo", "adaptive",
                                                                       "sequence")
    assert meta.kl_batch_size == 16 and meta.kl_horizon == 250.0 and meta.kl_target == 0.5
    assert meta.advantage_normalization is True and meta.param_count and meta.peak_flops
    samples = [json.loads(line) for line in (ppo_run / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 12 * 4
    _assert_canonical(list(samples[0]))
    assert samples[0]["prompt"].startswith("^") and samples[0]["prompt"].endswith(">")
    assert all(s["length"] >= len(s["completion"]) for s in samples)


def test_grpo_writes_a_valid_run_folder(grpo_run: Path) -> None:
    steps = _steps(grpo_run)
    _assert_canonical(list(steps.columns))
    assert (steps["kl_coef"] == 0.04).all() and (steps["group_size"] == 4).all()
    assert "value_loss" not in steps and "grad_norm_value" not in steps
    assert (steps["kl"] >= 0).all()  # the k3 estimator is non-negative
    meta = load_run_meta(grpo_run / "run.json")
    assert (meta.algorithm, meta.kl_controller, meta.kl_coef_init) == ("grpo", "fixed", 0.04)
    assert meta.kl_target is None and meta.config["kl_estimator"] == "k3"


def test_logged_kl_coef_follows_the_adaptive_law_exactly(ppo_run: Path) -> None:
    steps = _steps(ppo_run)
    meta = load_run_meta(ppo_run / "run.json")
    assert meta.kl_target and meta.kl_batch_size and meta.kl_horizon
    beta = steps["kl_coef"].to_numpy()
    # the controller saw the float32 per-sequence KL that is logged
    kl = steps["kl_seq"].to_numpy(dtype=np.float32).astype(np.float64)
    e = np.clip(kl / meta.kl_target - 1.0, -0.2, 0.2)
    predicted = beta[:-1] * (1.0 + e[:-1] * meta.kl_batch_size / meta.kl_horizon)
    np.testing.assert_allclose(beta[1:], predicted, rtol=1e-12)
    assert beta[0] == meta.kl_coef_init


def test_controllers() -> None:
    ctl = AdaptiveKLController(0.2, target=6.0, horizon=10000)
    ctl.update(6.6, 512)  # e = +0.1
    assert ctl.value == pytest.approx(0.2 * (1 + 0.1 * 512 / 10000), rel=1e-12)
    ctl.update(0.0, 512)  # e clipped at -0.2
    assert ctl.value == pytest.approx(0.2 * (1 + 0.1 * 0.0512) * (1 - 0.2 * 0.0512), rel=1e-12)
    wrong = AdaptiveKLController(0.2, target=6.0, horizon=10000, sign=-1.0)
    wrong.update(12.0, 512)
    assert wrong.value < 0.2
    tensor_ctl = AdaptiveKLController(0.2, target=6.0, horizon=10000)
    tensor_ctl.update(torch.tensor(6.6), 512)
    assert isinstance(tensor_ctl.value, torch.Tensor)
    assert float(tensor_ctl.value) == pytest.approx(0.2 * 1.00512, rel=1e-6)
    fixed = FixedKLController(0.05)
    fixed.update(100.0, 512)
    assert fixed.value == 0.05


def test_runs_are_deterministic(tmp_path: Path, ppo_run: Path) -> None:
    again = _steps(_run(tmp_path, "ppo"))
    first = _steps(ppo_run)
    cols = [c for c in first.columns if c not in TIMING]
    pd.testing.assert_frame_equal(first[cols], again[cols])


def test_cli_writes_a_run(tmp_path: Path) -> None:
    out = tmp_path / "cli"
    assert main(["--algo", "grpo", "--seed", "3", "--steps", "2", "--samples-per-step", "2",
                 "--sft-steps", "5", "--out", str(out), "--fault", "kl_off", "--onset", "1"]) == 0
    assert len(_steps(out)) == 2
    assert json.loads((out / "run.json").read_text())["config"]["fault"] == "kl_off"
    with pytest.raises(SystemExit):
        main(["--algo", "dpo", "--out", str(out)])


def _before_after(df: pd.DataFrame, col: str) -> tuple[pd.Series, pd.Series]:
    return df.loc[df.step < ONSET, col], df.loc[df.step >= ONSET, col]


def _check_lr_high(df: pd.DataFrame) -> None:
    lr0, lr1 = _before_after(df, "learning_rate")
    assert (lr1 == 30 * lr0.iloc[0]).all()
    a0, a1 = _before_after(df, "approx_kl")
    assert a1.mean() > 5 * a0.mean()


def _check_kl_off(df: pd.DataFrame) -> None:
    b0, b1 = _before_after(df, "kl_coef")
    assert (b0 > 0).all() and (b1 == 0).all()


def _check_kl_wrong_sign(df: pd.DataFrame) -> None:
    beta = df["kl_coef"].to_numpy()
    e = np.clip(df["kl_seq"].to_numpy() / 0.5 - 1, -0.2, 0.2)
    move = np.log(beta[1:] / beta[:-1])
    t = df["step"].to_numpy()[:-1]
    assert (np.sign(move[t < ONSET]) == np.sign(e[:-1][t < ONSET])).all()
    assert (np.sign(move[t >= ONSET]) == -np.sign(e[:-1][t >= ONSET])).all()


def _check_adv_norm_off(df: pd.DataFrame) -> None:
    s0, s1 = _before_after(df, "advantage_std")
    assert np.allclose(s0, 1.0, atol=0.02) and (abs(s1 - 1.0) > 0.1).all()


def _check_biased_baseline(df: pd.DataFrame) -> None:
    m0, m1 = _before_after(df, "advantage_mean")
    assert np.allclose(m0, 0.0, atol=1e-6) and (m1 > 0.05).all()


def _check_length_reward(df: pd.DataFrame) -> None:
    l0, l1 = _before_after(df, "reward/length")
    assert l0.isna().all() and (l1 > 0).all()
    after = df[df.step >= ONSET]
    np.testing.assert_allclose(after["reward/length"], 0.25 * after["response_length_mean"],
                               rtol=1e-5)


def _check_grad_explosion(df: pd.DataFrame) -> None:
    g0, g1 = _before_after(df, "grad_norm")
    assert g1.iloc[:3].max() > 4 * g0.median()
    lr = df.set_index("step")["learning_rate"]
    assert lr[ONSET] == 1000 * lr[0] and lr[ONSET + 3] == lr[0]


def _check_lr_tiny(df: pd.DataFrame) -> None:
    a0, a1 = _before_after(df, "approx_kl")
    assert a1.max() < 1e-4 < a0.mean()


def _check_entropy_collapse(df: pd.DataFrame) -> None:
    e0, e1 = _before_after(df, "entropy_loss")
    assert (e0 < 0).all() and (e1 > 0).all()  # the bonus became a penalty


def _check_value_loss_unscaled(df: pd.DataFrame) -> None:
    v0, v1 = _before_after(df, "grad_norm_value")
    assert v1.median() > 10 * v0.median()


def _check_max_length_small(df: pd.DataFrame) -> None:
    m0, m1 = _before_after(df, "response_length_max")
    assert (m1 <= 3).all() and m0.max() > 3
    t0, t1 = _before_after(df, "truncation_rate")
    assert t1.mean() > t0.mean() + 0.1


def _check_nan_overflow(df: pd.DataFrame) -> None:
    # a step overflows when one of its responses scores above 65504 / 1e5; with the small test
    # batch not every step has one (in the 240-step fixture every step after onset does)
    r1 = df.loc[df.step >= ONSET, "reward_mean"]
    overflowed = (r1 == math.inf).to_numpy()
    assert overflowed.sum() >= 3
    for col in ("loss", "grad_norm"):
        v0, v1 = _before_after(df, col)
        assert np.isfinite(v0).all()
        assert v1.isna().to_numpy()[overflowed].all() and np.isfinite(v1[~overflowed]).all()


def _check_resume_repeat(df: pd.DataFrame) -> None:
    # resume_span=3: the job dies in step 6, resumes from the checkpoint after step 2
    assert df["step"].tolist() == [*range(ONSET), *range(ONSET - 3, 12)]


CHECKS = {
    "lr_high": _check_lr_high, "kl_off": _check_kl_off, "kl_wrong_sign": _check_kl_wrong_sign,
    "adv_norm_off": _check_adv_norm_off, "biased_baseline": _check_biased_baseline,
    "length_reward": _check_length_reward, "grad_explosion": _check_grad_explosion,
    "lr_tiny": _check_lr_tiny, "entropy_collapse": _check_entropy_collapse,
    "value_loss_unscaled": _check_value_loss_unscaled,
    "max_length_small": _check_max_length_small, "nan_overflow": _check_nan_overflow,
    "resume_repeat": _check_resume_repeat,
}


def test_every_fault_has_a_check() -> None:
    assert set(CHECKS) == set(FAULTS)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault_changes_what_it_should(tmp_path: Path, fault: str) -> None:
    spec = FAULTS[fault]
    folder = _run(tmp_path, spec.algorithm, fault=fault, onset=ONSET, resume_span=3)
    df = _steps(folder)
    CHECKS[fault](df)
    meta = json.loads((folder / "run.json").read_text())
    assert meta["config"]["fault"] == fault and meta["config"]["onset"] == ONSET


def test_reference_policy_copy_is_flattened(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The frozen reference (a deep copy) re-flattens its GRU weights once, at the copy.

    On the CPU ``flatten_parameters`` has nothing to do, so this checks the bookkeeping: the
    copy's GRU is flattened after the copy is made; on CUDA ``test_cuda_run`` checks that the
    warning it prevents stays away.
    """
    from forensics.trainer.reference.trainer import _Run

    flattened: list[int] = []
    original = torch.nn.GRU.flatten_parameters

    def spy(self: torch.nn.GRU) -> None:
        flattened.append(id(self))
        original(self)

    monkeypatch.setattr(torch.nn.GRU, "flatten_parameters", spy)
    torch.set_num_threads(1)
    run = _Run(TrainConfig(algo="ppo", steps=1, **{**SMALL, "sft_steps": 2}), tmp_path / "r")
    try:
        assert id(run.ref.gru) in flattened
        assert run.ref.gru is not run.model.gru
        run.step(0)  # the flattened copy still serves as the reference
    finally:
        run.writer.close()
    assert len(_steps(tmp_path / "r")) == 1


def test_cuda_run(tmp_path: Path) -> None:
    """The trainer runs on a GPU when one is available (skipped on CPU-only machines).

    Without the contiguity warning of a deep-copied GRU ("RNN module weights are not part of
    single contiguous chunk of memory"), which would otherwise come on every step.
    """
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        folder = _run(tmp_path, "ppo", steps=4, device="cuda")
    assert len(_steps(folder)) == 4
    assert not [w for w in caught if "contiguous chunk of memory" in str(w.message)]
