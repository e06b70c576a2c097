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
    url: str = Field(
        "http://127.0.0.1:8801", description="the inference server's base URL (its OpenAI-compatible API under /v1)"
    )
    engine: Literal["vllm", "sglang", "nemo_rl"] = Field(
        "vllm", description="the server's kind: which fields ask it for token ids and logprobs (set by `backend=`)"
    )
    model: str | None = Field(
        None,
        description="the name the server serves the policy under; null: the session's own (a task's "
        "upstream_model, e.g. NeMo-RL's policy.model_name), else the first model the server's /v1/models lists",
    )
    timeout_s: float = Field(
        900.0, gt=0, description="seconds one call may take upstream, connecting to the last byte; then a recorded 504"
    )
    connect_timeout_s: float = Field(10.0, gt=0, description="seconds to open a connection to the server")
    sampling: dict[str, float | int] = Field(default_factory=dict, description="pinned, overrides the harness")
    policy_version: str | None = Field(
        None,
        description="recorded on every call as the weights' version, until POST "
        "/admin/inference/resume?policy_version=N names the next (null: none recorded)",
    )


class StoreConfig(Strict):
    path: str = Field("runs/proxy/records.sqlite", description="the SQLite file of the sessions and their records")
    durable: bool = Field(
        True, description="hold an answer's last byte until its record is committed (kill -9 loses no answer)"
    )
    flush_timeout_s: float = Field(30.0, gt=0, description="reading a session's records waits this long")


class LimitsConfig(Strict):
    max_body_bytes: int = Field(32 * 2**20, gt=0, description="a larger request body is a 413 in the caller's dialect")
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
    host: str = Field("127.0.0.1", description="the address to listen on (0.0.0.0: reachable from other machines)")
    port: int = Field(8800, ge=0, le=65535, description="the port to listen on (0: any free one)")
    control_token: str | None = Field(None, description="required on /admin routes when set")
    pause_wait_s: float = Field(600.0, gt=0, description="how long a call waits while generation is paused")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="the server's log level")
    upstream: UpstreamConfig = UpstreamConfig()
    store: StoreConfig = StoreConfig()
    limits: LimitsConfig = LimitsConfig()


class BackendConfig(Strict):
    """`conf/backend/*.yaml`: which inference server the proxy talks to and the sampling it pins."""

    engine: Literal["vllm", "sglang", "nemo_rl"] = Field(
        "vllm", description="the inference server's kind, copied to `upstream.engine`"
    )
    sampling: dict[str, float | int] = Field(
        default_factory=dict,
        description="sampling fields pinned on every call whatever the harness asks (e.g. temperature), copied to "
        "`upstream.sampling`",
    )


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
    """The shorthands Hydra cannot spell by itself (see VALUE_GROUPS and ROOT_GROUPS), and every key set
    whether the file has it or not (`settable`)."""
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
    return settable(config_name, out)


def settable(config_name: str, overrides: list[str]) -> list[str]:
    """`key=value` as Hydra's `++key=value` (set it, added if the composed file lacks it), so that a key only
    the settings models know (`runtime.limits.memory`, `budget.calls`) needs no `+`: the strict model still
    refuses a key it does not have. Left as written: a group's choice (`harness=codex`), Hydra's own
    prefixes (`+`, `++`, `~`), a package (`@`), and a key inside a group nothing picks (`harness.name=x`
    without `harness=...`), refused by Hydra naming the key."""
    groups = {p.name for p in CONF_DIR.iterdir() if p.is_dir()}
    picked = {g for g, option in _defaults(config_name).items() if option is not None}
    picked |= {item.partition("=")[0] for item in overrides if item.partition("=")[0] in groups}
    out = []
    for item in overrides:
        key, sep, _ = item.partition("=")
        root = key.split(".")[0]
        plain = sep and key and not key.startswith(("+", "~")) and "@" not in key and "/" not in key
        if plain and (root not in groups or ("." in key and root in picked)):
            item = "++" + item
        out.append(item)
    return out


def _defaults(config_name: str) -> dict[str, Any]:
    """`{group: option}` as `conf/<config_name>.yaml`'s defaults list picks them (null: none)."""
    from omegaconf import OmegaConf

    items = OmegaConf.to_container(OmegaConf.load(CONF_DIR / f"{config_name}.yaml")).get("defaults", [])
    picks = [item for item in items if isinstance(item, dict)]
    return {key.removeprefix("override ").split("@")[0]: option for item in picks for key, option in item.items()}


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
