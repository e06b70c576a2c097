"""RuntimeSpec validation, the factory, and the proxy's URL as a sandbox sees it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from nemo_polar.contracts import TaskSpec
from nemo_polar.runtimes.base import inside_url, proxy_address
from nemo_polar.runtimes.local import LocalRuntime
from nemo_polar.runtimes.spec import RuntimeSpec


def test_defaults_are_a_local_sandbox_reaching_only_the_proxy():
    spec = TaskSpec(instruction="x", harness={"name": "pi"}).runtime
    assert (spec.kind, spec.network, spec.options) == ("local", "proxy", {})
    assert LocalRuntime.parse_settings(spec.options).sandbox


@pytest.mark.parametrize(
    ("data", "names"),
    [
        ({"kind": "docker"}, "runtime.image"),
        ({"kind": "apptainer"}, "runtime.image"),
        ({"kind": "local", "image": "python:3.11"}, "runtime.image"),
        ({"kind": "local", "cpus": 2}, "runtime.cpus"),
        ({"kind": "docker", "image": "i", "sandbox": False}, "runtime.sandbox"),
        ({"kind": "image", "image": "i", "cpus": 1}, "runtime.cpus"),
        ({"kind": "image", "image": "relative/folder"}, "absolute folders"),
        ({"kind": "docker", "image": "i", "workdir": "/polar/x"}, "runtime.workdir"),
        ({"kind": "docker", "image": "i", "volumes": ["/a"]}, "runtime.volumes"),
        ({"kind": "docker", "image": "i", "memory": "two gigs"}, "memory"),
        ({"kind": "docker", "image": "i", "cpus": 0}, "cpus"),
        ({"kind": "docker", "image": "i", "network": "bridge"}, "network"),
        ({"kind": "podman", "image": "i"}, "kind"),
    ],
)
def test_invalid_specs_name_the_key(data, names):
    with pytest.raises(ValidationError) as exc:
        TaskSpec.model_validate({"instruction": "x", "harness": {"name": "pi"}, "runtime": data})
    assert names in str(exc.value)


def test_container_specs_validate():
    spec = RuntimeSpec(kind="docker", image="python:3.11-slim", cpus=1.5, memory="2g", network="none")
    assert spec.options == {"image": "python:3.11-slim", "cpus": 1.5, "memory": "2g"} and spec.network == "none"


def test_factory_builds_a_local_runtime(tmp_path):
    spec = RuntimeSpec(repo=str(tmp_path), network="host")
    rt = spec.make(tmp_path / "root", "s1", "http://127.0.0.1:8800")
    assert isinstance(rt, LocalRuntime)
    assert rt.folder == (tmp_path / "root" / "s1").resolve() and rt.repo == tmp_path and rt.network == "host"


def test_apptainer_without_the_binary_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("POLAR_APPTAINER_BIN", raising=False)
    with pytest.raises(RuntimeError, match="apptainer"):
        RuntimeSpec(kind="apptainer", image="x.sif").make(tmp_path, "s1", "http://127.0.0.1:1")


@pytest.mark.parametrize(
    ("url", "inside", "listen"),
    [
        ("http://127.0.0.1:8800", "http://127.0.0.1:8800", ["127.0.0.1:8800"]),
        ("http://localhost:8800/v1", "http://localhost:8800/v1", ["127.0.0.1:8800", "[::1]:8800"]),
        ("http://0.0.0.0:8800", "http://0.0.0.0:8800", ["127.0.0.1:8800"]),
        ("http://10.1.2.3:8800/v1", "http://127.0.0.1:8800/v1", ["127.0.0.1:8800"]),
        ("http://node7.cluster:9000", "http://127.0.0.1:9000", ["127.0.0.1:9000"]),
    ],
)
def test_the_proxy_url_inside_a_sandbox(url, inside, listen):
    assert inside_url(url) == (inside, listen)


def test_the_proxy_address_outside():
    assert proxy_address("http://0.0.0.0:8800") == ("127.0.0.1", 8800)
    assert proxy_address("http://node7:9000/v1") == ("node7", 9000)
