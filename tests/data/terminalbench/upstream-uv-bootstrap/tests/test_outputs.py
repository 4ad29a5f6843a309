from pathlib import Path


def test_sum():
    assert Path("sum.txt").read_text().strip() == "45"


def test_max():
    assert Path("max.txt").read_text().strip() == "30"
