import re
from collections import Counter
from pathlib import Path

def expected():
    words = re.findall(r"[a-z]+", Path("text.txt").read_text().lower())
    ranked = sorted(Counter(words).items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    return [f"{c} {w}" for w, c in ranked]

def test_file_exists():
    assert Path("top5.txt").is_file()

def test_top5_content():
    lines = [ln.strip() for ln in Path("top5.txt").read_text().splitlines() if ln.strip()]
    assert lines == expected()
