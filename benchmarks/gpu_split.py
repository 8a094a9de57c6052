"""One GPU's share of a 7B policy's RL step: training, decoding and weight-sync times to ground a projection.

    python -m benchmarks.gpu_split [--out benchmarks/results/gpu_split.json] [--device cuda] [--tiny]
        [--train-tokens 8192] [--train-seq 2048] [--context 1024] [--decode-steps 32] [--batches 32,128]

A Qwen2.5-7B-shaped model (random weights from `Qwen2Config`, bf16, SDPA attention, nothing downloaded) is built
on the device, then three phases run with memory freed between them:

- train: forward+backward of the causal-LM loss on one micro-batch with gradient checkpointing, as a ZeRO-3
  rank computes it (tokens/s, seconds per 1k tokens), a no-grad forward of the same batch (the log-prob passes
  of making experience), and one fused AdamW step over an fp32 flat copy of 1/8 of the parameters, what one of
  8 ZeRO-3 ranks updates;
- decode: prefill B rows of `--context` tokens, then `--decode-steps` single-token steps feeding the returned
  KV cache back, per B in `--batches`. This is HF eager decoding (no paged attention, no CUDA graphs), so it is
  a lower bound on what vLLM generates on the same GPU;
- graphs: the same decode over a static KV cache with each step captured once as a CUDA graph and replayed, as
  vLLM decodes (one launch a token, the cache read once a step), after a check that it decodes the tokens the
  eager loop decodes. On a CPU the step runs eagerly;
- sync: the parameters' bytes in bf16 copied once device-to-device and once into pinned host memory. OpenRLHF
  sends weights to its vLLM engines by NCCL broadcast between GPUs, so the device-to-device rate is a ceiling
  on that sync, not its speed.

`--tiny` swaps in a 2-layer model and small shapes so the script runs in seconds on a CPU (`--device cpu`).
Imports only torch, transformers and the standard library (plus benchmarks.tables' stdlib-only `save`), so it
runs from the repository root on a machine without the project installed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.tables import save  # noqa: E402
from searchrl.paths import ROOT  # noqa: E402

QWEN25_7B: dict[str, Any] = {
    "hidden_size": 3584,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "intermediate_size": 18944,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
}
TINY: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 1000,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
}
# Shapes per mode; a flag given on the command line wins over both.
SHAPES: dict[str, dict[str, Any]] = {
    "full": {"train_tokens": 8192, "train_seq": 2048, "context": 1024, "decode_steps": 32, "batches": "32,128"},
    "tiny": {"train_tokens": 256, "train_seq": 64, "context": 32, "decode_steps": 8, "batches": "2,4"},
}
ZERO3_RANKS = 8
GB = 1e9
DECODE_NOTE = (
    "HF transformers eager decoding (DynamicCache, no paged attention, no CUDA graphs): a lower bound on vLLM's "
    "rate on the same GPU"
)
GRAPHS_NOTE = (
    "greedy decoding over a static KV cache with each step replayed as one CUDA graph and the cache read once a "
    "step (grouped query heads folded into SDPA's query length), as vLLM decodes; no paged attention or "
    "continuous batching"
)
SYNC_NOTE = (
    "OpenRLHF syncs weights to vLLM engines by NCCL broadcast between GPUs, so the device-to-device copy rate is "
    "a ceiling on that sync, not its speed"
)


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def wait(torch: Any, dev: Any) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def free(torch: Any, dev: Any) -> None:
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def peak_gib(torch: Any, dev: Any) -> float | None:
    return round(torch.cuda.max_memory_allocated(dev) / 2**30, 2) if dev.type == "cuda" else None


def reset_peak(torch: Any, dev: Any) -> None:
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)


def timed(torch: Any, dev: Any, fn: Callable[[], Any], repeats: int, warmup: int = 1) -> list[float]:
    """Seconds per call of `fn`, after `warmup` untimed calls, each bracketed by a device synchronize."""
    for _ in range(warmup):
        fn()
    wait(torch, dev)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        wait(torch, dev)
        times.append(time.perf_counter() - started)
    return times


def oom_record(err: BaseException) -> dict[str, str]:
    return {"error": "out of memory", "detail": str(err).splitlines()[0][:300]}


def build_model(torch: Any, dev: Any, shape: dict[str, Any]) -> Any:
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(**shape)
    # Built on the device directly: a 7B model initialised on the host first would cost minutes and 30 GB of RAM.
    with torch.device(dev):
        return AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")


def train_phase(torch: Any, dev: Any, model: Any, tokens: int, seq: int, repeats: int) -> dict[str, Any]:
    rows = max(1, tokens // seq)
    ids = torch.randint(model.config.vocab_size, (rows, seq), device=dev)
    n = rows * seq
    out: dict[str, Any] = {"rows": rows, "seq": seq, "tokens": n, "gradient_checkpointing": True}
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()

    def step() -> None:
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()

    reset_peak(torch, dev)
    try:
        out["forward_backward"] = token_rate(timed(torch, dev, step, repeats), n, peak_gib(torch, dev))
    except torch.cuda.OutOfMemoryError as err:
        out["forward_backward"] = oom_record(err)
    model.zero_grad(set_to_none=True)
    free(torch, dev)
    say(f"train: forward+backward {out['forward_backward']}")

    # make_experience's actor and reference log-prob passes are no-grad forwards over the same tokens.
    model.eval()
    reset_peak(torch, dev)
    try:
        with torch.inference_mode():
            times = timed(torch, dev, lambda: model(input_ids=ids, use_cache=False).logits, repeats)
        out["forward_no_grad"] = token_rate(times, n, peak_gib(torch, dev))
    except torch.cuda.OutOfMemoryError as err:
        out["forward_no_grad"] = oom_record(err)
    model.gradient_checkpointing_disable()
    say(f"train: forward without grad {out['forward_no_grad']}")
    return out


def token_rate(times: list[float], tokens: int, peak: float | None) -> dict[str, Any]:
    sec = statistics.median(times)
    return {
        "seconds": [round(t, 4) for t in times],
        "median_seconds": round(sec, 4),
        "tokens_per_s": round(tokens / sec, 1),
        "seconds_per_1k_tokens": round(sec * 1000 / tokens, 5),
        "peak_gib": peak,
    }


def adamw_phase(torch: Any, dev: Any, model: Any, repeats: int) -> dict[str, Any]:
    """One optimizer step as one ZeRO-3 rank takes it: AdamW over a flat fp32 master copy of 1/8 of the weights."""
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    shard = -(-total // ZERO3_RANKS)
    reset_peak(torch, dev)
    try:
        master = torch.empty(shard, dtype=torch.float32, device=dev)
        filled = 0
        for p in params:
            take = min(p.numel(), shard - filled)
            master[filled : filled + take].copy_(p.detach().reshape(-1)[:take])
            filled += take
            if filled == shard:
                break
        master = torch.nn.Parameter(master)
        master.grad = torch.randn_like(master) * 1e-3
        fused = dev.type == "cuda"
        opt = torch.optim.AdamW([master], lr=1e-6, fused=fused, foreach=None if fused else True)
        # The first step allocates the moment buffers; a training run pays that once, not per step.
        times = timed(torch, dev, opt.step, repeats)
        result: dict[str, Any] = {
            "implementation": "fused" if fused else "foreach",
            "shard_params": shard,
            "of_ranks": ZERO3_RANKS,
            "seconds": [round(t, 5) for t in times],
            "median_seconds": round(statistics.median(times), 5),
            "peak_gib": peak_gib(torch, dev),
        }
        del opt, master
    except torch.cuda.OutOfMemoryError as err:
        result = oom_record(err)
    free(torch, dev)
    return result


def clocked(torch: Any, dev: Any, fn: Callable[[], Any]) -> tuple[Any, float]:
    """`fn()` and the seconds it took, from a synchronized device to a synchronized device."""
    wait(torch, dev)
    started = time.perf_counter()
    out = fn()
    wait(torch, dev)
    return out, time.perf_counter() - started


def decode_record(
    torch: Any, dev: Any, batch: int, context: int, steps: int, cached: int, prefill: float, took: float
) -> dict[str, Any]:
    return {
        "batch": batch,
        "context": context,
        "steps": steps,
        "cache_length_after": cached,
        "prefill_seconds": round(prefill, 4),
        "prefill_tokens_per_s": round(batch * context / prefill, 1),
        "decode_seconds": round(took, 4),
        "decode_tokens_per_s": round(batch * steps / took, 1),
        "ms_per_step": round(took * 1000 / steps, 3),
        "peak_gib": peak_gib(torch, dev),
    }


def decode_one(torch: Any, dev: Any, model: Any, batch: int, context: int, steps: int) -> dict[str, Any]:
    ids = torch.randint(model.config.vocab_size, (batch, context), device=dev)
    reset_peak(torch, dev)
    with torch.inference_mode():
        # logits_to_keep=1 keeps the prefill from materialising B x context x vocab logits, as generate() does.
        out, prefill = clocked(torch, dev, lambda: model(input_ids=ids, use_cache=True, logits_to_keep=1))
        state = [out.past_key_values, out.logits[:, -1:].argmax(-1)]
        del out

        def step() -> None:
            out = model(input_ids=state[1], past_key_values=state[0], use_cache=True)
            state[:] = [out.past_key_values, out.logits[:, -1:].argmax(-1)]

        step()  # untimed, so the timed steps leave out first-call kernel selection
        _, took = clocked(torch, dev, lambda: [step() for _ in range(steps)])
        cached = int(state[0].get_seq_length())
    return decode_record(torch, dev, batch, context, steps, cached, prefill, took)


FOLDED = "sdpa_folded"


def folded_sdpa(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> tuple[Any, None]:
    """SDPA for one-token decode steps that folds each KV head's query heads into the query length.

    With an explicit mask (which a static cache needs) transformers' SDPA path copies every KV head once per query
    head sharing it, reading the cache seven times over for Qwen2.5-7B; folded, the cache is read once, as
    vLLM's decode kernels read it. Prefill and models without grouped heads take transformers' own path.
    """
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    batch, heads, length, dim = query.shape
    kv_heads = key.shape[1]
    if length != 1 or heads == kv_heads:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    mask = attention_mask[:, :, :, : key.shape[-2]] if attention_mask is not None else None
    out = torch.nn.functional.scaled_dot_product_attention(
        query.view(batch, kv_heads, heads // kv_heads, dim), key, value, attn_mask=mask, scale=kwargs.get("scaling")
    )
    return out.view(batch, heads, 1, dim).transpose(1, 2).contiguous(), None


def use_folded_attention(model: Any) -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(FOLDED, folded_sdpa)
    AttentionMaskInterface.register(FOLDED, sdpa_mask)
    model.config._attn_implementation = FOLDED


class StaticDecoder:
    """Greedy decoding over a static KV cache, one step a call, with every step's inputs in fixed buffers.

    The step writes only into tensors it owns (next token, cache position, padding mask, cache), so on CUDA it is
    captured once as a graph and replayed: one launch a token, as vLLM's CUDA-graph decoding does. Elsewhere the
    same step runs eagerly, which is how the CPU test checks it decodes what the dynamic-cache loop decodes.
    """

    def __init__(self, torch: Any, dev: Any, model: Any, ids: Any, room: int) -> None:
        from transformers import StaticCache

        self.torch, self.model = torch, model
        batch, context = ids.shape
        self.cache = StaticCache(config=model.config, max_cache_len=context + room)
        # The mask spans the whole cache so its shape never changes; a step marks its own slot before attending.
        self.mask = torch.zeros(batch, context + room, dtype=torch.long, device=dev)
        self.mask[:, :context] = 1
        out = model(
            input_ids=ids,
            attention_mask=self.mask,
            past_key_values=self.cache,
            cache_position=torch.arange(context, device=dev),
            use_cache=True,
            logits_to_keep=1,
        )
        self.token = out.logits[:, -1:].argmax(-1)
        self.position = torch.full((1,), context, dtype=torch.long, device=dev)
        self.graph: Any = None

    def step(self) -> None:
        self.mask.index_fill_(1, self.position, 1)
        out = self.model(
            input_ids=self.token,
            attention_mask=self.mask,
            past_key_values=self.cache,
            cache_position=self.position,
            use_cache=True,
        )
        self.token.copy_(out.logits[:, -1:].argmax(-1))
        self.position.add_(1)

    def capture(self, warmup: int = 2) -> None:
        """Record one step as a CUDA graph, after `warmup` eager steps on a side stream (which decode for real)."""
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                self.step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.step()

    def __call__(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.step()


def greedy_tokens(torch: Any, model: Any, ids: Any, steps: int) -> Any:
    """`steps` greedy tokens after `ids` from the dynamic-cache loop `decode_one` times: the reference."""
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    tokens = [out.logits[:, -1:].argmax(-1)]
    for _ in range(steps - 1):
        out = model(input_ids=tokens[-1], past_key_values=out.past_key_values, use_cache=True)
        tokens.append(out.logits[:, -1:].argmax(-1))
    return torch.cat(tokens, dim=1)


def static_tokens(torch: Any, dev: Any, model: Any, ids: Any, steps: int, graphs: bool) -> Any:
    """The same `steps` tokens from `StaticDecoder`, replayed as a graph when `graphs`."""
    decoder = StaticDecoder(torch, dev, model, ids, room=steps + 4)
    tokens = [decoder.token.clone()]
    if graphs:
        decoder.capture(warmup=1)  # the warm-up step decodes the second token
        tokens.append(decoder.token.clone())
    while len(tokens) < steps:
        decoder()
        tokens.append(decoder.token.clone())
    return torch.cat(tokens, dim=1)


def graph_agreement(torch: Any, dev: Any, model: Any, batch: int, context: int, steps: int) -> dict[str, Any]:
    """Share of greedy tokens the graphed static-cache decoder gives as the dynamic-cache loop does.

    In bf16 the two attend through different kernels (a masked full-cache SDPA against an unmasked one over the
    filled part), so a near-tie in the logits can flip a token and the rows diverge after it; the first step
    agreeing on (nearly) every row is what says the graph decodes the same model.
    """
    ids = torch.randint(model.config.vocab_size, (batch, context), device=dev)
    with torch.inference_mode():
        ref = greedy_tokens(torch, model, ids, steps)  # with the attention `decode_one` times
        use_folded_attention(model)
        got = static_tokens(torch, dev, model, ids, steps, graphs=dev.type == "cuda")
    same = (ref == got).float()
    return {
        "batch": batch,
        "context": context,
        "steps": steps,
        "first_step_agreement": round(same[:, 1].mean().item(), 4) if steps > 1 else None,
        "all_steps_agreement": round(same.mean().item(), 4),
    }


def graphed_one(torch: Any, dev: Any, model: Any, batch: int, context: int, steps: int) -> dict[str, Any]:
    ids = torch.randint(model.config.vocab_size, (batch, context), device=dev)
    reset_peak(torch, dev)
    with torch.inference_mode():
        decoder, prefill = clocked(torch, dev, lambda: StaticDecoder(torch, dev, model, ids, room=steps + 8))

        def ready() -> None:
            if dev.type == "cuda":
                decoder.capture()
            decoder()  # untimed, as in decode_one

        _, capture = clocked(torch, dev, ready)
        _, took = clocked(torch, dev, lambda: [decoder() for _ in range(steps)])
        filled = int(decoder.position.item())
    record = decode_record(torch, dev, batch, context, steps, filled, prefill, took)
    return {**record, "graphs": dev.type == "cuda", "capture_seconds": round(capture, 4)}


def graphed_phase(torch: Any, dev: Any, model: Any, batches: list[int], context: int, steps: int) -> dict[str, Any]:
    model.eval()
    stock = model.config._attn_implementation
    out: dict[str, Any] = {"note": GRAPHS_NOTE}
    try:
        try:
            out["agreement"] = graph_agreement(torch, dev, model, 4, context, 8)
        except Exception as err:  # noqa: BLE001 - a failed capture is a finding to record, not a reason to stop
            out["agreement"] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"}
        free(torch, dev)
        say(f"graphs: agreement with the eager loop {out['agreement']}")
        use_folded_attention(model)
        out["runs"] = per_batch(torch, dev, model, "graphs", graphed_one, batches, context, steps)
    finally:
        model.config._attn_implementation = stock
    return out


def decode_phase(torch: Any, dev: Any, model: Any, batches: list[int], context: int, steps: int) -> dict[str, Any]:
    model.eval()
    return {"note": DECODE_NOTE, "runs": per_batch(torch, dev, model, "decode", decode_one, batches, context, steps)}


def per_batch(
    torch: Any, dev: Any, model: Any, label: str, one: Callable[..., dict[str, Any]], batches: list[int], context: int,
    steps: int,
) -> list[dict[str, Any]]:  # fmt: skip
    """`one` at each batch size, memory freed between; an out-of-memory or another failure (a CUDA graph that
    would not capture) becomes that batch's record rather than ending the run."""
    runs = []
    for b in batches:
        say(f"{label}: batch {b}, context {context}, {steps} steps")
        try:
            run = one(torch, dev, model, b, context, steps)
        except torch.cuda.OutOfMemoryError as err:
            run = {"batch": b, "context": context, "steps": steps, **oom_record(err)}
        except Exception as err:  # noqa: BLE001 - recorded, as above
            run = {"batch": b, "context": context, "steps": steps, "error": f"{type(err).__name__}: {err}"[:400]}
        free(torch, dev)
        runs.append(run)
        say(f"{label}: {run}")
    return runs


