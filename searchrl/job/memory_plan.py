"""`searchrl stage plan STAGE`: what every GPU of a stage's placement will hold, before anything is launched.

From the planned stage (searchrl/job/plan.py: OpenRLHF's flags as its own parser reads them) and the model's size:
the vLLM engines (bf16 weights and the KV cache their `gpu_memory_utilization` leaves), the actor, reference and
critic (bf16 weights, grads, fp32 master and Adam states by ZeRO stage and offload), what OpenRLHF's sleep modes
free in each phase, and an index or query-encoder replica where the search runs on these GPUs. Two phases are
summed on every GPU: generation (the engines awake, DeepSpeed asleep) and training (the other way round).

A plan that does not fit is refused with a fix: the first single change of a key under which the same arithmetic
fits, else changes kept knob by knob while each brings it closer. The preflight runs the same plan (`memory_verdict`).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import struct
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from searchrl.config import ConfigError
from searchrl.job.plan import plan_stage
from searchrl.search.index.index_types import compact_code_size
from searchrl.search.index.layout import MANIFEST, read_json
from searchrl.stage.config import STAGES, StageConfig
from searchrl.stage.openrlhf_flags import validated_args
from searchrl.stage.schedules import add_schedule_flags, schedule_overrides

GIB = 2**30
BF16 = 2
# Mixed-precision Adam keeps an fp32 master copy and two fp32 moments: 12 bytes a parameter (the ZeRO paper's K).
ADAM_BYTES = 12
# One CUDA context with torch's kernels loaded, per process on a GPU (vLLM worker, actor, reference, critic,
# retrieval server). An assumption, not measured here: about what nvidia-smi shows for a torch process at start.
CONTEXT_BYTES = GIB // 2
# faiss-gpu's StandardGpuResources reserves this much scratch on each GPU an index is cloned to (its default).
FAISS_SCRATCH_BYTES = 1536 * 2**20
# Training activations a token, with gradient checkpointing: each layer's input kept in bf16 (2 h L) and the
# logits in bf16, their fp32 copy and both gradients (12 V), as OpenRLHF's actor computes its log-probs. Against
# benchmarks/results/gpu_split.json (Qwen2.5-7B, 8,192 tokens, H200): 15.45 GiB here, 15.80 GiB measured (its
# 44.17 GiB peak less the bf16 weights and grads).
LOGIT_BYTES = 12
GPU_INDEX_KINDS = ("Flat", "exact", "SQ8", "PQ")
FAISS_GPU_KINDS = ("Flat", "SQ8", "PQ")


class PlanError(ValueError):
    """No plan can be made (the model's size unknown, an index described in part); the message says what to pass."""


@dataclass(frozen=True)
class ModelShape:
    params: int
    source: str
    layers: int | None = None
    hidden: int | None = None
    vocab: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None

    def token_activation_bytes(self, logits: bool = True) -> int | None:
        if self.layers is None or self.hidden is None or self.vocab is None:
            return None
        return BF16 * self.hidden * self.layers + (LOGIT_BYTES * self.vocab if logits else 0)

    def kv_bytes_per_token(self, tp: int) -> int | None:
        """K and V of every layer in bf16, the KV heads split across tensor-parallel ranks (replicated below one)."""
        if self.layers is None or self.kv_heads is None or self.head_dim is None:
            return None
        return 2 * self.layers * max(1, self.kv_heads // tp) * self.head_dim * BF16


_QWEN25_3B = ModelShape(3_085_938_688, "Qwen2.5-3B's config.json (tied embeddings), counted", 36, 2048, 151936, 2, 128)
_QWEN25_7B = ModelShape(7_615_616_512, "measured: benchmarks/results/gpu_split.json", 28, 3584, 152064, 4, 128)
_QWEN3_8B = ModelShape(8_190_735_360, "Qwen3-8B's config.json, counted", 36, 4096, 151936, 8, 128)
_LLAMA31_8B = ModelShape(8_030_261_248, "Llama-3.1-8B's config.json, counted", 32, 4096, 128256, 8, 128)
# Hybrid attention (linear or sliding layers) and per-layer embeddings: no KV or activation figure from a table.
_QWEN35_9B = ModelShape(9_000_000_000, "nominal, from its name (hybrid attention: KV and activations not estimated)")
_QWEN36_35B = ModelShape(35_000_000_000, "nominal total, from its name (an MoE: all experts are held, 3B active)")
_GEMMA4_E2B = ModelShape(5_100_000_000, "Gemma 4 E2B's 5.1B with its per-layer embeddings (2.3B effective)")
# The checkpoints configs/models/ names, by `model_path`, for when no local folder says more.
KNOWN_MODELS: dict[str, ModelShape] = {
    "Qwen/Qwen2.5-3B": _QWEN25_3B,
    "Qwen/Qwen2.5-3B-Instruct": _QWEN25_3B,
    "Qwen/Qwen2.5-7B": _QWEN25_7B,
    "Qwen/Qwen2.5-7B-Instruct": _QWEN25_7B,
    "Qwen/Qwen3-8B": _QWEN3_8B,
    "Qwen/Qwen3-8B-Base": _QWEN3_8B,
    "meta-llama/Llama-3.1-8B-Instruct": _LLAMA31_8B,
    "Qwen/Qwen3.5-9B": _QWEN35_9B,
    "Qwen/Qwen3.5-9B-Base": _QWEN35_9B,
    "Qwen/Qwen3.6-35B-A3B": _QWEN36_35B,
    "Qwen/Qwen3.6-35B-A3B-Base": _QWEN36_35B,
    "google/gemma-4-E2B-it": _GEMMA4_E2B,
}
# Query encoders by name (BERT-base, BERT-large and MiniLM-L6 sizes); on CUDA the project's encoder runs in fp16.
ENCODERS = {
    "e5-base-v2": 109_482_240,
    "e5-large-v2": 335_141_888,
    "bge-base-en-v1.5": 109_482_240,
    "bge-large-en-v1.5": 335_141_888,
    "all-minilm-l6-v2": 22_713_216,
}


def safetensors_params(folder: Path) -> int | None:
    """Parameters in the folder's safetensors files, from their headers alone (no tensor is read)."""
    index = read_json(folder / "model.safetensors.index.json")
    names = sorted(set(index["weight_map"].values())) if index and "weight_map" in index else None
    files = [folder / n for n in names] if names else sorted(folder.glob("*.safetensors"))
    if not files or not all(f.is_file() for f in files):
        return None
    total = 0
    try:
        for file in files:
            with file.open("rb") as fh:
                header = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
            total += sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None  # a file cut short or not safetensors: config.json may still say
    return total


def hybrid(config: dict[str, Any]) -> bool:
    """Layers other than full attention (linear or sliding), whose KV cache the dense formula would misstate."""
    return set(config.get("layer_types") or ["full_attention"]) != {"full_attention"}


def dense_params(config: dict[str, Any]) -> int | None:
    """A dense decoder's parameters from its config.json (Llama, Qwen2 with q/k/v biases, Qwen3 with q/k norms);
    None for an MoE or a hybrid, which need their weights' headers."""
    keys = ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size", "num_attention_heads")
    moe = config.get("num_experts") or config.get("num_local_experts") or config.get("n_routed_experts")
    if any(k not in config for k in keys) or hybrid(config) or moe:
        return None
    h, layers, inter, vocab, heads = (int(config[k]) for k in keys)
    kv = int(config.get("num_key_value_heads") or heads)
    hd = int(config.get("head_dim") or h // heads)
    model_type = str(config.get("model_type", ""))
    bias = (heads * hd + 2 * kv * hd) if config.get("attention_bias", model_type == "qwen2") else 0
    qk_norm = 2 * hd if model_type.startswith("qwen3") else 0
    layer = 2 * h * heads * hd + 2 * h * kv * hd + bias + qk_norm + 3 * h * inter + 2 * h
    embeddings = vocab * h * (1 if config.get("tie_word_embeddings", False) else 2)
    return embeddings + layers * layer + h


def shape_from_folder(folder: Path) -> ModelShape | None:
    config = read_json(folder / "config.json")
    if config is None:
        return None
    text = {**config, **(config.get("text_config") or {})}
    params, source = safetensors_params(folder), f"{folder}: its safetensors headers"
    if params is None:
        params, source = dense_params(text), f"{folder}/config.json, counted"
    if params is None:
        return None
    heads = int(text.get("num_attention_heads") or 0)
    full = not hybrid(text)
    return ModelShape(
        params,
        source,
        layers=text.get("num_hidden_layers"),
        hidden=text.get("hidden_size"),
        vocab=text.get("vocab_size"),
        kv_heads=(text.get("num_key_value_heads") or heads or None) if full else None,
        head_dim=(text.get("head_dim") or (text["hidden_size"] // heads if heads else None)) if full else None,
    )


def model_shape(stage_plan: dict[str, Any], params_b: float | None = None) -> ModelShape:
    """The policy's size: --params-b, else a local folder's weights or config.json (the starting checkpoint, then the
    model config's path), else the table of the project's models. PlanError names --params-b when none says."""
    path = str(stage_plan["model"].model_path)
    found = None
    for where in (str(stage_plan["policy"]), path):
        if Path(where).is_dir() and (found := shape_from_folder(Path(where))) is not None:
            break
    found = found or KNOWN_MODELS.get(path)
    if params_b is not None:
        base = found or ModelShape(0, "")
        return replace(base, params=int(params_b * 1e9), source="--params-b")
    if found is None:
        raise PlanError(
            f"the size of {path} is unknown here (no local folder with config.json, not one of "
            f"{len(KNOWN_MODELS)} known models): pass --params-b N (billions of parameters)"
        )
    return found


@dataclass(frozen=True)
class Layout:
    """The OpenRLHF flags that decide what each GPU holds, as its parser and pre-Ray checks leave them."""

    actor_gpus: int
    ref_gpus: int
    critic_gpus: int
    engines: int
    tp: int
    gpu_util: float
    colocate_all: bool
    colocate_actor_ref: bool
    async_: bool
    vllm_sleep: bool
    ds_sleep: bool
    zero_stage: int
    adam_offload: bool
    ref_offload: bool
    has_ref: bool
    has_critic: bool
    max_len: int
    micro_batch: int
    dynamic_tokens: int | None

    @property
    def colocated(self) -> bool:
        """Engines and DeepSpeed models on the same GPUs: OpenRLHF colocates the engines only when not async."""
        return self.colocate_all and not self.async_


# Where a fix names a Layout field, the OpenRLHF flag it is.
FLAGS = {
    "gpu_util": "vllm.gpu_memory_utilization",
    "vllm_sleep": "vllm.enable_sleep",
    "ds_sleep": "ds.enable_sleep",
    "zero_stage": "ds.zero_stage",
    "adam_offload": "ds.adam_offload",
    "ref_offload": "ref.offload",
    "tp": "vllm.tensor_parallel_size",
    "engines": "vllm.num_engines",
}


def layout_of(args: Any) -> Layout:
    """From OpenRLHF's nested, checked arguments: a reference exists only with a KL coefficient and a critic only
    for GAE (train_ppo_ray), and vLLM's sleep is already off unless everything is colocated."""

    def gpus(role: Any) -> int:
        return int(role.num_nodes) * int(role.num_gpus_per_node)

    train = args.train
    return Layout(
        actor_gpus=gpus(args.actor),
        ref_gpus=gpus(args.ref),
        critic_gpus=gpus(args.critic),
        engines=int(args.vllm.num_engines or 0),
        tp=int(args.vllm.tensor_parallel_size),
        gpu_util=float(args.vllm.gpu_memory_utilization),
        colocate_all=bool(train.colocate_all),
        colocate_actor_ref=bool(train.colocate_actor_ref),
        async_=bool(train.async_enable),
        vllm_sleep=bool(args.vllm.enable_sleep),
        ds_sleep=bool(args.ds.enable_sleep),
        zero_stage=int(args.ds.zero_stage),
        adam_offload=bool(args.ds.adam_offload),
        ref_offload=bool(args.ref.offload),
        has_ref=float(args.algo.kl.init_coef) > 0,
        has_critic=bool(args.critic.model_name_or_path),
        max_len=int(args.data.max_len),
        micro_batch=int(train.micro_batch_size),
        dynamic_tokens=int(train.max_tokens_per_gpu) if train.dynamic_batch_enable else None,
    )


def parse_index_type(text: str, dim: int) -> tuple[str, int]:
    """(kind, code): Flat, exact (fp16 shards), SQ8, PQ<m bytes>, HNSW<M links>, compact (IVF-PQ in RAM), from a name
    or a FAISS factory string."""
    low = text.strip().lower()
    if low in ("flat", "faiss", "idmap,flat"):
        return "Flat", 0
    if low in ("exact", "compact"):
        return ("exact", 0) if low == "exact" else ("compact", compact_code_size(dim))
    if m := re.search(r"hnsw(\d+)", low):
        return "HNSW", int(m[1])
    if "sq8" in low:
        return "SQ8", 0
    if m := re.search(r"pq(\d+)", low):
        return "PQ", int(m[1])
    raise PlanError(f"index type {text!r}: one of Flat, exact, compact, HNSW<M>, SQ8, PQ<m> or a FAISS factory string")


def vector_bytes(kind: str, code: int, dim: int) -> float:
    """Bytes a vector, as docs/BENCHMARKS.md measures them: Flat 4 d; exact's fp16 shards 2 d; IVF codes plus an
    8-byte id (SQ8 d + 8, PQ m + 8); HNSW adds 2M level-0 links, upper levels (4M / (M-1)) and 12 bytes of level and
    offset (HNSW32 at 384 dims: 1,808, as measured)."""
    if kind == "Flat":
        return 4.0 * dim
    if kind == "exact":
        return 2.0 * dim
    if kind == "SQ8":
        return dim + 8.0
    if kind in ("PQ", "compact"):
        return code + 8.0
    return 4.0 * dim + 8 * code + 4 * code / (code - 1) + 12


@dataclass(frozen=True)
class IndexPlan:
    passages: int
    dim: int
    kind: str
    code: int
    encoder: str | None
    encoder_params: int
    source: str
    # "engine": a replica in every vLLM engine (search.backend local or hybrid on cuda), split over its GPUs;
    # "server": one retrieval server over the first `gpus` GPUs of the placement; "off": not on these GPUs.
    where: str
    gpus: int = 0

    @property
    def label(self) -> str:
        return f"{self.kind}{self.code or ''}"

    @property
    def bytes(self) -> float:
        return self.passages * vector_bytes(self.kind, self.code, self.dim)

    @property
    def on_gpu(self) -> bool:
        return self.kind in GPU_INDEX_KINDS and self.where != "off"


@dataclass(frozen=True)
class IndexSpec:
    """An index described on the command line: passages, dimension, type, encoder, GPUs its server spans."""

    passages: int | None = None
    dim: int | None = None
    type: str | None = None
    encoder: str | None = None
    gpus: int = 0


def encoder_params(name: str | None) -> int:
    return ENCODERS.get(str(name).rsplit("/", 1)[-1].lower(), 0) if name else 0


def index_plan(stage: StageConfig, spec: IndexSpec) -> tuple[IndexPlan | None, list[str]]:
    """The index whose memory this plan counts: the command line's, else the manifest of the stage's own index
    (search.backend local or hybrid), with where it lives; notes say what was left out."""
    search = stage.search
    in_engine = search.backend in ("local", "hybrid") and search.device == "cuda"
    where = "engine" if in_engine else "server" if spec.gpus else "off"
    given = (spec.passages, spec.dim, spec.type)
    if any(v is not None for v in given) and not all(v is not None for v in given):
        raise PlanError("an index needs all three of --index-passages, --index-dim and --index-type")
    if spec.passages is not None and spec.dim is not None and spec.type is not None:
        kind, code = parse_index_type(spec.type, spec.dim)
        found = (spec.passages, spec.dim, kind, code, spec.encoder, "the command line")
    else:
        manifest = read_json(Path(search.index_dir) / MANIFEST) if search.index_dir else None
        if manifest is not None and not {"dimension", "passages", "factory"} <= set(manifest):
            manifest = None  # a build that never finished writes no manifest; one without these is not ours
        if manifest is None:
            if in_engine:
                return None, [f"search index not counted: no manifest under {search.index_dir}; pass --index-*"]
            return None, []
        dim = int(manifest["dimension"])
        kind, code = parse_index_type(
            manifest["factory"] if manifest.get("index_type", "faiss") == "faiss" else manifest["index_type"], dim
        )
        found = (int(manifest["passages"]), dim, kind, code, spec.encoder or manifest.get("model"), "its manifest")
    passages, dim, kind, code, encoder, source = found
    notes = [] if encoder_params(encoder) or where == "off" else [f"query encoder {encoder!r} not counted: unknown"]
    return IndexPlan(passages, dim, kind, code, encoder, encoder_params(encoder), source, where, spec.gpus), notes


@dataclass(frozen=True)
class Item:
    what: str
    generation: float
    training: float


@dataclass
class Gpu:
    """What one GPU hosts: a process of each role set, and its share of an index (with the encoder, on the first)."""

    engine: bool = False
    actor: bool = False
    ref: bool = False
    critic: bool = False
    index_share: int = 0  # the index is split over this many GPUs, this one among them (0: none here)
    encoder: bool = False
    server: bool = False

    def roles(self) -> str:
        names = [n for n in ("engine", "actor", "ref", "critic") if getattr(self, n)]
        names += ["index"] if self.index_share else []
        return ", ".join(n.replace("engine", "vLLM").replace("ref", "reference") for n in names)


def placement(layout: Layout, index: IndexPlan | None) -> list[Gpu]:
    """Every GPU of the job as train_ppo_ray places it: colocated, one placement group for all; under async the
    engines on GPUs of their own; otherwise each role on its own GPUs (the reference with the actor when
    colocate_actor_ref). The retrieval server's shards go on the first GPUs, as `--device cuda` takes them."""
    deepspeed = [Gpu(actor=True) for _ in range(layout.actor_gpus)]
    gpus = list(deepspeed)
    if layout.has_ref and (layout.colocate_all or layout.colocate_actor_ref):
        for g in deepspeed:
            g.ref = True
    elif layout.has_ref:
        gpus += [Gpu(ref=True) for _ in range(layout.ref_gpus)]
    if layout.has_critic and layout.colocate_all:
        for g in deepspeed:
            g.critic = True
    elif layout.has_critic:
        gpus += [Gpu(critic=True) for _ in range(layout.critic_gpus)]
    engine_gpus = layout.engines * layout.tp
    if layout.colocated:
        hosts = deepspeed[:engine_gpus]
    else:
        hosts = [Gpu() for _ in range(engine_gpus)]
        gpus += hosts
    for g in hosts:
        g.engine = True
    if index is not None and index.on_gpu and index.where == "engine":
        # faiss shards, and `exact` splits, over the GPUs the engine's process sees: taken to be its TP ranks'.
        for n, g in enumerate(hosts):
            g.index_share, g.encoder = layout.tp, n % layout.tp == 0
    elif index is not None and index.on_gpu and index.where == "server":
        for n, g in enumerate(gpus[: index.gpus]):
            g.index_share, g.encoder, g.server = min(index.gpus, len(gpus)), n == 0, True
    return gpus


@dataclass(frozen=True)
class Inputs:
    layout: Layout
    shape: ModelShape
    index: IndexPlan | None
    gpu_bytes: float


def zero_states(params: int, layout: Layout, group: int) -> tuple[float, float, float]:
    """(bf16 weights, bf16 grads, fp32 master + Adam) a GPU holds: ZeRO-1 partitions the optimizer states, ZeRO-2
    the grads too, ZeRO-3 the weights too; Adam offload moves the grads and optimizer states to CPU memory."""
    z = layout.zero_stage
    weights = BF16 * params / (group if z >= 3 else 1)
    grads = 0.0 if layout.adam_offload else BF16 * params / (group if z >= 2 else 1)
    adam = 0.0 if layout.adam_offload else ADAM_BYTES * params / (group if z >= 1 else 1)
    return weights, grads, adam


def trainer_items(name: str, params: int, group: int, inputs: Inputs, logits: bool) -> list[Item]:
    """A DeepSpeed model that trains (actor or critic). DeepSpeed's sleep offloads all but its bf16 weights while
    the engines generate; the activations are one sample of data.max_len, the least a micro-batch holds."""
    layout, shape = inputs.layout, inputs.shape
    weights, grads, adam = zero_states(params, layout, group)
    asleep = layout.ds_sleep
    where = " (offloaded to CPU)" if layout.adam_offload else ""
    per_token = shape.token_activation_bytes(logits)
    items = [
        Item(f"{name}: bf16 weights (ZeRO-{layout.zero_stage} over {group})", weights, weights),
        Item(f"{name}: bf16 grads{where}", 0.0 if asleep else grads, grads),
        Item(f"{name}: fp32 master + Adam m, v{where}", 0.0 if asleep else adam, adam),
    ]
    if per_token is None:
        return [*items, Item(f"{name}: activations not estimated (architecture unknown)", 0.0, 0.0)]
    act = per_token * layout.max_len
    return [*items, Item(f"{name}: activations ({layout.max_len:,} tokens, grad ckpt)", 0.0, act)]


def engine_items(inputs: Inputs) -> list[Item]:
    """vLLM takes gpu_memory_utilization of the whole card: its weights, then the KV cache (and its own activations)
    in what is left. Its sleep (level 1) offloads the weights and drops the cache while DeepSpeed trains."""
    layout = inputs.layout
    weights = BF16 * inputs.shape.params / layout.tp
    budget = layout.gpu_util * inputs.gpu_bytes
    kv = budget - weights
    kept = 0.0 if layout.vllm_sleep else 1.0
    per_token = inputs.shape.kv_bytes_per_token(layout.tp)
    seqs = f", {kv / (per_token * layout.max_len):.0f} sequences of {layout.max_len:,}" if per_token else ""
    return [
        Item(f"vLLM: bf16 weights (1/{layout.tp})", weights, weights * kept),
        Item(f"vLLM: KV cache ({layout.gpu_util:g} x card - weights{seqs})", kv, kv * kept),
    ]


def index_items(gpu: Gpu, index: IndexPlan) -> list[Item]:
    share = index.bytes / gpu.index_share
    items = [Item(f"index: {index.label} ({index.passages:,} x {index.dim}), 1/{gpu.index_share}", share, share)]
    if index.kind in FAISS_GPU_KINDS:
        items.append(Item("index: faiss-gpu scratch", FAISS_SCRATCH_BYTES, FAISS_SCRATCH_BYTES))
    if gpu.encoder and index.encoder_params:
        enc = BF16 * index.encoder_params
        items.append(Item(f"query encoder {str(index.encoder).rsplit('/', 1)[-1]} (fp16)", enc, enc))
    return items


def gpu_items(gpu: Gpu, inputs: Inputs) -> list[Item]:
    layout, params = inputs.layout, inputs.shape.params
    items = engine_items(inputs) if gpu.engine else []
    if gpu.actor:
        items += trainer_items("actor", params, layout.actor_gpus, inputs, logits=True)
    if gpu.critic:
        critic = trainer_items("critic", params, layout.critic_gpus, inputs, logits=False)
        # Asleep, the critic trains before the actor and is offloaded again: the actor's turn is the one counted.
        critic = [replace(i, training=i.generation) for i in critic] if layout.ds_sleep and gpu.actor else critic
        items += [i for i in critic if i.generation or i.training]
    if gpu.ref:
        # The reference runs DeepSpeed's eval config: ZeRO-3 partitions it when training does, else it is whole.
        group = layout.ref_gpus if layout.zero_stage == 3 else 1
        ref = 0.0 if layout.ref_offload else BF16 * params / group
        items.append(Item("reference: bf16 weights" + (" (offloaded)" if layout.ref_offload else ""), ref, ref))
    if gpu.index_share and inputs.index is not None:
        items += index_items(gpu, inputs.index)
    processes = gpu.engine + gpu.actor + gpu.critic + gpu.ref + gpu.server
    what = f"CUDA contexts ({processes} process{'es' if processes > 1 else ''})"
    items.append(Item(what, processes * CONTEXT_BYTES, processes * CONTEXT_BYTES))
    return items


@dataclass
class GpuGroup:
    gpus: list[int]
    roles: str
    items: list[Item]

    @property
    def generation(self) -> float:
        return sum(i.generation for i in self.items)

    @property
    def training(self) -> float:
        return sum(i.training for i in self.items)

    @property
    def name(self) -> str:
        first, last = self.gpus[0], self.gpus[-1]
        return f"GPU {first}" if first == last else f"GPUs {first}-{last}"


def layout_refused(layout: Layout) -> bool:
    """train_ppo_ray asserts, colocated, as many engine GPUs as actor GPUs (after its pre-Ray checks)."""
    return layout.colocated and bool(layout.engines) and layout.engines * layout.tp != layout.actor_gpus


def kv_deficit(inputs: Inputs) -> tuple[float, float]:
    """(vLLM's KV cache a GPU, what it lacks): vLLM refuses to start without room for one sequence of max_len
    (any room at all where the architecture is unknown)."""
    layout = inputs.layout
    kv = layout.gpu_util * inputs.gpu_bytes - BF16 * inputs.shape.params / layout.tp
    per_token = inputs.shape.kv_bytes_per_token(layout.tp)
    need = per_token * layout.max_len if per_token else 1.0
    return kv, max(0.0, need - kv) if layout.engines else 0.0


def evaluate(inputs: Inputs) -> tuple[list[GpuGroup], list[str]]:
    """Every GPU's items, consecutive equal GPUs grouped, and the problems: a layout OpenRLHF refuses, a KV cache
    below one sequence, a phase over the card."""
    layout = inputs.layout
    groups: list[GpuGroup] = []
    for n, gpu in enumerate(placement(layout, inputs.index)):
        items = gpu_items(gpu, inputs)
        if groups and groups[-1].items == items and groups[-1].gpus[-1] == n - 1:
            groups[-1].gpus.append(n)
        else:
            groups.append(GpuGroup([n], gpu.roles(), items))
    problems = []
    if layout_refused(layout):
        problems.append(
            f"OpenRLHF refuses colocate_all with {layout.engines} engines x TP {layout.tp} on {layout.actor_gpus} "
            "actor GPUs (they must be equal)"
        )
    kv, lacking = kv_deficit(inputs)
    if lacking and kv <= 0:
        problems.append(f"vLLM's weights fill its {layout.gpu_util:g} of the card: no room for a KV cache")
    elif lacking:
        problems.append(f"vLLM's KV cache ({kv / GIB:.1f} GiB) holds less than one sequence of {layout.max_len:,}")
    cap = inputs.gpu_bytes
    for g in groups:
        for phase, used in (("generation", g.generation), ("training", g.training)):
            if used > cap:
                problems.append(f"{g.name}: {used / GIB:.1f} GiB during {phase}, over the {cap / GIB:g} GiB card")
    return groups, problems


def fits(inputs: Inputs) -> bool:
    return not evaluate(inputs)[1]


def overflow(inputs: Inputs) -> float:
    """How far a plan is from fitting, to rank the changes tried: bytes over the card in either phase, the KV cache
    lacking, a layout OpenRLHF refuses counted as a whole card."""
    groups, _ = evaluate(inputs)
    cap = inputs.gpu_bytes
    over = sum(max(0.0, g.generation - cap) + max(0.0, g.training - cap) for g in groups)
    return over + kv_deficit(inputs)[1] + cap * layout_refused(inputs.layout)


class Change(NamedTuple):
    knob: str
    text: str
    inputs: Inputs


def candidates(inputs: Inputs) -> list[Change]:
    """Changes to try, by knob, cheapest in speed first: the engine count OpenRLHF wants, sleep modes, ZeRO-3, the
    reference offloaded, the index spread over the node, vLLM's tensor parallelism, then its memory share (highest
    first), the index shrunk, Adam offloaded last (its steps run on the CPU)."""
    layout = inputs.layout
    out: list[Change] = []

    def change(knob: str, **values: Any) -> None:
        text = " ".join(f"openrlhf.{FLAGS[k]}={str(v).lower()}" for k, v in values.items())
        out.append(Change(knob, text, replace(inputs, layout=replace(layout, **values))))

    engine_gpus = layout.engines * layout.tp
    if layout_refused(layout):
        change("engines", engines=max(1, layout.actor_gpus // layout.tp))
    for key in ("vllm_sleep", "ds_sleep") if layout.colocated else ():
        if not getattr(layout, key):
            change(key, **{key: True})
    if layout.zero_stage < 3:
        change("zero_stage", zero_stage=3)
    if layout.has_ref and not layout.ref_offload:
        change("ref_offload", ref_offload=True)
    spread, shrink = index_candidates(inputs)
    out += spread
    for tp in (t for t in (2, 4, 8) if t > layout.tp and layout.engines and engine_gpus % t == 0):
        change("tp", tp=tp, engines=engine_gpus // tp)
    for util in (u / 100 for u in range(95, 5, -5)):
        if layout.engines and abs(util - layout.gpu_util) > 1e-9:
            change("gpu_util", gpu_util=util)
    out += shrink
    if not layout.adam_offload:
        change("adam_offload", adam_offload=True)
    return out


def index_candidates(inputs: Inputs) -> tuple[list[Change], list[Change]]:
    """(spread, shrink): one retrieval server sharding the index over every GPU of the node, as Search-R1 serves
    its own, instead of a shard on a few or a replica in every engine; or fewer bytes: fp16 vectors, or RAM."""
    index = inputs.index
    if index is None or not index.on_gpu:
        return [], []
    total = len(placement(inputs.layout, None))
    spread, shrink = [], []
    server = replace(inputs, index=replace(index, where="server", gpus=total))
    if index.where == "server" and index.gpus < total:
        text = f"shard the index over {total} GPUs (the retrieval server's CUDA_VISIBLE_DEVICES; --index-gpus {total})"
        spread.append(Change("index_gpus", text, server))
    if index.where == "engine":
        text = f"search.backend=http: one retrieval server over the {total} GPUs (searchrl search serve --device cuda)"
        spread.append(Change("index_gpus", text, server))
    if index.kind == "Flat":
        text = "the exact index type: fp16 vectors, half of Flat's (searchrl index import/build --index-type exact)"
        shrink.append(Change("index_type", text, replace(inputs, index=replace(index, kind="exact"))))
    if index.where == "engine":
        text = "search.device=cpu (the index in RAM)"
        shrink.append(Change("index_device", text, replace(inputs, index=replace(index, where="off"))))
    return spread, shrink


def find_fix(inputs: Inputs) -> str:
    """The first single change that fits; else, knob by knob in the same order, the value that brings the plan
    closest, kept while it helps, until it fits; else what no flag changes: more or larger GPUs."""
    for change in candidates(inputs):
        if fits(change.inputs):
            return change.text
    kept: list[str] = []
    current = inputs
    for knob in dict.fromkeys(c.knob for c in candidates(inputs)):
        options = [c for c in candidates(current) if c.knob == knob]
        best = min(options, key=lambda c: overflow(c.inputs), default=None)
        if best is not None and overflow(best.inputs) < overflow(current):
            kept.append(best.text)
            current = best.inputs
            if fits(current):
                return "; ".join(kept)
    return "no change of these flags fits: more GPUs (openrlhf.actor.num_gpus_per_node / num_nodes) or larger cards"


@dataclass
class MemoryPlan:
    stage: str
    model: str
    inputs: Inputs
    groups: list[GpuGroup]
    problems: list[str]
    notes: list[str] = field(default_factory=list)
    fix: str = ""

    @property
    def fits(self) -> bool:
        return not self.problems

    @property
    def peak(self) -> tuple[float, str]:
        """The fullest GPU's bytes, and which GPUs in which phase."""
        phases = [(g.generation, f"{g.name}, generation") for g in self.groups]
        phases += [(g.training, f"{g.name}, training") for g in self.groups]
        return max(phases, key=lambda pair: pair[0])


def activation_notes(inputs: Inputs, groups: list[GpuGroup]) -> list[str]:
    """A packed micro-batch may hold train.micro_batch_size samples of data.max_len (or train.max_tokens_per_gpu
    with dynamic batches): the plan counts one sample, and says where the most would not fit."""
    layout = inputs.layout
    per_token = inputs.shape.token_activation_bytes()
    tokens = layout.dynamic_tokens or layout.micro_batch * layout.max_len
    if per_token is None or tokens <= layout.max_len:
        return []
    extra = per_token * (tokens - layout.max_len)
    worst = max((g.training for g in groups if "actor" in g.roles), default=0.0) + extra
    if worst <= inputs.gpu_bytes:
        return []
    return [
        f"a micro-batch of {tokens:,} tokens (every sample at data.max_len) would need {worst / GIB:.1f} GiB: fine "
        "while samples are shorter; to cap it, openrlhf.train.dynamic_batch_enable=true "
        "openrlhf.train.max_tokens_per_gpu=N"
    ]


def plan_memory(
    stage_plan: dict[str, Any], gpu_gib: float = 80.0, params_b: float | None = None, spec: IndexSpec | None = None
) -> MemoryPlan:
    """The memory plan of a planned stage (plan_stage's dict) on GPUs of `gpu_gib`. PlanError when the model's size
    is unknown or an index is described in part."""
    stage: StageConfig = stage_plan["stage"]
    shape = model_shape(stage_plan, params_b)
    index, notes = index_plan(stage, spec or IndexSpec())
    inputs = Inputs(layout_of(validated_args(stage_plan["train_args"])), shape, index, gpu_gib * GIB)
    groups, problems = evaluate(inputs)
    notes = [f"{shape.params / 1e9:.2f}B parameters: {shape.source}", *notes]
    if index is not None and not index.on_gpu:
        notes.append(index_note(index, inputs.gpu_bytes))
    notes += activation_notes(inputs, groups)
    if inputs.layout.adam_offload:
        host = (BF16 + ADAM_BYTES) * shape.params / (GIB * max(1, inputs.layout.actor_gpus))
        notes.append(f"Adam offload: the grads and optimizer states take {host:.1f} GiB of host RAM per actor GPU")
    plan = MemoryPlan(stage.stage, stage_plan["model"].name, inputs, groups, problems, notes)
    if problems:
        plan.fix = find_fix(inputs)
    return plan


def index_note(index: IndexPlan, gpu_bytes: float) -> str:
    """An index not on these GPUs (a CPU type, search.device=cpu, or a retrieval server elsewhere): its size, and
    how many cards of this size it would take on GPUs."""
    size = f"index {index.label} ({index.passages:,} x {index.dim}): {index.bytes / GIB:.1f} GiB"
    if index.kind not in GPU_INDEX_KINDS:
        return f"{size} in RAM ({index.kind} searches on CPU)"
    cards = math.ceil(index.bytes / (gpu_bytes - FAISS_SCRATCH_BYTES))
    return f"{size} in RAM or on the server's host (--index-gpus K: on K of these GPUs); alone: {cards} card(s)"


def render(plan: MemoryPlan) -> str:
    layout, gib = plan.inputs.layout, plan.inputs.gpu_bytes / GIB
    lines = [
        f"# {plan.stage} on {plan.model}: {sum(len(g.gpus) for g in plan.groups)} GPUs of {gib:g} GiB; vLLM "
        f"{layout.engines} x TP {layout.tp} at {layout.gpu_util:g}, ZeRO-{layout.zero_stage}, "
        f"{'colocated' if layout.colocated else 'separate GPUs'}, sleep vLLM {'on' if layout.vllm_sleep else 'off'} "
        f"/ DeepSpeed {'on' if layout.ds_sleep else 'off'}",
    ]
    lines += [f"# {n}" for n in plan.notes]
    width = max(len(i.what) for g in plan.groups for i in g.items) + 2
    for g in plan.groups:
        head = f"{g.name} ({g.roles})"
        lines.append(f"{head:{width}}{'generation':>12}{'training':>10}")
        for i in g.items:
            lines.append(f"  {i.what:{width - 2}}{_gib(i.generation):>12}{_gib(i.training):>10}")
        lines.append(f"  {'total (GiB)':{width - 2}}{g.generation / GIB:>12.1f}{g.training / GIB:>10.1f}")
    if plan.fits:
        used, where = plan.peak
        lines.append(f"fits: at most {used / GIB:.1f} of {gib:g} GiB ({where})")
    else:
        lines += [f"does not fit: {p}" for p in plan.problems] + [f"fix: {plan.fix}"]
    return "\n".join(lines)


def _gib(value: float) -> str:
    return "-" if value == 0 else f"{value / GIB:.1f}"


class Verdict(NamedTuple):
    ok: bool
    detail: str
    fix: str


def memory_verdict(stage_plan: dict[str, Any], gpu_gib: float = 80.0) -> Verdict:
    """The preflight's reading of the plan: refused with its fix when it does not fit; passed, saying why, when no
    plan can be made here (the model's size unknown) or the job is a CPU rehearsal."""
    if stage_plan["stage"].episodes.source == "rehearsal":
        return Verdict(True, "not planned: a CPU rehearsal holds no GPU memory", "")
    try:
        plan = plan_memory(stage_plan, gpu_gib)
    except PlanError as e:
        return Verdict(True, f"not planned: {e}", "")
    if plan.fits:
        used, where = plan.peak
        return Verdict(True, f"at most {used / GIB:.1f} of {gpu_gib:g} GiB ({where}): `searchrl stage plan`", "")
    return Verdict(False, "; ".join(plan.problems), f"{plan.fix} (`searchrl stage plan` shows every GPU)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="searchrl stage plan",
        description="what every GPU of the stage's placement will hold (vLLM, actor, reference, critic, index), and "
        "whether it fits; exit 1 with a fix when it does not",
    )
    p.add_argument("stage", choices=sorted(STAGES))
    p.add_argument("--model", default=None, help="a configs/models/*.yaml file (default: the stage config's)")
    p.add_argument("--gpu-gib", type=float, default=80.0, help="memory of one GPU in GiB (default 80)")
    p.add_argument("--params-b", type=float, default=None, help="the policy's parameters in billions (else read)")
    g = p.add_argument_group("search index (default: the stage's own, from its manifest)")
    g.add_argument("--index-passages", type=int, default=None, help="vectors in the index")
    g.add_argument("--index-dim", type=int, default=None, help="their dimension")
    g.add_argument("--index-type", default=None, help="Flat, exact, compact, HNSW<M>, SQ8, PQ<m> or a factory")
    g.add_argument("--index-encoder", default=None, help="the query encoder's name, e.g. intfloat/e5-base-v2")
    g.add_argument(
        "--index-gpus", type=int, default=0, help="GPUs of this placement a retrieval server shards it over (0: none)"
    )
    add_schedule_flags(p)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. openrlhf.ds.zero_stage=2")
    return p


def main(argv: list[str] | None = None) -> int:
    """`searchrl stage plan`: 0 when the plan fits, 1 when not (with its fix), 2 when it cannot be made."""
    args = build_parser().parse_intermixed_args(argv)
    spec = IndexSpec(args.index_passages, args.index_dim, args.index_type, args.index_encoder, args.index_gpus)
    try:
        stage_plan = plan_stage(args.stage, args.model, [*schedule_overrides(args), *args.overrides])
        plan = plan_memory(stage_plan, args.gpu_gib, args.params_b, spec)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(render(plan))
    return 0 if plan.fits else 1


if __name__ == "__main__":
    sys.exit(main())
