"""Where the repository's own files are: the one place that knows the checkout's layout.

Code, configs, bundled examples and run folders are found from here, never from a module's own `__file__`,
so a module can move between packages without its paths changing.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
EXAMPLES = ROOT / "examples"
RUNS = ROOT / "runs"