def copy_rate(torch: Any, dev: Any, dst: Any, src: Any, repeats: int) -> dict[str, Any]:
    times = timed(torch, dev, lambda: dst.copy_(src, non_blocking=True), repeats)
    nbytes = src.numel() * src.element_size()
    return {"seconds": [round(t, 5) for t in times], "gb_per_s": round(nbytes / GB / statistics.median(times), 2)}


def sync_phase(torch: Any, dev: Any, n_params: int, repeats: int) -> dict[str, Any]:
    nbytes = n_params * 2
    out: dict[str, Any] = {"note": SYNC_NOTE, "params": n_params, "bytes_bf16": nbytes, "gb_bf16": nbytes / GB}
    reset_peak(torch, dev)
    try:
        src = torch.empty(n_params, dtype=torch.bfloat16, device=dev)
        dst = torch.empty_like(src)
        out["device_to_device" if dev.type == "cuda" else "host_to_host"] = copy_rate(torch, dev, dst, src, repeats)
        del dst
        free(torch, dev)
        out["device_to_host_pinned"] = None
        if dev.type == "cuda":
            host = torch.empty(n_params, dtype=torch.bfloat16, pin_memory=True)
            out["device_to_host_pinned"] = copy_rate(torch, dev, host, src, repeats)
            del host
        del src
    except torch.cuda.OutOfMemoryError as err:
        out.update(oom_record(err))
    out["gb_bf16"] = round(out["gb_bf16"], 4)
    free(torch, dev)
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    full, tiny = SHAPES["full"], SHAPES["tiny"]

    def shaped(key: str) -> str:
        return f"default {full[key]} ({tiny[key]} with --tiny)"

    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    p.add_argument("--tiny", action="store_true", help="2-layer model and small shapes, for a CPU check")
    p.add_argument("--train-tokens", type=int, default=None, help=f"micro-batch tokens; {shaped('train_tokens')}")
    p.add_argument("--train-seq", type=int, default=None, help=f"row length of that batch; {shaped('train_seq')}")
    p.add_argument("--context", type=int, default=None, help=f"prompt tokens per decode row; {shaped('context')}")
    p.add_argument("--decode-steps", type=int, default=None, help=f"timed decode steps; {shaped('decode_steps')}")
    p.add_argument("--batches", default=None, help=f"comma list of decode batch sizes; {shaped('batches')}")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats of train, AdamW and copy steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu_split.json")
    return p


