"""Checks of stats.median; writes /logs/verifier/reward.json whatever happens to the checks."""

import json
import sys
import traceback

sys.path.insert(0, ".")


def check_odd():
    from stats import median

    assert median([3, 1, 2]) == 2
    assert median([7]) == 7


def check_even():
    from stats import median

    assert median([4, 1, 3, 2]) == 2.5
    assert median([1.0, 2.0]) == 1.5


def check_input_unchanged():
    from stats import median

    values = [5, 3, 9, 1]
    median(values)
    assert values == [5, 3, 9, 1]


def check_empty():
    from stats import median

    try:
        median([])
    except ValueError:
        return
    raise AssertionError("median([]) did not raise ValueError")


def main() -> None:
    checks = [check_odd, check_even, check_input_unchanged, check_empty]
    passed = 0
    for check in checks:
        try:
            check()
            passed += 1
            print(f"PASSED {check.__name__}")
        except Exception:
            print(f"FAILED {check.__name__}")
            traceback.print_exc()
    reward = 1.0 if passed == len(checks) else 0.0
    with open("/logs/verifier/reward.json", "w") as f:
        json.dump({"reward": reward, "passed": passed, "total": len(checks)}, f)


main()
