"""The steps that build from source (`--no-build-isolation`): what can be checked of them without a GPU.

pip builds such a package in the node's own environment, so its build needs (setup.py's imports, setup_requires,
pyproject's build requires) must already be installed by an earlier step: `build_needs` reads them from the sdist.
Its metadata is built here for real in a bare venv holding the earlier steps' packages, with this machine's torch
of the same version standing in for the CUDA build and a stand-in nvcc that reports torch's CUDA version; the
metadata becomes a placeholder wheel for the later steps' resolution. The CUDA compile itself is not run.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import shutil
import subprocess
import sys
import tarfile
import tomllib
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

# Left out of the build venv: CUDA runtime libraries (gigabytes) that a build script never imports.
GPU_RUNTIME = ("nvidia-", "cuda-", "triton", "tokenspeed-triton")
# Import names whose distribution is named otherwise.
IMPORT_DIST = {"pkg_resources": "setuptools", "_distutils_hack": "setuptools", "yaml": "pyyaml",
               "cpuinfo": "py-cpuinfo", "git": "gitpython"}  # fmt: skip
NATIVE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".pyx", ".rs")
NATIVE_FILES = {"Cargo.toml", "CMakeLists.txt", "meson.build"}
# The CPU torch of the stand-in has no CUDA: this makes torch.utils.cpp_extension find the stand-in toolkit, as a
# CUDA build of torch finds CUDA_HOME, so setup.py's CUDAExtension(...) is constructed as on the node.
SHIM = """import os
if os.environ.get("SEARCHRL_STANDIN_CUDA_HOME"):
    import torch.utils.cpp_extension as _ext
    _ext.CUDA_HOME = os.environ["SEARCHRL_STANDIN_CUDA_HOME"]
"""


@dataclass(frozen=True)
class BuildEnv:
    python: Path
    cuda_home: Path

    def variables(self) -> dict[str, str]:
        # PIP_NO_INDEX: a setup_requires missing from the venv fails the build instead of being fetched unseen.
        return {
            "CUDA_HOME": str(self.cuda_home),
            "SEARCHRL_STANDIN_CUDA_HOME": str(self.cuda_home),
            "PIP_NO_INDEX": "1",
        }


CUDA_RUNTIMES = ("cuda-toolkit", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12")


def cuda_version(items: dict[str, dict]) -> str | None:
    """torch's CUDA version, major.minor: the CUDA runtime torch's own metadata pins (`cuda-toolkit==13.0.3` for
    PyPI's torch 2.13.0), else the runtime wheel installed beside it; None for a CPU build."""
    torch = items.get("torch", {}).get("metadata", {})
    for text in torch.get("requires_dist") or []:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if canonicalize_name(req.name) in CUDA_RUNTIMES and exact:
            return ".".join(exact[0].split(".")[:2])
    for name in CUDA_RUNTIMES[1:]:
        if name in items:
            return ".".join(items[name]["metadata"]["version"].split(".")[:2])
    return None


def standin_torch(version: str) -> tuple[importlib.metadata.Distribution | None, str]:
    """This interpreter's torch when it is `version` (any local build, e.g. +cpu), else None and why not."""
    try:
        dist = importlib.metadata.distribution("torch")
    except importlib.metadata.PackageNotFoundError:
        return None, "no torch is installed here"
    if Version(dist.version).public != Version(version).public:
        return None, f"torch {dist.version} is installed here"
    return dist, ""


def make_build_env(
    folder: Path,
    pip_install: Callable[[str, list[str], Path], None],
    installed: dict[str, str],
    cuda: str,
    torch: importlib.metadata.Distribution | None,
) -> BuildEnv:
    """A venv with the earlier steps' packages (GPU runtimes left out), the stand-in torch linked in, a stand-in
    nvcc reporting `cuda`. `pip_install(label, args, python)` installs into it; raises RuntimeError on failure."""
    shutil.rmtree(folder, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=300)
    python = folder / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout.strip()
    )  # fmt: skip
    pins = sorted(f"{n}=={v}" for n, v in installed.items() if n != "torch" and not n.startswith(GPU_RUNTIME))
    if pins:
        pip_install("build-env", ["--no-deps", "--only-binary=:all:", "--no-compile", *pins], python)
    if torch is not None:
        root = Path(torch.locate_file(""))
        tops = (torch.read_text("top_level.txt") or "torch").split()
        info = next(root.glob(f"torch-{torch.version}.dist-info"), None)
        for entry in [*(root / t for t in tops), *([info] if info else [])]:
            if entry.exists():
                (site / entry.name).symlink_to(entry)
    (site / "sitecustomize.py").write_text(SHIM, encoding="utf-8")
    cuda_home = folder / "cuda"
    for sub in ("bin", "include", "lib64"):
        (cuda_home / sub).mkdir(parents=True, exist_ok=True)
    nvcc = cuda_home / "bin" / "nvcc"
    nvcc.write_text(
        f'#!/bin/sh\necho "nvcc: NVIDIA (R) Cuda compiler driver (the check\'s stand-in)"\n'
        f'echo "Cuda compilation tools, release {cuda}, V{cuda}.0"\n',
        encoding="utf-8",
    )
    nvcc.chmod(0o755)
    return BuildEnv(python, cuda_home)


