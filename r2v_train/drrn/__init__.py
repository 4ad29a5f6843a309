"""DRRN (He et al., 2016), the text-game field's standard learner, on any r2v env id with admissible actions.

``config`` (the dataclass of ``r2v drrn``; light), ``replay`` (transitions from runner records, the replay buffer),
``trainer`` (collection through the runner, Q-learning updates, checkpoints, curve) and ``matrix`` (train under one
perturbation setting, test under each: ``r2v drrn-matrix``). The network and its policy are
:mod:`r2v_agents.drrn`, so ``r2v eval --agent drrn:RUN_DIR`` loads a trained run without training code. Importing
this package imports no torch.
"""
