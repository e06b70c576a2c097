"""Parsing: a CSV line with quoted fields must not split inside the quotes."""

from ..model import BundledTask, append_hidden, src

TASK = BundledTask(
    name="csv_split",
    summary="quoted fields",
    problem_statement=src('''
        `split_row('a,"b,c",d')` returns `['a', '"b', 'c"', 'd']`. Fields in double quotes may hold
        commas, and a doubled quote inside a quoted field stands for one quote character:
        `split_row('"say ""hi""",x')` should be `['say "hi"', 'x']`. Unquoted fields are unchanged.
        '''),
    files={
        "rows/__init__.py": "",
        "rows/split.py": src("""
            def split_row(line: str, sep: str = ",") -> list[str]:
                \"\"\"One CSV line as its fields.\"\"\"
                return line.rstrip("\\r\\n").split(sep)
            """),
        "tests/test_split.py": src("""
            from rows.split import split_row


            def test_plain():
                assert split_row("a,b,c") == ["a", "b", "c"]


            def test_empty_fields():
                assert split_row("a,,c\\n") == ["a", "", "c"]


            def test_other_separator():
                assert split_row("a;b", sep=";") == ["a", "b"]
            """),
    },
    fix={
        "rows/split.py": [
            (
                '    return line.rstrip("\\r\\n").split(sep)\n',
                "    fields, field, quoted, i = [], [], False, 0\n"
                '    line = line.rstrip("\\r\\n")\n'
                "    while i < len(line):\n"
                "        ch = line[i]\n"
                "        if quoted and ch == '\"' and line[i + 1 : i + 2] == '\"':\n"
                "            field.append('\"')\n"
                "            i += 1\n"
                "        elif ch == '\"':\n"
                "            quoted = not quoted\n"
                "        elif ch == sep and not quoted:\n"
                '            fields.append("".join(field))\n'
                "            field = []\n"
                "        else:\n"
                "            field.append(ch)\n"
                "        i += 1\n"
                '    fields.append("".join(field))\n'
                "    return fields\n",
            )
        ]
    },
    # honours quotes but keeps doubled quotes doubled
    wrong_fix={
        "rows/split.py": [
            (
                '    return line.rstrip("\\r\\n").split(sep)\n',
                "    fields, field, quoted = [], [], False\n"
                '    for ch in line.rstrip("\\r\\n"):\n'
                "        if ch == '\"':\n"
                "            quoted = not quoted\n"
                "        elif ch == sep and not quoted:\n"
                '            fields.append("".join(field))\n'
                "            field = []\n"
                "        else:\n"
                "            field.append(ch)\n"
                '    fields.append("".join(field))\n'
                "    return fields\n",
            )
        ]
    },
    hidden_tests={
        "tests/test_split.py": [
            append_hidden('''
                def test_quoted_separator():
                    assert same(split_row('a,"b,c",d'), ["a", "b,c", "d"])


                def test_doubled_quote():
                    assert same(split_row('"say ""hi""",x'), ['say "hi"', "x"])
                '''),
        ]
    },
    fail_to_pass=["tests/test_split.py::test_quoted_separator", "tests/test_split.py::test_doubled_quote"],
    pass_to_pass=[
        "tests/test_split.py::test_plain",
        "tests/test_split.py::test_empty_fields",
        "tests/test_split.py::test_other_separator",
    ],
)
