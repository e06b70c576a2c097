"""String parsing: runs of separators must collapse to one dash and never lead or trail."""

from ..model import BundledTask, append_hidden, src

TASK = BundledTask(
    name="slugify",
    summary="string parsing",
    problem_statement=src("""
        `slugify` leaves doubled and dangling dashes: `slugify("Hello,  World!")` returns
        `"hello--world-"` instead of `"hello-world"`. Any run of characters that are not letters or
        digits should become a single dash, and the slug should never start or end with a dash.
        """),
    files={
        "textkit/__init__.py": src("""
            from .slug import slugify

            __all__ = ["slugify"]
            """),
        "textkit/slug.py": src("""
            def slugify(text: str) -> str:
                \"\"\"Lower-case words joined by dashes, for URLs.\"\"\"
                out = []
                for ch in text.lower():
                    out.append(ch if ch.isalnum() else "-")
                return "".join(out)
            """),
        "tests/test_slug.py": src("""
            from textkit import slugify


            def test_simple_word():
                assert slugify("Hello") == "hello"


            def test_single_space():
                assert slugify("hello world") == "hello-world"
            """),
    },
    fix={
        "textkit/slug.py": [
            (
                '        out.append(ch if ch.isalnum() else "-")\n    return "".join(out)',
                '        if ch.isalnum():\n            out.append(ch)\n        elif out and out[-1] != "-":\n'
                '            out.append("-")\n    return "".join(out).strip("-")',
            )
        ]
    },
    wrong_fix={"textkit/slug.py": [('return "".join(out)', 'return "".join(out).strip("-")')]},
    hidden_tests={
        "tests/test_slug.py": [
            append_hidden("""
                import pytest


                @pytest.mark.parametrize(
                    "text, slug",
                    [("Hello,  World!", "hello-world"), ("  spaced   out  ", "spaced-out"), ("a - b", "a-b")],
                )
                def test_separators_collapse(text, slug):
                    assert same(slugify(text), slug)
                """),
        ]
    },
    fail_to_pass=[
        "tests/test_slug.py::test_separators_collapse[Hello,  World!-hello-world]",
        "tests/test_slug.py::test_separators_collapse[  spaced   out  -spaced-out]",
        "tests/test_slug.py::test_separators_collapse[a - b-a-b]",
    ],
    pass_to_pass=["tests/test_slug.py::test_simple_word", "tests/test_slug.py::test_single_space"],
)
