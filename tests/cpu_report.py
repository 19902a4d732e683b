"""Sum the CPU log the suite writes with TINSMITH_CPU_LOG=DIR (see tests/conftest.py).

    python -m tests.cpu_report DIR [--top N]

Prints CPU seconds (own process + waited-for children) per test file, the slowest tests and the
slowest fixture set-ups. A test's figure includes the set-up of the fixtures it was first to need.
"""
from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log_dir", type=Path)
    parser.add_argument("--top", type=int, default=40)
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
