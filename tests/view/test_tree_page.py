"""The chain tree of a long agent session in the browser: the merge benchmark's generated session 2
(75 turns rendered with the real Qwen tokenizer and Qwen3's reasoning-stripping template, two
sub-agents interleaved, a compaction) from a record store alone (`polar view --store`). Every
chain, fork, sub-agent, compaction and repaired drift the builder produced is on the page."""

from __future__ import annotations

import pytest

from nemo_polar.bench.sessions import qwen_tokenizer_dir
from nemo_polar.records import Session
from nemo_polar.store import SqliteStore
from nemo_polar.traces import build
from nemo_polar.view.app import ViewThread
from nemo_polar.view.sources import open_source
from nemo_polar.view.tree import chain_tree

pytestmark = pytest.mark.skipif(qwen_tokenizer_dir() is None, reason="the Qwen tokenizer (dev extra) is missing")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from nemo_polar.bench.merge_corpus import generate, qwen_tokenizer

    case = generate(3, 0, qwen_tokenizer())[2]
    path = tmp_path_factory.mktemp("store") / "records.sqlite"
    s = SqliteStore(path)
    s.add_session(Session(id=case.session_id, api_key="sk-x", created_at=0.0, metadata={"task_id": "merge-2"}))
    for r in case.records:
        s.add_record(r)
    s.close()
    return path, case


def test_the_tree_shows_every_chain_fork_and_drift_the_builder_produced(store, open_page):
    path, case = store
    tree = chain_tree(case.records, build(case.records))
    roles = [n["role"] for n in tree["nodes"]]
    assert {"sub-agent", "compaction", "repaired"} <= set(roles) and tree["forks"] >= 1
    with ViewThread(open_source(store=str(path)), tokenizer=str(qwen_tokenizer_dir())) as view:
        p = open_page(view.url, height=1200)
        page = p.go(f"/#/s/{case.session_id}")
        page.wait_for_selector(".tree")
        assert page.locator(".tree li.leaf").count() == tree["chains"]
        assert page.locator(".tree > li.root").count() == len(tree["roots"])
        assert page.locator(".tree .fork").count() == tree["forks"]
        for role in ("sub-agent", "compaction"):  # a chain's start says what started it
            assert page.locator(f".tree .role:text-is('{role}')").count() == roles.count(role)
        repaired = [n["drift"]["cause"] for n in tree["nodes"] if n["role"] == "repaired"]
        assert page.locator(".tree .drift.fixed").count() == len(repaired)
        assert page.locator(f".tree .drift.fixed:has-text('repaired: {repaired[0]}')").count() >= 1

        # a trace past a fork: the shared calls were trained in an earlier trace, so they show as such
        later = max(n["trace"] for n in tree["nodes"] if n["trace"] is not None)
        page.locator(f".tree a.to-trace[href$='/t/{later}']").click()
        page.wait_for_selector("body[data-trace-complete='1']")
        assert page.locator("#tokens .tok.k-o").count() > 0 and page.locator("#tokens .tok.k-t").count() > 0
        assert "text by" in page.inner_text(".facts-line")  # Qwen's own text, not ids
