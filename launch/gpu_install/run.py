"""One dry run of the install's steps, in order, with what each step leaves on the node carried to the next.

A later step resolves with what earlier steps pinned or built held fixed (a constraints file): a step that would
move torch under flash-attn's build is a conflict, as it would be on the node. Packages built from source enter
the later steps as placeholder wheels holding their real metadata, since `--platform` resolution takes wheels only:
the `--no-build-isolation` builds of a step (`source_builds`), and any pure-Python sdist pip would build in
isolation on the node (`isolated_sdist`); one that compiles native code there is a finding, not a placeholder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from launch.gpu_install import sources
from launch.gpu_install.pip import Pip, PipResult, Target
from launch.gpu_install.steps import Step, parse_requirement

# At most this many sdists found one by one in a step (each costs a resolution): more means something else is wrong.
MAX_SDISTS = 8
NO_MATCH = re.compile(r"No matching distribution found for (.+?)(?: \(from .*\))?$", re.M)


class SetupError(RuntimeError):
    """The check cannot run here (not a finding about the install): exit 2."""


@dataclass
class Failure:
    step: Step
    what: str
    reason: str
    fix: str
    log: Path | None = None


def say(text: str) -> None:
    print(f"[gpu-install] {text}", flush=True)


@dataclass
class Run:
    pip: Pip
    target: Target
    work: Path
    script: Path
    installed: dict[str, str] = field(default_factory=dict)  # what the steps so far leave on the node
    items: dict[str, dict] = field(default_factory=dict)  # their report entries (the files pip chose)
    fixed: dict[str, str] = field(default_factory=dict)  # pinned or built by a step: later steps must keep them
    built: list[str] = field(default_factory=list)  # --no-build-isolation builds
    isolated: list[str] = field(default_factory=list)  # pure-Python sdists pip builds in isolation

    @property
    def placeholders(self) -> Path:
        return self.work / "placeholders"

    def where(self, step: Step) -> str:
        return f"{self.script.name}:{step.line}"

    def platform_words(self) -> str:
        glibc = ".".join(map(str, self.target.glibc))
        return f"CPython {self.target.python_version} on manylinux x86_64 (glibc <= {glibc})"

    def binary_args(self) -> list[str]:
        return [*self.target.platform_args(), "--only-binary=:all:"]

    def held_args(self, n: int) -> list[str]:
        """What earlier steps pinned or built, as constraints; the placeholder wheels, as a find-links."""
        constraints = self.work / f"constraints-{n}.txt"
        constraints.write_text("".join(f"{k}=={v}\n" for k, v in sorted(self.fixed.items())), encoding="utf-8")
        self.placeholders.mkdir(parents=True, exist_ok=True)
        return ["--find-links", str(self.placeholders), "--constraint", str(constraints)]

    def step(self, n: int, step: Step) -> Failure | None:
        held = self.held_args(n)
        if step.no_build_isolation and (failure := self.source_builds(n, step)):
            return failure
        tried: set[str] = set()
        while not (result := self.pip.install(f"{n}-{step.name}", [*self.binary_args(), *held, *step.args])).ok:
            text = unresolved(result)
            name = requirement_name(text) if text else None
            if name is None or name in tried or len(tried) >= MAX_SDISTS:
                return self.unresolvable(step, result)
            tried.add(name)
            if failure := self.isolated_sdist(n, step, text or "", result):
                return failure
        if step.no_deps and (unmet := self.unmet(result)):
            return Failure(
                step,
                "installs with --no-deps what earlier steps do not satisfy",
                "\n".join(unmet),
                "install those requirements in an earlier step (or drop --no-deps)",
                result.log,
            )
        versions = result.versions()
        self.installed.update(versions)
        self.items.update(result.installs())
        for name, pin in step.pins().items():
            self.fixed[name] = versions.get(name, pin)
        return None

    def unresolvable(self, step: Step, result: PipResult) -> Failure:
        held = ", ".join(f"{k}=={v}" for k, v in sorted(self.fixed.items())) or "nothing"
        return Failure(
            step,
            "pip cannot resolve it for the GPU platform",
            result.reason(),
            f"a requirement here conflicts with another or with what earlier steps hold fixed ({held}), or has no "
            f"wheel for {self.platform_words()} nor a pure-Python sdist: change the step in {self.where(step)} or "
            "the pin in pyproject.toml",
            result.log,
        )

    def unmet(self, result: PipResult) -> list[str]:
        """Requirements of a --no-deps install that the earlier steps leave unsatisfied on the node."""
        found = []
        for name, item in result.installs().items():
            for text in item["metadata"].get("requires_dist") or []:
                req = Requirement(text)
                if req.marker and not req.marker.evaluate(self.target.markers()):
                    continue
                have = self.installed.get(canonicalize_name(req.name))
                if have is None or not req.specifier.contains(have, prereleases=True):
                    found.append(f"{name} requires {text}; the earlier steps install {have or 'no ' + req.name}")
        return found

    def isolated_sdist(self, n: int, step: Step, text: str, failed: PipResult) -> Failure | None:
        """A requirement with no wheel for the node: pip there builds its sdist in isolation. Pure Python builds
        anywhere, so its metadata (built here) becomes a placeholder; native code is reported."""
        name = requirement_name(text) or text
        probe = self.pip.install(
            f"{n}-{step.name}-sdist-{name}", [*self.target.platform_args(), "--no-deps", f"--no-binary={name}", text]
        )
        item = probe.installs().get(name) if probe.ok else None
        if item is None or item["download_info"]["url"].endswith(".whl"):
            return self.unresolvable(step, failed)
        version = item["metadata"]["version"]
        native = sources.native_code(sources.fetch_sdist(item["download_info"], self.work / "sdists"))
        if native:
            return Failure(
                step,
                f"{name} {version} has no wheel for {self.platform_words()}: the node would compile it",
                f"its sdist holds native code ({', '.join(native)}); whether the node's compilers build it is not "
                "checked here",
                f"pin a version of {name} with a manylinux wheel, or pass --glibc X.Y if the node's glibc is newer",
                probe.log,
            )
        sources.write_placeholder(self.placeholders, item["metadata"])
        self.isolated.append(f"{name} {version}")
        say(f"  {name} {version}: no wheel; a pure-Python sdist pip builds in isolation (resolving again)")
        return None

    def source_builds(self, n: int, step: Step) -> Failure | None:
        """Each pinned requirement without a wheel for the node: its metadata built for real, then its build needs."""
        to_build = []
        for text in step.requirements:
            req = parse_requirement(text)
            if req is None or not step.pins().get(canonicalize_name(req.name)):
                return Failure(
                    step,
                    f"{text} builds from source unpinned",
                    "the dry run checks a source build only of an exact version",
                    f"pin it with == in {self.where(step)}",
                )
            probe = self.pip.install(f"{n}-{step.name}-wheel-{req.name}", [*self.binary_args(), "--no-deps", text])
            if probe.ok:
                say(f"  {text}: a wheel for the GPU platform exists; nothing to build")
            else:
                to_build.append(text)
        if not to_build:
            return None
        say(f"  {', '.join(to_build)}: no wheel for the GPU platform; pip builds from source")
        env, failure = self.build_env(step)
        if failure or env is None:
            return failure
        meta = self.pip.install(
            f"{n}-{step.name}-metadata",
            ["--no-deps", "--no-build-isolation", "--no-binary=:all:", *to_build],
            python=env.python,
            env=env.variables(),
        )
        if not meta.ok:
            return Failure(
                step,
                "a source build's setup fails with the earlier steps' packages",
                meta.reason(),
                f"pin a version that builds with them, or change the earlier steps (build venv: {env.python.parent})",
                meta.log,
            )
        for name, item in meta.installs().items():
            version = item["metadata"]["version"]
            needs = sources.build_needs(sources.fetch_sdist(item["download_info"], self.work / "sdists"))
            if missing := sorted(needs - set(self.installed)):
                return Failure(
                    step,
                    f"{name} {version} builds without isolation, but no earlier step installs {', '.join(missing)}",
                    f"its setup.py imports or its build requires: {', '.join(sorted(needs))}",
                    f"add {' '.join(missing)} to an earlier step in {self.script.name}",
                )
            sources.write_placeholder(self.placeholders, item["metadata"])
            self.built.append(f"{name} {version}")
            self.fixed[name] = version
        return None

    def build_env(self, step: Step) -> tuple[sources.BuildEnv | None, Failure | None]:
        cuda = sources.cuda_version(self.items)
        if cuda is None:
            return None, Failure(
                step,
                "the earlier steps install no CUDA runtime",
                f"torch {self.installed.get('torch', '(none)')} resolves without nvidia-cuda-runtime (a CPU build)",
                "install PyPI's CUDA build of torch in an earlier step",
            )
        torch = None
        if "torch" in self.installed:
            torch, why = sources.standin_torch(self.installed["torch"])
            if torch is None:
                version = self.installed["torch"]
                raise SetupError(
                    f"step {step.name} builds against torch {version}, whose CPU build stands in for it here, but "
                    f"{why}: pip install 'torch=={version}' --index-url https://download.pytorch.org/whl/cpu "
                    "(SEARCHRL_TORCH for launch/setup_env.sh)"
                )
        return sources.make_build_env(self.work / "build-env", self.install_into, self.installed, cuda, torch), None

    def install_into(self, label: str, args: list[str], python: Path) -> None:
        result = self.pip.install(label, args, python=python, report=False, dry_run=False)
        if not result.ok:
            raise SetupError(f"could not make the build venv: {result.reason()} (log: {result.log})")


def unresolved(result: PipResult) -> str | None:
    """The requirement pip found no file for ("No matching distribution found for X"), if that is why it failed."""
    found = NO_MATCH.findall(result.log.read_text(encoding="utf-8", errors="replace"))
    return found[-1].strip() if found else None


def requirement_name(text: str) -> str | None:
    try:
        return canonicalize_name(Requirement(text).name)
    except InvalidRequirement:
        return None
