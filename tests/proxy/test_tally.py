"""What a session's calls came to at the proxy (`Sessions.tally`): every call that reached it with the session's
key, those refused before they were forwarded, and the proxy's own time over the calls recorded, streamed ones
included (the upstream's time left out: the added-latency metric counts them too now)."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import records

from .dialect_cases import CASES, IDS


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_calls_made_recorded_and_refused_add_up(case, proxy):
    session = proxy.proxy.sessions.open(max_calls=2)
    for stream in (True, False, True):  # the third is past the budget: refused, not recorded
        r = httpx.post(
            proxy.url + case.path(stream), json=case.body("hi", stream), headers=case.headers(session.api_key)
        )
        assert r.status_code == (400 if stream and len(records(proxy, session.id)) == 2 else 200), r.text
    bad = httpx.post(proxy.url + case.path(False), content=b"{", headers=case.headers(session.api_key))
    assert bad.status_code == 400
    tally = proxy.proxy.sessions.tally(session.id)
    assert (tally.arrived, tally.refused, len(records(proxy, session.id))) == (4, 2, 2)
    assert tally.timed == 2 and 0 < tally.added_max_s <= tally.added_s < 1.0
    added = proxy.proxy.metrics.added.collect()[0].samples
    assert next(s.value for s in added if s.name.endswith("_count")) == 2  # the streamed call is measured too
    proxy.proxy.sessions.close(session.id)
    assert session.id not in proxy.proxy.sessions._tallies  # nothing kept of a closed session
