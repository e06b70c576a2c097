"""What a harness in a local sandbox can and cannot reach: real bubblewrap, real processes, a real
proxy (fake upstream). Inside, only the proxy answers, only the working copy and HOME are writable,
only its own key is accepted, and no key ends up in what is stored."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import sys
import uuid
from pathlib import Path

import pytest

from nemo_polar.runtimes.local import LocalRuntime
from nemo_polar.traces import build
from nemo_polar.traces.export import write_jsonl
from tests.conftest import make_proxy, records

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap not installed (apt-get install bubblewrap)"
)

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}

# a harness-like client run inside the sandbox: prints one JSON line per request it makes
CLIENT = r"""
import json, sys, urllib.request, urllib.error
url, key, body = sys.argv[1], sys.argv[2], sys.argv[3]
req = urllib.request.Request(url, data=body.encode(), method="POST", headers={
    "content-type": "application/json", "authorization": "Bearer " + key, "x-api-key": key})
try:
    with urllib.request.urlopen(req, timeout=20) as r:
        print(json.dumps({"status": r.status, "body": json.loads(r.read())}))
except urllib.error.HTTPError as e:
    print(json.dumps({"status": e.code, "body": json.loads(e.read())}))
"""


def go(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def in_sandbox(rt: LocalRuntime, argv: list[str]) -> tuple[int, str, str]:
    await rt.start()
    try:
        return await rt.exec(argv)
    finally:
        await rt.stop()


def call(rt: LocalRuntime, path: str, key: str, body: dict) -> dict:
    rc, out, err = go(in_sandbox(rt, [sys.executable, "-c", CLIENT, rt.proxy_url + path, key, json.dumps(body)]))
    assert rc == 0, err
    return json.loads(out)


@pytest.fixture
def listener():
    """A real TCP service on the host's loopback, which a sandbox must not reach."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        yield srv.getsockname()[1]


def test_only_the_proxy_is_reachable(proxy, session, listener, tmp_path):
    rt = LocalRuntime(tmp_path / "s", session_id="a", proxy_url=proxy.url)
    assert rt.sandboxed and rt.proxy_url == proxy.url  # a loopback URL means the same inside
    probe = f"import socket; socket.create_connection(('127.0.0.1', {listener}), timeout=5)"
    rc, _, err = go(in_sandbox(rt, [sys.executable, "-c", probe]))
    assert rc != 0 and "ConnectionRefusedError" in err
    # and the same probe outside reaches it: the refusal is the sandbox's doing
    socket.create_connection(("127.0.0.1", listener), timeout=5).close()

    got = call(LocalRuntime(tmp_path / "s", session_id="b", proxy_url=proxy.url), "/v1/chat/completions",
               session["api_key"], CHAT)  # fmt: skip
    assert got["status"] == 200 and got["body"]["choices"][0]["message"]["content"]
    (record,) = records(proxy, session["session_id"])
    assert record.status == "ok" and record.completion_token_ids


def test_network_none_reaches_nothing_not_even_the_proxy(proxy, tmp_path):
    rt = LocalRuntime(tmp_path / "s", proxy_url=proxy.url, network="none")
    assert rt.proxy_url is None
    port = proxy.url.rsplit(":", 1)[1]
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)"
    rc, _, err = go(in_sandbox(rt, [sys.executable, "-c", probe]))
    assert rc != 0 and "ConnectionRefusedError" in err


def test_writes_outside_work_and_home_fail(proxy, tmp_path):
    rt = LocalRuntime(tmp_path / "s", proxy_url=proxy.url)
    host_file = Path(__file__).resolve().parent / f"escape-{uuid.uuid4().hex}"  # the checkout, under /work
    private_tmp = tmp_path / "escape"  # /tmp inside is a private tmpfs: writable, but not the host's
    targets = [host_file, Path("/etc") / f"escape-{uuid.uuid4().hex}"]
    script = "; ".join(f"(echo x > {t}) 2>/dev/null && echo wrote {t}" for t in targets)
    script += f"; echo x > {private_tmp}"
    work, home = rt.inside_work, rt.inside_home
    script += f"; echo ok > {work}/a; echo ok > {home}/b; cat {work}/a {home}/b"

    async def body():
        await rt.start()
        try:
            return await rt.exec(["sh", "-c", script])
        finally:
            await rt.stop()

    rc, out, _ = go(body())
    assert out == "ok\nok\n"  # nothing reported as written outside
    assert not any(t.exists() for t in [*targets, private_tmp])
    assert not rt.folder.exists()


