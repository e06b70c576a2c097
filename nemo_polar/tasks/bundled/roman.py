"""Parsing: Roman numerals with subtractive pairs (IV, XL, CM) are read as additions."""

from ..model import BundledTask, append_hidden, src

TASK = BundledTask(
    name="roman",
    summary="numeral parsing",
    problem_statement=src("""
        `from_roman("IV")` returns 6 and `from_roman("MCMXCIV")` returns 2216. A symbol followed by
        a larger one must be subtracted (IV = 4, XL = 40, XC = 90, CD = 400, CM = 900), so
        MCMXCIV is 1994.
        """),
    files={
        "numerals/__init__.py": "",
        "numerals/roman.py": src("""
            VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


            def from_roman(text: str) -> int:
                text = text.strip().upper()
                if not text or any(ch not in VALUES for ch in text):
                    raise ValueError(f"not a roman numeral: {text!r}")
                return sum(VALUES[ch] for ch in text)
            """),
        "tests/test_roman.py": src("""
            import pytest

            from numerals.roman import from_roman


            @pytest.mark.parametrize("text, value", [("III", 3), ("VIII", 8), ("MDCLXVI", 1666), (" xii ", 12)])
            def test_additive(text, value):
                assert from_roman(text) == value


            def test_rejects_garbage():
                with pytest.raises(ValueError):
                    from_roman("XIZ")
            """),
    },
    fix={
        "numerals/roman.py": [
            (
                "    return sum(VALUES[ch] for ch in text)\n",
                "    total = 0\n"
                '    for ch, nxt in zip(text, text[1:] + " "):\n'
                "        value = VALUES[ch]\n"
                "        total += -value if VALUES.get(nxt, 0) > value else value\n"
                "    return total\n",
            )
        ]
    },
    # special-cases the two pairs from the report and nothing else
    wrong_fix={
        "numerals/roman.py": [
            (
                "    return sum(VALUES[ch] for ch in text)\n",
                "    total = sum(VALUES[ch] for ch in text)\n"
                '    return total - 2 * text.count("IV") - 2 * text.count("IX")\n',
            )
        ]
    },
    hidden_tests={
        "tests/test_roman.py": [
            append_hidden("""
                @pytest.mark.parametrize("text, value", [("IV", 4), ("XL", 40), ("MCMXCIV", 1994), ("CDXLIV", 444)])
                def test_subtractive(text, value):
                    assert same(from_roman(text), value)
                """),
        ]
    },
    fail_to_pass=[
        "tests/test_roman.py::test_subtractive[IV-4]",
        "tests/test_roman.py::test_subtractive[XL-40]",
        "tests/test_roman.py::test_subtractive[MCMXCIV-1994]",
        "tests/test_roman.py::test_subtractive[CDXLIV-444]",
    ],
    pass_to_pass=[
        "tests/test_roman.py::test_additive[III-3]",
        "tests/test_roman.py::test_additive[VIII-8]",
        "tests/test_roman.py::test_additive[MDCLXVI-1666]",
        "tests/test_roman.py::test_additive[ xii -12]",
        "tests/test_roman.py::test_rejects_garbage",
    ],
)
