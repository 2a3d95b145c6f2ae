"""Writes fixtures/formats/wandb_offline/: a W&B offline run made by the wandb package itself.

The run logs what Hugging Face's ``WandbCallback`` logs for a TRL GRPO run (``train/<key>`` and
``train/global_step``), the log_history of ``fixtures/trl/grpo_lr_jump`` (a learning rate x30 at
step 60), and prints the console dict lines ``ProgressCallback`` prints, which W&B captures as
``files/output.log``. Run from the repository root with the wandb package installed:
``python scripts/make_wandb_fixture.py``. W&B's own debug logs and temporary files are removed.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "fixtures" / "formats" / "wandb_offline"


def main() -> None:
    import wandb

    history = json.loads((ROOT / "fixtures/trl/grpo_lr_jump/trainer_state.json").read_text())["log_history"]
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    os.environ["WANDB_SILENT"] = "true"
    run = wandb.init(project="forensics-fixture", dir=str(OUT), mode="offline", id="fx0grpo1",
                     config={"learning_rate": 1e-6, "max_grad_norm": 1.0, "beta": 0.04})
    for row in history:
        if "train_runtime" in row:
            continue
        step = row["step"]
        logs = {k: v for k, v in row.items() if k != "step"}
        print({k: round(v, 6) if isinstance(v, float) else v for k, v in logs.items()}, flush=True)
        run.log({**{f"train/{k}": v for k, v in logs.items()}, "train/global_step": step})
    run.finish()
    for folder in OUT.glob("wandb/*run-*"):
        shutil.rmtree(folder / "logs", ignore_errors=True)
        shutil.rmtree(folder / "tmp", ignore_errors=True)
        for extra in ("files/requirements.txt", "files/wandb-metadata.json", "files/conda-environment.yaml"):
            (folder / extra).unlink(missing_ok=True)
    for f in OUT.glob("wandb/debug*.log"):
        f.unlink()
    latest = OUT / "wandb" / "latest-run"
    if latest.is_symlink():
        latest.unlink()


if __name__ == "__main__":
    main()
