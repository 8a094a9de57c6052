"""The `exact` index type: exact inner product over the fp16 embedding shards, rows split across devices.

On GPUs each device holds one contiguous slice of the rows as an fp16 tensor (25M x 1024 is 51 GB: one
80 GB card, or a few smaller ones) and answers a query batch with one matrix product and a top-k; the
per-device top-k lists are merged on the host. No faiss-gpu build is needed. On CPU the slice stays
memory-mapped and is streamed through in blocks, upcast to fp32 (CPUs have no fast fp16 product).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from searchrl.search.index.index_types import top_k
from searchrl.search.index.shards import EmbeddingShards

CPU_BLOCK_ROWS = 1 << 16
GPU_BLOCK_ROWS = 1 << 22


def device_slices(n_rows: int, n_devices: int) -> list[tuple[int, int]]:
    """Contiguous, disjoint [start, end) row ranges covering 0..n_rows, one per device (some may be empty)."""
    bounds = np.linspace(0, n_rows, n_devices + 1).round().astype(np.int64)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


class _DeviceSlice:
    def __init__(self, shards: EmbeddingShards, start: int, end: int, device: str, resident: bool) -> None:
        import torch

        self.start, self.end, self.device = start, end, device
        self.block_rows = GPU_BLOCK_ROWS
        self.pieces = shards.slice(start, end)
        self.matrix = None
        if resident:
            # Filled piece by piece from the memory map: the host never holds a second copy of the slice.
            self.matrix = torch.empty((end - start, shards.dimension), dtype=torch.float16, device=device)
            row = 0
            for piece in self.pieces:
                self.matrix[row : row + len(piece)] = torch.from_numpy(np.array(piece)).to(device)
                row += len(piece)

    def launch(self, queries: np.ndarray, k: int):
        """Start the search (asynchronous on GPUs); `collect` waits for it."""
        import torch

        if self.end == self.start:
            return None
        if self.matrix is not None:
            q = torch.from_numpy(queries).to(self.device, dtype=torch.float16)
            values, indices = [], []
            # Row blocks bound the score matrix (queries x block, fp16) whatever the slice's size.
            for lo in range(0, len(self.matrix), self.block_rows):
                found = torch.topk(q @ self.matrix[lo : lo + self.block_rows].T, min(k, len(self.matrix) - lo), dim=1)
                values.append(found.values)
                indices.append(found.indices + lo)
            return torch.cat(values, dim=1), torch.cat(indices, dim=1)
        best_scores, best_rows = [], []
        q = torch.from_numpy(queries)
        offset = self.start
        for piece in self.pieces:
            for lo in range(0, len(piece), CPU_BLOCK_ROWS):
                block = torch.from_numpy(np.asarray(piece[lo : lo + CPU_BLOCK_ROWS], dtype=np.float32))
                found = torch.topk(q @ block.T, min(k, len(block)), dim=1)
                best_scores.append(found.values.numpy())
                best_rows.append(found.indices.numpy().astype(np.int64) + offset + lo - self.start)
            offset += len(piece)
        return np.concatenate(best_scores, axis=1), np.concatenate(best_rows, axis=1)

    def collect(self, launched, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores, rows = launched
        if not isinstance(scores, np.ndarray):
            scores, rows = scores.float().cpu().numpy(), rows.cpu().numpy().astype(np.int64)
        return top_k(scores, rows + self.start, k)


class ShardedExactIndex:
    """`resident` (default: on every non-CPU device) copies each slice into an fp16 tensor on its device;
    tests set it on CPU devices to run the GPU code path without a GPU."""

    def __init__(self, shards: EmbeddingShards, devices: Sequence[str], resident: bool | None = None) -> None:
        if not devices:
            raise ValueError("no devices given")
        self.ntotal = len(shards)
        self.d = shards.dimension
        self.devices = list(devices)
        self.slices = [
            _DeviceSlice(shards, a, b, dev, dev != "cpu" if resident is None else resident)
            for (a, b), dev in zip(device_slices(self.ntotal, len(devices)), devices, strict=True)
        ]

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = np.ascontiguousarray(vectors, dtype=np.float32)
        launched = [s.launch(queries, k) for s in self.slices]
        found = [s.collect(x, k) for s, x in zip(self.slices, launched, strict=True) if x is not None]
        if not found:
            return np.full((len(queries), k), -np.inf, np.float32), np.full((len(queries), k), -1, np.int64)
        scores = np.concatenate([f[0] for f in found], axis=1).astype(np.float32)
        rows = np.concatenate([f[1] for f in found], axis=1)
        return top_k(scores, rows, k)
