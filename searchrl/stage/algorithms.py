"""Training algorithms by name: OpenRLHF 0.11.2 flag sets a stage config picks with `algorithm:`. The set is
merged under the stage's own `openrlhf:` flags, which win, so a stage states only what is not the algorithm's.
"""

from __future__ import annotations

FlagValue = bool | int | float | str | list[str] | list[int] | list[float] | None

ALGORITHMS: dict[str, dict[str, FlagValue]] = {
    # Router-R1's train.sh on verl: PPO with GAE (gamma = lambda = 1, verl's defaults) and a critic initialised
    # from the policy (OpenRLHF's default for gae), one sample per prompt, actor lr 1e-6, critic lr 1e-5, no
    # warm-up and constant rates, the k1 KL estimate in the reward at 0.001, value clip 0.5, entropy 0.001.
    "ppo": {
        "algo.advantage.estimator": "gae",
        "algo.advantage.gamma": 1.0,
        "algo.advantage.lambd": 1.0,
        "rollout.n_samples_per_prompt": 1,
        "actor.adam.lr": 1.0e-6,
        "actor.lr_warmup_ratio": 0.0,
        "actor.lr_scheduler": "constant",
        "actor.entropy_coef": 0.001,
        "algo.kl.init_coef": 0.001,
        "critic.adam.lr": 1.0e-5,
        "critic.lr_warmup_ratio": 0.0,
        "critic.lr_scheduler": "constant",
        "critic.value_clip": 0.5,
    },
    # The R1-Searcher recipe of this project's stages: REINFORCE++ with a group baseline over 16 samples per
    # prompt, lr 2e-6, no KL term; no critic.
    "reinforce++": {
        "algo.advantage.estimator": "reinforce_baseline",
        "rollout.n_samples_per_prompt": 16,
        "actor.adam.lr": 2.0e-6,
        "actor.lr_warmup_ratio": 0.0,
        "algo.kl.init_coef": 0.0,
    },
    # GRPO as Search-R1's GRPO script runs it on verl: group-normalised advantages (OpenRLHF's group_norm: the
    # group's mean subtracted, divided by its std) over 5 samples per prompt, lr 1e-6 with a warm-up over 28.5 %
    # of the steps and constant after it (verl's warmup_style constant), the entropy bonus at verl's 0.001, and
    # the KL to the reference as a loss (k3, verl's low_var_kl) at 0.001, not in the reward.
    "grpo": {
        "algo.advantage.estimator": "group_norm",
        "rollout.n_samples_per_prompt": 5,
        "actor.adam.lr": 1.0e-6,
        "actor.lr_warmup_ratio": 0.285,
        "actor.lr_scheduler": "constant_with_warmup",
        "actor.entropy_coef": 0.001,
        "algo.kl.use_loss": True,
        "algo.kl.estimator": "k3",
        "algo.kl.init_coef": 0.001,
    },
}
# Search-R1's train_ppo.sh on verl: the PPO above (its GAE, critic, KL in the reward and value clip are verl's
# defaults too) with its warm-ups, 28.5 % of the steps for the actor and 1.5 % for the critic, each constant after
# (verl's warmup_style constant). `algorithm=search-r1-ppo` on the search_r1 stage (tests/test_search_r1_oracle.py).
ALGORITHMS["search-r1-ppo"] = {
    **ALGORITHMS["ppo"],
    "actor.lr_warmup_ratio": 0.285,
    "actor.lr_scheduler": "constant_with_warmup",
    "critic.lr_warmup_ratio": 0.015,
    "critic.lr_scheduler": "constant_with_warmup",
}
