"""The control routes' token check: every token is compared in constant time, on every server."""

from __future__ import annotations

import hmac

import httpx
import pytest

from nemo_polar import control
from nemo_polar.config import ProxyConfig
from nemo_polar.proxy.app import Proxy
from nemo_polar.server.gateway.node import GatewayNode, NodeConfig, NodeThread
from nemo_polar.server.rollout import RolloutConfig, RolloutThread
from nemo_polar.serving import free_port


@pytest.fixture
def compared(monkeypatch) -> list[tuple[bytes, bytes]]:
    """Every comparison `control` makes, through hmac.compare_digest (it still decides)."""
    seen: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a, b):
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(control.hmac, "compare_digest", spy)
    return seen


def test_token_ok():
    assert control.token_ok(None, None) and control.token_ok(None, "anything")  # no token configured: open
    assert control.token_ok("s3cret", "s3cret")
    assert not control.token_ok("s3cret", "s3cre") and not control.token_ok("s3cret", None)
    assert not control.token_ok("s3cret", "s3crét")  # not ASCII: refused, not a TypeError


def test_the_rollout_server_compares_in_constant_time(tmp_path, compared):
    cfg = RolloutConfig(port=0, control_token="s3cret", dispatch=False, store={"path": str(tmp_path / "r.sqlite")})
    with RolloutThread(cfg) as srv:
        r = httpx.post(srv.url + "/tasks", json={}, headers={"x-polar-control-token": "s3cre"})
        assert r.status_code == 401
        ok = httpx.post(srv.url + "/nodes/n/drain", headers={"x-polar-control-token": "s3cret"})
        assert ok.status_code == 404  # past the token: no such node
    assert compared == [(b"s3cre", b"s3cret"), (b"s3cret", b"s3cret")]


def test_a_node_compares_in_constant_time_on_its_routes_and_the_proxys_admin(fake_upstream, tmp_path, compared):
    port = free_port()
    proxy_cfg = ProxyConfig.model_validate(
        {"port": port, "store": {"path": str(tmp_path / "records.sqlite")}, "upstream": {"url": fake_upstream.url}}
    )
    node = GatewayNode(
        NodeConfig(rollout_url="http://127.0.0.1:9", public_url=f"http://127.0.0.1:{port}", root=str(tmp_path / "n")),
        Proxy(proxy_cfg),
    )
    with NodeThread(node, "127.0.0.1", port):
        url, wrong = f"http://127.0.0.1:{port}", {"x-polar-control-token": "guess"}
        assert httpx.delete(url + "/sessions/x", headers=wrong).status_code == 401
        assert httpx.post(url + "/admin/inference/pause", headers=wrong).status_code == 401
        right = {"x-polar-control-token": node.control_token}
        assert httpx.get(url + "/admin/inference/status", headers=right).status_code == 200
    node.proxy.close()
    token = node.control_token.encode()
    assert compared == [(b"guess", token), (b"guess", token), (token, token)]
