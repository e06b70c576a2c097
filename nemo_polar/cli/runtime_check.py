"""`polar runtime check`: every harness configuration makes a model call through the proxy from inside
a runtime, and leaves nothing behind.

    polar runtime check --runtime image --json     # {"harnesses": N, "ran": N, "failures": []}, N configurations

One session per configuration: every registered harness (`harnesses.HARNESSES`), once per wire API for
one whose settings choose it (Pi on its four), with the options its class gives the check
(`Harness.check_options`: `shell` runs a bash one-liner, so the image needs no Python for it). A few
at a time, each in its own sandbox of the runtime, against the proxy in front of vLLM (started on the
tiny model unless `--upstream` names a server; `--engine nemo_rl`: NeMo-RL's own vLLM HTTP server, started the
same way, `nemo_rl/server.py`). A configuration ran when the proxy recorded at least
one answered call of its session. Afterwards no process may still run and nothing may be mounted under
the check's folder, and every session folder must be gone; anything left is a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..bench.fake_upstream import SERVED_MODEL, FakeUpstreamThread
from ..config import ProxyConfig
from ..contracts import HarnessSpec
from ..errors import ConfigError, HarnessNotInstalled
from ..harnesses import HARNESSES, Endpoint
from ..harnesses.install import check_install
from ..nemo_rl.server import local_server
from ..paths import DEPS
from ..proxy.backends import BACKENDS
from ..proxy.serve import ProxyThread, free_port
from ..runtimes import RUNTIMES
from ..runtimes.spec import RuntimeSpec
from .fidelity import TOOL_LOOP_CALLS, TOOL_LOOP_STEPS, TOOL_LOOP_TASK, Ran, fidelity_row, markdown, write_table

ROOTFS = DEPS / "rootfs" / "bookworm"  # scripts/setup.sh rootfs: Debian minbase, no python, no node
TASK = "Say hello in one word."
GRACE_S = 5.0


def configurations() -> dict[str, dict[str, Any]]:
    """The harness options of each configuration, by its name (`--only`): codex, ..., pi-anthropic."""
    out: dict[str, dict[str, Any]] = {}
    for name, cls in HARNESSES.items():
        options = {"name": name, **cls.check_options}
        if "dialect" in cls.Settings.model_fields:  # its settings choose the wire API: each one it speaks
            out |= {f"{name}-{dialect}": options | {"dialect": dialect} for dialect in cls.dialects}
        else:
            out[name] = options
    return out


def chosen(only: list[str] | None) -> list[str]:
    """The configurations `only` names (every one when none), or a ConfigError naming the known ones."""
    configs = configurations()
    unknown = [name for name in only or () if name not in configs]
    if unknown:
        raise ConfigError(f"unknown harness configuration {', '.join(unknown)}: choose from {', '.join(configs)}")
    return only or list(configs)


def runtime_spec(kind: str, image: str | None = None) -> RuntimeSpec:
    """The runtime to check; a kind that runs a root filesystem folder (`image`) gets set-up's by default."""
    runs = RUNTIMES[kind]
    if image is None and runs.in_image and not runs.pulls:
        image = str(ROOTFS)
    return RuntimeSpec(kind=kind, image=image)


@dataclass(frozen=True)
class Pass:
    """One session of every configuration: its task, where its calls go, and its bounds."""

    name: str
    task: str = TASK
    max_steps: int = 2
    route: dict[str, Any] = field(default_factory=dict)  # the session's own (upstream_url, max_calls, ...)


