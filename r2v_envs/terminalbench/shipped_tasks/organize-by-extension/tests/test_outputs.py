from pathlib import Path

EXPECTED = {
    "pdf/report.PDF", "txt/notes.txt", "txt/todo.TXT", "jpg/photo.jpg", "gz/archive.tar.gz",
    "none/Makefile", "csv/data.csv", "txt/my notes.txt", "sh/script.sh",
}

def test_inbox_empty():
    assert Path("inbox").is_dir() and not any(Path("inbox").iterdir())

def test_sorted_layout():
    got = {str(p.relative_to("sorted")) for p in Path("sorted").rglob("*") if p.is_file()}
    assert got == EXPECTED

def test_contents_kept():
    assert Path("sorted/txt/my notes.txt").read_text() == "spaces\n"
