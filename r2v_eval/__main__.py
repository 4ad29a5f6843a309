"""``python -m r2v_eval ...`` is ``r2v eval ...`` (see :mod:`r2v_eval.cli`), with the same exit statuses."""

import sys

from r2v_envs.exit_status import run_console
from r2v_eval.cli import main

if __name__ == "__main__":
    sys.exit(run_console(main, "python -m r2v_eval"))
