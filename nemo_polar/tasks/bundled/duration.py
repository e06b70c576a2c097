"""Parsing: multi-digit amounts in durations like `120s` or `1h30m`."""

from ..model import BundledTask, append_hidden, src

TASK = BundledTask(
    name="duration",
    summary="regex parsing",
    problem_statement=src("""
        `parse_duration("120s")` returns 0 instead of 120, and `parse_duration("1h30m")` returns 3600
        instead of 5400. Amounts can have any number of digits; units are h, m and s, in that order,
        each optional. Text that is not a duration must still raise ValueError.
        """),
    files={
        "timing/__init__.py": "",
        "timing/duration.py": src("""
            import re

            UNITS = {"h": 3600, "m": 60, "s": 1}
            PATTERN = re.compile(r"(?:(\\d)h)?(?:(\\d)m)?(?:(\\d)s)?")


            def parse_duration(text: str) -> int:
                \"\"\"Seconds in a duration such as `2h`, `5m` or `1h2m3s`.\"\"\"
                m = PATTERN.fullmatch(text.strip())
                if m is None or not any(m.groups()):
                    raise ValueError(f"not a duration: {text!r}")
                return sum(int(v) * UNITS[u] for v, u in zip(m.groups(), "hms") if v)
            """),
        "tests/test_duration.py": src("""
            import pytest

            from timing.duration import parse_duration


            def test_single_units():
                assert (parse_duration("2h"), parse_duration("5m"), parse_duration("7s")) == (7200, 300, 7)


            def test_all_units():
                assert parse_duration("1h2m3s") == 3723


            @pytest.mark.parametrize("text", ["", "abc", "5x", "m5"])
            def test_rejects(text):
                with pytest.raises(ValueError):
                    parse_duration(text)
            """),
    },
    fix={"timing/duration.py": [(r'r"(?:(\d)h)?(?:(\d)m)?(?:(\d)s)?"', r'r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?"')]},
    # two digits are enough for the examples someone tried first, not for `120s`
    wrong_fix={
        "timing/duration.py": [(r'r"(?:(\d)h)?(?:(\d)m)?(?:(\d)s)?"', r'r"(?:(\d\d?)h)?(?:(\d\d?)m)?(?:(\d\d?)s)?"')]
    },
    hidden_tests={
        "tests/test_duration.py": [
            append_hidden("""
                @pytest.mark.parametrize("text, seconds", [("120s", 120), ("1h30m", 5400), ("10h", 36000)])
                def test_many_digits(text, seconds):
                    assert same(parse_duration(text), seconds)
                """),
        ]
    },
    fail_to_pass=[
        "tests/test_duration.py::test_many_digits[120s-120]",
        "tests/test_duration.py::test_many_digits[1h30m-5400]",
        "tests/test_duration.py::test_many_digits[10h-36000]",
    ],
    pass_to_pass=[
        "tests/test_duration.py::test_single_units",
        "tests/test_duration.py::test_all_units",
        "tests/test_duration.py::test_rejects[]",
        "tests/test_duration.py::test_rejects[abc]",
        "tests/test_duration.py::test_rejects[5x]",
        "tests/test_duration.py::test_rejects[m5]",
    ],
)
