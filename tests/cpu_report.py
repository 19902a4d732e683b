"""Sum the CPU log the suite writes with TINSMITH_CPU_LOG=DIR (see tests/conftest.py).

    python -m tests.cpu_report DIR [--top N] [--write-costs]

Prints CPU seconds (own process + waited-for children) per test file, the slowest tests and the
slowest fixture set-ups. A test's figure includes the set-up of the fixtures it was first to need
(a build shared by the session is counted once, where it was made). --write-costs stores the
per-file figures in tests/data/file_cpu_seconds.json, which orders the suite's files costliest
first (tests/conftest.py); files the log does not cover keep their stored figure.
"""
from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

COSTS = Path(__file__).with_name("data") / "file_cpu_seconds.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log_dir", type=Path)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--write-costs", action="store_true", help="update tests/data/file_cpu_seconds.json")
    args = parser.parse_args()
    tests, fixtures = [], []
    for log in sorted(args.log_dir.glob("cpu-*.jsonl")):
        for line in log.read_text().splitlines():
            record = json.loads(line)
            (tests if "test" in record else fixtures).append(record)
    per_file = collections.Counter()
    count = collections.Counter()
    for record in tests:
        name = record["test"].split("::")[0]
        per_file[name] += record["own"] + record["children"]
        count[name] += 1
    total = sum(per_file.values())
    if args.write_costs:
        stored = json.loads(COSTS.read_text()) if COSTS.is_file() else {}
        stored.update({name: round(seconds, 1) for name, seconds in per_file.items()})
        COSTS.write_text(json.dumps(dict(sorted(stored.items(), key=lambda kv: -kv[1])), indent=1) + "\n")
    print(f"{len(tests)} tests, {total:.1f} CPU s in all "
          f"({sum(r['wall'] for r in tests):.1f} s of wall time inside tests)")
    print("\nCPU s per file:")
    for name, seconds in per_file.most_common():
        print(f"  {seconds:8.1f}  {count[name]:5d}  {name}")
    print(f"\nslowest {args.top} tests (CPU s, own + children):")
    for record in sorted(tests, key=lambda r: -(r["own"] + r["children"]))[:args.top]:
        print(f"  {record['own'] + record['children']:8.1f}  {record['test']}")
    print(f"\nslowest {args.top} fixture set-ups (CPU s):")
    for record in sorted(fixtures, key=lambda r: -(r["own"] + r["children"]))[:args.top]:
        print(f"  {record['own'] + record['children']:8.1f}  {record['scope']:8s} "
              f"{record['fixture']}  (first for {record['node']})")


if __name__ == "__main__":
    main()
