"""Ready-made :class:`r2v_train.chain.ChainConfig` presets (``python -m r2v_train.chain --preset NAME``)."""
