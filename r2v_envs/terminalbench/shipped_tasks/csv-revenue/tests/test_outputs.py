import csv, json
from collections import defaultdict
from pathlib import Path

def test_revenue_per_region():
    totals = defaultdict(float)
    with open("sales.csv") as f:
        for row in csv.DictReader(f):
            totals[row["region"]] += int(row["units"]) * float(row["unit_price"])
    got = json.loads(Path("revenue.json").read_text())
    assert set(got) == set(totals)
    for region, value in totals.items():
        assert abs(float(got[region]) - round(value, 2)) < 0.011, region
