"""`PyNcclCommunicator` over gloo: the weight-sync broadcast from DeepSpeed rank 0 to the engines,
with NCCL's call shape (`broadcast(tensor, src, stream)`) on CPU tensors."""

from __future__ import annotations

import datetime
from typing import Any

import torch
import torch.distributed as dist

from vllm.distributed.utils import StatelessProcessGroup


class PyNcclCommunicator:
    def __init__(self, group: StatelessProcessGroup, device: Any = None) -> None:
        self.rank = group.rank
        self.world_size = group.world_size
        self.group = dist.ProcessGroupGloo(group.store, group.rank, group.world_size, datetime.timedelta(minutes=10))

    def broadcast(self, tensor: torch.Tensor, src: int, stream: Any = None) -> None:
        self.group.broadcast(tensor, src).wait()
