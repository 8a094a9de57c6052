"""Sentence-transformers encoder that applies a model profile's instructions and normalisation."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from searchrl.search.encode import onnx_encoder
from searchrl.search.encode.profiles import DEFAULT_MODEL, ModelProfile, profile_for, resolve_model

log = logging.getLogger(__name__)

# Queries per forward pass on a CPU. A batch is run shortest first in chunks of about this size, so each chunk is
# padded to its own longest query rather than the batch's, which costs less per query (the server's figures with
# --forward-batch 64 beside it: docs/BENCHMARKS.md#retrieval-server). A GPU runs the whole batch in one pass.
CPU_FORWARD_BATCH = 16
# The ONNX check at load: texts of unequal length, so one batch carries padding, as a server's batches do.
PROBE = [
    "which river flows through the capital of the country",
    "who",
    "the physicist who won the 1921 Nobel Prize and the theory he is best known for, explained in full",
]
# fp32 ONNX vectors must equal PyTorch's to this (unit vectors: a cosine of at least 0.99999); int8's are opt-in and
# only sanity-checked (their recall against fp32 is measured in docs/BENCHMARKS.md).
ONNX_TOLERANCE = 1e-5
# With PROBE, what the tokenizer called directly must turn into the same ids as sentence-transformers' preprocess
# before a pass may skip it: a text past any model's length limit, so truncation is compared too.
TOKENIZER_PROBE = [*PROBE, "Who " + "wrote the river's long history, " * 200]
INT8_MIN_COSINE = 0.98
# Under `auto`, the largest forward pass ONNX Runtime runs; larger ones run in PyTorch. ONNX Runtime saves the per-
# operator dispatch that dominates a lone query (1.96x PyTorch's rate for one query on 2 threads, 1.25x for 4), but
# PyTorch's kernels win once a pass holds more text (0.70x at 8 queries, 0.81x at 16; a scratch sweep on 2 cores).
ONNX_MAX_ROWS = 4


class Encoder:
    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        device: str = "cpu",
        profile: ModelProfile | None = None,
        max_seq_length: int | None = None,
        forward_batch: int | None = None,
        backend: str = "auto",
    ) -> None:
        """`backend`: torch, onnx (ONNX Runtime, fp32), onnx-int8, or auto: on a CPU, ONNX Runtime for passes of up
        to ONNX_MAX_ROWS texts and PyTorch for larger ones when its vectors match PyTorch's on a probe at load,
        PyTorch alone otherwise (a GPU always runs PyTorch, in fp16). `onnx_check` holds
        the probe's comparison whenever an ONNX backend was tried."""
        if backend not in onnx_encoder.BACKENDS:
            raise ValueError(f"encoder backend {backend!r}: choose one of {', '.join(onnx_encoder.BACKENDS)}")
        path = resolve_model(model)
        if path != model or os.path.isdir(path):
            # A local copy must never trigger a hub look-up: these machines have no route to it.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        self.model_name = model
        self.profile = profile or profile_for(model)
        self.device = device
        self.forward_batch = forward_batch or (CPU_FORWARD_BATCH if device == "cpu" else None)
        self.model = SentenceTransformer(path, device=device)
        # Inference only: `encode` switches to eval mode on every call, the direct path relies on this once.
        self.model.eval()
        # fp16 halves memory traffic on GPUs at no retrieval cost; CPUs have no fast fp16 kernels, and a checkpoint
        # stored in fp16 or bf16 loads in that type (transformers >= 5), so a CPU model is made fp32 whatever it was.
        self.fp16 = device.startswith("cuda")
        if self.fp16:
            self.model.half()
        else:
            self.model.float()
        if max_seq_length:
            self.model.max_seq_length = max_seq_length
        # sentence-transformers 6 renamed the method; 3.x-5.x only have the old name.
        get_dimension = getattr(self.model, "get_embedding_dimension", None)
        get_dimension = get_dimension or self.model.get_sentence_embedding_dimension
        self.dimension = int(get_dimension())
        self._check_pooling()
        self.direct = self._plain_text_pipeline()
        # Whether the vectors come out unit length: the model's own Normalize module, or the profile's step after it.
        self.normalizes = self.profile.normalize or type(self.model[-1]).__name__ == "Normalize"
        self._preprocess = getattr(self.model, "preprocess", None) or self.model.tokenize  # ST < 6: tokenize
        self.onnx: onnx_encoder.OnnxTransformer | None = None
        self.onnx_check: dict[str, float] | None = None
        # None: every pass runs in ONNX Runtime (asked for by name); a number: passes up to that size do (`auto`).
        self.onnx_max_rows: int | None = None
        # The pooling mode when an ONNX pass runs outside PyTorch altogether (tokenizer, session, NumPy pooling).
        self.onnx_pooling: str | None = None
        self.pooler_dropped = self.direct and self._drop_unused_pooler()
        self.backend = self._select_backend(backend, path)

    def _select_backend(self, asked: str, path: str) -> str:
        """The backend that runs, and why when it is not the one asked for (see __init__)."""
        if asked == "torch":
            return "torch"
        reason = None
        if self.device != "cpu":
            reason = f"ONNX Runtime runs on CPU here; on {self.device} the encoder is PyTorch's (fp16)"
        reason = reason or onnx_encoder.available()
        if reason is None and not self.direct:
            reason = "the model's pipeline has modules beyond a transformer, pooling, dense layers and normalisation"
        model_dir = _local_dir(path)
        if reason is None and model_dir is None:
            reason = f"{path} is not a local model folder (the export is keyed by its files)"
        if reason is not None:
            if asked != "auto":
                raise ValueError(f"encoder backend {asked}: {reason}")
            log.info("encoder: PyTorch (%s)", reason)
            return "torch"
        int8 = asked == "onnx-int8"
        try:
            features = self._features(PROBE)
            self.onnx = onnx_encoder.OnnxTransformer(self.model[0].auto_model, model_dir, features, int8)
        except Exception as exc:  # noqa: BLE001 - any export or session failure leaves the PyTorch path working
            log.warning("encoder: ONNX Runtime unavailable for %s (%s); using PyTorch", self.model_name, exc)
            return "torch"
        self.onnx_pooling = self._numpy_pooling()
        onnx_vectors = self._forward(PROBE)
        self.onnx, session = None, self.onnx  # the NumPy pass runs only beside a session
        torch_vectors = self._forward(PROBE)
        diff = float(np.abs(onnx_vectors - torch_vectors).max())
        cosine = float(np.min(np.sum(onnx_vectors * torch_vectors, axis=1) / (
            np.linalg.norm(onnx_vectors, axis=1) * np.linalg.norm(torch_vectors, axis=1))))  # fmt: skip
        self.onnx_check = {"max_abs_diff": diff, "min_cosine": cosine}
        if (int8 and cosine < INT8_MIN_COSINE) or (not int8 and diff > ONNX_TOLERANCE):
            log.warning(
                "encoder: ONNX Runtime's vectors differ from PyTorch's on the probe (max |diff| %.2g, min cosine "
                "%.6f; allowed %s); using PyTorch",
                diff,
                cosine,
                f"cosine {INT8_MIN_COSINE}" if int8 else f"|diff| {ONNX_TOLERANCE:g}",
            )
            self.onnx_pooling = None
            return "torch"
        self.onnx = session
        if asked == "auto":
            self.onnx_max_rows = ONNX_MAX_ROWS
        return asked if asked != "auto" else "onnx"

    def _features(self, texts: list[str]) -> dict:
        import torch

        return {
            name: value.to(self.device) if isinstance(value, torch.Tensor) else value
            for name, value in self._preprocess(texts).items()
        }

    def _check_pooling(self) -> None:
        for module in self.model:
            if type(module).__name__ != "Pooling":
                continue
            mode = pooling_mode(module.get_config_dict())
            if mode != self.profile.pooling:
                log.warning(
                    "model %s pools by %s but profile %s expects %s",
                    self.model_name,
                    mode,
                    self.profile.name,
                    self.profile.pooling,
                )

    def _plain_text_pipeline(self) -> bool:
        """Whether a batch can run through the model's own modules (`preprocess`, then `forward`) with the same
        result as `encode`: no prompt or dimension truncation that `encode` would add, and only the modules of
        a plain text encoder (no router choosing modules per task)."""
        modules = {type(module).__name__ for module in self.model}
        return (
            getattr(self.model, "default_prompt_name", None) is None
            and getattr(self.model, "truncate_dim", None) is None
            and modules <= {"Transformer", "Pooling", "Normalize", "Dense"}
        )

    def _drop_unused_pooler(self) -> bool:
        """Whether the transformer's pooler was dropped. BERT-style models compute a pooler (a dense layer over the
        first token) that pooling over token embeddings never reads: 2.5 % of a one-query MiniLM encode on one CPU
        thread. It goes only if a probe encodes to the very same vector without it, and stays otherwise."""
        auto_model = getattr(self.model[0], "auto_model", None) if len(self.model) else None
        pooler = getattr(auto_model, "pooler", None)
        if auto_model is None or pooler is None:
            return False
        probe = ["which river flows through the capital of the country"]
        before = self._forward(probe)
        auto_model.pooler = None
        try:
            if np.array_equal(self._forward(probe), before):
                return True
        except Exception:  # noqa: BLE001 - a model that needs its pooler keeps it
            log.debug("model %s needs its pooler", self.model_name, exc_info=True)
        auto_model.pooler = pooler
        return False

    def _tokenized(self, texts: list[str]) -> dict[str, np.ndarray]:
        return self.model.tokenizer(
            texts, padding=True, truncation="longest_first", max_length=self.model.max_seq_length, return_tensors="np"
        )

    def _numpy_pooling(self) -> str | None:
        """The pooling mode when a lone query may skip PyTorch altogether: sentence-transformers' preprocessing and
        its pooling and normalise modules cost 0.3 ms of a 2.5 ms one-query encode on 2 threads (ONNX Runtime), a
        tenth of what a lone caller waits. Only for a transformer, mean or CLS pooling and an optional normalise,
        and only if the tokenizer called directly gives preprocess's very ids (the vectors are then checked
        against PyTorch's with the rest of the ONNX pass)."""
        modules = [type(module).__name__ for module in self.model]
        if modules not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
            return None
        mode = pooling_mode(self.model[1].get_config_dict())
        if mode not in onnx_encoder.POOLING_MODES:
            return None
        try:
            direct = self._tokenized(TOKENIZER_PROBE)
            reference = self._preprocess(TOKENIZER_PROBE)
            same = all(n in direct and np.array_equal(direct[n], np.asarray(reference[n])) for n in self.onnx.names)
        except Exception:  # noqa: BLE001 - a tokenizer that cannot be called so keeps sentence-transformers' path
            log.debug("encoder: tokenizer of %s not callable directly", self.model_name, exc_info=True)
            return None
        return mode if same else None

    def _forward(self, texts: list[str]) -> np.ndarray:
        """One batch through the modules. `encode` re-resolves the device, the prompt and its keyword arguments
        (an `inspect.signature`) and walks every submodule on each call: about 1 ms, 7 % of a one-query encode of
        MiniLM on one CPU thread, paid by every lone query a server answers (docs/SEARCH.md)."""
        import torch

        if (
            self.onnx is not None
            and self.onnx_pooling
            and (self.onnx_max_rows is None or len(texts) <= self.onnx_max_rows)
        ):
            feed = self._tokenized(texts)
            vectors = onnx_encoder.pooled(self.onnx(feed), feed["attention_mask"], self.onnx_pooling, self.normalizes)
            return np.ascontiguousarray(vectors, dtype=np.float32)
        with torch.inference_mode():
            features = self._features(texts)
            if self.onnx is not None and (self.onnx_max_rows is None or len(texts) <= self.onnx_max_rows):
                # The exported transformer, then sentence-transformers' own pooling, dense and normalise modules.
                features["token_embeddings"] = torch.from_numpy(self.onnx(features))
                for module in list(self.model)[1:]:
                    features = module(features)
                vectors = features["sentence_embedding"]
            else:
                vectors = self.model(features)["sentence_embedding"]
            if self.profile.normalize:
                vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
            return np.ascontiguousarray(vectors.float().cpu().numpy(), dtype=np.float32)

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        if self.onnx is not None and (self.onnx_max_rows is None or batch_size <= self.onnx_max_rows):
            # As `encode` batches (longest first, by characters), through the ONNX session.
            order = np.argsort([-len(t) for t in texts], kind="stable")
            chunks = [order[lo : lo + batch_size] for lo in range(0, len(texts), batch_size)]
            return self._forward_in_chunks(texts, chunks)
        vectors = self.model.encode(
            texts,
            batch_size=batch_size,
            convert_to_numpy=True,
            normalize_embeddings=self.profile.normalize,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def encode_queries(self, queries: list[str], batch_size: int = 64) -> np.ndarray:
        texts = [self.profile.query_instruction + q for q in queries]
        # A server's batches are at most one encoder batch; index builds keep `encode` (per-call cost is nothing
        # there, and their vectors stay what sentence-transformers writes).
        if self.direct and 0 < len(texts) <= batch_size:
            return self._forward_by_length(texts)
        return self._encode(texts, batch_size)

    def _forward_by_length(self, texts: list[str]) -> np.ndarray:
        """`texts` shortest first in near-equal chunks of at most `forward_batch`, vectors back in input order.
        Equal chunks, not full ones and a remainder: 17 queries as 9 and 8, never 16 and a lone one."""
        if not self.forward_batch or len(texts) <= self.forward_batch:
            return self._forward(texts)
        order = np.argsort([len(t) for t in texts], kind="stable")
        return self._forward_in_chunks(texts, np.array_split(order, -(-len(texts) // self.forward_batch)))

    def _forward_in_chunks(self, texts: list[str], chunks: list[np.ndarray]) -> np.ndarray:
        """Vectors of `texts` in input order, each chunk of row numbers one forward pass."""
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for rows in chunks:
            out[rows] = self._forward([texts[i] for i in rows])
        return out

    def encode_passages(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        return self._encode([self.profile.passage_instruction + t for t in texts], batch_size)

    def token_lengths(self, texts: list[str], chunk: int = 4096) -> np.ndarray:
        """Tokens each text will occupy in the model (truncation included), or its characters when the model
        has no tokenizer to ask. Chunked, so only the lengths of a large shard are ever held."""
        tokenizer = getattr(self.model, "tokenizer", None)
        limit = self.model.max_seq_length
        if tokenizer is None or not callable(tokenizer):
            return np.array([len(t) for t in texts], dtype=np.int64)
        lengths = []
        for lo in range(0, len(texts), chunk):
            ids = tokenizer(
                texts[lo : lo + chunk],
                truncation=True,
                max_length=limit,
                return_attention_mask=False,
                return_token_type_ids=False,
            )["input_ids"]
            lengths.extend(len(row) for row in ids)
        return np.array(lengths, dtype=np.int64)

    def encode_passages_sorted(
        self, texts: list[str], batch_size: int, on_batch: Callable[[int], None] | None = None
    ) -> np.ndarray:
        """fp16 vectors of `texts` in input order, encoded longest first in batches of `batch_size`.

        Sorting the whole chunk by token count (sentence-transformers sorts by characters, and only within
        one call) puts passages of equal length in one batch, so almost no padding is computed: on kiltmini
        14 % fewer padded tokens than the character sort. `on_batch(n)` reports progress.
        """
        out = np.empty((len(texts), self.dimension), dtype=np.float16)
        prefixed = [self.profile.passage_instruction + t for t in texts]
        order = np.argsort(-self.token_lengths(prefixed), kind="stable")
        for lo in range(0, len(texts), batch_size):
            rows = order[lo : lo + batch_size]
            out[rows] = self._encode([prefixed[i] for i in rows], batch_size)
            if on_batch is not None:
                on_batch(len(rows))
        return out


def pooling_mode(config: dict) -> str | None:
    """The one mode a Pooling module's config names (mean, cls, max, ...), None when it names several. Sentence-
    transformers >= 6 names it; older releases set one boolean flag per mode (`pooling_mode_cls_token`)."""
    if config.get("pooling_mode"):
        return config["pooling_mode"]
    modes = [k.removeprefix("pooling_mode_").removesuffix("_tokens").removesuffix("_token") for k, on in
             config.items() if k.startswith("pooling_mode_") and on is True]  # fmt: skip
    return modes[0] if len(modes) == 1 else None


def _local_dir(path: str) -> Path | None:
    """The model's folder: `path` itself, or its snapshot in the Hugging Face cache (never fetched)."""
    if os.path.isdir(path):
        return Path(path)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(path, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached, or not a repository name
        return None


def passage_text(title: str, text: str) -> str:
    """What gets embedded for a passage: the title line (when there is one) then the text."""
    return f"{title}\n{text}" if title else text
