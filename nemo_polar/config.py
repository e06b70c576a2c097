"""Typed configuration: Hydra composes `conf/`, pydantic validates each section strictly.

A typo fails at start-up with the key's full name (`upstream.engin: Extra inputs are not
permitted`), never later and never silently.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ConfigError, problems

CONF_DIR = Path(os.environ.get("POLAR_CONF_DIR", Path(__file__).resolve().parent.parent / "conf"))


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UpstreamConfig(Strict):
    url: str = "http://127.0.0.1:8801"
    engine: Literal["vllm", "sglang", "nemo_rl"] = "vllm"
    model: str = Field("tiny", description="the served model name every call is sent to")
    timeout_s: float = Field(900.0, gt=0)
    connect_timeout_s: float = Field(10.0, gt=0)
    sampling: dict[str, float | int] = Field(default_factory=dict, description="pinned, overrides the harness")
    policy_version: str | None = None


class StoreConfig(Strict):
    path: str = "runs/proxy/records.sqlite"


class LimitsConfig(Strict):
    max_body_bytes: int = Field(32 * 2**20, gt=0)
    max_tokens: int | None = Field(None, gt=0, description="cap on each call's output tokens")


class ProxyConfig(Strict):
    host: str = "127.0.0.1"
    port: int = Field(8800, ge=0, le=65535)
    control_token: str | None = Field(None, description="required on /admin routes when set")
    pause_wait_s: float = Field(600.0, gt=0, description="how long a call waits while generation is paused")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    upstream: UpstreamConfig = UpstreamConfig()
    store: StoreConfig = StoreConfig()
    limits: LimitsConfig = LimitsConfig()


M = TypeVar("M", bound=BaseModel)


def validate(model: type[M], data: dict[str, Any]) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems(exc))) from None


def compose(config_name: str, overrides: list[str]) -> dict[str, Any]:
    """Compose `conf/<config_name>.yaml` with Hydra command-line overrides."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            cfg = hydra_compose(config_name=config_name, overrides=overrides)
    except HydraException as exc:
        raise ConfigError(str(exc)) from None
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def load(model: type[M], config_name: str, overrides: list[str]) -> M:
    return validate(model, compose(config_name, overrides))
