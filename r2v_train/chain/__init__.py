"""The R2V training chain (Algorithm 1, Table 10): every stage in order over one run directory, resumable.

Modules:

* :mod:`~r2v_train.chain.stages`: the stages in order, keys, skip-if-done, manifests;
* :mod:`~r2v_train.chain.launch`: BC and DPO alone, for accelerate launch;
* :mod:`~r2v_train.chain.collect`: split, teacher, replay, router data through the runner;
* :mod:`~r2v_train.chain.preferences`: BC candidates, verifier scores, preference pairs;
* :mod:`~r2v_train.chain.augment`: goal-object renaming rows for BC;
* :mod:`~r2v_train.chain.bc`: behavioural cloning (Eq. 3), TRL's SFTTrainer;
* :mod:`~r2v_train.chain.dpo`: the DPO stage (Eq. 4-6);
* :mod:`~r2v_train.chain.dpo_consistency`: DPO + the JSD consistency term on TRL's DPOTrainer;
* :mod:`~r2v_train.chain.saving`: checkpoints to resume from and the finished model.
"""

__all__ = [
    # the chain
    "stages", "launch",
    # data stages
    "collect", "preferences", "augment",
    # policy stages
    "bc", "dpo", "dpo_consistency", "saving",
]
