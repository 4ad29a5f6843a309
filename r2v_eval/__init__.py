"""r2v_eval: evaluate any agent on any registered benchmark under a grid of seeded perturbations.

``r2v eval`` (or ``python -m r2v_eval``) runs an agent spec (:mod:`r2v_eval.agents`) over env ids x
perturbation settings x seeds x tasks through the shared runner (:mod:`r2v_eval.grid`), then writes a
robustness report (:mod:`r2v_eval.robustness`, :mod:`r2v_eval.robustness_report`). Importing this package is
light: the agents' heavy dependencies (openai, torch, transformers) load when an agent is built.
"""