def test_root_in_the_sandbox_has_none_of_roots_powers_and_no_package_to_read(tmp_path):
    """Run as root, bubblewrap would keep every capability: a command could remount the host read-write or
    make its files immutable (and its session folder undeletable). Nor is this package there to import (the
    bundled tasks' fixes are in it), whatever the Python."""
    rt = LocalRuntime(tmp_path / "s")
    tries = {
        "remount": "mount -o remount,bind,rw / 2>&1 || mount -o remount,rw /usr 2>&1",
        "immutable": f"touch {rt.inside_work}/f && chattr +i {rt.inside_work}/f 2>&1",
        "package": f"{sys.executable} -c 'import nemo_polar.tasks.bundled' 2>&1",
    }

    async def body():
        await rt.start()
        try:
            return {name: await rt.exec(["sh", "-c", command]) for name, command in tries.items()}
        finally:
            await rt.stop()

    done = go(body())
    assert all(rc != 0 for rc, _, _ in done.values()), done
    assert "ModuleNotFoundError" in done["package"][1]
    assert not rt.folder.exists()  # nothing immutable was left to stop its removal


def test_another_nodes_key_is_refused_in_the_callers_dialect(fake_upstream, proxy, tmp_path):
    with make_proxy(fake_upstream.url, tmp_path / "other") as other:
        foreign = other.proxy.sessions.open().api_key  # a real key, of a session that is not ours
    cases = [
        ("/v1/chat/completions", CHAT, lambda b: b["error"]["type"]),
        (
            "/v1/messages",
            {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
            lambda b: b["type"] == "error" and b["error"]["type"],
        ),
    ]
    for i, (path, body, kind) in enumerate(cases):
        got = call(LocalRuntime(tmp_path / "s", session_id=f"k{i}", proxy_url=proxy.url), path, foreign, body)
        assert got["status"] == 401 and kind(got["body"]), got
    proxy.proxy.store.flush()
    assert proxy.proxy.store.sessions() == []  # an unknown key opens nothing


def test_no_key_in_stored_records_or_traces(proxy, session, tmp_path):
    key = session["api_key"]
    body = CHAT | {
        "api_key": key,  # some clients put it in the body too
        "messages": [
            {"role": "user", "content": "run env"},
            {"role": "assistant", "content": f"OPENAI_API_KEY={key}"},  # a tool output that printed it
            {"role": "user", "content": "hi"},
        ],
    }
    got = call(LocalRuntime(tmp_path / "s", session_id="e", proxy_url=proxy.url), "/v1/chat/completions", key, body)
    assert got["status"] == 200
    (record,) = records(proxy, session["session_id"])
    assert key not in record.model_dump_json()
    out = tmp_path / "traces.jsonl"
    write_jsonl(build([record], "prefix_tree"), out, session_id="e")
    assert key not in out.read_text()


def test_the_forwarder_and_the_tunnel_leave_nothing_behind(proxy, tmp_path):
    from tests.runtimes.test_local import alive_in_group

    rt = LocalRuntime(tmp_path / "s", proxy_url=proxy.url)

    async def body():
        await rt.start()
        socket_dir = rt.tunnel.folder
        try:
            # a background child as well: at the deadline the group goes, forwarder included
            return socket_dir, await rt.exec(["sh", "-c", "sleep 1000 & sleep 1000"], timeout=0.5)
        finally:
            await rt.stop()

    socket_dir, (rc, _, _) = go(body())
    assert rc == 124
    (pid,) = rt.groups.started
    assert alive_in_group(pid) == []
    assert not socket_dir.exists() and not rt.folder.exists()
