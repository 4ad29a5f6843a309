"""The router's training config (Appendix C's defaults) and the choices it names.

Example:
    >>> RouterTrainConfig().identity()["alpha"], "progress" in RouterTrainConfig().identity()
    (0.2, False)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from r2v_agents.trajectory_features import FEATURE_SETS
from r2v_envs.errors import UnknownChoiceError
from r2v_train.router import calibration
from r2v_train.router.losses import COST_SCALES

MODES = ("cvar", "mean", "brier")
LABEL_KINDS = ("episode", "counterfactual", "deviation")
PAPER_DEFAULTS = {"cost_scale": "paper", "features": "full", "labels": "episode", "bag": 1, "bag_folds": 4,
                  "calibrate_on": "valid"}
"""Fields added after the paper's router and their paper values: left out of identities and stage keys
when at these values, so a paper router's run directory stays current."""
CALIBRATIONS = ("temperature", "platt", "none")
CALIBRATION_ROWS = ("valid", "pooled")
ROUTER_FILE, METRICS_FILE, STATE_FILE = "router.pt", "router_metrics.json", "router_train_state.pt"



@dataclass
class RouterTrainConfig:
    """Router training hyper-parameters; defaults follow Appendix C (costs: see the module docstring)."""

    epochs: int = field(default=20, metadata={"help": "passes over the training steps"})
    batch_size: int = field(default=4096, metadata={"help": "steps per batch (whole rollouts are packed)"})
    lr: float = field(default=1e-3, metadata={"help": "AdamW learning rate, cosine-annealed to 0"})
    weight_decay: float = field(default=1e-4, metadata={"help": "AdamW weight decay"})
    dual_lr: float = field(default=1e-2, metadata={"help": "Adam learning rate for ascent on log lambda"})
    eta_lr: float = field(default=1e-2, metadata={"help": "learning rate of the Rockafellar-Uryasev eta"})
    alpha: float = field(default=0.2, metadata={"help": "CVaR tail fraction of rollouts (Table 5)"})
    epsilon: float = field(default=0.1, metadata={"help": "CVaR budget epsilon (Table 5), on cost_scale (paper: teacher-call units)"})
    brier_weight: float = field(default=1.0, metadata={"help": "lambda_B, weight of the Brier term (Eq. 11)"})
    c_slm: float = field(default=0.02, metadata={"help": "cost of an SLM step (c_LLM / c_SLM = 50)"})
    c_llm: float = field(default=1.0, metadata={"help": "cost of a teacher call (the unit of cost)"})
    kappa: float = field(default=1.96, metadata={
        "help": "cost of not escalating on a failing rollout's step; 2 (c_LLM - c_SLM) gives tau* = 0.5"})
    lambda_init: float = field(default=1.0, metadata={"help": "initial Lagrange multiplier"})
    lambda_max: float = field(default=10.0, metadata={"help": "cap on lambda (an infeasible epsilon saturates)"})
    mode: str = field(default="cvar", metadata={"help": "cvar (Eq. 11) | mean (no CVaR) | brier (Brier only)"})
    features: str = field(default="full", metadata={
        "help": "router inputs: full (Eq. 6's 15) | trajectory (those + r2v_agents.trajectory_features)"})
    labels: str = field(default="episode", metadata={
        "help": "step labels: episode (Eq. 7, y_t = 1[episode failed]) | counterfactual (y_cf: one teacher action "
                "at t rescues the episode; r2v_train.router.counterfactual) | deviation (Eq. 7 and the SLM's action differs "
                "from the env's expert action at t: the failing rollout's steps the SLM got wrong)"})
    cost_scale: str = field(default="paper", metadata={
        "help": "scale of ell_route on which alpha and epsilon are read: paper (Eq. 8 in teacher calls) | max "
                "(/ its largest step value) | regret (excess over the step's best decision, = |p - y| at the "
                "default kappa) | miss (its failure side: failing steps left to the SLM; Table 5's epsilon grid "
                "binds monotonically); see r2v_train.router.losses.COST_SCALES"})
    hidden: tuple[int, ...] = field(default=(128, 64), metadata={"help": "MLP hidden widths"})
    dropout: float = field(default=0.2, metadata={"help": "dropout after each hidden layer"})
    recalibration: str = field(default="platt", metadata={
        "help": "post-hoc calibration on validation NLL: platt (temperature and bias) | temperature (Appendix C) "
                "| none"})
    threshold_rule: str = field(default="min_cost", metadata={
        "help": "min_cost (lowest validation routing cost) | bayes (tau* of Eq. 13) | budget"})
    max_escalation: float | None = field(default=None, metadata={
        "help": "highest validation escalation rate allowed by threshold_rule=budget"})
    bag: int = field(default=1, metadata={
        "help": "routers averaged (probabilities) into one: 1 = the paper's single router; > 1 = a bagged router "
                "(r2v_train.router.bagging)"})
    bag_folds: int = field(default=4, metadata={
        "help": "with bag > 1: member m trains on the rollouts outside fold m mod K of a K-fold split of the "
                "training rollouts (1: every member on all of them, differing only in seed)"})
    calibrate_on: str = field(default="valid", metadata={
        "help": "rows the recalibration and threshold are fitted on: valid (the paper) | pooled (the validation "
                "rows plus the training rows scored out of fold by the members that did not see them; needs "
                "bag >= bag_folds > 1)"})
    seed: int = field(default=0, metadata={"help": "seed of initialisation and batch order"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UnknownChoiceError("router training mode", self.mode, MODES)
        if self.recalibration not in CALIBRATIONS:
            raise UnknownChoiceError("recalibration", self.recalibration, CALIBRATIONS)
        if self.features not in FEATURE_SETS:
            raise UnknownChoiceError("router feature set", self.features, FEATURE_SETS)
        if self.labels not in LABEL_KINDS:
            raise UnknownChoiceError("router labels", self.labels, LABEL_KINDS)
        if self.cost_scale not in COST_SCALES:
            raise UnknownChoiceError("cost scale", self.cost_scale, COST_SCALES)
        if self.threshold_rule not in calibration.THRESHOLD_RULES:
            raise UnknownChoiceError("threshold rule", self.threshold_rule, calibration.THRESHOLD_RULES)
        if self.calibrate_on not in CALIBRATION_ROWS:
            raise UnknownChoiceError("calibration rows", self.calibrate_on, CALIBRATION_ROWS)
        if self.bag < 1 or self.bag_folds < 1:
            raise ValueError(f"need bag >= 1 and bag_folds >= 1; got {self.bag}, {self.bag_folds}")
        if self.calibrate_on == "pooled" and not self.bag >= self.bag_folds > 1:
            raise ValueError(f"calibrate_on: pooled scores each training rollout out of fold, which needs "
                             f"bag >= bag_folds > 1; got bag {self.bag}, bag_folds {self.bag_folds}")
        if self.epochs < 1 or self.batch_size < 2:
            raise ValueError(f"need epochs >= 1 and batch_size >= 2; got {self.epochs}, {self.batch_size}")
        if not 0 < self.alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1]; got {self.alpha}")
        if not (0 <= self.c_slm < self.c_llm and self.kappa > 0):
            raise ValueError(f"Eq. 8 needs 0 <= c_slm < c_llm and kappa > 0; got {self.c_slm}, {self.c_llm}, "
                             f"{self.kappa}")
        if not 0 < self.lambda_init <= self.lambda_max:
            raise ValueError(f"need 0 < lambda_init <= lambda_max; got {self.lambda_init}, {self.lambda_max}")
        self.hidden = tuple(int(h) for h in self.hidden)

    def identity(self) -> dict[str, Any]:
        """The fields that change the trained router (resuming with other values is refused)."""
        d = asdict(self)
        d.pop("progress")
        for k, default in PAPER_DEFAULTS.items():  # routers trained before these fields existed keep their identity
            if d[k] == default:
                d.pop(k)
        d["hidden"] = list(d["hidden"])
        return d
