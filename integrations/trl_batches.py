"""The TRL adapter's batch plumbing (`creditbench.integrations.trl`): rows of TRL's per-row
output dict and of the method's `RolloutBatch` taken together, several draws joined (DAPO's
refills), a batch moved to the model's device."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import torch

from creditbench.methods.core import RolloutBatch, concat_batches


def on_device(batch: RolloutBatch, device: torch.device) -> RolloutBatch:
    """``batch`` with every tensor (and every extras tensor) on ``device``."""

    def move(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: move(item) for key, item in value.items()}
        return value.to(device) if isinstance(value, torch.Tensor) else value

    return replace(batch, **{f.name: move(getattr(batch, f.name)) for f in fields(batch)})


# TRL's per-row output tensors: prompt-side (left-padded), completion-side (right-padded)
_PROMPT_KEYS = ("prompt_ids", "prompt_mask")


def take_rows(
    output: dict, batch: RolloutBatch, unscorable: torch.Tensor, index: torch.Tensor
) -> tuple[dict, RolloutBatch, torch.Tensor]:
    """Rows ``index`` (bool or long ``[B]``) of one process's TRL output and of the batch."""
    taken = {
        key: value[index.to(value.device)]
        if isinstance(value, torch.Tensor) and value.ndim >= 1
        else value
        for key, value in output.items()
    }
    mask = taken["completion_mask"]
    taken["num_items_in_batch"] = mask.sum()
    return taken, batch.select(index), unscorable[index.to(unscorable.device)]


def concat_draws(
    parts: list[tuple[dict, RolloutBatch, torch.Tensor]], pad_id: int
) -> tuple[dict, RolloutBatch, torch.Tensor]:
    """Several draws' rows as one: TRL's prompt tensors left-padded, the others right-padded
    to the widest; the batch by `methods.core.concat_batches`, which keeps groups apart."""
    merged: dict[str, Any] = {}
    for key, first in parts[0][0].items():
        if not isinstance(first, torch.Tensor) or first.ndim == 0:
            continue
        values = [out[key] for out, _, _ in parts]
        width = max(v.shape[1] for v in values) if first.ndim >= 2 else 0
        fill = pad_id if key in ("prompt_ids", "completion_ids") else 0
        padded = []
        for v in values:
            if v.ndim >= 2 and v.shape[1] < width:
                extra = v.new_full((v.shape[0], width - v.shape[1], *v.shape[2:]), fill)
                v = torch.cat([extra, v] if key in _PROMPT_KEYS else [v, extra], dim=1)
            padded.append(v)
        merged[key] = torch.cat(padded)
    merged["num_items_in_batch"] = merged["completion_mask"].sum()
    batch = concat_batches([b for _, b, _ in parts])
    return merged, batch, torch.cat([bad for _, _, bad in parts])
