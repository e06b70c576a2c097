"""Counting words in a text."""


def word_count(text: str) -> int:
    """The number of words in `text`: runs of characters between whitespace."""
    if not text:
        return 0
    return len(text.split(" "))
