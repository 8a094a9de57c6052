"""pip's resolver as the check runs it: dry runs for the GPU platform, their JSON reports, and pip's own reason
when a step fails.

pip runs against one index with no pip config at all: `--isolated` drops the user's files and PIP_* variables, and
PIP_CONFIG_FILE=/dev/null the site-wide files `--isolated` still reads (a local constraint or a find-links of CPU
wheels would change the answer). The pip is a pinned release kept beside the runs (`bootstrap`): on an index without
PEP 658 metadata files an old pip downloads every wheel whole (gigabytes of CUDA libraries), where PIP_VERSION reads
their metadata with HTTP range requests (fast-deps). Each call's output goes to a log, with a line every HEARTBEAT
seconds on the terminal.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

PYPI = "https://pypi.org/simple"
NO_CONFIG = {"PIP_CONFIG_FILE": os.devnull}
HEARTBEAT = 15.0
PIP_VERSION = "26.3"
FAST_DEPS = ["--use-feature=fast-deps"]  # PEP 658 metadata still comes first where the index serves it
# `--python` (run pip for another interpreter) came in pip 22.3; `--report` in 22.2.
PIP_MIN = (22, 3)


@dataclass(frozen=True)
class Target:
    """The GPU node pip is asked about: CPython X.Y on manylinux x86_64 with glibc up to `glibc`."""

    python_version: str = "3.11"
    glibc: tuple[int, int] = (2, 35)

    def platform_args(self) -> list[str]:
        # pip matches --platform tags exactly: a node with glibc 2.35 also takes every older manylinux tag.
        major, top = self.glibc
        tags = [f"manylinux_{major}_{minor}_x86_64" for minor in range(top, 4, -1)]
        tags += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
        flags = [f"--platform={t}" for t in tags]
        return [*flags, f"--python-version={self.python_version}", "--implementation=cp"]

    def markers(self) -> dict[str, str]:
        """Environment markers of the node, to tell which of a package's requirements apply there."""
        return {
            "python_version": self.python_version,
            "python_full_version": f"{self.python_version}.0",
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            "sys_platform": "linux",
            "platform_system": "Linux",
            "os_name": "posix",
            "platform_machine": "x86_64",
            "extra": "",
        }


@dataclass
class PipResult:
    rc: int
    log: Path
    report: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def installs(self) -> dict[str, dict]:
        """canonical name -> the report's entry for it (metadata, download_info)."""
        return {canonicalize_name(i["metadata"]["name"]): i for i in self.report.get("install", [])}

    def versions(self) -> dict[str, str]:
        return {name: item["metadata"]["version"] for name, item in self.installs().items()}

    def reason(self, limit: int = 14) -> str:
        return pip_reason(self.log.read_text(encoding="utf-8", errors="replace"), limit)


def pip_reason(text: str, limit: int = 14) -> str:
    """pip's own account of a failure: its ERROR lines, the conflict it names, the build's last exception."""
    lines = text.splitlines()
    keep: list[str] = []
    in_conflict = False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("The conflict is caused by"):
            in_conflict = True
        elif in_conflict and (not stripped or stripped.startswith(("To fix", "Additionally"))):
            in_conflict = False
        if in_conflict or stripped.startswith(("ERROR:", "error:")):
            keep.append(stripped)
    errors = [s.strip() for s in lines if re.match(r"^\s*\w*(Error|Exception): ", s) and "ERROR:" not in s]
    if errors:
        keep.append(errors[-1])  # the exception a build script raised, if one did
    if not keep:
        keep = [s.strip() for s in lines if s.strip()][-5:]
    return "\n".join(dict.fromkeys(keep[:limit]))


def pip_version(command: list[str]) -> tuple[int, ...]:
    out = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=120)
    m = re.match(r"pip (\d+)\.(\d+)", out.stdout)
    if out.returncode or not m:
        raise RuntimeError(f"`{shlex.join(command)} --version` failed: {(out.stderr or out.stdout).strip()[-300:]}")
    return int(m.group(1)), int(m.group(2))


