"""`all_gather` along the first axis, used by OpenRLHF only with ring attention (not rehearsed on CPU)."""

from __future__ import annotations

import torch
import torch.distributed as dist


def all_gather(tensor: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, tensor.contiguous(), group=group)
    return torch.cat(parts, dim=0)
