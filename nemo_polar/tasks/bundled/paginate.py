"""Off-by-one: the page count drops the last, partly filled page."""

from ..model import BundledTask, append_hidden, src

TASK = BundledTask(
    name="paginate",
    summary="off-by-one",
    problem_statement=src("""
        `page_count(total, per_page)` loses the last page when it is only partly filled:
        `page_count(11, 5)` returns 2, but items 11 needs a third page. `pages()` then never yields
        the last items. Zero items should still be zero pages.
        """),
    files={
        "pager/__init__.py": "",
        "pager/core.py": src("""
            def page_count(total: int, per_page: int) -> int:
                if per_page <= 0:
                    raise ValueError("per_page must be positive")
                return total // per_page


            def pages(items: list, per_page: int) -> list[list]:
                return [items[i * per_page : (i + 1) * per_page] for i in range(page_count(len(items), per_page))]
            """),
        "tests/test_core.py": src("""
            import pytest

            from pager.core import page_count, pages


            def test_exact_multiple():
                assert page_count(10, 5) == 2


            def test_empty():
                assert page_count(0, 5) == 0


            def test_rejects_zero_per_page():
                with pytest.raises(ValueError):
                    page_count(3, 0)


            def test_pages_exact():
                assert pages([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]
            """),
    },
    fix={"pager/core.py": [("return total // per_page", "return -(-total // per_page)")]},
    wrong_fix={"pager/core.py": [("return total // per_page", "return total // per_page + 1")]},
    hidden_tests={
        "tests/test_core.py": [
            append_hidden("""
                def test_partial_last_page():
                    assert same(page_count(11, 5), 3)


                def test_pages_keep_the_tail():
                    assert same(pages([1, 2, 3], 2), [[1, 2], [3]])
                """),
        ]
    },
    fail_to_pass=["tests/test_core.py::test_partial_last_page", "tests/test_core.py::test_pages_keep_the_tail"],
    pass_to_pass=[
        "tests/test_core.py::test_exact_multiple",
        "tests/test_core.py::test_empty",
        "tests/test_core.py::test_rejects_zero_per_page",
        "tests/test_core.py::test_pages_exact",
    ],
)
