# The shipped tasks' own tests and sources run inside the task sandbox after an episode, never in the
# project's test run: keep pytest (and --doctest-modules) out of this directory.
collect_ignore_glob = ["*"]
