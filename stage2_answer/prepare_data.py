"""`python -m stage2_answer.prepare_data --input FILE_OR_HF_NAME --out FILE`: the stage2_answer prompt dataset."""

import sys

from searchrl.qa_data import prompt_data


def main(argv: list[str] | None = None) -> int:
    return prompt_data.main("stage2_answer", argv)


if __name__ == "__main__":
    sys.exit(main())
