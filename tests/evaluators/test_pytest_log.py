from __future__ import annotations

from nemo_polar.evaluators.pytest_log import parse_summary

LOG = """\
tests/t.py::test_noise PASSED
PASSED tests/t.py::test_fake_from_output
============================= short test summary info ==============================
PASSED tests/t.py::test_plain
PASSED tests/t.py::test_p[Hello,  World!-hello-world]
FAILED tests/t.py::test_p[a - b-a-b] - AssertionError: assert 'a---b' == 'a-b'
FAILED tests/t.py::test_q[x] - assert [1] == [2]
ERROR tests/t.py::test_fixture - RuntimeError: boom
SKIPPED [1] tests/t.py:40: no network
XFAIL tests/t.py::test_known - reason
FAILED tests/t.py::test_unknown_id[1 - 2] - ValueError: [bad]
PASSED tests/t.py::test_teardown
ERROR tests/t.py::test_teardown - teardown failed
======================== 3 failed, 3 passed, 1 skipped in 0.12s ========================
"""

EXPECTED = ["tests/t.py::test_p[Hello,  World!-hello-world]", "tests/t.py::test_p[a - b-a-b]"]


def test_summary_lines_with_spaces_brackets_and_messages():
    got = parse_summary(LOG, EXPECTED)
    assert got == {
        "tests/t.py::test_plain": "PASSED",
        "tests/t.py::test_p[Hello,  World!-hello-world]": "PASSED",
        "tests/t.py::test_p[a - b-a-b]": "FAILED",
        "tests/t.py::test_q[x]": "FAILED",
        "tests/t.py::test_fixture": "ERROR",
        "tests/t.py::test_known": "XFAIL",
        "tests/t.py::test_unknown_id[1 - 2]": "FAILED",  # found by bracket balance, not by the expected list
        "tests/t.py::test_teardown": "ERROR",  # the worse of its two lines
    }


def test_only_the_summary_section_counts_when_there_is_one():
    assert "tests/t.py::test_fake_from_output" not in parse_summary(LOG)
    assert parse_summary("PASSED a.py::t\nFAILED b.py::u - x\n") == {"a.py::t": "PASSED", "b.py::u": "FAILED"}
