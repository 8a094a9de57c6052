"""The encoder's transformer run by ONNX Runtime on CPU: exported here with torch.onnx the first time, cached by the
model's files, and used only where its vectors match PyTorch's (the check is searchrl/search/encode/encoder.py's).

One query through MiniLM on 2 threads spends nearly all its time in PyTorch's per-operator dispatch; ONNX Runtime
runs the same graph fused, about 3.5x faster here. Only the transformer's token embeddings come from the exported
graph. Dense layers stay sentence-transformers' own modules; plain mean or CLS pooling and normalisation are done
here in NumPy (`pooled`) when the encoder has checked they give its modules' vectors.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

BACKENDS = ("auto", "torch", "onnx", "onnx-int8")
# Part of the cache key: a change to how the graph is exported must not reuse an older export.
EXPORT_VERSION = 1
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def available() -> str | None:
    """None when ONNX Runtime and the exporter's dependencies import, else what is missing."""
    missing = []
    for module in ("onnxruntime", "onnx", "onnxscript"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    return f"{', '.join(missing)} not installed (pip install onnxruntime onnx onnxscript)" if missing else None


def cache_root() -> Path:
    """$SEARCHRL_CACHE/onnx, or the user's cache: ~/.cache/searchrl/onnx."""
    base = os.environ.get("SEARCHRL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "searchrl"
    )
    return Path(base) / "onnx"


def model_key(model_dir: Path) -> str:
    """The export's cache key: every file of the model (name, size, modification time), torch's version and ours.
    Size and time, not content: hashing a 1.3 GB model on every load would cost seconds."""
    import torch

    h = hashlib.sha256(f"{EXPORT_VERSION}|{torch.__version__}".encode())
    for f in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        st = f.stat()
        h.update(f"{f.relative_to(model_dir)}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()[:20]


def _token_embeddings(auto_model: Any, with_token_types: bool) -> Any:
    """The transformer as a module whose inputs are positional, as the exporter wants them, returning the hidden
    states."""
    import torch

    class TokenEmbeddings(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.auto_model = auto_model

        def forward(
            self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
        ) -> torch.Tensor:
            extra = {"token_type_ids": token_type_ids} if with_token_types else {}
            return self.auto_model(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state

    return TokenEmbeddings()


def export(auto_model: Any, features: dict[str, Any], target: Path) -> None:
    """The transformer as ONNX (dynamic batch and sequence axes) into `target`, written whole or not at all: an
    export runs in a folder of its own and is renamed into place, so processes exporting at once never read a half
    file; the first rename wins."""
    import torch

    names = tuple(n for n in INPUTS if n in features)
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".export-", dir=target.parent))
    # The exporter traces one attention implementation; eager is the one every BERT-family model has.
    previous = getattr(auto_model.config, "_attn_implementation", None)
    try:
        if hasattr(auto_model, "set_attn_implementation"):
            auto_model.set_attn_implementation("eager")
        else:
            auto_model.config._attn_implementation = "eager"
        dims = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}
        with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _token_embeddings(auto_model, "token_type_ids" in names),
                tuple(features[n] for n in names),
                str(work / "model.onnx"),
                input_names=list(names),
                output_names=["token_embeddings"],
                dynamic_shapes=tuple(dims for _ in names),
                dynamo=True,
                verbose=False,
            )
        try:
            os.rename(work, target)
        except OSError:  # another process got there first: its export is the same graph
            shutil.rmtree(work, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if previous is not None:
            if hasattr(auto_model, "set_attn_implementation"):
                auto_model.set_attn_implementation(previous)
            else:
                auto_model.config._attn_implementation = previous


def quantized(folder: Path) -> Path:
    """The int8 (dynamic quantization, per-channel weights) copy of folder/model.onnx, made once."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    path = folder / "model.int8.onnx"
    if not path.is_file():
        fd, tmp = tempfile.mkstemp(suffix=".onnx", dir=folder)
        os.close(fd)
        quantize_dynamic(str(folder / "model.onnx"), tmp, weight_type=QuantType.QInt8, per_channel=True)
        os.replace(tmp, path)
    return path


class OnnxTransformer:
    """Token embeddings from ONNX Runtime sessions over the exported transformer, one session per thread count.

    A session's thread pool is fixed when it is made, while the server sizes each search's pools as it starts
    (searchrl/search/index/cpu_threads.py: one thread beside a busy process, every core otherwise); so each call runs
    on the session made for the calling thread's torch thread count (at most two counts in practice)."""

    def __init__(self, auto_model: Any, model_dir: Path, features: dict[str, Any], int8: bool) -> None:
        import torch

        folder = cache_root() / model_key(model_dir)
        if not (folder / "model.onnx").is_file():
            log.info("exporting %s to ONNX into %s (once)", model_dir, folder)
            export(auto_model, features, folder)
        self.path = quantized(folder) if int8 else folder / "model.onnx"
        self.sessions: dict[int, Any] = {}
        self._lock = threading.Lock()
        self.names = [i.name for i in self.session(torch.get_num_threads()).get_inputs()]

    def session(self, threads: int) -> Any:
        found = self.sessions.get(threads)
        if found is not None:
            return found
        import onnxruntime as ort

        with self._lock:
            if threads not in self.sessions:
                options = ort.SessionOptions()
                options.intra_op_num_threads = threads
                options.inter_op_num_threads = 1
                self.sessions[threads] = ort.InferenceSession(
                    str(self.path), options, providers=["CPUExecutionProvider"]
                )
            return self.sessions[threads]

    def __call__(self, features: dict[str, Any]) -> np.ndarray:
        """Token embeddings for `features` (torch tensors or NumPy arrays of token ids)."""
        import torch

        feed = {n: np.asarray(features[n]).astype(np.int64, copy=False) for n in self.names}
        return self.session(torch.get_num_threads()).run(None, feed)[0]


POOLING_MODES = ("mean", "cls")


def pooled(token_embeddings: np.ndarray, attention_mask: np.ndarray, mode: str, normalize: bool) -> np.ndarray:
    """Sentence vectors as sentence-transformers' Pooling (mean over the unmasked tokens, or the first token) and
    torch's `normalize` (a floor of 1e-12 on the norm) make them."""
    if mode == "cls":
        vectors = token_embeddings[:, 0].astype(np.float32)
    else:
        mask = attention_mask[..., None].astype(np.float32)
        vectors = (token_embeddings * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
    if normalize:
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return vectors
