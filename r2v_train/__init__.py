"""r2v_train: the ordered R2V training pipeline (Algorithm 1) and its evaluation."""
