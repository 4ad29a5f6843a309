"""The YAML configs of ``r2v pipeline`` and ``r2v table1`` (data files; :mod:`r2v_train.config` reads them)."""