def fetch_sdist(download_info: dict, folder: Path) -> Path:
    """The sdist pip resolved (its report's download_info), checked against the sha256 pip recorded."""
    url = download_info["url"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / url.rsplit("/", 1)[-1].split("#")[0]
    with urllib.request.urlopen(url, timeout=300) as answer:
        data = answer.read()
    want = download_info.get("archive_info", {}).get("hashes", {}).get("sha256")
    if want and hashlib.sha256(data).hexdigest() != want:
        raise RuntimeError(f"{url}: sha256 differs from the one pip recorded")
    path.write_bytes(data)
    return path


def _optional(node: ast.Try) -> bool:
    """A try whose handlers catch ImportError (or everything): what it imports is optional to the build."""
    if any(h.type is None for h in node.handlers):
        return True
    names = {n.id for h in node.handlers if h.type for n in ast.walk(h.type) if isinstance(n, ast.Name)}
    return bool(names & {"ImportError", "ModuleNotFoundError", "Exception"})


def script_imports(source: str) -> set[str]:
    """Top-level module names a build script imports, at module level or in functions, optional ones left out."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Try) and _optional(node):
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def setup_requires(source: str) -> set[str]:
    """The names in a literal `setup_requires=[...]` of a setup() call."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.keyword) and node.arg == "setup_requires" and isinstance(node.value, ast.List):
            names |= {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return names


def requirement_names(texts: set[str] | list[str]) -> set[str]:
    names = set()
    for text in texts:
        try:
            names.add(canonicalize_name(Requirement(text).name))
        except InvalidRequirement:
            continue
    return names


def build_needs(sdist: Path) -> set[str]:
    """Distributions a `--no-build-isolation` build of the sdist imports or requires (canonical names)."""
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        root = names[0].split("/")[0]
        local = {n.split("/")[1].removesuffix(".py") for n in names if n.count("/") >= 1 and n.startswith(root + "/")}

        def read(rel: str) -> str | None:
            try:
                member = tar.extractfile(f"{root}/{rel}")
            except KeyError:
                return None
            return member.read().decode("utf-8", errors="replace") if member else None

        setup, pyproject = read("setup.py"), read("pyproject.toml")
    needs: set[str] = set()
    if setup:
        imports = script_imports(setup) - set(sys.stdlib_module_names) - local - {"__future__"}
        needs |= {canonicalize_name(IMPORT_DIST.get(m, m)) for m in imports}
        needs |= requirement_names(setup_requires(setup))
    if pyproject:
        needs |= requirement_names(tomllib.loads(pyproject).get("build-system", {}).get("requires", []))
    return needs


def native_code(sdist: Path, limit: int = 3) -> list[str]:
    """Files of an sdist that a build compiles (C, C++, CUDA, Cython, Rust, CMake): none in a pure-Python one."""
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    found = [n for n in names if n.endswith(NATIVE_SUFFIXES) or n.rsplit("/", 1)[-1] in NATIVE_FILES]
    return [n.split("/", 1)[-1] for n in found[:limit]]


def write_placeholder(folder: Path, metadata: dict) -> Path:
    """A wheel holding only the metadata pip prepared (name, version, requirements), for the later steps."""
    name, version = metadata["name"], metadata["version"]
    dist = canonicalize_name(name).replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    if metadata.get("requires_python"):
        lines.append(f"Requires-Python: {metadata['requires_python']}")
    lines += [f"Requires-Dist: {r}" for r in metadata.get("requires_dist") or []]
    lines += [f"Provides-Extra: {e}" for e in metadata.get("provides_extra") or []]
    wheel = ["Wheel-Version: 1.0", "Generator: launch.gpu_install", "Root-Is-Purelib: true", "Tag: py3-none-any"]
    files = {f"{info}/METADATA": "\n".join(lines) + "\n", f"{info}/WHEEL": "\n".join(wheel) + "\n"}
    files[f"{info}/RECORD"] = "".join(f"{p},,\n" for p in [*files, f"{info}/RECORD"])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for member, text in files.items():
            whl.writestr(member, text)
    return path
