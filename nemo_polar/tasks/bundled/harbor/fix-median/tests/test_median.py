"""Checks of stats.median; writes /logs/verifier/reward.json whatever happens to the checks.

The code under test runs in a child process, which reports what `median` returned; this process never imports
it, compares the report with what it expects (the type as well as the value: an object equal to everything is
not a median) and writes the reward once the child has ended. Code of the working copy that ran in the
verifier's own process could write the reward itself (at exit, after the checks).
"""

import json
import subprocess
import sys

CASES = [([3, 1, 2], 2), ([7], 7), ([4, 1, 3, 2], 2.5), ([1.0, 2.0], 1.5), ([5, 3, 9, 1], 4.0)]
CHILD = r"""
import json, sys
sys.path.insert(0, ".")
from stats import median
report = []
for values in json.loads(sys.argv[1]):
    given = list(values)
    try:
        got = median(values)
        report.append({"repr": repr(got), "type": type(got).__name__, "unchanged": values == given})
    except Exception as exc:
        report.append({"raised": type(exc).__name__})
print(json.dumps(report))
"""


def run(inputs):
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(inputs)], capture_output=True, text=True, timeout=60
    )
    print(done.stderr[-2000:], file=sys.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    checks = []
    try:
        report = run([values for values, _ in CASES] + [[]])
        for (values, want), got in zip(CASES, report, strict=False):
            right = got.get("repr") == repr(want) and got.get("type") == type(want).__name__
            checks.append((f"median({values})", right and got.get("unchanged") is True))
        checks.append(("median([]) raises ValueError", report[len(CASES)] == {"raised": "ValueError"}))
    except Exception as exc:  # no report: every check failed
        print(f"FAILED the checks could not run: {type(exc).__name__}: {exc}")
    for name, ok in checks:
        print(("PASSED " if ok else "FAILED ") + name)
    passed, total = sum(ok for _, ok in checks), len(CASES) + 1
    with open("/logs/verifier/reward.json", "w") as f:
        json.dump({"reward": 1.0 if passed == total else 0.0, "passed": passed, "total": total}, f)


main()
