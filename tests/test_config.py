"""Configuration: Hydra overrides, strict validation that names the wrong key."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nemo_polar.config import ProxyConfig, load
from nemo_polar.errors import ConfigError


def test_overrides_reach_the_typed_config():
    cfg = load(ProxyConfig, "proxy", ["port=9000", "upstream.engine=nemo_rl", "+upstream.sampling.top_p=0.9"])
    assert cfg.port == 9000 and cfg.upstream.engine == "nemo_rl" and cfg.upstream.sampling == {"top_p": 0.9}


@pytest.mark.parametrize(
    "override,key",
    [
        ("upstream.engin=vllm", "upstream.engin"),
        ("upstream.engine=tgi", "upstream.engine"),
        ("limits.max_tokens=-3", "limits.max_tokens"),
        ("port=http", "port"),
    ],
)
def test_a_wrong_key_or_value_fails_with_its_name(override, key):
    with pytest.raises(ConfigError) as exc:
        load(ProxyConfig, "proxy", [override])
    assert key in str(exc.value)


def test_polar_proxy_refuses_a_typo_at_start():
    proc = subprocess.run(
        [sys.executable, "-m", "nemo_polar.cli", "proxy", "upstream.urll=http://x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "upstream.urll" in proc.stderr
