"""Adapters: the logs real trainers write, detected from content and read as raw step rows.

:data:`ADAPTERS` lists their formats, most specific first, for :mod:`forensics.io.formats`. Each
adapter yields rows under the trainer's own keys; :mod:`forensics.schema` maps them to canonical
names and units, so the report can say which source key fed which metric.
"""

from __future__ import annotations

from ..readers import Format
from . import (
    column_json,
    csv_table,
    deepspeed_chat,
    hf_console,
    hf_trainer_state,
    kv_console,
    llamafactory,
    openrlhf,
    rldk_events,
    tensorboard,
    verl,
    wandb,
    wandb_offline,
)
from ._common import JsonlLines, LineParser

__all__ = ["ADAPTERS", "LINE_PARSERS", "LineParser"]

#: The adapters' formats, in detection order.
ADAPTERS: tuple[Format, ...] = (
    Format("hf-trainer-state", hf_trainer_state.detect,
           lambda p, s: hf_trainer_state.HFTrainerStateSource(p, s),
           "Hugging Face trainer_state.json (TRL, Unsloth, LLaMA-Factory): log_history rows"),
    Format("verl-jsonl", verl.detect_jsonl, lambda p, s: verl.VerlJsonlSource(p, s),
           'veRL file logger JSONL: {"step": N, "data": {...}}'),
    Format("rldk-events", rldk_events.detect, lambda p, s: rldk_events.RldkEventsSource(p, s),
           "RLDK event stream: one JSON line per metric and step (time, step, name, value), pivoted"),
    Format("llamafactory", llamafactory.detect, lambda p, s: llamafactory.LlamaFactorySource(p, s),
           "LLaMA-Factory trainer_log.jsonl"),
    Format("wandb-history", wandb.detect_history, lambda p, s: wandb.WandbHistorySource(p, s),
           "W&B API history export (CSV or JSONL with _step, _runtime, _timestamp)"),
    Format("wandb-csv", wandb.detect_chart, lambda p, s: wandb.WandbChartSource(p, s),
           "W&B chart CSV export (Step, '<run> - <metric>' columns)"),
    Format("wandb-offline", wandb_offline.detect, lambda p, s: wandb_offline.WandbOfflineSource(p, s),
           "W&B run folder (wandb/run-*/): the .wandb history (with the wandb package), else files/output.log"),
    Format("tensorboard", tensorboard.detect, lambda p, s: tensorboard.TensorBoardSource(p, s),
           "TensorBoard event file, or a folder of them (merged, de-duplicated by tag and step)"),
    Format("column-json", column_json.detect, lambda p, s: column_json.ColumnJsonSource(p, s),
           'column-major metric JSON (NeMo-RL\'s TensorBoard scalars, TensorBoard-to-JSON dumps): '
           '{"metric": {"step": value, ...}, ...}'),
    Format("openrlhf-console", openrlhf.detect, lambda p, s: openrlhf.OpenRLHFSource(p, s),
           "OpenRLHF console: '✨ Global step N: {...}' lines"),
    Format("deepspeed-chat", deepspeed_chat.detect, lambda p, s: deepspeed_chat.DeepSpeedChatSource(p, s),
           "DeepSpeed-Chat step-3 console (epoch|step|act_loss blocks, OVERFLOW lines)"),
    Format("verl-console", verl.detect_console, lambda p, s: verl.VerlConsoleSource(p, s),
           "veRL console logger of every era: 'step:N - key:value - ...' lines"),
    Format("hf-console", hf_console.detect, lambda p, s: hf_console.HFConsoleSource(p, s),
           "Hugging Face Trainer console: {'loss': ...} dict lines (no step: rows numbered)"),
    Format("csv", csv_table.detect, lambda p, s: csv_table.CsvTableSource(p, s),
           "plain CSV or TSV: a header of key names, one row per step (a step column, or rows numbered)"),
)

#: Line-oriented formats and their parsers (``forensics watch`` feeds them appended lines).
LINE_PARSERS: dict[str, type[LineParser]] = {
    "jsonl": JsonlLines,
    "verl-console": verl.VerlConsoleParser,
    "verl-jsonl": verl.VerlJsonlParser,
    "llamafactory": llamafactory.LlamaFactoryParser,
    "openrlhf-console": openrlhf.OpenRLHFParser,
    "deepspeed-chat": deepspeed_chat.DeepSpeedChatParser,
    "hf-console": hf_console.HFConsoleParser,
    "rldk-events": rldk_events.RldkEventsParser,
    "kv-console": kv_console.KVConsoleParser,
}
