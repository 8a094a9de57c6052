"""`python -m stage1_format.prepare_data --input FILE_OR_HF_NAME --out FILE`: the stage1_format prompt dataset."""

import sys

from searchrl.qa_data import prompt_data


def main(argv: list[str] | None = None) -> int:
    return prompt_data.main("stage1_format", argv)


if __name__ == "__main__":
    sys.exit(main())
