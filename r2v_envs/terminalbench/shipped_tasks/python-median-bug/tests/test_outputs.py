import importlib, random, statistics, sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

def test_median_matches_statistics():
    stats = importlib.import_module("stats")
    rng = random.Random(0)
    for n in range(1, 40):
        values = [rng.randint(-50, 50) for _ in range(n)]
        copy = list(values)
        assert stats.median(values) == statistics.median(values)
        assert values == copy

def test_mean_untouched():
    stats = importlib.import_module("stats")
    assert stats.mean([1, 2, 3, 6]) == 3

def test_shipped_tests_unchanged():
    assert "assert median([4, 1, 3, 2]) == 2.5" in Path("test_stats.py").read_text()
