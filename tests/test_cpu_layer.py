"""The training rehearsal's CPU layer (`searchrl/rehearsal/cpu/`): vLLM's request semantics kept by the stand-in,
the weight sync over gloo through OpenRLHF's own set-up code, the flash-attn padding helpers, the SDPA
override giving packed samples the log-probs they have unpacked, the CUDA shims and the overrides
applied after OpenRLHF's checks."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import types

import pytest
import torch

from searchrl.paths import ROOT
from searchrl.process import free_port
from searchrl.rehearsal.cpu.cuda_shims import CpuDevice
from searchrl.rehearsal.cpu.sampler import BatchSampler
from searchrl.tiny_policy.model import build_policy

STUBS = ROOT / "searchrl/rehearsal/cpu" / "stubs"
# The packages under searchrl/ beside the core: the layer may use the core alone.
SUBPACKAGES = ("rollout", "stage", "job", "qa_data", "tiny_policy", "rehearsal", "routing")
TEXTS = [
    "Who wrote the book? <|begin_of_query|> book author <|end_of_query|>\n\n<|begin_of_documents|>\n(1)x\n"
    "<|end_of_documents|>\n\n The author is Ann. </think>\n<answer> Ann </answer>"
] * 20


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    out = build_policy(tmp_path_factory.mktemp("policy") / "tiny", TEXTS, seed=0)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(out).eval(), AutoTokenizer.from_pretrained(out), out


class Script:
    """A logits processor that makes the model emit `ids` in order (then EOS), whatever its weights."""

    def __init__(self, ids: list[int], start: int, eos: int) -> None:
        self.ids, self.start, self.eos = ids, start, eos

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        step = input_ids.shape[1] - self.start
        want = self.ids[step] if step < len(self.ids) else self.eos
        forced = torch.full_like(scores, float("-inf"))
        forced[:, want] = 0.0
        return forced


def params(**kw):
    sys.path.insert(0, str(STUBS))
    try:
        from vllm import SamplingParams
    finally:
        sys.path.remove(str(STUBS))
    return SamplingParams(**kw)


def scripted(policy, text: str, prompt: list[int], **kw):
    model, tok, _ = policy
    ids = tok(text, add_special_tokens=False)["input_ids"]
    sampler = BatchSampler(model, tok, 4096, kw.pop("logprobs_mode", "raw_logprobs"),
                           [Script(ids, len(prompt), tok.eos_token_id)])  # fmt: skip
    return asyncio.run(sampler.generate(prompt, params(**kw))), ids


def test_stop_string_keeps_the_whole_token_and_cuts_the_text(policy):
    _, tok, _ = policy
    prompt = tok("Who wrote the book?", add_special_tokens=False)["input_ids"]
    # The query tag's last token merges `|>` with the newlines after it, as Qwen's tokenizer does.
    done, ids = scripted(policy, " <|begin_of_query|> book author <|end_of_query|>\n\nmore", prompt,
                         stop=["<|end_of_query|>"], include_stop_str_in_output=True, max_tokens=50)  # fmt: skip
    assert done.finish_reason == "stop" and done.stop_reason == "<|end_of_query|>"
    assert done.text == " <|begin_of_query|> book author <|end_of_query|>"
    assert tok.decode(done.token_ids).endswith("|>\n\n")  # the whole completing token, as vLLM keeps it
    assert done.token_ids == ids[: len(done.token_ids)]
    cut, _ = scripted(policy, " <|begin_of_query|> x <|end_of_query|> y", prompt, stop=["<|end_of_query|>"],
                      include_stop_str_in_output=False, max_tokens=50)  # fmt: skip
    assert cut.text == " <|begin_of_query|> x "


def test_eos_is_kept_in_the_tokens_not_in_the_text(policy):
    _, tok, _ = policy
    prompt = tok("Q", add_special_tokens=False)["input_ids"]
    done, ids = scripted(policy, " <answer> Ann </answer>", prompt, max_tokens=50, skip_special_tokens=False)
    assert done.finish_reason == "stop" and done.stop_reason is None
    assert done.token_ids == [*ids, tok.eos_token_id]
    assert done.text == " <answer> Ann </answer>"


def test_max_tokens_ends_with_length_and_logprobs_cover_every_token(policy):
    _, tok, _ = policy
    prompt = tok("Q", add_special_tokens=False)["input_ids"]
    done, ids = scripted(policy, " a long answer that goes on and on", prompt, max_tokens=3, logprobs=1,
                         logprobs_mode="processed_logprobs")  # fmt: skip
    assert done.finish_reason == "length" and done.token_ids == ids[:3]
    assert [list(step) for step in done.logprobs] == [[t] for t in ids[:3]]
    # Processed log-probs are those of the scripted (forced) distribution: each chosen token has p = 1.
    assert all(abs(step[t]) < 1e-6 for step, t in zip(done.logprobs, ids, strict=False))
    raw, _ = scripted(policy, " a long answer", prompt, max_tokens=3, logprobs=1)
    assert all(step[t] < -0.01 for step, t in zip(raw.logprobs, ids, strict=False))  # the model's own, p < 1


def test_requests_arriving_together_share_one_batch(policy):
    model, tok, _ = policy
    sampler = BatchSampler(model, tok, 4096)
    calls = []
    real = sampler._generate
    sampler._generate = lambda batch: calls.append(len(batch)) or real(batch)  # type: ignore[method-assign]

    async def run():
        prompts = [tok(q, add_special_tokens=False)["input_ids"] for q in ("A b", "C d e", "F")]
        return await asyncio.gather(*(sampler.generate(p, params(max_tokens=4, temperature=1.0)) for p in prompts))

    done = asyncio.run(run())
    assert calls == [3] and all(1 <= len(d.token_ids) <= 4 for d in done)


def test_pause_parks_a_running_batch_between_tokens_and_holds_new_ones(policy):
    """OpenRLHF's partial rollout: pause, change the weights, resume. While paused nothing computes (so the weights
    may change), no new batch starts, and the parked request goes on afterwards, counted as spanning a sync."""
    model, tok, _ = policy
    steps: list[int] = []
    sampler = BatchSampler(model, tok, 4096, logits_processors=[lambda ids, scores: steps.append(1) or scores])
    prompt = tok("Who wrote the book?", add_special_tokens=False)["input_ids"]
    long = params(max_tokens=60, ignore_eos=True, temperature=1.0)

    async def run():
        first = asyncio.create_task(sampler.generate(prompt, long))
        while len(steps) < 3:  # the batch is under way
            await asyncio.sleep(0.001)
        assert not sampler.quiet
        await sampler.pause()
        assert sampler.quiet and sampler.running == 1
        parked_at = len(steps)
        late = asyncio.create_task(sampler.generate(prompt, params(max_tokens=2)))
        await asyncio.sleep(0.2)
        assert len(steps) == parked_at and sampler.pending and not first.done()  # parked, and the late one waits
        sampler.version += 1  # what the engine's worker does once a sync's last parameter is in
        sampler.resume()
        return await first, await late

    done, late = asyncio.run(run())
    assert len(done.token_ids) == 60 and len(late.token_ids) == 2
    assert (sampler.pauses, sampler.across_syncs) == (1, 1)


def test_weight_sync_over_gloo_through_openrlhf_set_up(policy, tmp_path):
    """DeepSpeed rank 0 broadcasts every parameter as OpenRLHF's broadcast_to_vllm does; the engine's
    worker receives them through OpenRLHF's own stateless_init_process_group; digests then agree."""
    _, _, folder = policy
    script = tmp_path / "sync.py"
    script.write_text(
        textwrap.dedent(f"""
        import asyncio, json, socket, sys, torch
        from multiprocessing import Process
        sys.path.insert(0, {str(STUBS)!r}); sys.path.insert(0, {str(ROOT)!r})
        from searchrl.weights import weights_digest

        def engine(port):
            from vllm import AsyncEngineArgs, AsyncLLMEngine
            llm = AsyncLLMEngine.from_engine_args(AsyncEngineArgs(model={str(folder)!r}, dtype="bfloat16"))
            async def run():
                await llm.collective_rpc("init_process_group", args=("127.0.0.1", port, 1, 2, "g", "gloo", False))
                for name, p in sorted(llm.model.named_parameters()):
                    await llm.collective_rpc("update_weight", args=(name, p.dtype, p.shape, False))
            asyncio.run(run())
            print("ENGINE", weights_digest(llm.model.named_parameters()), flush=True)

        if __name__ == "__main__":
            from transformers import AutoModelForCausalLM
            from openrlhf.utils.distributed_util import stateless_init_process_group
            s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
            trained = AutoModelForCausalLM.from_pretrained({str(folder)!r}, dtype=torch.bfloat16)
            with torch.no_grad():
                for p in trained.parameters():
                    p.add_(0.5)  # as if a training step had changed every weight
            proc = Process(target=engine, args=(port,)); proc.start()
            group = stateless_init_process_group("127.0.0.1", port, 0, 2, "cpu")
            for name, p in sorted(trained.named_parameters()):
                group.broadcast(p.data, src=0, stream=None)
            proc.join(120)
            print("TRAINED", weights_digest(trained.named_parameters()), flush=True)
    """)
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    lines = dict(line.split() for line in done.stdout.splitlines() if line.startswith(("ENGINE", "TRAINED")))
    assert done.returncode == 0, done.stderr[-3000:]
    assert lines["ENGINE"] == lines["TRAINED"]


def test_deepspeed_trains_over_gloo_without_building_the_shared_memory_op(policy, tmp_path):
    """With the layer active, a ZeRO-3 engine built from OpenRLHF's own DeepSpeed config trains a step and compiles
    nothing: DeepSpeed would otherwise JIT-build its shared-memory allreduce into the extensions folder. (The
    optimizer here is DeepSpeed's torch_adam, so that its FusedAdam, built at set-up, is not rebuilt in a fresh
    extensions folder.)"""
    _, _, folder = policy
    script = tmp_path / "ds.py"
    script.write_text(
        textwrap.dedent(f"""
        import json, os, sys, torch
        sys.path.insert(0, {str(STUBS)!r}); sys.path.insert(0, {str(ROOT)!r})
        from searchrl.rehearsal.cpu import activate
        activate()
        import deepspeed
        from deepspeed.comm import comm as ds_comm
        from openrlhf.utils.deepspeed.deepspeed_utils import get_train_ds_config
        from transformers import AutoModelForCausalLM
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str({free_port()}), RANK="0", WORLD_SIZE="1",
                          LOCAL_RANK="0")
        deepspeed.init_distributed("gloo")
        model = AutoModelForCausalLM.from_pretrained({str(folder)!r}, dtype=torch.float32)
        optim = {{"type": "AdamW", "params": {{"lr": 0.01, "eps": 1e-7, "weight_decay": 0.1, "torch_adam": True}}}}
        cfg = get_train_ds_config(offload=False, stage=3, optim_config=optim, param_dtype="fp32")
        cfg.update(train_micro_batch_size_per_gpu=1, gradient_accumulation_steps=1)
        engine, opt, _, _ = deepspeed.initialize(model=model, config=cfg, model_parameters=model.parameters())
        with deepspeed.zero.GatheredParameters(list(engine.module.parameters())):
            before = [p.detach().clone() for p in engine.module.parameters()]
        ids = torch.tensor([[5, 6, 7, 8, 9]])
        engine.backward(engine(input_ids=ids, labels=ids).loss)
        engine.step()
        with deepspeed.zero.GatheredParameters(list(engine.module.parameters())):
            moved = max((a - b).abs().max().item() for a, b in zip(engine.module.parameters(), before))
        print("RESULT", json.dumps({{"moved": moved, "shm": ds_comm.cdb.shm_comm_op is None}}))
    """)
    )
    ext = tmp_path / "torch_extensions"
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(ext), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT"))[7:])
    assert got["shm"] and got["moved"] > 1e-3, got
    assert not ext.exists() or not any(ext.rglob("*.so"))  # nothing was compiled


def test_flash_attn_padding_helpers_round_trip():
    sys.path.insert(0, str(STUBS))
    try:
        from flash_attn.bert_padding import pad_input, unpad_input
    finally:
        sys.path.remove(str(STUBS))
    x = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    flat, indices, cu, longest, lengths = unpad_input(x, mask)
    assert flat.shape == (5, 3) and cu.tolist() == [0, 3, 5] and longest == 3 and lengths.tolist() == [3, 2]
    back = pad_input(flat, indices, 2, 4)
    assert torch.equal(back * mask.unsqueeze(-1), x * mask.unsqueeze(-1))


def test_packed_sdpa_log_probs_equal_the_unpacked_ones(policy):
    """The override `ds.attn_implementation=sdpa` keeps OpenRLHF's sample packing: two sequences packed
    into one row get the log-probs each has alone (torch builds the block mask from the position ids)."""
    _, _, folder = policy
    sys.path.insert(0, str(STUBS))
    try:
        from openrlhf.models.actor import Actor
    finally:
        sys.path.remove(str(STUBS))
    packed = Actor(str(folder), attn_implementation="sdpa", packing_samples=True)
    plain = Actor(str(folder), attn_implementation="sdpa", packing_samples=False)
    packed.model.float()
    plain.model.float()
    plain.model.load_state_dict(packed.model.state_dict())
    seqs = torch.tensor([[5, 9, 12, 7, 3, 0], [8, 6, 4, 0, 0, 0]])
    mask = (seqs != 0).long()
    action = torch.ones(2, 5)
    with torch.no_grad():
        a = packed(seqs, action, mask) * mask[:, 1:]
        b = plain(seqs, action, mask) * mask[:, 1:]
    assert torch.allclose(a, b, atol=1e-5)


def test_cuda_shim_device_is_the_cpu_and_formats_as_an_index():
    d = CpuDevice()
    assert torch.ones(1).to(d).device.type == "cpu" and torch.zeros(1, device=d).device.type == "cpu"
    assert f"cuda:{d}" == "cuda:0"  # OpenRLHF's replay buffer builds (and never uses) this device


def test_overrides_are_applied_after_openrlhf_checks(monkeypatch, capsys):
    import openrlhf.utils

    from searchrl.rehearsal.cpu.launch import apply_after_checks

    seen = {}
    monkeypatch.setattr(openrlhf.utils, "get_strategy", lambda args: seen.setdefault("args", args))
    args = types.SimpleNamespace(ds=types.SimpleNamespace(attn_implementation="flash_attention_2"))
    apply_after_checks([{"flag": "ds.attn_implementation", "value": "sdpa", "reason": "no GPU"}])
    openrlhf.utils.get_strategy(args)
    assert seen["args"].ds.attn_implementation == "sdpa"
    assert "OpenRLHF's checks had set 'flash_attention_2'" in capsys.readouterr().out


def test_the_layer_imports_only_the_core():
    """It is shipped (py_modules) to rehearsal jobs only, beside the uploaded code: it may use the core, nothing
    that would make a real job's code reach it."""
    own = {"search_backend", "reward_server", "eval", "launch", "benchmarks", *(f"searchrl.{p}" for p in SUBPACKAGES)}
    for file in (ROOT / "searchrl/rehearsal/cpu").rglob("*.py"):
        text = file.read_text(encoding="utf-8").replace("searchrl.rehearsal.cpu", "")
        found = [m for m in own if f"from {m}" in text or f"import {m}" in text]
        assert not found, f"{file}: imports {found}"


def test_launch_has_help():
    cmd = [sys.executable, "-m", "searchrl.rehearsal.cpu.launch", "--help"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and "train_ppo_ray" in done.stdout
    assert json.dumps  # the module's own --help, not argparse's: the flags after MODULE go to OpenRLHF
