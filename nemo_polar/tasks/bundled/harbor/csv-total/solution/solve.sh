#!/bin/bash
python3 - <<'PY'
import csv
from decimal import Decimal

with open("orders.csv", newline="") as f:
    total = sum(
        Decimal(row["quantity"]) * Decimal(row["unit_price"]) for row in csv.DictReader(f) if row["status"] == "paid"
    )
with open("total.txt", "w") as f:
    f.write(f"{total:.2f}\n")
PY
