"""Every check of a submission, without submitting: `launch/ray_submit.sh STAGE --preflight`.

A real submit runs the same checks first and stops on a failure, because each one, missed, costs a
job that dies (or trains on the wrong thing) after vLLM and DeepSpeed have loaded.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from searchrl.job.memory_plan import memory_verdict
from searchrl.paths import RUNS
from searchrl.process import own_tool
from searchrl.protocols import get_protocol
from searchrl.ray_serve import app_state, applications
from searchrl.reward.spec import protocols_of
from searchrl.search.base import HealthProbe
from searchrl.stage.config import CONFIG_JSON_ENV, STAGES, StageConfig, stage_package
from searchrl.stage.templates import template_fingerprint

# Ray refuses a working_dir package of this size or more (its gRPC message limit, 512 MiB).
RAY_PACKAGE_LIMIT = 512 * 1024 * 1024
# A single file this large in the upload is data, not code (Ray itself warns from 10 MiB).
LARGE_FILE = 10 * 1024 * 1024
DATA_SUFFIXES = (".faiss", ".npy", ".safetensors", ".bin", ".pt", ".arrow", ".parquet", ".mmap", ".tar", ".gz")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


@dataclass
class PackageReport:
    files: list[str]
    bytes: int
    data_files: list[str] = field(default_factory=list)

    @property
    def mib(self) -> float:
        return self.bytes / 1024 / 1024


def build_package(runtime_env: dict[str, Any], out: Path) -> PackageReport:
    """The working_dir zip exactly as `ray job submit` builds it (Ray's own packaging code, its
    default excludes, .gitignore/.rayignore honoured unless RAY_RUNTIME_ENV_IGNORE_GITIGNORE=1)."""
    from ray._private import ray_constants
    from ray._private.runtime_env.packaging import create_package

    include_gitignore = os.environ.get(ray_constants.RAY_RUNTIME_ENV_IGNORE_GITIGNORE, "0") != "1"
    excludes = ray_constants.get_runtime_env_default_excludes() + list(runtime_env.get("excludes") or [])
    if out.exists():
        out.unlink()
    quiet = logging.getLogger("searchrl.package")
    quiet.setLevel(logging.WARNING)
    create_package(
        runtime_env["working_dir"], out, include_gitignore=include_gitignore, excludes=excludes, logger=quiet
    )
    with zipfile.ZipFile(out) as z:
        infos = [i for i in z.infolist() if not i.is_dir()]
    data = [i.filename for i in infos if i.file_size >= LARGE_FILE or i.filename.endswith(DATA_SUFFIXES)]
    return PackageReport([i.filename for i in infos], out.stat().st_size, data)


def _auth(token_env: str) -> dict[str, str]:
    token = os.environ.get(token_env)
    return {"Authorization": f"Bearer {token}"} if token else {}


def _get_health(url: str, token_env: str, timeout_s: float) -> tuple[dict[str, Any] | None, str]:
    try:
        r = httpx.get(f"{url.rstrip('/')}/health", headers=_auth(token_env), timeout=timeout_s)
    except httpx.HTTPError as e:
        return None, f"{type(e).__name__}"
    if r.status_code != 200:
        return None, f"HTTP {r.status_code}"
    try:
        return r.json(), "ok"
    except ValueError:
        return None, "answered with something that is not JSON"


def _token_accepted(url: str, path: str, body: dict[str, Any], token_env: str, timeout_s: float) -> bool | None:
    """Whether the server accepts the token the job will carry: an empty request is refused as
    malformed (4xx, not 401/403) once past authentication. None when the server cannot be reached."""
    try:
        r = httpx.post(f"{url.rstrip('/')}{path}", json=body, headers=_auth(token_env), timeout=timeout_s)
    except httpx.HTTPError:
        return None
    return r.status_code not in (401, 403)


def _normalised(spec: Any) -> Any:
    return json.loads(json.dumps(spec))


def started_here(url: str, run_dir: Path) -> dict[str, Any] | None:
    """The record launch/start_servers.sh wrote for the server it started on this URL, if any."""
    for record in sorted(run_dir.glob("*.json")):
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("url", "").rstrip("/") == url.rstrip("/"):
            return data
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def check_servers(
    stage: StageConfig, run_dir: Path, timeout_s: float = 5.0, stage_name: str | None = None
) -> list[Check]:
    """The servers the stage names answer, take its tokens and, for the reward server, score its reward in its
    protocol. `stage_name`: the command-line name the fixes name (default: the config's `stage` field's prefix)."""
    checks = []
    rewards = [
        HealthProbe(u, stage.reward_server.token_env, "/get_reward", {"query": []}) for u in stage.reward_server.urls
    ]
    servers = [("reward server", p) for p in rewards]
    servers += [("retrieval server", p) for p in stage.search.kind.health_probes(stage.search)]
    start = f"bash launch/start_servers.sh --index DIR --stage {stage_name or stage.stage.split('_')[0]}"
    for what, probe in servers:
        health, status = _get_health(probe.url, probe.token_env, timeout_s)
        if health is None:
            checks.append(Check(f"{what} healthy", False, f"{probe.url}/health: {status}", f"start it: {start}"))
            continue
        checks.append(Check(f"{what} healthy", True, f"{probe.url}/health answered"))
        checks += _started_here_check(what, probe.url, run_dir, start)
        checks.append(_token_check(what, probe, timeout_s))
        if what == "reward server":
            checks += _reward_spec_checks(stage, probe, health, start)
    return checks


def _started_here_check(what: str, url: str, run_dir: Path, start: str) -> list[Check]:
    """When start_servers.sh recorded starting a server at `url`, that the process it started still answers there."""
    record = started_here(url, run_dir)
    if record is None:
        return []
    if record.get("engine") == "ray":
        return [_serve_check(what, record, start)]
    pid = int(record.get("pid", -1))
    ok = _alive(pid)
    return [
        Check(
            f"{what} is the one start_servers.sh started",
            ok,
            f"pid {pid} ({record.get('name')}) {'running' if ok else 'is gone: someone else answers here'}",
            "" if ok else f"stop whatever holds {url}, then {start}",
        )
    ]


def _serve_check(what: str, record: dict[str, Any], start: str) -> Check:
    """A server `servers start --engine ray` made: its Serve application runs every replica it was given."""
    app, dashboard = str(record.get("app")), str(record.get("dashboard"))
    try:
        ok, said = app_state(applications(dashboard), app)
    except httpx.HTTPError as e:
        ok, said = False, f"Serve's REST API at {dashboard} did not answer ({e})"
    return Check(
        f"{what} is the Serve application servers start made",
        ok,
        f"{app}: {said}",
        "" if ok else f"{start} --engine ray (in the training job's Ray cluster)",
    )


def _token_check(what: str, probe: HealthProbe, timeout_s: float) -> Check:
    accepted = _token_accepted(probe.url, probe.path, probe.payload, probe.token_env, timeout_s)
    set_ = bool(os.environ.get(probe.token_env))
    return Check(
        f"{what} token",
        accepted is not False,
        f"${probe.token_env} {'set, forwarded to the workers' if set_ else 'not set'}; "
        f"{'accepted' if accepted else 'refused (401/403)' if accepted is False else 'not probed'}",
        "" if accepted is not False else f"export {probe.token_env}=<the server's token> before submitting",
    )


def _reward_spec_checks(stage: StageConfig, probe: HealthProbe, health: dict[str, Any], start: str) -> list[Check]:
    """The reward server reads this stage's protocol and scores with this stage's reward (its /health spec)."""
    served = health.get("spec")
    if served is None:
        return [
            Check(
                "reward spec equal",
                False,
                f"{probe.url}/health shows no spec (it needs the bearer token)",
                f"export {probe.token_env}=<the server's token>",
            )
        ]
    reads = "?"
    if isinstance(served, dict):
        reads = served.get("protocol") or protocols_of(str(served.get("formula", "")))[0]
    fits = reads == stage.protocol
    diff = stage.reward.differing_components(served) if isinstance(served, dict) else ["spec"]
    return [
        Check(
            "reward server protocol",
            fits,
            f"the server reads {reads}'s tags; this stage speaks {stage.protocol}",
            "" if fits else f"restart the reward server with this stage's reward ({stage.protocol}): {start}",
        ),
        Check(
            "reward spec equal",
            not diff,
            f"the server scores with this stage's reward (digest {stage.reward.digest()})"
            if not diff
            else f"{probe.url} scores another reward; differing components: {', '.join(diff)}",
            "" if not diff else f"restart the reward server for this stage: {start}",
        ),
    ]


def check_data(
    stage: StageConfig, flags: dict[str, Any], model: Any, stage_name: str, key: str = "data.prompt_dataset"
) -> list[Check]:
    """The prompts under `key` (the training data, or eval.dataset's test set) prepared for this model and stage."""
    data = flags.get(key)
    what = "prompt data" if key == "data.prompt_dataset" else "evaluation data"
    split = "" if key == "data.prompt_dataset" else " --split test --keep-leaked"
    prepare = (
        f"python -m {stage_package(stage.stage)}.prepare_data --model {stage.model} --input QUESTIONS{split} "
        f"--out {data}"
    )
    if stage.prompt is not None or get_protocol(stage.protocol).PROMPT is not None:
        # The stage's own prompt (RAG-R1's rules, Router-R1's pool) or its protocol's instruction (Search-R1's) is
        # rendered only through its config.
        prepare += f" --config configs/stages/{STAGES.get(stage_name, stage_name)}.yaml"
    if not data:
        return [Check(what, False, f"openrlhf.{key} is not set", prepare)]
    path = Path(str(data))
    if not path.is_file():
        return [Check(what, False, f"{path}: no such file", prepare)]
    report_file = path.with_suffix(".report.json")
    try:
        report = json.loads(report_file.read_text())
    except (OSError, ValueError):
        return [Check(f"{what} prepared for this model", False, f"{report_file}: no preparation report", prepare)]
    want = template_fingerprint(model)
    problems = []
    if report.get("model") != model.name:
        problems.append(f"prepared for model {report.get('model')!r}, this job's is {model.name!r}")
    if report.get("template_sha256") not in (None, want):
        problems.append("prepared with another prompt template")
    if report.get("template_sha256") is None:
        problems.append("the report names no template (prepared by an older version)")
    keys = [flags.get("data.input_key") or "input", flags.get("data.label_key")]
    with path.open(encoding="utf-8") as fh:
        first = json.loads(fh.readline() or "{}")
    missing = [k for k in keys if k and k not in first]
    if missing:
        problems.append(f"first record lacks {missing}")
    return [
        Check(
            f"{what} prepared for this model",
            not problems,
            f"{path} ({report.get('written')} prompts, model {report.get('model')})"
            if not problems
            else "; ".join(problems),
            "" if not problems else prepare,
        )
    ]


def check_checkpoint(policy: str, policy_source: str) -> list[Check]:
    if not policy_source.startswith("final checkpoint"):
        return []
    ok = (Path(policy) / "config.json").is_file()
    return [
        Check(
            "starting checkpoint present",
            ok,
            f"{policy} ({policy_source})" + ("" if ok else ": no config.json yet"),
            ""
            if ok
            else "wait for the previous stage to finish (OpenRLHF writes the final checkpoint at the end; "
            "--when-ready waits for it) or set init_from=null / openrlhf.actor.model_name_or_path=PATH",
        )
    ]


def check_package(runtime_env: dict[str, Any], agent_file: str) -> tuple[list[Check], PackageReport | None]:
    try:
        import ray  # noqa: F401
    except ImportError:
        fix = "bash launch/install_gpu.sh (or pip install -e '.[dev]' for the CPU rehearsal)"
        return [Check("Ray package", False, "Ray is not installed here", fix)], None
    with tempfile.TemporaryDirectory() as tmp:
        report = build_package(runtime_env, Path(tmp) / "package.zip")
    checks = [
        Check(
            "Ray package size",
            report.bytes < RAY_PACKAGE_LIMIT,
            f"{report.mib:.1f} MiB, {len(report.files)} files (Ray's limit: 512 MiB)",
            "keep data outside the upload: see `excludes` in searchrl/job/submit.py",
        ),
        Check(
            "Ray package holds the agent",
            agent_file in report.files,
            agent_file,
            "run from the project root; the agent file must be inside working_dir",
        ),
        Check(
            "Ray package carries no data",
            not report.data_files,
            "code and configs only" if not report.data_files else ", ".join(report.data_files[:5]),
            "move indexes, corpora and checkpoints outside the uploaded folders",
        ),
    ]
    return checks, report


def check_config(runtime_env: dict[str, Any], stage: StageConfig) -> Check:
    inline = runtime_env.get("env_vars", {}).get(CONFIG_JSON_ENV)
    ok = inline is not None and StageConfig.model_validate(json.loads(inline)) == stage
    return Check(
        "config reaches every worker",
        ok,
        f"inline in env_vars ${CONFIG_JSON_ENV} ({len(inline or '')} bytes)",
        "" if ok else "a bug: the runtime_env must carry the resolved config",
    )


def check_ray_cli() -> Check:
    """The environment's own `ray` (beside its Python, as a virtual environment installs it, or on PATH)."""
    found = own_tool("ray")
    return Check(
        "ray CLI",
        found is not None,
        found or f"neither beside {sys.executable} nor on PATH",
        "install the `train` extra on the submitting machine: bash launch/install_gpu.sh",
    )


def report(checks: list[Check], out: Callable[[str], None] = print) -> bool:
    for c in checks:
        out(f"  [{'ok' if c.ok else 'FAIL'}] {c.name}: {c.detail}")
        if not c.ok and c.fix:
            out(f"         fix: {c.fix}")
    failed = sum(not c.ok for c in checks)
    out(f"preflight: {len(checks) - failed} checks passed, {failed} failed")
    return failed == 0


def submission_checks(plan: dict[str, Any], env: dict[str, Any], run_dir: Path | None = None) -> list[Check]:
    stage: StageConfig = plan["stage"]
    checks = [
        Check("flags parse", True, f"{len(plan['train_args'])} arguments, OpenRLHF 0.11.2's own parser and checks"),
        check_ray_cli(),
        check_config(env, stage),
    ]
    package, _ = check_package(env, plan["flags"]["train.agent_func_path"])
    checks += package
    checks += check_servers(stage, run_dir or RUNS / "servers", stage_name=plan["stage_name"])
    checks += check_data(stage, plan["flags"], plan["model"], plan["stage_name"])
    if plan["flags"].get("eval.dataset"):
        checks += check_data(stage, plan["flags"], plan["model"], plan["stage_name"], key="eval.dataset")
    checks += check_checkpoint(plan["policy"], plan["policy_source"])
    checks.append(Check("GPU memory plan", *memory_verdict(plan)))
    forwarded = sorted(k for k in env["env_vars"] if k != CONFIG_JSON_ENV)
    checks.append(Check("secrets forwarded", True, ", ".join(forwarded) + " (masked)" if forwarded else "none set"))
    return checks
