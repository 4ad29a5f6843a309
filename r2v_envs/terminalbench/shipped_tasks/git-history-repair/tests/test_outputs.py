import subprocess

def git(*args):
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout

def test_file_restored_with_its_last_content():
    want = "def add(a, b):\n    return a + b\n\ndef mul(a, b):\n    return a * b\n"
    with open("src/util.py") as f:
        assert f.read() == want
    assert git("show", "HEAD:src/util.py") == want

def test_history_not_rewritten():
    log = git("log", "--format=%s").splitlines()
    assert log[1:4] == ["Add README (and clean up)", "Add mul", "Add util and main"]
    assert len(log) == 4

def test_clean_tree():
    assert git("status", "--porcelain") == ""
