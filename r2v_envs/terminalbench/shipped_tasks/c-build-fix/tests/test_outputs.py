import subprocess
from pathlib import Path

def test_make_builds():
    subprocess.run(["make", "clean"], check=False, capture_output=True)
    r = subprocess.run(["make"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert Path("geom").is_file()

def test_hypotenuse():
    out = subprocess.run(["./geom", "3", "4"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "5.000"
    out = subprocess.run(["./geom", "5", "12"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "13.000"

def test_computation_unchanged():
    assert "sqrt" in Path("geometry.c").read_text()
