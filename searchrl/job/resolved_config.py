"""`python -m searchrl.job.resolved_config STAGE [key=value ...] --out FILE`: the resolved stage config,
as JSON.

launch/start_servers.sh starts the reward server on this file, so the server scores with exactly the spec
the agent reads (the same stage file, the same overrides); the stage names come from searchrl/stage/config.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from searchrl.config import ConfigError
from searchrl.stage.config import STAGES, load_stage, stage_config_file


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m searchrl.job.resolved_config", description=__doc__.splitlines()[0])
    p.add_argument("stage", choices=sorted(STAGES), help="a stage name: stage1, stage2, search_r1, ...")
    p.add_argument("--out", type=Path, required=True, help="where the resolved config (JSON) goes")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="e.g. reward.answer_metric=f1")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_intermixed_args(argv)
    try:
        stage, _ = load_stage(stage_config_file(args.stage), args.overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(stage.model_dump_json(indent=1), encoding="utf-8")
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
