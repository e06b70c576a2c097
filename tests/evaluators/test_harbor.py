"""The `harbor` evaluator: a task's own tests/test.sh in a real sandbox (local bubblewrap, and the image
runtime on Debian's root filesystem), its reward file read as Harbor reads it, and every "no valid reward"
masked rather than scored 0."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nemo_polar.evaluators import EVALUATORS
from nemo_polar.evaluators.base import EvalContext
from nemo_polar.evaluators.harbor import pick, read_rewards
from nemo_polar.runtimes.base import copy_work
from nemo_polar.runtimes.spec import RuntimeSpec
from nemo_polar.tasks.check import ROOTFS_PYTHON

from ..conftest import DOCKER_MISSING


@pytest.mark.parametrize(
    "files, rewards, problem",
    [
        ({"reward.json": '{"reward": 0.25, "passed": 3}', "reward.txt": "1"}, {"reward": 0.25, "passed": 3.0}, None),
        ({"reward.txt": " 0.5\n"}, {"reward": 0.5}, None),
        ({"reward.json": '{"ok": true}'}, {"ok": 1.0}, None),  # Harbor takes booleans as 1/0
        ({"reward.json": "", "reward.txt": "1"}, {}, "reward.json is empty"),  # the JSON file still wins
        ({"reward.txt": ""}, {}, "reward.txt is empty"),
        ({"reward.json": "{oops"}, {}, "not JSON"),
        ({"reward.json": "[1]"}, {}, "flat object"),
        ({"reward.json": '{"reward": {"a": 1}}'}, {}, "not a finite number"),
        ({"reward.json": '{"reward": "1"}'}, {}, "not a finite number"),
        ({"reward.json": '{"reward": NaN}'}, {}, "not a finite number"),
        ({"reward.json": '{"reward": 1e309}'}, {}, "not a finite number"),
        ({"reward.txt": "inf"}, {}, "not a finite number"),
        ({"reward.txt": "passed"}, {}, "not a number"),
        ({}, {}, "wrote no reward"),
    ],
)
def test_reward_files_read_as_harbor_reads_them(tmp_path, files, rewards, problem):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    got, why = read_rewards(tmp_path)
    assert got == rewards
    assert (why is None) if problem is None else (problem in why)


def test_which_key_is_the_reward():
    assert pick({"reward": 0.0, "passed": 3.0}, "reward") == ("reward", None)
    assert pick({"accuracy": 0.5}, "reward") == ("accuracy", None)  # one key: that one, as Harbor's metrics do
    key, why = pick({"a": 1.0, "b": 0.0}, "reward")
    assert "no 'reward'" in why
    assert pick({"a": 1.0, "b": 0.0}, "b") == ("b", None)


def task_folder(root: Path, test_sh: str, toml: str = "[verifier]\ntimeout_sec = 30\n") -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test.sh").write_text("#!/bin/bash\n" + test_sh)
    (root / "tests" / "expected.txt").write_text("42\n")
    (root / "task.toml").write_text(toml)
    return root


def evaluate(tmp_path: Path, test_sh: str, block: dict, config: dict | None = None, agent: str = "echo 42 > out.txt"):
    """A session in runtime `block`: the agent's command, then what the gateway does before grading (what the
    agent left running killed, what it changed outside its working copy noted: `details["changed"]` here),
    then the evaluator, with a fresh sandbox of the image to carry the working copy to when it asks."""
    folder = task_folder(tmp_path / "task", test_sh)
    fields = {"harbor": {"path": str(folder), "workdir": "/app", "verifier_timeout_s": 30, "verifier_env": {"V": "x"}}}
    spec = RuntimeSpec.model_validate(block | {"network": "none"})
    made = []

    async def fresh_work():
        made.append(spec.make(tmp_path / "runs", "s1-eval", ""))
        await made[-1].start()
        await copy_work(made[0], made[-1])
        return made[-1]

    async def run():
        made.append(spec.make(tmp_path / "runs", "s1", ""))
        rt = made[0]
        await rt.start()
        try:
            rc, _, err = await rt.exec(["sh", "-c", agent], None, 30)
            assert rc == 0, err
            await rt.quiesce()
            changed = await rt.changed_outside()
            ctx = EvalContext(
                fields=fields, config=config or {}, work=rt.work, scratch=tmp_path / "scratch", home=rt.home,
                sandbox=rt if rt.in_image else None, fresh_work=fresh_work if rt.in_image else None,
                changed_outside=changed,
            )  # fmt: skip
            result = await EVALUATORS.make("harbor", config).evaluate(ctx)
            result.details["changed"] = changed
            return result
        finally:
            for box in made:
                await box.stop()

    return asyncio.run(run())


GRADES = 'if cmp -s out.txt /tests/expected.txt && [ "$PWD" = /app ] && [ "$V" = x ]; then r=1; else r=0; fi\n'


def runtimes() -> list[dict]:
    if not (ROOTFS_PYTHON / "bin" / "sh").exists():
        pytest.fail(f"no root filesystem at {ROOTFS_PYTHON}: run scripts/setup.sh rootfs")
    return [
        {"kind": "local"},
        {"kind": "image", "image": str(ROOTFS_PYTHON), "workdir": "/app"},
    ]  # as the task maps it


@pytest.mark.parametrize("kind", ["local", "image"])
def test_the_task_grades_the_agents_work_in_its_own_paths(tmp_path, kind):
    block = {b["kind"]: b for b in runtimes()}[kind]
    good = evaluate(
        tmp_path / "good", GRADES + 'echo "{\\"reward\\": $r, \\"extra\\": 7}" > /logs/verifier/reward.json\n', block
    )
    assert good.infrastructure_error is None and good.reward == 1.0 and good.components == {"reward": 1.0}
    assert good.details["rewards"] == {"reward": 1.0, "extra": 7.0}
    bad = evaluate(tmp_path / "bad", GRADES + "echo $r > /logs/verifier/reward.txt; exit 3\n", block, agent="true")
    assert bad.reward == 0.0 and bad.details["test_rc"] == 3  # the exit code means nothing; the file does


@pytest.mark.parametrize("kind", ["local", "image"])
def test_no_valid_reward_is_masked_never_zero(tmp_path, kind):
    block = {b["kind"]: b for b in runtimes()}[kind]
    # the agent leaves a reward of its own where the verifier writes: it is not taken
    cheat = "mkdir -p /logs/verifier 2>/dev/null; echo 1 > /logs/verifier/reward.txt 2>/dev/null; true"
    silent = evaluate(tmp_path / "silent", "echo ran\n", block, agent=cheat)
    assert silent.reward is None and "wrote no reward" in silent.infrastructure_error
    assert silent.details["log_tail"] == "ran\n"
    slow = evaluate(tmp_path / "slow", "sleep 30; echo 1 > /logs/verifier/reward.txt\n", block, {"timeout_s": 1})
    assert slow.reward is None and "timed out after 1 s" in slow.infrastructure_error
    nan = evaluate(tmp_path / "nan", "echo nan > /logs/verifier/reward.txt\n", block)
    assert nan.reward is None and "not a finite number" in nan.infrastructure_error


def test_a_row_without_its_task_is_masked(tmp_path):
    ctx = EvalContext(fields={"harbor": {"path": str(tmp_path / "gone")}}, config={}, work=tmp_path, scratch=tmp_path)
    result = asyncio.run(EVALUATORS.make("harbor").evaluate(ctx))
    assert result.reward is None and "test.sh: no such file" in result.infrastructure_error
    ctx.fields = {"instance_id": "a SWE-bench row"}
    assert "not a Harbor task row" in asyncio.run(EVALUATORS.make("harbor").evaluate(ctx)).infrastructure_error


# A verifier that takes a while and writes 0 unless the agent's work is right (it never is here).
SLOW_ZERO = (
    "sleep 1; if cmp -s out.txt /tests/expected.txt; then r=1; else r=0; fi; echo $r > /logs/verifier/reward.txt\n"
)
REWRITER = (  # detached from the harness, rewriting the reward while the verifier runs
    "setsid sh -c 'while true; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; sleep 0.05; done'"
    " </dev/null >/dev/null 2>&1 & echo 41 > out.txt"
)


def containers(docker_engine: bool) -> list[str]:
    return ["local", "image", *(["docker"] if docker_engine else [])]


def block_of(kind: str) -> dict:
    if kind == "docker":
        from nemo_polar.local.docker_engine import image_name

        return {"kind": "docker", "image": image_name("bookworm-python"), "workdir": "/app"}
    return {b["kind"]: b for b in runtimes()}[kind]


@pytest.fixture(params=["local", "image", "docker"])
def kind(request) -> str:
    if request.param == "docker":
        if DOCKER_MISSING:
            pytest.skip(DOCKER_MISSING)
        request.getfixturevalue("docker")
    return request.param


def test_what_the_agent_left_running_is_gone_before_the_verifier(tmp_path, kind):
    result = evaluate(tmp_path, SLOW_ZERO, block_of(kind), agent=REWRITER)
    assert result.reward == 0.0, result.details


def test_a_reward_planted_behind_a_link_is_not_taken(tmp_path, kind):
    """/logs a link to the agent's folder, a reward.json (which wins over reward.txt) waiting there."""
    plant = "mkdir -p /tmp/mine/verifier && echo '{\"reward\": 1}' > /tmp/mine/verifier/reward.json"
    plant += " && rm -rf /logs && ln -s /tmp/mine /logs; echo 41 > out.txt"
    result = evaluate(tmp_path, SLOW_ZERO, block_of(kind), agent=plant + (" || true" if kind == "local" else ""))
    assert result.reward == 0.0, result.details
    if kind != "local":  # a local session cannot even reach /logs
        assert "/logs is a link" in result.details["planted"]


