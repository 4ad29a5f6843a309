import os, subprocess
from pathlib import Path

def test_executable():
    assert Path("bin/greet").is_file() and os.access("bin/greet", os.X_OK)

def test_greets():
    r = subprocess.run(["./bin/greet", "Ada Lovelace"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "Hello, Ada Lovelace!\n"

def test_usage():
    r = subprocess.run(["./bin/greet"], capture_output=True, text=True)
    assert r.returncode == 2 and "usage: greet NAME" in r.stderr and r.stdout == ""
