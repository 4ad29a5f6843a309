#!/bin/bash
set -Eeuo pipefail
cd /app
pip3 install --no-cache-dir pytest 2>/dev/null || pip install --no-cache-dir pytest
set +e
find $TEST_DIR -name "*test*.py" -exec cp {} . \;
python3 -m pytest . -v --tb=short
