"""``python -m r2v_eval.view RUN_DIR`` is ``r2v view RUN_DIR`` (see :mod:`r2v_eval.view`)."""

from r2v_eval.view import main

if __name__ == "__main__":
    main()
