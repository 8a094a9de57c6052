import pytest

from searchrl.config import ConfigError, apply_override, load
from searchrl.reward.spec import load_reward_spec
from searchrl.stage.config import ModelConfig, StageConfig, load_stage
from searchrl.stage.openrlhf_flags import parser_flags, render_flags, unknown_flags

STAGE1 = "configs/stages/stage1_format.yaml"
STAGE2 = "configs/stages/stage2_answer.yaml"


def test_stage_configs_carry_r1searcher_defaults():
    for path in (STAGE1, STAGE2):
        stage, model = load_stage(path)
        flags = stage.openrlhf
        assert flags["algo.advantage.estimator"] == "reinforce_baseline"
        assert flags["rollout.n_samples_per_prompt"] == 16
        assert flags["rollout.batch_size"] == 64
        assert flags["train.batch_size"] == 256
        assert flags["actor.adam.lr"] == 2e-6
        assert flags["algo.kl.init_coef"] == 0.0
        assert flags["rollout.temperature"] == 1.0
        assert (stage.episode.top_k, stage.episode.max_searches, stage.episode.max_segment_tokens) == (3, 8, 512)
        assert model.kind == "base"
    assert load_stage(STAGE1)[0].reward.search_weight == 0.5
    assert load_stage(STAGE2)[0].reward.violation_penalty == 2.0


def test_every_openrlhf_key_is_a_parser_flag():
    assert len(parser_flags()) > 100
    for path in (STAGE1, STAGE2):
        stage, _ = load_stage(path)
        assert unknown_flags(stage.openrlhf) == []
        args = render_flags(stage.openrlhf)
        assert args[:2] == ["--algo.advantage.estimator", "reinforce_baseline"]
        assert "--actor.gradient_checkpointing_enable" in args


def test_unknown_flag_is_named():
    with pytest.raises(ValueError, match="rollout.n_samples"):
        render_flags({"rollout.n_samples": 4})


def test_swapping_the_model_is_one_path():
    stage, model = load_stage(STAGE1, ["model=configs/models/llama3.1-8b-instruct.yaml"])
    assert model.kind == "chat" and model.name == "llama3.1-8b-instruct"
    assert stage.reward.search_weight == 0.5


def test_overrides_reach_nested_and_flag_keys():
    stage, _ = load_stage(
        STAGE2,
        [
            "reward.answer_metric=f1",
            "openrlhf.rollout.n_samples_per_prompt=8",
            "episode.top_k=5",
            "openrlhf.vllm.num_engines=4",
        ],
    )
    assert stage.reward.answer_metric == "f1"
    assert stage.openrlhf["rollout.n_samples_per_prompt"] == 8
    assert stage.openrlhf["vllm.num_engines"] == 4
    assert stage.episode.top_k == 5


def test_errors_name_file_key_and_expectation(tmp_path):
    with pytest.raises(
        ConfigError, match=r"stage2_answer.yaml: reward.answer_metric: Input should be 'em', 'f1' or 'cem'"
    ):
        load_stage(STAGE2, ["reward.answer_metric=bleu"])
    with pytest.raises(ConfigError, match=r"episode.top_k: Input should be less than or equal to 50"):
        load_stage(STAGE2, ["episode.top_k=500"])
    with pytest.raises(ConfigError, match=r"reward.surprise: Extra inputs are not permitted"):
        load_stage(STAGE2, ["reward.surprise=1"])
    with pytest.raises(ConfigError, match="expected key=value"):
        load_stage(STAGE2, ["reward.answer_metric"])
    with pytest.raises(ConfigError, match="model: no such file"):
        load_stage(STAGE2, ["model=configs/models/nope.yaml"])
    bad = tmp_path / "m.yaml"
    bad.write_text("name: x\nkind: base\nmodel_path: p\ntemplate: no placeholder\n")
    with pytest.raises(ConfigError, match=r"m.yaml: \(top level\): Value error, a base model needs `template`"):
        load(ModelConfig, bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load(StageConfig, bad)
    with pytest.raises(ConfigError, match="no such config file"):
        load(StageConfig, tmp_path / "missing.yaml")


def test_apply_override_into_value_is_an_error():
    with pytest.raises(ConfigError, match="is a value"):
        apply_override({"a": 1}, "a.b", 2)


def test_reward_spec_from_preset_or_config(tmp_path):
    assert load_reward_spec(preset="r1searcher-qwen-stage2").answer_metric == "f1"
    with pytest.raises(ConfigError, match="cem .cover-EM. pays a list of candidates.*ACC_R.*allow_cover_em"):
        load_reward_spec(preset="r1searcher-qwen-stage2", overrides=["answer_metric=cem"])
    allowed = load_reward_spec(preset="r1searcher-qwen-stage2", overrides=["answer_metric=cem", "allow_cover_em=true"])
    assert allowed.answer_metric == "cem"
    assert load_reward_spec(preset="r1searcher-llama-stage1").answer_metric == "cem"  # R1-Searcher's, inherited
    assert load_reward_spec(config=STAGE2, overrides=["reward.violation_penalty=1"]).violation_penalty == 1.0
    with pytest.raises(ConfigError, match="unknown preset"):
        load_reward_spec(preset="nope")
    with pytest.raises(ConfigError, match="exactly one"):
        load_reward_spec()
    with pytest.raises(ConfigError, match="reward.format_rules: Value error, unknown rule"):
        load_reward_spec(preset="stage2-answer", overrides=["format_rules=[typo]"])
    # The server reads a stage file's section through the stage config's own loader: same errors, same names.
    with pytest.raises(ConfigError, match=r"stage2_answer.yaml: reward.answer_metric: Input should be 'em'"):
        load_reward_spec(config=STAGE2, overrides=["answer_metric=zz"])
    with pytest.raises(ConfigError, match=r"stage2_answer.yaml: reward.answer_metric: Input should be 'em'"):
        load_stage(STAGE2, ["reward.answer_metric=zz"])
    no_reward = tmp_path / "no_reward.yaml"
    no_reward.write_text("model: m\n")
    with pytest.raises(ConfigError, match="no_reward.yaml: reward: Field required"):
        load_reward_spec(config=no_reward)


def test_backend_names_come_from_one_list():
    """The `search:` schema, a stage's search, the retrieval server and the opener all read BACKEND_NAMES."""
    from search_backend.serve.app import ServerConfig
    from searchrl.search.backends import BACKENDS
    from searchrl.search.settings import BACKEND_NAMES, INDEX_BACKENDS, SearchConfig
    from searchrl.stage.search import StageSearchConfig

    assert tuple(BACKENDS) == BACKEND_NAMES and set(INDEX_BACKENDS) < set(BACKEND_NAMES)
    for name in BACKEND_NAMES:
        assert SearchConfig(backend=name).backend == name and StageSearchConfig(backend=name).backend == name
    assert StageSearchConfig(backend="router").backend == "router"
    for name in INDEX_BACKENDS:
        assert ServerConfig(index_dir=".", backend=name).backend == name
    with pytest.raises(ValueError, match="backend"):
        SearchConfig(backend="router")
    with pytest.raises(ValueError, match="backend"):
        ServerConfig(index_dir=".", backend="http")
