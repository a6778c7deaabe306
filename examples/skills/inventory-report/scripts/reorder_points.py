"""Print each supplier's reorder point: daily sales x lead time + safety stock."""

import csv
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def main() -> None:
    with (ASSETS / "lead_times.csv").open(encoding="utf-8", newline="") as table:
        for row in csv.DictReader(table):
            point = int(row["daily_sales"]) * int(row["lead_time_days"]) + int(row["safety_stock"])
            print(f"{row['supplier']}: reorder at {point}")


if __name__ == "__main__":
    main()
