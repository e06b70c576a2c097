"""A session that abuses its sandbox, beside one that does not, in every runtime that runs here: the abuser ends with
its limit's reason (`runtime.limits`) and nothing of it is left, and its neighbour's work finishes as fast as it did
alone. Run with -s for the table (docs/sandboxes.md, "Limits")."""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest

from nemo_polar.cli.runtime_check import ROOTFS
from nemo_polar.local.docker_engine import image_name
from nemo_polar.runtimes.spec import RuntimeSpec

from ..conftest import requires_docker

LIMITS = {"processes": 128, "memory": "256m", "disk": "64m", "output": "8m"}
DEADLINE_S = 10.0  # the abuser's command: what a limit must end well before
# name -> (command, the reason it must end with; None: it ends at its deadline, every process of it killed)
ATTACKS = {
    "fork bomb": ("f() { f | f & }; f; sleep 60", "limit: processes (128)"),
    "memory balloon": ("tail /dev/zero", "limit: memory (256m)"),  # one line that never ends, held whole
    "disk fill": (
        "i=0; while :; do dd if=/dev/zero of=fill$i bs=1M count=4 2>/dev/null; i=$((i+1)); done",
        "limit: disk",
    ),
    "endless output": ("yes polar", "limit: output (8m)"),
    "ignores SIGTERM": ("trap '' TERM; (trap '' TERM; setsid sleep 600 &); sleep 600", None),
}
NEIGHBOUR = "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"  # a fixed piece of work: a shell counting
KINDS = {
    "local": lambda: {"kind": "local"},
    "image": lambda: {"kind": "image", "image": str(ROOTFS)},
    "docker": lambda: {"kind": "docker", "image": image_name("bookworm-python")},
}
TABLE: list[tuple[str, str, str, float, str, str]] = []


async def _neighbour(runtime, until: asyncio.Future) -> list[float]:
    """Seconds of each round of the neighbour's work, until `until` is done."""
    took = []
    while not until.done() or not took:
        t0 = time.monotonic()
        rc, _, err = await runtime.exec(["sh", "-c", NEIGHBOUR], timeout=60)
        assert rc == 0, err
        took.append(time.monotonic() - t0)
    return took


async def _left(runtime) -> list:
    """What of the session still runs once the gateway has ended the agent (`quiesce`): its cgroup's processes
    (local, image), or the container's beyond ours (a setsid'd process outlives its exec there, and goes here)."""
    await runtime.quiesce()
    await asyncio.sleep(0.5)
    if runtime.name == "docker":
        return await runtime.quiesce()
    return runtime.containment.kill_all()


def _abuse(kind: str, attack: str, root, docker_engine=None) -> dict:
    command, _ = ATTACKS[attack]
    spec = RuntimeSpec(**KINDS[kind](), network="none", limits=LIMITS)
    calm = RuntimeSpec(**KINDS[kind](), network="none")

    async def body() -> dict:
        abuser, neighbour = spec.make(root / "a", "abuser", ""), calm.make(root / "n", "neighbour", "")
        await abuser.start()
        await neighbour.start()
        try:
            alone = [await _wait(neighbour) for _ in range(3)]
            t0 = time.monotonic()
            attack_run = asyncio.ensure_future(abuser.exec(["bash", "-c", command], timeout=DEADLINE_S))
            beside = await _neighbour(neighbour, attack_run)
            rc, _, _ = await attack_run
            ended_s = time.monotonic() - t0
            return {
                "rc": rc,
                "ended_s": ended_s,
                "reason": abuser.exceeded(),
                "left": await _left(abuser),
                "alone_s": statistics.median(alone),
                "beside_s": max(beside),
                "rounds": len(beside),
                "folder": abuser.folder,
            }
        finally:
            await abuser.stop()
            await neighbour.stop()

    return asyncio.run(body())


async def _wait(runtime) -> float:
    t0 = time.monotonic()
    rc, _, err = await runtime.exec(["sh", "-c", NEIGHBOUR], timeout=60)
    assert rc == 0, err
    return time.monotonic() - t0


def _check(kind: str, attack: str, seen: dict) -> None:
    _, reason = ATTACKS[attack]
    TABLE.append(
        (
            kind,
            attack,
            seen["reason"] or f"its deadline (rc {seen['rc']})",
            seen["ended_s"],
            f"{seen['alone_s']:.2f}",
            f"{seen['beside_s']:.2f}",
        )
    )
    if reason is None:
        assert seen["reason"] is None and seen["ended_s"] < DEADLINE_S + 5, seen
    else:
        assert seen["reason"] is not None and seen["reason"].startswith(reason), seen
        assert seen["ended_s"] < DEADLINE_S - 2, seen  # the limit ended it, not its deadline
    assert seen["left"] == [], seen  # nothing of it ran on once it had ended
    assert not seen["folder"].exists()
    # the neighbour worked through it, each round within a second more than it took alone (2 cores, loaded by CI)
    assert seen["rounds"] >= 1 and seen["beside_s"] < seen["alone_s"] * 4 + 1.0, seen


@pytest.mark.parametrize("attack", list(ATTACKS))
@pytest.mark.parametrize("kind", ["local", "image"])
def test_an_abusive_session_ends_with_its_reason_and_its_neighbour_finishes(kind, attack, tmp_path):
    if kind == "image" and not (ROOTFS / "bin" / "sh").exists():
        pytest.fail(f"no root filesystem at {ROOTFS}: run scripts/setup.sh rootfs")
    _check(kind, attack, _abuse(kind, attack, tmp_path))


@requires_docker
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_abusive_container_ends_with_its_reason_and_its_neighbour_finishes(docker, attack, tmp_path):
    _check("docker", attack, _abuse("docker", attack, tmp_path))


@requires_docker
def test_a_container_has_a_process_limit_and_no_capability_beyond_what_harnesses_use(docker, tmp_path):
    """As the engine reports the container it runs (not our arguments): a process limit, `no-new-privileges`, and
    the bounding set of capabilities cut to eight."""
    spec = RuntimeSpec(kind="docker", image=image_name("bookworm-python"), network="none", limits={"processes": 77})

    async def body():
        runtime = spec.make(tmp_path, "caps", "")
        await runtime.start()
        try:
            runtime.container.reload()
            status = await runtime.exec(["sh", "-c", "grep -E '^(CapBnd|NoNewPrivs)' /proc/self/status"])
            return runtime.container.attrs["HostConfig"], status
        finally:
            await runtime.stop()

    host, (rc, status, _) = asyncio.run(body())
    assert host["PidsLimit"] == 77 and host["SecurityOpt"] == ["no-new-privileges"]
    assert host["CapDrop"] == ["ALL"] and len(host["CapAdd"]) == 8
    fields = dict(line.split(":\t") for line in status.strip().splitlines())
    assert rc == 0 and fields["NoNewPrivs"] == "1"
    assert bin(int(fields["CapBnd"], 16)).count("1") == 8  # docker's default grants 14


def teardown_module() -> None:
    if TABLE:
        print("\n| sandbox | attack | ended by | after (s) | neighbour alone (s) | neighbour beside it, slowest (s) |")
        print("|---|---|---|---|---|---|")
        for kind, attack, why, ended, alone, beside in TABLE:
            print(f"| {kind} | {attack} | {why} | {ended:.1f} | {alone} | {beside} |")
