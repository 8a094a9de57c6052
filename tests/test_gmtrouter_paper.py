"""GMTRouter as the paper's code has it (ulab-uiuc/GMTRouter, src/): one test per mechanism. HGT layers over
user/session/query/LLM/response nodes with the original's edges, temporal session -> previous-session
edges, LLMs known by their text, the cross-attention scorer, the softplus pairwise loss, the original's
metrics, the epoch picked by validation AUC, and its processed dataset format."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.nn import HGTConv

from searchrl.routing.gmtrouter.__main__ import main
from searchrl.routing.gmtrouter.checkpoint import load_checkpoint
from searchrl.routing.gmtrouter.data import Interaction, LogError, UserLog, sessions_of
from searchrl.routing.gmtrouter.graph import EDGE_TYPES, LLMTable, TextTable, UserHistory, build_graph
from searchrl.routing.gmtrouter.metrics import pair_metrics, rated_pairs
from searchrl.routing.gmtrouter.model import CrossAttentionScorer, GMTRouterNet, NetConfig
from searchrl.routing.gmtrouter.original_format import read_original_logs, read_user_logs
from searchrl.routing.gmtrouter.policy import PersonalRouter
from searchrl.routing.gmtrouter.synthetic import synthesize
from searchrl.routing.gmtrouter.train import Pairs, TrainConfig, pairwise_loss, train_checkpoint, validate

FIXTURES = Path(__file__).parent / "fixtures" / "gmtrouter"
T0 = datetime(2025, 3, 1, tzinfo=UTC)


def hashed(texts: list[str]) -> np.ndarray:
    """A deterministic 16-d stand-in for the sentence encoder where the text's meaning does not matter."""
    seeds = [int(hashlib.sha256(t.encode()).hexdigest()[:8], 16) for t in texts]
    return np.stack([np.random.default_rng(s).normal(size=16) for s in seeds]).astype(np.float32)


def turn(query: str, model: str, rating: float, minute: int, session: str | None = None) -> Interaction:
    return Interaction(
        query=query, model_used=model, user_feedback=rating, timestamp=T0 + timedelta(minutes=minute), session=session
    )


def two_turn_user() -> UserLog:
    # Session 1: q1 then q2, each put to A and B; session 2 (a day later): q3 put to A only.
    inters = [
        turn("q1", "A", 0.9, 0),
        turn("q1", "B", 0.2, 1),
        turn("q2", "A", 0.8, 2),
        turn("q2", "B", 0.1, 3),
        turn("q3", "A", 0.5, 60 * 24),
    ]
    return UserLog(user_id="u", interactions=inters)


def test_the_graph_has_the_originals_nodes_and_edges_and_the_encoder_is_hgt():
    texts = TextTable(hashed, 16)
    llms = LLMTable(texts, ["A", "B"])
    user = two_turn_user()
    graph = build_graph([UserHistory("u", sessions_of(user))], texts, llms.rows, llms.features())
    assert set(graph.node_types) == {"user", "session", "query", "llm", "response"}
    assert set(graph.edge_types) == {
        ("session", "owned by", "user"),
        ("query", "included by", "session"),
        ("llm", "response to", "session"),
        ("response", "included by", "session"),
        ("session", "prev", "session"),
    }
    # As in the original, a session node is one model's turn: five interactions, five sessions and responses.
    assert graph["session"].num_nodes == graph["response"].num_nodes == 5
    assert graph["response"].x.squeeze(1).tolist() == pytest.approx([0.9, 0.2, 0.8, 0.1, 0.5])
    assert graph["llm", "response to", "session"].edge_index[0].tolist() == [0, 1, 0, 1, 0]
    assert graph["query"].num_nodes == 3 and torch.equal(graph["llm"].x, torch.from_numpy(hashed(["A", "B"])))

    net = GMTRouterNet(NetConfig(models=["A", "B"], query_dim=16, hidden=8, layers=3))
    assert net.encoder is not None
    convs = list(net.encoder.convs)
    assert len(convs) == 3 and all(isinstance(c, HGTConv) and c.heads == 4 for c in convs)
    assert set(convs[0].edge_types) == set(EDGE_TYPES)
    assert isinstance(net.scorer.cross_attn, torch.nn.MultiheadAttention)
    assert net.user_states([UserHistory("u", sessions_of(user)), UserHistory("", [])], texts, llms).shape == (2, 8)