def check(
    spec: RuntimeSpec,
    upstream_url: str | None = None,
    only: list[str] | None = None,
    parallel: int = 3,
    timeout_s: float = 300.0,
    engine: str = "vllm",
    model: str | None = None,
    versions: dict[str, str] | None = None,
    fidelity: bool = False,
) -> dict[str, Any]:
    """{"harnesses", "ran", "failures": [{harness, why, ...}]} (and "seconds"; "fidelity": a row per configuration
    with `fidelity`). `engine`: the server's kind (the proxy's upstream.engine), `model`: the name it serves (needed
    for one that lists none, as NeMo-RL's); `versions`: harness -> the CLI version to run instead of its pin."""
    configs = configurations()
    names = chosen(only)
    unknown = sorted(set(versions or {}) - {o["name"] for o in configs.values()})
    if unknown:
        raise ConfigError(f"--version names no harness of this check: {', '.join(unknown)}")
    for name in names:
        if configs[name]["name"] in (versions or {}):
            configs[name] = configs[name] | {"version": versions[configs[name]["name"]]}  # type: ignore[index]
    backend = BACKENDS[engine]
    if upstream_url is not None and model is None and not backend.lists_models:
        raise ConfigError(backend.no_model_name().replace("upstream.model", "--model"))
    t0 = time.monotonic()
    vllm = None
    if upstream_url is None:
        folder = Path(tempfile.mkdtemp(prefix="polar-check-vllm-"))
        try:
            vllm = local_server(engine, port=free_port(), log_path=folder / "vllm.log")
        except ValueError as exc:  # an engine this machine does not start: the check needs its URL
            folder.rmdir()
            raise ConfigError(str(exc).replace("upstream.engine=", "--engine ")) from None
        vllm.start(300)
        upstream_url, model = vllm.url, vllm.served_name
    upstream = {"url": upstream_url, "engine": engine, "model": model, "timeout_s": 300}
    try:
        with tempfile.TemporaryDirectory(prefix="polar-check-") as tmp, contextlib.ExitStack() as stack:
            passes = [Pass("served")]
            if fidelity:  # the fake upstream of the tool loop, routed to per session
                fake = stack.enter_context(FakeUpstreamThread())
                route = {"upstream_url": fake.url, "upstream_model": SERVED_MODEL, "max_calls": TOOL_LOOP_CALLS}
                passes.append(Pass("tool_loop", TOOL_LOOP_TASK, TOOL_LOOP_STEPS, route))
            out = asyncio.run(
                _check_all(spec, upstream, [(n, configs[n]) for n in names], Path(tmp), parallel, timeout_s, passes)
            )
    finally:
        if vllm is not None:
            vllm.stop()
    if vllm is not None:  # its log is kept only where an error names it
        shutil.rmtree(folder, ignore_errors=True)
    return out | {"seconds": round(time.monotonic() - t0, 1)}


async def _check_all(
    spec: RuntimeSpec,
    upstream: dict[str, Any],
    configs: list[tuple[str, dict[str, Any]]],
    root: Path,
    parallel: int,
    timeout_s: float,
    passes: list[Pass],
) -> dict[str, Any]:
    config = ProxyConfig.model_validate(
        {
            "port": 0,
            "store": {"path": str(root / "records.sqlite")},
            "limits": {"max_tokens": 64},
            "upstream": upstream,
        }
    )
    gate = asyncio.Semaphore(parallel)
    pids: list[int] = []
    rows: list[dict[str, Any]] = []
    with ProxyThread(config) as proxy:
        outcomes = await asyncio.gather(
            *(
                _one(gate, name, options, spec, proxy, root / "sessions", timeout_s, pids, passes)
                for name, options in configs
            )
        )
        if len(passes) > 1:
            done = zip(configs, outcomes, strict=True)
            rows = [fidelity_row(name, options, ran, proxy.proxy) for (name, options), (_, ran) in done]
    failures = [failure for failure, _ in outcomes if failure is not None]
    failures += leftovers(root, pids)
    ran = sum(failure is None for failure, _ in outcomes)
    return {"harnesses": len(configs), "ran": ran, "failures": failures} | ({"fidelity": rows} if rows else {})


