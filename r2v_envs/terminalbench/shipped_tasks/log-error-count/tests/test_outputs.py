import re
from collections import Counter
from pathlib import Path

def test_error_counts():
    counts = Counter()
    for log in Path("logs").glob("*.log"):
        for line in log.read_text().splitlines():
            m = re.match(r"\S+ ERROR \[(\w+)\]", line)
            if m:
                counts[m.group(1)] += 1
    want = [f"{s} {c}" for s, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    got = [ln.strip() for ln in Path("errors.txt").read_text().splitlines() if ln.strip()]
    assert got == want
