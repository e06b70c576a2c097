"""Comparison: versions must compare number by number, not as text."""

from ..model import BundledTask, append_hidden, src

TASK = BundledTask(
    name="semver",
    summary="version ordering",
    problem_statement=src("""
        `newest(["1.9.0", "1.10.0"])` returns "1.9.0": versions are compared as strings. `compare`
        should order versions by their numeric parts (major, then minor, then patch), so 1.10.0 is
        newer than 1.9.0 and 2.0.10 is newer than 2.0.9.
        """),
    files={
        "versions/__init__.py": "",
        "versions/compare.py": src("""
            def compare(a: str, b: str) -> int:
                \"\"\"-1, 0 or 1 as version `a` is older than, equal to or newer than `b`.\"\"\"
                return (a > b) - (a < b)


            def newest(versions: list[str]) -> str:
                best = versions[0]
                for v in versions[1:]:
                    if compare(v, best) > 0:
                        best = v
                return best
            """),
        "tests/test_compare.py": src("""
            from versions.compare import compare, newest


            def test_equal():
                assert compare("1.2.3", "1.2.3") == 0


            def test_single_digits():
                assert compare("1.2.3", "1.3.0") == -1 and compare("2.0.0", "1.9.9") == 1


            def test_newest_simple():
                assert newest(["0.1.0", "0.3.0", "0.2.0"]) == "0.3.0"
            """),
    },
    fix={
        "versions/compare.py": [
            (
                "    return (a > b) - (a < b)\n",
                '    ka, kb = [int(p) for p in a.split(".")], [int(p) for p in b.split(".")]\n'
                "    return (ka > kb) - (ka < kb)\n",
            )
        ]
    },
    # numeric, but only major.minor: the patch level is ignored
    wrong_fix={
        "versions/compare.py": [
            (
                "    return (a > b) - (a < b)\n",
                '    ka, kb = [int(p) for p in a.split(".")[:2]], [int(p) for p in b.split(".")[:2]]\n'
                "    return (ka > kb) - (ka < kb)\n",
            )
        ]
    },
    hidden_tests={
        "tests/test_compare.py": [
            append_hidden("""
                def test_multi_digit_minor():
                    assert same(compare("1.10.0", "1.9.0"), 1) and same(newest(["1.9.0", "1.10.0"]), "1.10.0")


                def test_multi_digit_patch():
                    assert same(compare("2.0.9", "2.0.10"), -1)
                """),
        ]
    },
    fail_to_pass=["tests/test_compare.py::test_multi_digit_minor", "tests/test_compare.py::test_multi_digit_patch"],
    pass_to_pass=[
        "tests/test_compare.py::test_equal",
        "tests/test_compare.py::test_single_digits",
        "tests/test_compare.py::test_newest_simple",
    ],
)
