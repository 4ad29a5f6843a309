"""Evaluation of any agent on the perturbed benchmarks, and the statistics every evaluation shares.

Layering: ``r2v_train`` (the R2V chain and its Table 1) -> ``r2v_eval`` -> ``r2v_agents`` -> ``r2v_envs``; nothing
here imports ``r2v_train``, so evaluating an outside agent needs no training code.
"""