def test_a_fresh_verifier_runs_nothing_the_agent_planted_in_its_image(tmp_path, kind):
    """`cmp`, which the verifier trusts, replaced ahead on PATH: paid in the agent's own environment (Harbor's
    way, `shared`), not in a fresh one, where the working copy alone is carried over."""
    fake = (
        "mkdir -p /usr/local/bin && printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/cmp && chmod +x /usr/local/bin/cmp"
    )
    agent = f"({fake}) 2>/dev/null; echo 41 > out.txt; mkdir -p sub && echo kept > sub/note"
    check = SLOW_ZERO.replace("sleep 1; ", "test -f sub/note || exit 3; ")
    fresh = evaluate(tmp_path / "fresh", check, block_of(kind), {"verifier": "fresh"}, agent=agent)
    assert fresh.reward == 0.0 and fresh.details["verifier"] == ("local" if kind == "local" else "fresh")
    right = evaluate(tmp_path / "right", check, block_of(kind), {"verifier": "fresh"}, agent=agent.replace("41", "42"))
    assert right.reward == 1.0, right.details  # the working copy itself is carried over
    if kind == "local":  # nothing of the host is the agent's to change
        assert fresh.details["changed"] == []
        return
    assert "/usr/local/bin/cmp" in fresh.details["changed"]
    shared = evaluate(tmp_path / "shared", check, block_of(kind), {"verifier": "shared"}, agent=agent)
    assert shared.reward == 1.0  # why `fresh` exists: Harbor's shared environment pays for the planted program
    auto = evaluate(tmp_path / "auto", check, block_of(kind), agent=agent)  # the default
    assert auto.reward is None and "rests on what the agent changed" in auto.infrastructure_error
    assert auto.details["outside_paid"] == 1.0
    auto_right = evaluate(tmp_path / "auto-right", check, block_of(kind), agent=agent.replace("41", "42"))
    assert auto_right.reward == 1.0 and auto_right.details["verifier"] == "fresh"


def test_auto_grades_in_the_agents_own_sandbox_when_it_changed_nothing_else(tmp_path):
    block = block_of("image")
    result = evaluate(tmp_path, GRADES + "echo $r > /logs/verifier/reward.txt\n", block)
    assert result.reward == 1.0 and result.details["verifier"] == "shared" and result.details["changed"] == []
