"""Security properties that hold by construction: loopback by default, no pickle, secrets from the environment."""

import re

from tests.conftest import ROOT

SOURCES = [
    p
    for d in (
        "searchrl",
        "search_backend",
        "reward_server",
        "eval",
        "stage1_format",
        "stage2_answer",
        "stage_router_r1",
        "launch",
        "benchmarks",
    )
    for p in (ROOT / d).rglob("*.py")
]


def test_no_pickle_anywhere():
    # torch.load only with weights_only=True (its safe loader, no pickle), on the line of the call.
    pattern = re.compile(
        r"\bimport pickle\b|\bpickle\.|allow_pickle\s*=\s*True|torch\.load\((?![^\n]*weights_only=True)"
    )
    offenders = [str(p.relative_to(ROOT)) for p in SOURCES if pattern.search(p.read_text(encoding="utf-8"))]
    assert SOURCES and offenders == []
    assert pattern.search("torch.load(f)") and pattern.search("torch.load(f, weights_only=False)")
    assert not pattern.search('torch.load(f, map_location="cpu", weights_only=True)')


def test_servers_bind_loopback_by_default():
    from reward_server.__main__ import build_parser
    from search_backend.serve.app import parser

    assert build_parser().parse_args(["--preset", "stage2-answer"]).host == "127.0.0.1"
    assert parser().parse_args(["--index", "x"]).host == "127.0.0.1"
    from searchrl.routing.loopback_pool import build_parser as pool_parser

    assert pool_parser().parse_args(["--qa", "x"]).host == "127.0.0.1"


def test_api_keys_come_only_from_the_environment():
    from searchrl.search.web import WebSearchConfig

    fields = set(WebSearchConfig.model_fields)
    assert not any(name in fields for name in ("api_key", "key", "token", "secret"))
    assert {"api_key_env", "summarizer_api_key_env"} <= fields