def test_temporal_edges_link_a_models_turn_to_its_previous_turn_in_the_session():
    texts = TextTable(hashed, 16)
    llms = LLMTable(texts, ["A", "B"])
    hist = [UserHistory("u", sessions_of(two_turn_user()))]
    prev = ("session", "prev", "session")
    graph = build_graph(hist, texts, llms.rows, llms.features())
    # q2@A (node 2) -> q1@A (node 0), q2@B (3) -> q1@B (1); q3@A opens another session: no edge.
    assert graph[prev].edge_index.tolist() == [[2, 3], [0, 1]]
    assert build_graph(hist, texts, llms.rows, llms.features(), temporal=False)[prev].edge_index.shape == (2, 0)
    # The temporal edges reach the user's state: removing them changes it.
    net = GMTRouterNet(NetConfig(models=["A", "B"], query_dim=16, hidden=8, layers=3)).eval()
    with torch.no_grad():
        with_edges = net.states(graph)
        without = net.states(build_graph(hist, texts, llms.rows, llms.features(), temporal=False))
    assert not torch.allclose(with_edges, without)


def test_the_scorer_is_the_originals_cross_attention():
    torch.manual_seed(0)
    scorer = CrossAttentionScorer(user_dim=8, text_dim=12, hidden=16, heads=4, dropout=0.1).eval()
    users, queries, llms = torch.randn(3, 8), torch.randn(5, 12), torch.randn(4, 12)
    u_idx, q_idx, l_idx = torch.tensor([0, 1, 2, 2]), torch.tensor([4, 0, 3, 3]), torch.tensor([1, 2, 0, 3])
    # The original: the LLM's projection attends to the stacked (user, query) projections, then [attended, LLM].
    u, q, m = scorer.user_proj(users[u_idx]), scorer.query_proj(queries[q_idx]), scorer.llm_proj(llms[l_idx])
    context = torch.stack([u, q], dim=1)
    attended, _ = scorer.cross_attn(m.unsqueeze(1), context, context)
    expected = scorer.out(torch.cat([attended.squeeze(1), m], dim=1)).squeeze(1)
    assert torch.allclose(scorer(users, queries, llms, u_idx, q_idx, l_idx), expected, atol=1e-6)


def test_the_pairwise_loss_is_softplus_of_the_signed_score_difference():
    s_a, s_b = torch.tensor([2.0, 0.0, 1.0]), torch.tensor([0.0, 0.0, 3.0])
    a_won = torch.tensor([1, 0, 0])
    # softplus(-(2-0)), softplus(+(0-0)), softplus(+(1-3)): y = +1 where a won, -1 where b won.
    expected = (np.log1p(np.exp(-2.0)) + np.log(2.0) + np.log1p(np.exp(-2.0))) / 3
    assert pairwise_loss(s_a, s_b, a_won).item() == pytest.approx(expected, abs=1e-6)


