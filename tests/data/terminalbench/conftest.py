# Task folders for the TerminalBench tests: their tests run only inside the task sandbox after an episode,
# never in the project's test run.
collect_ignore_glob = ["*"]
