"""r2v_eval: evaluate any agent on any registered benchmark under a grid of seeded perturbations.

``r2v eval`` (or ``python -m r2v_eval``) runs an agent spec (:mod:`r2v_eval.agents`) over env ids x
perturbation settings x seeds x tasks through the shared runner (:mod:`r2v_eval.grid`), then writes a
robustness report (:mod:`r2v_eval.robustness`, :mod:`r2v_eval.robustness_report`); :mod:`r2v_eval.cells` is the one
rule of which episodes a success rate counts and :mod:`r2v_eval.stats` holds the
bootstrap statistics every evaluation shares (the R2V pipeline's Table 1 too); :mod:`r2v_eval.view` writes an offline
HTML page of any run (``r2v view``). Importing this package is light: the
agents' heavy dependencies (openai, torch, transformers) load when an agent is built.

Layering: ``r2v_train`` (the R2V chain and its Table 1) -> ``r2v_eval`` -> ``r2v_agents`` -> ``r2v_envs``; nothing
here imports ``r2v_train``, so evaluating an outside agent needs no training code (run-directory agents are
declared by ``r2v_train`` as ``r2v.agents`` entry points).
"""
