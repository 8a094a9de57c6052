"""The replay policy for evaluation on a CPU: it re-emits a model's recorded trajectories (R1-Searcher's
released files: `question`, `gen_text_store`; or trajectories in another protocol's tags) segment by segment,
while search runs live.

The queries are the recorded ones and the answers too, so the scores are the recording's; what runs for
real is everything else an evaluation does (prompts, environment, search backend, scoring, reports).
"""

from __future__ import annotations

from pathlib import Path

from eval.generation import Completion, GenParams
from searchrl.jsonl import RecordError, read_jsonl
from searchrl.protocols import DEFAULT_PROTOCOL, TagProtocol, get_protocol
from searchrl.rollout.engines import recorded_actions

DEFAULT = get_protocol(DEFAULT_PROTOCOL)


class ReplayTextEngine:
    def __init__(self, recordings: dict[str, str], protocol: TagProtocol = DEFAULT) -> None:
        """`recordings`: rendered prompt -> recorded trajectory (the text after the prompt), in `protocol`'s tags."""
        self.protocol = protocol
        self.actions = {prompt: recorded_actions(traj, protocol) for prompt, traj in recordings.items()}

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        render: object,
        trajectory_key: str = "gen_text_store",
        protocol: TagProtocol = DEFAULT,
    ) -> ReplayTextEngine:
        """Recordings from a JSONL file; `render(question)` gives the prompt the run will use."""
        recordings = {}
        for i, row in enumerate(read_jsonl(path), start=1):
            if "question" not in row or trajectory_key not in row:
                raise RecordError(f"{path}:{i}: a recording needs 'question' and {trajectory_key!r}")
            recordings[render(row["question"])] = row[trajectory_key]  # type: ignore[operator]
        return cls(recordings, protocol)

    async def generate_batch(self, prompts: list[str], params: GenParams) -> list[Completion]:
        out = []
        for observed in prompts:
            prompt = next((p for p in self.actions if observed.startswith(p)), None)
            if prompt is None:
                raise RecordError("--engine replay: a question has no recording (evaluate the recorded questions)")
            steps = self.actions[prompt]
            done = observed[len(prompt) :].count(self.protocol.DOCUMENTS_OPEN)
            out.append(Completion(steps[min(done, len(steps) - 1)], "stop"))
        return out

    async def aclose(self) -> None:
        pass
