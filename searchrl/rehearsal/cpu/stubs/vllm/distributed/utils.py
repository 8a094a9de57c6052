"""`StatelessProcessGroup`: a store-backed group between processes outside torch's default group
(DeepSpeed rank 0 and the engines), as vLLM's weight-sync set-up creates it."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import torch.distributed as dist


@dataclass
class StatelessProcessGroup:
    rank: int
    world_size: int
    store: dist.TCPStore

    @staticmethod
    def create(host: str, port: int, rank: int, world_size: int, store_timeout: int = 300) -> StatelessProcessGroup:
        store = dist.TCPStore(
            host, port, world_size, is_master=rank == 0, timeout=datetime.timedelta(seconds=store_timeout)
        )
        return StatelessProcessGroup(rank=rank, world_size=world_size, store=store)