def peak(r: dict[str, Any]) -> str:
    return f", peak {r['peak_gib']} GiB allocated" if r.get("peak_gib") is not None else ""


def summary(result: dict[str, Any]) -> str:
    train, decode, sync = result["train"], result["decode"], result["sync"]
    lines = [
        f"device {result['machine']['device_name']}, {result['model']['params']:,} params "
        f"({'tiny' if result['tiny'] else 'Qwen2.5-7B shape'}), torch {result['machine']['torch']}, "
        f"transformers {result['machine']['transformers']}",
    ]
    for key, name in (("forward_backward", "fwd+bwd (grad ckpt)"), ("forward_no_grad", "forward, no grad")):
        r = train[key]
        lines.append(
            f"  train {name}: {r['error']}"
            if "error" in r
            else f"  train {name}: {train['tokens']} tokens in {r['median_seconds']:.3f} s, "
            f"{r['tokens_per_s']:,.0f} tokens/s, {r['seconds_per_1k_tokens']:.4f} s per 1k tokens"
            f"{peak(r)}"
        )
    a = train["adamw"]
    lines.append(
        f"  train AdamW: {a['error']}"
        if "error" in a
        else f"  train AdamW ({a['implementation']}, 1/{a['of_ranks']} of params = {a['shard_params']:,}): "
        f"{a['median_seconds']:.4f} s{peak(a)}"
    )
    for r in decode["runs"]:
        lines.append(
            f"  decode B={r['batch']}: {r['error']}"
            if "error" in r
            else f"  decode B={r['batch']} ctx={r['context']}: {r['decode_tokens_per_s']:,.0f} tokens/s, "
            f"{r['ms_per_step']:.2f} ms/step; prefill {r['prefill_tokens_per_s']:,.0f} tokens/s"
            f"{peak(r)}"
        )
    lines.append(f"  ({decode['note']})")
    graphs = result.get("decode_graphs")
    if graphs:
        lines.append(f"  graphs: agreement with the eager loop {graphs['agreement']}")
        for r in graphs["runs"]:
            lines.append(
                f"  graphs B={r['batch']}: {r['error']}"
                if "error" in r
                else f"  graphs B={r['batch']} ctx={r['context']}: {r['decode_tokens_per_s']:,.0f} tokens/s, "
                f"{r['ms_per_step']:.2f} ms/step (capture {r['capture_seconds']:.2f} s){peak(r)}"
            )
        lines.append(f"  ({graphs['note']})")
    copies = [k for k in ("device_to_device", "host_to_host", "device_to_host_pinned") if sync.get(k)]
    rates = ", ".join(f"{k.replace('_', ' ')} {sync[k]['gb_per_s']} GB/s" for k in copies)
    lines.append(f"  sync: {sync['gb_bf16']} GB of bf16 weights; {rates or sync.get('error')}")
    lines.append(f"  ({sync['note']})")
    lines.append(f"  wall time {result['wall_seconds']:.1f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    started = time.perf_counter()
    import torch
    import transformers

    mode = SHAPES["tiny" if args.tiny else "full"]
    shape = {key: getattr(args, key) if getattr(args, key) is not None else mode[key] for key in mode}
    batches = [int(b) for b in str(shape["batches"]).split(",") if b.strip()]
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: no CUDA device here (use --device cpu --tiny for a CPU check)")
    torch.manual_seed(args.seed)
    config = TINY if args.tiny else QWEN25_7B
    result: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "machine": {
            "device": str(dev),
            "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu",
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "transformers": transformers.__version__,
        },
        "tiny": args.tiny,
        "dtype": "bfloat16",
        "attn_implementation": "sdpa",
        "repeats": args.repeats,
        "shapes": {**shape, "batches": batches},
    }

    say(f"building {'tiny' if args.tiny else 'Qwen2.5-7B-shaped'} model on {dev}")
    model = build_model(torch, dev, config)
    n_params = sum(p.numel() for p in model.parameters())
    result["model"] = {"config": config, "params": n_params}
    say(f"built: {n_params:,} parameters")

    say("train: starting")
    result["train"] = train_phase(torch, dev, model, shape["train_tokens"], shape["train_seq"], args.repeats)
    free(torch, dev)
    result["train"]["adamw"] = adamw_phase(torch, dev, model, args.repeats)
    say(f"train: AdamW step {result['train']['adamw']}")
    say("train: done")
    say("decode: starting")
    result["decode"] = decode_phase(torch, dev, model, batches, shape["context"], shape["decode_steps"])
    say("decode: done")
    say("graphs: starting")
    result["decode_graphs"] = graphed_phase(torch, dev, model, batches, shape["context"], shape["decode_steps"])
    say("graphs: done")
    # The copies need room for two full bf16 weight copies, so the model goes first.
    del model
    free(torch, dev)
    say("sync: starting")
    result["sync"] = sync_phase(torch, dev, n_params, args.repeats)
    say(f"sync: done {result['sync']}")

    result["wall_seconds"] = round(time.perf_counter() - started, 1)
    print(summary(result), flush=True)
    save(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