async def _one(
    gate: asyncio.Semaphore,
    name: str,
    options: dict[str, Any],
    spec: RuntimeSpec,
    proxy: ProxyThread,
    root: Path,
    timeout_s: float,
    pids: list,
    passes: list[Pass],
) -> tuple[dict[str, Any] | None, dict[str, Ran]]:
    """The configuration's failure (None: it ran) and its sessions, by pass."""
    async with gate:
        spec_h = HarnessSpec(**options, max_steps=2)
        harness = HARNESSES.make(spec_h.name, spec_h.options)
        try:
            await asyncio.to_thread(check_install, harness)
        except HarnessNotInstalled as exc:
            return {"harness": name, "why": str(exc)}, {}
        ran: dict[str, Ran] = {}
        for each in passes:
            session = proxy.proxy.sessions.open(metadata={"runtime_check": name, "pass": each.name}, **each.route)
            runtime = spec.make(root, f"{name}-{each.name}", proxy.url)
            t0 = time.monotonic()
            try:
                await runtime.start()
                endpoint = Endpoint(runtime.proxy_url or proxy.url, session.api_key)
                launch = harness.launch(each.task, endpoint, runtime.inside(), each.max_steps)
                launch.write_files(runtime.home)
                rc, out, err = await runtime.exec(launch.argv, launch.env, timeout=timeout_s)
            except Exception as exc:  # noqa: BLE001 - a failed start is this configuration's failure
                return {"harness": name, "why": f"{each.name}: {type(exc).__name__}: {exc}"}, ran
            finally:
                pids += getattr(runtime, "pids", [])
                await runtime.stop()
            proxy.proxy.store.flush()
            ran[each.name] = Ran(session.id, rc, time.monotonic() - t0)
            answered = [r for r in proxy.proxy.store.records(session.id) if r.status == "ok"]
            if not answered:
                tail = (err or out).strip()[-1500:]
                why = f"no answered model call through the proxy ({each.name})"
                return {"harness": name, "why": why, "rc": rc, "tail": tail}, ran
            print(
                f"{name} ({each.name}): {len(answered)} call(s), rc {rc}, {ran[each.name].seconds:.1f} s",
                file=sys.stderr,
            )
        return None, ran


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def leftovers(root: Path, pids: list[int]) -> list[dict[str, Any]]:
    """Processes still alive from the sessions' groups or naming the check's folder, mounts under it,
    and session folders not removed."""
    found = []
    deadline = time.monotonic() + GRACE_S  # killed processes are reaped by their new parent a moment later
    for pid in pids:
        while _group_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _group_alive(pid):
            found.append({"harness": "*", "why": f"process group {pid} is still alive"})
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(root) in cmdline and int(proc.name) != os.getpid():
            found.append({"harness": "*", "why": f"process {proc.name} left behind: {cmdline[:200]}"})
    mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if str(root) in line]
    found += [{"harness": "*", "why": f"left mounted: {line[:200]}"} for line in mounts]
    sessions = root / "sessions"
    if sessions.is_dir():
        found += [{"harness": p.name, "why": f"session folder not removed: {p}"} for p in sessions.iterdir()]
    return found


def main(
    kind: str,
    image: str | None,
    upstream: str | None,
    only: list[str] | None,
    as_json: bool,
    engine: str = "vllm",
    model: str | None = None,
    versions: dict[str, str] | None = None,
    fidelity: bool = False,
    table_file: Path | None = None,
) -> int:
    fidelity = fidelity or table_file is not None
    result = check(
        runtime_spec(kind, image), upstream, only, engine=engine, model=model, versions=versions, fidelity=fidelity
    )
    keys = ("harnesses", "ran", "failures", "seconds") + (("fidelity",) if fidelity else ())
    if as_json:
        print(json.dumps({k: result[k] for k in keys if k in result}))
    else:
        print(f"{result['ran']} of {result['harnesses']} harness configurations ran in {kind} ({result['seconds']} s)")
        for failure in result["failures"]:
            print(
                f"  {failure['harness']}: {failure['why']}" + (f"\n    {failure['tail']}" if "tail" in failure else "")
            )
        if fidelity:
            print(markdown(result.get("fidelity", []), kind))
    if table_file is not None:
        ran = "every configuration ran" if result["ran"] == result["harnesses"] else f"{result['ran']} ran"
        failed = f"{len(result['failures'])} failures" if result["failures"] else "no failure"
        note = (
            f"Made by `polar runtime check --runtime {kind} --fidelity --markdown {table_file}` "
            f"({ran}, {failed}, {result['seconds']} s)."
        )
        write_table(table_file, markdown(result.get("fidelity", []), kind), note)
    return 0 if not result["failures"] and result["ran"] == result["harnesses"] else 1
