"""`polar view --rollout URL`: the page follows a running rollout server (through RolloutAPI): a task
submitted while the page is open appears, and a session's result changes its row, without a reload."""

from __future__ import annotations

import asyncio
import threading

from nemo_polar.contracts import HarnessSpec, SessionResult, TaskSpec, Timing
from nemo_polar.server.client import RolloutAPI
from nemo_polar.server.rollout import RolloutConfig, RolloutThread
from nemo_polar.states import SessionState
from nemo_polar.view.app import ViewThread
from nemo_polar.view.remote import RolloutSource


def off_thread(coro_fn, *args):
    """The control-plane client in a thread of its own: the page's driver holds this one's event loop."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(asyncio.run(coro_fn(*args))))
    t.start()
    t.join(30)
    return out[0]


async def submit(url: str) -> dict:
    async with RolloutAPI(url) as api:
        task_id = await api.submit(
            TaskSpec(task_id="live", instruction="Say hi.", harness=HarnessSpec(name="pi"), num_samples=2)
        )
        return await api.task(task_id)


async def finish(url: str, session_id: str) -> None:
    timing = Timing(init_s=0.2, run_s=3.0, postrun_s=0.1)
    result = SessionResult(
        session_id=session_id, task_id="live", status=SessionState.COMPLETED, reward=1.0, timing=timing
    )
    async with RolloutAPI(url) as api:
        assert await api.deliver(result)


def test_the_page_follows_a_running_rollout_server(tmp_path, open_page):
    cfg = RolloutConfig(port=0, dispatch=False, store={"path": str(tmp_path / "rollout.sqlite")})
    with RolloutThread(cfg) as rollout, ViewThread(RolloutSource(rollout.url)) as view:
        p = open_page(view.url)
        page = p.go("/")
        page.wait_for_selector("#live.on")
        assert page.locator(".row.session").count() == 0

        task = off_thread(submit, rollout.url)
        page.wait_for_function("document.querySelectorAll('.row.session').length === 2", timeout=15_000)
        assert page.locator(".row.session .st-registered").count() == 2

        first = task["sessions"][0]["session_id"]
        off_thread(finish, rollout.url, first)
        page.wait_for_selector(f".row.session[data-sid='{first}'] .st-completed", timeout=15_000)
        assert page.locator(".row.session .st-registered").count() == 1
