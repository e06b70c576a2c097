#!/bin/bash
cat > stats/center.py <<'PY'
def mean(values):
    """The arithmetic mean of a non-empty list of numbers."""
    if not values:
        raise ValueError("mean of an empty list")
    return sum(values) / len(values)


def median(values):
    """The middle value of a non-empty list of numbers."""
    if not values:
        raise ValueError("median of an empty list")
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2
PY