def test_the_originals_metrics_accuracy_auc_and_per_user_auc():
    assert rated_pairs([0.9, 0.2, 0.9]) == [(0, 1, 1), (1, 2, 0)]  # ties skipped, order kept
    users = ["x", "x", "x", "y", "y", "y"]
    diffs = [2.0, -1.0, 0.5, -0.3, 0.0, 1.0]
    labels = [1, 0, 0, 1, 0, 1]
    m = pair_metrics(users, diffs, labels)
    # Right: x 2.0/1, x -1.0/0, y 1.0/1; wrong: x 0.5/0, y -0.3/1, and the score tie y 0.0/0.
    assert m["accuracy"] == pytest.approx(3 / 6)
    # x: positive 2.0 beats both negatives -> 1.0; y: positives -0.3, 1.0 vs negative 0.0 -> 1/2.
    assert m["per_user"]["x"]["auc"] == 1.0 and m["per_user"]["y"]["auc"] == 0.5
    assert m["per_user_auc"] == pytest.approx(0.75)
    # Overall: positives {2.0, -0.3, 1.0} vs negatives {-1.0, 0.5, 0.0}: 2.0 and 1.0 beat all three, -0.3
    # beats one -> 7/9.
    assert m["auc"] == pytest.approx(7 / 9)
    assert pair_metrics(["z"], [1.0], [1])["per_user"]["z"]["auc"] is None  # one class: undefined, not 0


@pytest.fixture(scope="module")
def selected(tmp_path_factory):
    """A small HGT trained with a validation every epoch, at a learning rate where the last epoch is not
    the best one."""
    out = tmp_path_factory.mktemp("gmt_select") / "ck"
    users = synthesize(24, seed=5)
    cfg = TrainConfig(hidden=16, epochs=14, eval_every=1, lr=2e-2, seed=3, prediction_count=10_000)
    config = train_checkpoint(users, out, cfg, encode=hashed, progress=False)
    return out, users, config


def test_the_checkpoint_holds_the_epoch_of_best_validation_auc(selected):
    out, users, config = selected
    chosen = config.selection["personalised"]
    curve = dict((int(e), v) for e, v in chosen["evaluated"])
    assert chosen["metric"] == "validation auc" and len(curve) == 14
    assert chosen["epoch"] == max(curve, key=curve.get) and chosen["value"] == pytest.approx(max(curve.values()))
    assert curve[14] < chosen["value"] - 0.01, "the last epoch should be worse here, or this test cannot fail"
    assert json.loads((out / "config.json").read_text())["selection"]["personalised"]["epoch"] == chosen["epoch"]

    # The saved weights score the validation pairs as the chosen epoch did.
    net = load_checkpoint(out)
    texts = TextTable(hashed, 16)
    llms = LLMTable(texts, config.models, config.llm_texts)
    train, valid = [], []
    for user in users:
        ss = sessions_of(user)
        n = max(1, int(0.1 * len(ss)))
        train.append(UserHistory(user.user_id, ss[:-n]))
        valid.append(ss[-n:])
    pairs = Pairs.empty()
    for row, sessions in enumerate(valid):
        pairs.extend(row, sessions, set(config.models))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as training validated: the same summation order, so the same near-ties
    try:
        metrics = validate(net, train, pairs, [train[r].user_id for r in pairs.user], texts, llms)
    finally:
        torch.set_num_threads(threads)
    assert metrics["auc"] == pytest.approx(chosen["value"], abs=1e-6)


def test_a_new_llm_is_scored_from_its_description_without_retraining(selected):
    out, users, config = selected
    router = PersonalRouter.load(out, encode=hashed)
    states = router.user_states([UserHistory(u.user_id, sessions_of(u)) for u in users[:4]])
    router.add_models({"fable": config.llm_texts["atlas"], "gale": "a different model altogether"})
    assert router.models[-2:] == ["fable", "gale"]
    scores = router.scores(states, range(4), ["How do I make risotto?", "Solve 3x + 7 = 22 for x", "q", "q"])
    assert scores.shape == (4, len(config.models) + 2)
    # The new node differs from atlas only by name: same text, same scores; another text, other scores.
    atlas = config.models.index("atlas")
    assert np.allclose(scores[:, -2], scores[:, atlas]) and not np.allclose(scores[:, -1], scores[:, atlas])


