"""``python -m r2v_eval ...`` is ``r2v eval ...`` (see :mod:`r2v_eval.cli`)."""

from r2v_eval.cli import main

if __name__ == "__main__":
    main()
