"""`python -m stage2_answer.prepare_data --input FILE_OR_HF_NAME --out FILE`: the stage2_answer prompt dataset;
`search_r1_main`: the same in Search-R1's protocol and prompt (`searchrl data prepare search_r1`)."""

import sys

from searchrl.paths import CONFIGS
from searchrl.qa_data import prompt_data

SEARCH_R1_CONFIG = str(CONFIGS / "stages/search_r1.yaml")


def main(argv: list[str] | None = None) -> int:
    return prompt_data.main("stage2_answer", argv)


def search_r1_main(argv: list[str] | None = None) -> int:
    """Search-R1's published data (its verl parquet rows, e.g. hf:PeterJinGo/nq_hotpotqa_train) rendered with its
    instruction, for `searchrl stage submit search_r1`."""
    return prompt_data.main("stage2_answer", argv, command="search_r1", config=SEARCH_R1_CONFIG)


if __name__ == "__main__":
    sys.exit(main())