def test_the_original_processed_format_is_read_as_sessions_with_normalised_ratings():
    users = read_original_logs(FIXTURES / "training_set.jsonl")
    raw = [json.loads(line) for line in (FIXTURES / "training_set.jsonl").read_text().splitlines()]
    judges = list(dict.fromkeys(e["judge"] for e in raw))
    assert [u.user_id for u in users] == judges
    ratings = [t["rating"] for e in raw for t in e["conversation"]]
    low, high = min(ratings), max(ratings)
    first = users[0]
    sessions = sessions_of(first)
    groups = {(e["question_id"], e["turn"]) for e in raw if e["judge"] == first.user_id}
    assert len(sessions) == len(groups)
    # The first group: question 81, two turns, two models; ratings min-max normalised over the file.
    head = [e for e in raw if e["judge"] == first.user_id and e["question_id"] == 81]
    assert [(i.model_used, i.query) for i in sessions[0].interactions] == [
        (e["model"], e["conversation"][j]["query"]) for j in range(2) for e in head
    ]
    expected = [(e["conversation"][j]["rating"] - low) / (high - low) for j in range(2) for e in head]
    assert [i.user_feedback for i in sessions[0].interactions] == pytest.approx(expected, abs=1e-6)
    # Its second turn is linked to the first turn of the same model, as the original's S2S1 edges.
    texts = TextTable(hashed, 16)
    llms = LLMTable(texts, sorted({e["model"] for e in raw}))
    graph = build_graph([UserHistory(first.user_id, sessions[:1])], texts, llms.rows, llms.features())
    assert graph["session", "prev", "session"].edge_index.tolist() == [[2, 3], [0, 1]]
    assert read_user_logs(FIXTURES / "training_set.jsonl")[0] == first  # the format is detected


def test_bad_original_format_lines_name_the_line_and_the_fix(tmp_path):
    entry = json.loads((FIXTURES / "training_set.jsonl").read_text().splitlines()[0])
    lonely = tmp_path / "lonely.jsonl"
    lonely.write_text(json.dumps(entry) + "\n" + json.dumps(entry | {"question_id": 999}) + "\n")
    with pytest.raises(LogError, match="line 1: group .* has one entry; fix: put a question's answers"):
        read_original_logs(lonely)
    short = tmp_path / "short.jsonl"
    other = entry | {"model": "other", "conversation": entry["conversation"][:1]}
    short.write_text(json.dumps(entry) + "\n" + json.dumps(other) + "\n")
    with pytest.raises(LogError, match="line 1: field conversation: .*different lengths"):
        read_original_logs(short)
    missing = tmp_path / "missing.jsonl"
    missing.write_text(json.dumps({k: v for k, v in entry.items() if k != "judge"}) + "\n")
    with pytest.raises(LogError, match="line 1: field judge: Field required; fix: GMTRouter's processed format"):
        read_original_logs(missing)


def test_users_with_the_original_data_train_and_evaluate_with_the_commands(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    train_set, valid_set = FIXTURES / "training_set.jsonl", FIXTURES / "valid_set.jsonl"
    args = ["train", "--logs", str(train_set), "--valid-logs", str(valid_set), "--out", str(ckpt)]
    assert main([*args, "--epochs", "4", "--hidden", "8", "--eval-every", "2"]) == 0
    config = json.loads((ckpt / "config.json").read_text())
    assert config["kind"] == "hgt" and config["models"] == ["claude-v1", "gpt-4", "llama-13b", "vicuna-13b"]
    assert config["selection"]["personalised"]["pairs"] > 0
    assert "kept epoch" in capsys.readouterr().out
    # The original's test path: users' states from their training history, every test pair scored.
    assert main(["evaluate", "--checkpoint", str(ckpt), "--logs", str(valid_set), "--context-sessions", "0"]) == 0
    report = json.loads((ckpt / "evaluation.json").read_text())
    assert report["seen_users"] == 4 and report["overall"]["personalised"]["pairs"] > 20
    assert set(report["overall"]["personalised"]) >= {"accuracy", "auc", "per_user_auc"}
