def mean(values):
    """The arithmetic mean of a non-empty list of numbers."""
    if not values:
        raise ValueError("mean of an empty list")
    return sum(values) / len(values)


def median(values):
    """The middle value of a non-empty list of numbers."""
    if not values:
        raise ValueError("median of an empty list")
    return values[len(values) // 2]
