import shutil, subprocess
from pathlib import Path

def files(root):
    return {str(p.relative_to(root)): p.read_text() for p in Path(root).rglob("*") if p.is_file()}

def test_backup_copies_everything(tmp_path):
    dest = tmp_path / "out"
    r = subprocess.run(["bash", "backup.sh", "documents", str(dest)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert files(dest) == files("documents")
    assert r.stdout.strip() == f"backed up {len(files('documents'))} files"

def test_other_tree(tmp_path):
    src = tmp_path / "my src"
    (src / "a b").mkdir(parents=True)
    (src / "a b" / "c d.txt").write_text("1")
    (src / "e.txt").write_text("2")
    r = subprocess.run(["bash", "backup.sh", str(src), str(tmp_path / "dst")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert files(tmp_path / "dst") == {"a b/c d.txt": "1", "e.txt": "2"}
    assert "backed up 2 files" in r.stdout
