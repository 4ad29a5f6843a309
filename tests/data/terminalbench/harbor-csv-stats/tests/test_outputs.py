import json
from pathlib import Path


def test_totals():
    assert json.loads(Path("/app/totals.json").read_text()) == {"north": 12.5, "south": 4.5, "east": 1.0}
