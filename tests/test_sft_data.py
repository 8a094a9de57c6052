"""SFT trajectories in each protocol's own tags: its documents blocks become tool turns (kept out of the loss), the
policy's text stays assistant turns, and the answer's turn ends with EOS."""

from __future__ import annotations

import json

import pytest

from searchrl.protocols import get_protocol
from searchrl.qa_data.sft_data import main, trajectory_messages
from searchrl.search.base import Passage

R1 = (
    " I will search. <|begin_of_query|> dune author <|end_of_query|> It is Frank Herbert. </think>\n"
    "<answer> Frank Herbert </answer>"
)


def written(name: str) -> str:
    """R1's episode as a policy of the protocol writes it, with the documents block its environment appends."""
    protocol = get_protocol(name)
    search, rest = protocol.from_r1_searcher(R1).split(protocol.SEARCH_CLOSE, 1)
    search += protocol.SEARCH_CLOSE
    found = protocol.passage_entry(Passage("1", "Dune", "Dune is a novel by Frank Herbert.", 1.0))
    return search + protocol.documents_block([found], after=search) + rest


@pytest.mark.parametrize("name", ["search-r1", "router-r1", "r1-searcher"])
def test_a_protocols_documents_are_tool_turns_in_its_own_tags(name):
    protocol = get_protocol(name)
    solution = written(name)
    messages = trajectory_messages("Question: who wrote Dune?", solution, "</s>", protocol)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"], messages
    assert messages[2]["content"].startswith(protocol.DOCUMENTS_OPEN) and "Frank Herbert" in messages[2]["content"]
    assert protocol.DOCUMENTS_OPEN not in messages[1]["content"] + messages[3]["content"]
    assert messages[3]["content"].endswith("</s>")
    assert "".join(m["content"] for m in messages[1:]) == solution.rstrip() + "</s>"


def test_search_r1_trajectories_read_with_r1_searchers_tags_have_no_tool_turn():
    # The protocol matters: Search-R1's <information> blocks are not R1-Searcher's documents blocks.
    solution = written("search-r1")
    assert [m["role"] for m in trajectory_messages("Q", solution, "</s>")] == ["user", "assistant"]


def test_the_command_writes_a_protocols_trajectories(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    solution = written("search-r1")
    src.write_text(json.dumps({"prompt": "Question: who wrote Dune?", "solution": solution, "answer": "x"}) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["--input", str(src), "--out", str(out), "--eos", "</s>", "--protocol", "search-r1"]) == 0
    row = json.loads(out.read_text())
    assert [m["role"] for m in row["messages"]] == ["user", "assistant", "tool", "assistant"]
    with pytest.raises(SystemExit):
        main(["--input", str(src), "--out", str(out), "--protocol", "nope"])
    assert "invalid choice: 'nope'" in capsys.readouterr().err
