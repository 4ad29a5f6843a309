"""R2V/TerminalBench-v0 (:mod:`.env`): Terminal-Bench tasks as a Gymnasium env.

* :mod:`.task`: a task as data, in either directory format, and its Dockerfile's grammar;
* :mod:`.backends`: where it runs (the local sandbox over a scratch copy of its build, or a Docker container): start,
  run the agent's commands, run and copy for the judge, close;
* :mod:`.judge`: one test phase for every backend, the verdict from the judge's own record, the offline test runtime
  and the programs that run inside the sandbox;
* :mod:`.hacks`: the reward hacks that must never win.
"""
