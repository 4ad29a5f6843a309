"""Sec. 5's evaluation of a training run: Table 1's six methods (and the policy alone), the router study, the
ablations and the report.

Modules:

* :mod:`~r2v_train.evaluation.methods`: the six methods and the policy alone through the shared runner, SR and LLM%
  with CIs;
* :mod:`~r2v_train.evaluation.agents`: a run's parts, and the slm:/r2v: specs of r2v eval;
* :mod:`~r2v_train.evaluation.study`: named router settings, the counterfactual oracle, repeats;
* :mod:`~r2v_train.evaluation.ablations`: Appendix E, one function each;
* :mod:`~r2v_train.evaluation.report`: report.md and the plots;
* :mod:`~r2v_train.evaluation.rollout`: r2v rollout: simple policies through each perturbation.
"""

__all__ = [
    # methods and agents
    "methods", "agents",
    # studies
    "study", "ablations",
    # output
    "report", "rollout",
]
