from textstats.words import word_count


def test_one_word():
    assert word_count("hello") == 1


def test_two_words():
    assert word_count("hello world") == 2


def test_empty():
    assert word_count("") == 0
