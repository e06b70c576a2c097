"""Datasets: SWE-bench / SWE-Gym rows made into the Gym rows a recipe names (`data swe`), and the bundled
CPU task set, graded (`tasks check`) or written out (`tasks build`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _data_swe(args: argparse.Namespace) -> int:
    from ..tasks.gym_rows import write

    n = write(args.input, args.out, namespace=args.namespace, engine=args.engine)
    print(json.dumps({"rows": n, "out": str(Path(args.out).resolve())}))
    return 0


def _tasks_check(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from ..tasks.check import check_tasks, history_warnings
    from ..tasks.dataset import load_jsonl
    from ..tasks.harbor import load_dataset

    expected = None
    if args.expect:
        try:
            expected = json.loads(Path(args.expect).read_text())
        except ValueError as exc:
            raise ConfigError(f"--expect {args.expect}: not JSON: {exc}") from None
    rows = (load_jsonl(args.swe) if args.swe else []) + (_gym_task_rows(args.gym) if args.gym else [])
    if rows:  # rows of your own: graded on their repo_path, and what their repositories carry past base_commit
        report = check_tasks((), args.workers, [], [], expected, rows)
    elif args.harbor:  # a folder of the user's own: its Harbor tasks alone
        report = check_tasks((), args.workers, load_dataset(args.harbor), expected=expected)
    else:
        report = check_tasks(workers=args.workers, expected=expected)
    report["warnings"] = history_warnings(rows)
    if args.json:
        print(json.dumps(report))
    else:
        n, took = report["tasks"], report["elapsed_s"]
        if n:
            print(f"{report['correct']}/{report['checks']} checks right over {n} tasks in {took}s")
        for f in report["failures"]:
            where = f" ({f['runtime']})" if "runtime" in f else ""
            print(f"  {f['task']} {f['check']}{where}: got {f['got']}, expected {f['expected']}: {f['detail']}")
        for w in report["warnings"]:
            print(f"  warning: {w['task']}: {w['warning']} (sessions get it cut at base_commit)")
    return 0 if not report["failures"] else 1


def _gym_task_rows(path: str) -> list:
    """Gym rows (`polar` block: instruction, fields, runtime.repo and commit) as SWE rows, read as our agent
    reads them in training (`env.gym.task_from_row`)."""
    from ..env.gym import task_from_row
    from ..tasks.dataset import parse_row

    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        gym_row = json.loads(line)
        task = task_from_row(gym_row, {"harness": {"name": "codex"}})  # any harness: its task's own keys are read
        name = (gym_row.get("polar") or {}).get("task_id") or f"row-{n}"
        row = {"instance_id": name, "repo": name, "problem_statement": task.instruction}
        row |= {k: v for k, v in {"repo_path": task.runtime.repo, "base_commit": task.runtime.commit}.items() if v}
        out.append(parse_row(row | task.fields, f"{path}:{n}"))
    return out


def _tasks_build(args: argparse.Namespace) -> int:
    from ..tasks.materialize import build

    print(build(args.out))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    data = sub.add_parser("data", help="datasets for training").add_subparsers(dest="action", required=True)
    dswe = data.add_parser("swe", help="SWE-bench / SWE-Gym rows (JSONL or parquet) -> the Gym rows a recipe names")
    dswe.add_argument("input", help="a .jsonl or .parquet file of SWE-bench / SWE-Gym rows")
    dswe.add_argument("--out", required=True, help="e.g. $POLAR_DATA_DIR/swe_gym/train.jsonl")
    dswe.add_argument("--namespace", default="swebench", help="the instance images' registry namespace")
    dswe.add_argument("--engine", default="apptainer", choices=["apptainer", "docker"], help="how images are named")
    dswe.set_defaults(func=_data_swe)

    tasks = sub.add_parser("tasks", help="the bundled CPU task set").add_subparsers(dest="action", required=True)
    tcheck = tasks.add_parser(
        "check",
        help="grade every task's reference fix (1), no change (0), wrong fix (0); Harbor tasks in local, image and "
        "docker",
    )
    tcheck.add_argument("--json", action="store_true", help="one JSON object on one line")
    tcheck.add_argument("--workers", type=int, default=None, help="tasks graded at once")
    tcheck.add_argument(
        "--harbor",
        default=None,
        metavar="DIR",
        help="a folder of Harbor tasks of your own, instead of the bundled set",
    )
    tcheck.add_argument(
        "--swe",
        default=None,
        metavar="FILE",
        help="a JSONL of SWE rows of your own, instead of the bundled set: each graded on its repo_path (patch 1, "
        "no change 0, wrong_patch 0), and a warning for each repo_path that holds history past its base_commit",
    )
    tcheck.add_argument(
        "--gym",
        default=None,
        metavar="FILE",
        help="a JSONL of Gym rows of your own (their polar block: instruction, fields, runtime.repo and commit), "
        "graded as --swe grades",
    )
    tcheck.add_argument(
        "--expect",
        default=None,
        metavar="FILE",
        help='JSON: per task, what a check gives other than 1 / 0 / 0, e.g. {"org/t": {"reference": 0.5, '
        '"no_change": "masked"}}',
    )
    tcheck.set_defaults(func=_tasks_check)
    tbuild = tasks.add_parser("build", help="write the task repos and OUT/tasks.jsonl (SWE-bench style rows)")
    tbuild.add_argument("--out", required=True, help="the folder to write into (made if missing)")
    tbuild.set_defaults(func=_tasks_build)
