#!/bin/bash
python3 - <<'PY'
import csv, json
totals = {}
with open("/app/sales.csv") as f:
    for row in csv.DictReader(f):
        totals[row["region"]] = totals.get(row["region"], 0.0) + float(row["amount"])
json.dump(totals, open("/app/totals.json", "w"))
PY
