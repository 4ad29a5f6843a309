#!/bin/bash
set -e
export GIT_AUTHOR_NAME=dev GIT_AUTHOR_EMAIL=dev@example.org GIT_COMMITTER_NAME=dev GIT_COMMITTER_EMAIL=dev@example.org
export GIT_AUTHOR_DATE="2024-01-01T10:00:00" GIT_COMMITTER_DATE="2024-01-01T10:00:00"
git init -q -b main .
git config user.name dev && git config user.email dev@example.org
mkdir -p src
printf 'def add(a, b):\n    return a + b\n' > src/util.py
printf 'from util import add\nprint(add(2, 3))\n' > src/main.py
git add src && git commit -q -m "Add util and main"
printf '\ndef mul(a, b):\n    return a * b\n' >> src/util.py
git commit -q -am "Add mul"
printf '# Project\n' > README.md
git add README.md && git rm -q src/util.py && git commit -q -m "Add README (and clean up)"
