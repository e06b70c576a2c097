"""Your own task, as the rows nemo_polar reads: a tiny repository, its hidden tests, its fix.

    python3 examples/own_tasks/make_rows.py OUT

writes OUT/textstats/ (the repository, committed: its commit is the task's base_commit), OUT/swe.jsonl (a
SWE-bench style row: `polar tasks check --swe`, `polar up dataset=...`) and OUT/gym.jsonl (the same task as a
NeMo Gym row with a `polar` block: `polar tasks check --gym`, `polar up dataset=...`, a recipe's data path).
Standard library only. Make your own by replacing repo/, the three diffs and PROBLEM.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TASK_ID = "textstats-1"
PROBLEM = (
    'word_count("a  b") returns 3, and word_count("one\\ntwo three") returns 2. Words are separated by any run '
    "of whitespace: spaces, tabs and newlines, leading and trailing ones included."
)
FAIL_TO_PASS = [
    f"tests/test_hidden.py::test_whitespace_runs[{c}]" for c in ("double-space", "newline", "padded", "tab")
]
PASS_TO_PASS = [
    "tests/test_words.py::test_one_word",
    "tests/test_words.py::test_two_words",
    "tests/test_words.py::test_empty",
]
# a fixed identity and date: the same files give the same base_commit on every machine
GIT_ENV = {
    "GIT_AUTHOR_NAME": "you", "GIT_AUTHOR_EMAIL": "you@localhost", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "you", "GIT_COMMITTER_EMAIL": "you@localhost",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
}  # fmt: skip


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, env=os.environ | GIT_ENV, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def make_repo(dest: Path) -> str:
    """repo/ copied to `dest` and committed once; the commit."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(HERE / "repo", dest, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    git(dest, "init", "-q", "--initial-branch=main")
    git(dest, "add", "-A")
    git(dest, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "textstats: initial")
    return git(dest, "rev-parse", "HEAD")


def swe_row(repo: Path, commit: str) -> dict:
    """The SWE-bench / SWE-Gym row: what `polar data swe`, `polar tasks check --swe` and `polar up` read."""
    return {
        "instance_id": TASK_ID,
        "repo": "you/textstats",
        "base_commit": commit,
        "problem_statement": PROBLEM,
        "patch": (HERE / "fix.diff").read_text(),  # the reference fix: `polar tasks check` expects 1 from it
        "test_patch": (HERE / "hidden_tests.diff").read_text(),  # applied after the agent's work, never shown to it
        "FAIL_TO_PASS": FAIL_TO_PASS,
        "PASS_TO_PASS": PASS_TO_PASS,
        "wrong_patch": (HERE / "wrong_fix.diff").read_text(),  # optional: a plausible fix that must get 0
        "repo_path": str(repo),  # on this machine; a row run in an image names its `image` instead
    }


def gym_row(swe: dict) -> dict:
    """The same task as a NeMo Gym row: the instruction as the user message, the `polar` block as the task."""
    fields = {k: v for k, v in swe.items() if k not in ("problem_statement", "repo_path")}
    return {
        "responses_create_params": {"input": [{"role": "user", "content": swe["problem_statement"]}]},
        "agent_ref": {"type": "responses_api_agents", "name": "polar_agent"},
        "polar": {
            "task_id": TASK_ID,
            "runtime": {"repo": swe["repo_path"], "commit": swe["base_commit"]},  # the recipe's runtime gives the kind
            "evaluator": {"kind": "tests"},  # the hidden tests; a recipe's own (swebench) needs an instance image
            "fields": fields,  # what the evaluator reads
        },
    }


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    repo = out.resolve() / "textstats"
    swe = swe_row(repo, make_repo(repo))
    (out / "swe.jsonl").write_text(json.dumps(swe) + "\n")
    (out / "gym.jsonl").write_text(json.dumps(gym_row(swe)) + "\n")
    print(
        json.dumps(
            {
                "repo": str(repo),
                "base_commit": swe["base_commit"],
                "rows": [str(out / "swe.jsonl"), str(out / "gym.jsonl")],
            }
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/own_tasks"))
