import os
from pathlib import Path

def test_report():
    entries = [(p.stat().st_size, str(p)) for p in Path("data").rglob("*")
               if p.is_file() and p.stat().st_size > 2000]
    want = [f"{s} {p}" for s, p in sorted(entries, key=lambda e: (-e[0], e[1]))]
    got = [ln.strip() for ln in Path("large.txt").read_text().splitlines() if ln.strip()]
    assert got == want and len(want) > 5
