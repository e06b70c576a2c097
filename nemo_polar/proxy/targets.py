"""Where calls go: the configured inference server, and the ones sessions name, each as the
`UpstreamInfo` its records carry (engine, url, model, the policy version the operator set)."""

from __future__ import annotations

from ..config import UpstreamConfig
from ..records import UpstreamInfo


def base_url(url: str) -> str:
    """An inference server's address without a trailing `/v1` (NeMo-RL hands out `.../v1`)."""
    return url.rstrip("/").removesuffix("/v1")


class Targets:
    def __init__(self, up: UpstreamConfig):
        self.info = UpstreamInfo(  # the configured server
            engine=up.engine, url=base_url(up.url), model=up.model or "", policy_version=up.policy_version
        )
        self._known: dict[tuple[str, str], UpstreamInfo] = {}

    def get(self, url: str, model: str) -> UpstreamInfo:
        """The target at `url` serving `model`, built once."""
        target = self._known.get((url, model))
        if target is None:
            target = self._known[(url, model)] = self.info.model_copy(update={"url": url, "model": model})
        return target

    def set_policy_version(self, version: str) -> None:
        self.info = self.info.model_copy(update={"policy_version": version})
        self._known.clear()  # they carry the version too