class Pip:
    """Runs `COMMAND [--python PY] install ...` with the log in `logs`, returning the report when asked for one."""

    def __init__(
        self,
        command: list[str],
        index_url: str,
        logs: Path,
        cwd: Path,
        timeout: float = 900.0,
        options: Sequence[str] = (),
    ) -> None:
        self.command, self.index_url, self.logs, self.cwd, self.timeout = command, index_url, logs, cwd, timeout
        self.options = list(options)  # passed to every install (FAST_DEPS with the bootstrapped pip)
        logs.mkdir(parents=True, exist_ok=True)

    def install(
        self,
        label: str,
        args: list[str],
        *,
        python: Path | None = None,
        env: dict[str, str] | None = None,
        report: bool = True,
        dry_run: bool = True,
    ) -> PipResult:
        slug = re.sub(r"[^\w.-]+", "-", label).strip("-")
        log, report_path = self.logs / f"{slug}.log", self.logs / f"{slug}.json"
        report_path.unlink(missing_ok=True)
        argv = [*self.command, *(["--python", str(python)] if python else []), "install", "--isolated"]
        argv += ["--index-url", self.index_url, "--disable-pip-version-check", "--no-input", *self.options]
        if dry_run:
            # An empty --target: pip resolves as on a fresh node, whatever this machine has installed.
            argv += ["--dry-run", "--ignore-installed", "--target", str(self.logs / "target")]
        if report:
            argv += ["--report", str(report_path)]
        argv += args
        rc = self._run(label, argv, log, env)
        data = json.loads(report_path.read_text(encoding="utf-8")) if rc == 0 and report_path.exists() else {}
        return PipResult(rc, log, data)

    def _run(self, label: str, argv: list[str], log: Path, env: dict[str, str] | None) -> int:
        start = next_beat = time.monotonic()
        with log.open("w", encoding="utf-8") as out:
            out.write(f"$ {shlex.join(argv)}\n")
            out.flush()
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env={**os.environ, **NO_CONFIG, **(env or {})},
            )
            while True:
                try:
                    return proc.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    now = time.monotonic()
                    if now - start > self.timeout:
                        proc.kill()
                        proc.wait()
                        out.write(f"\nERROR: the check stopped pip after {self.timeout:.0f} s\n")
                        return 124
                    if now >= next_beat + HEARTBEAT:
                        next_beat = now
                        print(f"[gpu-install]   {label}: {now - start:.0f} s, {last_activity(log)}", flush=True)


def last_activity(log: Path) -> str:
    """pip's latest `Collecting`/`Downloading`/`Preparing` line, the one that says what it is doing."""
    text = log.read_text(encoding="utf-8", errors="replace")
    lines = [s.strip() for s in text.replace("\r", "\n").splitlines()]
    busy = [s for s in lines if s.startswith(("Collecting", "Downloading", "Preparing", "Building", "Installing"))]
    return (busy or lines or [""])[-1][:110]


def bootstrap(folder: Path, index_url: str) -> list[str]:
    """The command of pip PIP_VERSION, installed into `folder` by this Python's pip on first use, then reused."""
    if not (folder / f"pip-{PIP_VERSION}.dist-info").is_dir():
        shutil.rmtree(folder, ignore_errors=True)
        argv = [sys.executable, "-m", "pip", "install", "--isolated", "--disable-pip-version-check", "--no-input"]
        argv += ["--index-url", index_url, "--target", str(folder), f"pip=={PIP_VERSION}"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env={**os.environ, **NO_CONFIG})
        if done.returncode:
            raise RuntimeError(f"could not install pip {PIP_VERSION} into {folder}: {done.stdout[-600:]}{done.stderr}")
    # pip runs from its folder (`python DIR/pip`): its parent goes first on sys.path, and holds pip alone.
    return [sys.executable, str(folder / "pip")]
