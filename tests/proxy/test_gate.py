"""The generation gate's hold: released once by whoever holds it, whatever ends the call."""

from __future__ import annotations

import asyncio

import pytest

from nemo_polar.errors import Paused
from nemo_polar.proxy.gate import GenerationGate


def test_a_hold_counts_once_however_often_it_is_released():
    async def main() -> None:
        changes: list[int] = []
        gate = GenerationGate(track=changes.append)
        hold = gate.enter()
        assert hold is not None and gate.status() == {"paused": False, "inflight": 1}
        hold.release()
        hold.release()
        with hold:  # a hold already released leaves nothing more when its block ends
            pass
        assert gate.inflight == 0 and changes == [+1, -1]

    asyncio.run(main())


def test_a_block_that_fails_or_is_cancelled_releases_its_hold():
    async def main() -> None:
        gate = GenerationGate()

        async def call() -> None:
            with gate.enter():
                await asyncio.sleep(10)

        task = asyncio.ensure_future(call())
        await asyncio.sleep(0)
        assert gate.inflight == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(RuntimeError), gate.enter():
            raise RuntimeError("a failed call")
        assert gate.inflight == 0

    asyncio.run(main())


def test_a_paused_gate_holds_new_calls_and_drains_once_the_holds_are_released():
    async def main() -> None:
        gate = GenerationGate(wait_s=0.05)
        running = gate.enter()
        assert running is not None
        pausing = asyncio.ensure_future(gate.pause(timeout_s=5))
        await asyncio.sleep(0)
        assert gate.enter() is None and not pausing.done()
        with pytest.raises(Paused):
            await gate.wait()
        running.release()
        assert await pausing
        waiting = asyncio.ensure_future(gate.wait())
        gate.resume()
        (await waiting).release()
        assert gate.status() == {"paused": False, "inflight": 0}

    asyncio.run(main())
