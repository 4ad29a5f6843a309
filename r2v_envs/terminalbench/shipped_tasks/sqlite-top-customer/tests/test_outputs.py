import sqlite3
from pathlib import Path

def test_answer():
    db = sqlite3.connect("shop.db")
    (want,) = db.execute(
        "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id "
        "GROUP BY c.id ORDER BY SUM(o.amount) DESC LIMIT 1").fetchone()
    assert Path("answer.txt").read_text().strip() == want

def test_database_untouched():
    db = sqlite3.connect("shop.db")
    assert db.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == 300
