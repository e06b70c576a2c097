"""Dict merge: nested sections must merge, not replace, and the inputs must stay untouched."""

from ..model import BundledTask, append_hidden, src

TASK = BundledTask(
    name="deep_merge",
    summary="dict merge",
    problem_statement=src("""
        Layered configs lose keys. `merge({"db": {"host": "a", "port": 1}}, {"db": {"port": 2}})`
        returns `{"db": {"port": 2}}`: the override replaces the whole `db` section instead of
        merging into it. Nested dicts should merge recursively (the override wins on conflicts), and
        `merge` must not modify either argument.
        """),
    files={
        "layers/__init__.py": "",
        "layers/merge.py": src("""
            def merge(base: dict, override: dict) -> dict:
                \"\"\"`base` with `override` laid over it.\"\"\"
                out = dict(base)
                out.update(override)
                return out
            """),
        "tests/test_merge.py": src("""
            from layers.merge import merge


            def test_flat_override():
                assert merge({"a": 1, "b": 2}, {"b": 3}) == {"a": 1, "b": 3}


            def test_new_keys():
                assert merge({"a": 1}, {"c": {"d": 1}}) == {"a": 1, "c": {"d": 1}}
            """),
    },
    fix={
        "layers/merge.py": [
            (
                "    out.update(override)\n",
                "    for key, value in override.items():\n"
                "        if isinstance(value, dict) and isinstance(out.get(key), dict):\n"
                "            out[key] = merge(out[key], value)\n"
                "        else:\n"
                "            out[key] = value\n",
            )
        ]
    },
    # recursive, but writes into the caller's dict
    wrong_fix={
        "layers/merge.py": [
            (
                "    out = dict(base)\n    out.update(override)\n    return out",
                "    for key, value in override.items():\n"
                "        if isinstance(value, dict) and isinstance(base.get(key), dict):\n"
                "            base[key] = merge(base[key], value)\n"
                "        else:\n"
                "            base[key] = value\n"
                "    return base",
            )
        ]
    },
    hidden_tests={
        "tests/test_merge.py": [
            append_hidden("""
                def test_nested_sections_merge():
                    merged = merge({"db": {"host": "a", "port": 1}}, {"db": {"port": 2}})
                    assert same(merged, {"db": {"host": "a", "port": 2}})


                def test_inputs_untouched():
                    base, override = {"db": {"host": "a"}}, {"db": {"port": 2}}
                    merge(base, override)
                    assert same(base, {"db": {"host": "a"}}) and same(override, {"db": {"port": 2}})
                """),
        ]
    },
    fail_to_pass=["tests/test_merge.py::test_nested_sections_merge", "tests/test_merge.py::test_inputs_untouched"],
    pass_to_pass=["tests/test_merge.py::test_flat_override", "tests/test_merge.py::test_new_keys"],
)
