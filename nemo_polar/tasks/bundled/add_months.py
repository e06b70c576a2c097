"""Date math without dependencies: adding months must clamp to the end of a shorter month."""

from ..model import BundledTask, append_hidden, src

TASK = BundledTask(
    name="add_months",
    summary="date math",
    problem_statement=src("""
        `add_months(date(2024, 1, 31), 1)` raises `ValueError: day is out of range for month`.
        Adding months to a day that the target month does not have should give that month's last day
        (2024-02-29 here, 2023-02-28 in a common year, 2024-04-30 for March 31 + 1).
        """),
    files={
        "calendarx/__init__.py": "",
        "calendarx/months.py": src("""
            from datetime import date


            def add_months(day: date, months: int) -> date:
                index = day.month - 1 + months
                year, month = day.year + index // 12, index % 12 + 1
                return day.replace(year=year, month=month)
            """),
        "tests/test_months.py": src("""
            from datetime import date

            from calendarx.months import add_months


            def test_same_day_next_month():
                assert add_months(date(2024, 3, 15), 1) == date(2024, 4, 15)


            def test_across_year_end():
                assert add_months(date(2023, 11, 5), 3) == date(2024, 2, 5)


            def test_backwards():
                assert add_months(date(2024, 1, 10), -1) == date(2023, 12, 10)
            """),
    },
    fix={
        "calendarx/months.py": [
            ("from datetime import date\n", "import calendar\nfrom datetime import date\n"),
            (
                "return day.replace(year=year, month=month)",
                "last = calendar.monthrange(year, month)[1]\n    return date(year, month, min(day.day, last))",
            ),
        ]
    },
    wrong_fix={
        "calendarx/months.py": [
            ("return day.replace(year=year, month=month)", "return date(year, month, min(day.day, 28))"),
        ]
    },
    hidden_tests={
        "tests/test_months.py": [
            append_hidden("""
                def test_clamps_to_leap_february():
                    assert same(add_months(date(2024, 1, 31), 1), date(2024, 2, 29))


                def test_clamps_to_common_february():
                    assert same(add_months(date(2023, 1, 31), 1), date(2023, 2, 28))


                def test_clamps_to_thirty_days():
                    assert same(add_months(date(2024, 3, 31), 1), date(2024, 4, 30))
                """),
        ]
    },
    fail_to_pass=[
        "tests/test_months.py::test_clamps_to_leap_february",
        "tests/test_months.py::test_clamps_to_common_february",
        "tests/test_months.py::test_clamps_to_thirty_days",
    ],
    pass_to_pass=[
        "tests/test_months.py::test_same_day_next_month",
        "tests/test_months.py::test_across_year_end",
        "tests/test_months.py::test_backwards",
    ],
)
