"""Typed configuration: Hydra composes `conf/`, pydantic validates each section strictly.

A typo fails at start-up with the key's full name (`upstream.engin: Extra inputs are not
permitted`), never later and never silently.

Config groups (`conf/<group>/<option>.yaml`) are picked on the command line: `polar up backend=sglang
harness=codex runtime=docker`. A group's choice lands at the root under the group's name. Most are
sections of the typed config (`harness`, `runtime`, `builder`, `evaluator`, `dataset`, `topology`);
`backend` is a selector the proxy section reads by interpolation (`upstream.engine: ${backend.engine}`),
validated here and then dropped. `proxy` is the proxy section itself (`proxy: default | cluster`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ConfigError, problems
from .session_cache import DEFAULT_LIMIT

CONF_DIR = Path(os.environ.get("POLAR_CONF_DIR", Path(__file__).resolve().parent.parent / "conf"))


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UpstreamConfig(Strict):
    url: str = "http://127.0.0.1:8801"
    engine: Literal["vllm", "sglang", "nemo_rl"] = "vllm"
    model: str | None = Field(
        None,
        description="the name the server serves the policy under; null: the session's own (a task's "
        "upstream_model, e.g. NeMo-RL's policy.model_name), else the first model the server's /v1/models lists",
    )
    timeout_s: float = Field(900.0, gt=0)
    connect_timeout_s: float = Field(10.0, gt=0)
    sampling: dict[str, float | int] = Field(default_factory=dict, description="pinned, overrides the harness")
    policy_version: str | None = None


class StoreConfig(Strict):
    path: str = "runs/proxy/records.sqlite"
    durable: bool = Field(
        True, description="hold an answer's last byte until its record is committed (kill -9 loses no answer)"
    )
    flush_timeout_s: float = Field(30.0, gt=0, description="reading a session's records waits this long")


class LimitsConfig(Strict):
    max_body_bytes: int = Field(32 * 2**20, gt=0)
    max_depth: int = Field(
        100, gt=0, le=200, description="JSON nesting a request may have (tool schemas nest; records store up to 254)"
    )
    max_tokens: int | None = Field(None, gt=0, description="cap on each call's output tokens")
    session_cache_bytes: int = Field(
        DEFAULT_LIMIT,
        gt=0,
        description="what open sessions' last histories, prompt ids and records may hold, to make their next "
        "calls cheap (least recently used dropped first; closed sessions' at once)",
    )


class ProxyConfig(Strict):
    host: str = "127.0.0.1"
    port: int = Field(8800, ge=0, le=65535)
    control_token: str | None = Field(None, description="required on /admin routes when set")
    pause_wait_s: float = Field(600.0, gt=0, description="how long a call waits while generation is paused")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    upstream: UpstreamConfig = UpstreamConfig()
    store: StoreConfig = StoreConfig()
    limits: LimitsConfig = LimitsConfig()


class BackendConfig(Strict):
    """`conf/backend/*.yaml`: which inference server the proxy talks to and the sampling it pins."""

    engine: Literal["vllm", "sglang", "nemo_rl"] = "vllm"
    sampling: dict[str, float | int] = Field(default_factory=dict)


# Root sections that only feed others by interpolation: validated, then removed before the model sees them.
SELECTORS: dict[str, type[BaseModel]] = {"backend": BackendConfig}
# Groups that also take a plain value: `dataset=rows.jsonl` (not an option) means the option `file`
# with `path=rows.jsonl`.
VALUE_GROUPS: dict[str, tuple[str, str]] = {"dataset": ("file", "path")}
# A group placed at the root of a primary config (`proxy@_here_` in proxy.yaml) is overridden as `proxy=...`.
ROOT_GROUPS: dict[str, tuple[str, ...]] = {"proxy": ("proxy",)}

M = TypeVar("M", bound=BaseModel)


def invalid(found: list[str]) -> ConfigError:
    """One wrong key on the line that says so; several, one a line."""
    return ConfigError("invalid configuration:" + (" " if len(found) == 1 else "\n  ") + "\n  ".join(found))


def validate(model: type[M], data: dict[str, Any]) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid(problems(exc)) from None


def _is_option(group: str, value: str) -> bool:
    return (CONF_DIR / group / f"{value}.yaml").is_file()


def rewrite(config_name: str, overrides: list[str]) -> list[str]:
    """The two shorthands Hydra cannot spell by itself (see VALUE_GROUPS and ROOT_GROUPS)."""
    out = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key in VALUE_GROUPS and value and not _is_option(key, value):
            option, field = VALUE_GROUPS[key]
            out += [f"{key}={option}", f"{key}.{field}={value}"]
            continue
        if sep and key in ROOT_GROUPS.get(config_name, ()):
            item = f"{key}@_global_={value}"
        out.append(item)
    return out


def compose(config_name: str, overrides: list[str]) -> dict[str, Any]:
    """Compose `conf/<config_name>.yaml` with Hydra command-line overrides."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf import OmegaConf

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            cfg = hydra_compose(config_name=config_name, overrides=rewrite(config_name, overrides))
    except MissingConfigException as exc:
        raise ConfigError(_no_such_option(exc)) from None
    except HydraException as exc:
        raise ConfigError(" ".join(str(exc).split())) from None  # one line: Hydra's runs over several
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def _no_such_option(exc: Any) -> str:
    """`harness=nope: no such option; choose from claude_code, codex, ...` (Hydra's lists them a line each,
    then its search path)."""
    if not exc.options:  # not a group's option: a missing file
        return " ".join(str(exc).split())
    group, _, option = exc.missing_cfg_file.rpartition("/")
    return f"{group}={option}: no such option; choose from {', '.join(exc.options)}"


def split_selectors(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """Validate and drop the selector sections the model does not hold itself."""
    for name, selector in SELECTORS.items():
        if name in data and name not in model.model_fields:
            section = data.pop(name)
            try:
                selector.model_validate(section)
            except ValidationError as exc:
                raise invalid([f"{name}.{p}" for p in problems(exc, whole=name)]) from None
    return data


def load(model: type[M], config_name: str, overrides: list[str]) -> M:
    return validate(model, split_selectors(model, compose(config_name, overrides)))
