"""The R2V router (Sec. 3.2-4.1, Appendix C): its rows, losses, training, calibration and the settings beyond the
paper's.

Modules:

* :mod:`~r2v_train.router.data`: rows (f_t, y_t) and their rollouts;
* :mod:`~r2v_train.router.losses`: Brier, routing cost, CVaR (Eq. 8-11), consistency;
* :mod:`~r2v_train.router.config`: Appendix C's defaults;
* :mod:`~r2v_train.router.train`: the router stage: training, recalibration, threshold;
* :mod:`~r2v_train.router.calibration`: ECE, reliability, temperature / Platt, tau;
* :mod:`~r2v_train.router.bagging`: a bagged router with cross-fitted calibration;
* :mod:`~r2v_train.router.settings`: named router settings;
* :mod:`~r2v_train.router.counterfactual`: counterfactual step labels.
"""

__all__ = [
    # data and objective
    "data", "losses", "config",
    # training
    "train", "calibration", "bagging",
    # beyond the paper
    "settings", "counterfactual",
]
