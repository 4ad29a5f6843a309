#!/bin/bash
# Terminal-Bench layout: the tests are copied to $TEST_DIR after the agent is done; run from the workdir.
python3 -m pytest "$TEST_DIR/test_outputs.py" -rA -p no:cacheprovider
