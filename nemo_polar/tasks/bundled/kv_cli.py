"""A small CLI: `kv get` of a missing key must fail with exit code 1 and a message on stderr."""

from ..model import BundledTask, append_hidden, src

TASK = BundledTask(
    name="kv_cli",
    summary="command line",
    problem_statement=src("""
        `python -m kvstore FILE get KEY` prints `None` and exits 0 when KEY is not in the store, so
        shell scripts cannot tell a missing key from a key whose value is the text "None". It should
        print `error: no key KEY` to stderr, nothing to stdout, and exit with status 1.
        """),
    files={
        "kvstore/__init__.py": "",
        "kvstore/__main__.py": src("""
            import sys

            from .cli import main

            sys.exit(main())
            """),
        "kvstore/cli.py": src("""
            import argparse
            import json
            import sys
            from pathlib import Path


            def main(argv=None) -> int:
                p = argparse.ArgumentParser(prog="kvstore")
                p.add_argument("file")
                sub = p.add_subparsers(dest="action", required=True)
                get = sub.add_parser("get")
                get.add_argument("key")
                put = sub.add_parser("set")
                put.add_argument("key")
                put.add_argument("value")
                args = p.parse_args(argv)
                path = Path(args.file)
                data = json.loads(path.read_text()) if path.exists() else {}
                if args.action == "set":
                    data[args.key] = args.value
                    path.write_text(json.dumps(data, sort_keys=True))
                    return 0
                print(data.get(args.key))
                return 0
            """),
        "tests/test_cli.py": src("""
            from kvstore.cli import main


            def test_set_then_get(tmp_path, capsys):
                store = str(tmp_path / "s.json")
                assert main([store, "set", "a", "1"]) == 0
                assert main([store, "get", "a"]) == 0
                assert capsys.readouterr().out == "1\\n"


            def test_set_overwrites(tmp_path, capsys):
                store = str(tmp_path / "s.json")
                main([store, "set", "a", "1"])
                main([store, "set", "a", "2"])
                main([store, "get", "a"])
                assert capsys.readouterr().out.splitlines()[-1] == "2"
            """),
    },
    fix={
        "kvstore/cli.py": [
            (
                "    print(data.get(args.key))\n",
                "    if args.key not in data:\n"
                '        print(f"error: no key {args.key}", file=sys.stderr)\n'
                "        return 1\n"
                "    print(data[args.key])\n",
            )
        ]
    },
    # reports the problem, but on stdout and with a zero status
    wrong_fix={
        "kvstore/cli.py": [
            (
                "    print(data.get(args.key))\n",
                '    print(data.get(args.key, f"error: no key {args.key}"))\n',
            )
        ]
    },
    hidden_tests={
        "tests/test_cli.py": [
            append_hidden("""
                def test_missing_key_fails(tmp_path, capsys):
                    store = str(tmp_path / "s.json")
                    main([store, "set", "a", "1"])
                    capsys.readouterr()
                    assert same(main([store, "get", "b"]), 1)
                    captured = capsys.readouterr()
                    assert captured.out == "" and captured.err == "error: no key b\\n"
                """),
        ]
    },
    fail_to_pass=["tests/test_cli.py::test_missing_key_fails"],
    pass_to_pass=["tests/test_cli.py::test_set_then_get", "tests/test_cli.py::test_set_overwrites"],
)
