"""Programs the judge copies into the offline runtime and runs inside the sandbox with ``python -I``: the shim
(``uv``/``pytest``/``pip``/``apt-get``/... offline), the judge's daemon (the verdict channel) and its pytest plugin.
Standard library (and pytest) only: they never import r2v, whose code is not inside the sandbox."""
