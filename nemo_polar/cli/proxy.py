"""`polar proxy`: the token-faithful proxy alone, capturing what passes through it."""

from __future__ import annotations

import argparse

from ..errors import ConfigError
from .parsing import ConfigFile


def _proxy(args: argparse.Namespace) -> int:
    from ..control import LOOPBACK
    from ..proxy.backends import BACKENDS
    from ..proxy.serve import serve

    config = args.config.load(args.overrides)
    if config.control_token is None and config.host not in LOOPBACK:  # a node's proxy is guarded by the node
        raise ConfigError(f"host={config.host}: a proxy listening beyond loopback needs control_token (admin routes)")
    backend = BACKENDS[config.upstream.engine]
    if config.upstream.model is None and not backend.lists_models:  # else every call would fail the same way
        raise ConfigError(backend.no_model_name())
    serve(config)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    proxy = sub.add_parser("proxy", help="run the token-faithful proxy alone (capture only)")
    proxy.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. upstream.url=http://h:8000 port=8800")
    proxy.set_defaults(func=_proxy, config=ConfigFile("proxy", "nemo_polar.config:ProxyConfig"))
