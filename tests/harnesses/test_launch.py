"""Each adapter's launch, without running anything: every model name pinned to the served model, the
session's key and the proxy's URL where the harness reads them, nothing interactive, the step limit
passed on, and every program it starts inside the harness toolchain's mount (never the image's node or
python), at the paths the sandbox shows it."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from nemo_polar.harnesses import HARNESSES, Endpoint, Inside, Launch
from nemo_polar.harnesses.openhands import RUNNER
from nemo_polar.harnesses.pi import Pi
from nemo_polar.harnesses.shell import Shell

URL, KEY, MODEL, TASK = "http://127.0.0.1:4321", "sk-session-key", "served-model", "Fix the bug."
# as a container shows them: the toolchain and our scripts at their mounts, the image's own PATH
TOOLS, SCRIPTS, IMAGE_PATH = Path("/polar/tools"), Path("/polar/scripts"), "/opt/conda/bin:/usr/bin:/bin"
NODE = str(TOOLS / "node/bin/node")


def launch(harness, tmp_path: Path, max_steps: int = 7) -> Launch:
    home, work = Path("/polar/home"), Path("/testbed")
    out = harness.launch(TASK, Endpoint(URL, KEY, MODEL), Inside(home, work, TOOLS, SCRIPTS, IMAGE_PATH), max_steps)
    assert out.env["HOME"] == str(home)
    # the image's PATH first (the agent's commands find the image's own tools), the toolchain's node last
    assert out.env["PATH"] == f"{IMAGE_PATH}:{TOOLS}/node/bin"
    programs = [a for a in out.argv[:3] if a.startswith("/")]
    assert all(a.startswith((str(TOOLS) + "/", str(SCRIPTS) + "/")) for a in programs), out.argv
    out.write_files(tmp_path / "home")  # written on the host side of HOME
    return out


def after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_every_bundled_harness_is_registered():
    bundled = {"codex", "claude_code", "qwen_code", "gemini_cli", "pi", "mini_swe_agent", "openhands", "opencode"}
    assert bundled | {"shell"} <= set(HARNESSES)


def test_codex(tmp_path):
    out = launch(HARNESSES["codex"](), tmp_path)
    argv = out.argv
    assert argv[:3] == [NODE, str(TOOLS / "node/bin/codex"), "exec"] and argv[-1] == TASK
    assert "--skip-git-repo-check" in argv and after(argv, "-m") == MODEL and after(argv, "--cd") == "/testbed"
    provider = next(a for a in argv if a.startswith("model_providers.polar="))
    assert (
        f'base_url="{URL}/v1"' in provider
        and 'wire_api="responses"' in provider
        and 'env_key="POLAR_API_KEY"' in provider
    )
    assert "model_provider=polar" in argv and out.env["POLAR_API_KEY"] == KEY
    assert out.env["CODEX_HOME"] == "/polar/home/.codex"
    config = tomllib.loads((tmp_path / "home/.codex/config.toml").read_text())
    assert config["check_for_update_on_startup"] is False
    assert KEY not in " ".join(argv)


def test_claude_code(tmp_path):
    out = launch(HARNESSES["claude_code"](), tmp_path)
    argv, env = out.argv, out.env
    assert argv[0] == str(TOOLS / "node/bin/claude") and after(argv, "-p") == TASK  # native: no node
    assert after(argv, "--model") == MODEL and after(argv, "--max-turns") == "7"
    assert after(argv, "--output-format") == "json"
    assert env["ANTHROPIC_BASE_URL"] == URL and env["ANTHROPIC_API_KEY"] == KEY
    aliases = [k for k in env if k.endswith("_MODEL")]
    assert len(aliases) >= 6 and all(env[k] == MODEL for k in aliases)  # sub-agents and haiku too
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and env["DISABLE_AUTOUPDATER"] == "1"


def test_qwen_code(tmp_path):
    out = launch(HARNESSES["qwen_code"](), tmp_path)
    argv = out.argv
    assert argv[:2] == [NODE, str(TOOLS / "node/bin/qwen")] and after(argv, "-p") == TASK
    assert after(argv, "--auth-type") == "openai" and after(argv, "--openai-api-key") == KEY
    assert after(argv, "--openai-base-url") == f"{URL}/v1" and after(argv, "-m") == MODEL
    assert "--yolo" in argv and after(argv, "--max-session-turns") == "7"
    settings = json.loads((tmp_path / "home/.qwen/settings.json").read_text())
    assert settings["telemetry"]["enabled"] is False and settings["general"]["disableAutoUpdate"] is True


def test_gemini_cli(tmp_path):
    out = launch(HARNESSES["gemini_cli"](), tmp_path)
    argv = out.argv
    assert argv[:2] == [NODE, str(TOOLS / "node/bin/gemini")] and after(argv, "-p") == TASK
    assert after(argv, "-m") == MODEL and "--yolo" in argv
    assert out.env["GEMINI_API_KEY"] == KEY and out.env["GOOGLE_GEMINI_BASE_URL"] == URL
    settings = json.loads((tmp_path / "home/.gemini/settings.json").read_text())
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"  # else "Invalid auth method"
    assert settings["security"]["folderTrust"]["enabled"] is False
    assert settings["model"]["maxSessionTurns"] == 7 and settings["telemetry"]["enabled"] is False


def test_opencode(tmp_path):
    task = 'Fix issue 42:  the "bug" -- --help\nthen -m x'
    harness = HARNESSES.make("opencode", {"max_tokens": 512, "context": 8192, "body": {"top_p": 0.9}})
    out = harness.launch(task, Endpoint(URL, KEY, MODEL), Inside(Path("/h"), Path("/testbed"), TOOLS), 7)
    argv, env = out.argv, out.env
    # the toolchain's Python opens the instruction as stdin and execs the native binary (no node)
    assert argv[:4] == [str(TOOLS / "python/bin/python3"), "-I", "-S", "-c"]
    assert argv[5:9] == ["/h/.polar/instruction.md", str(TOOLS / "node/bin/opencode"), "run", "--auto"]
    assert after(argv, "--dir") == "/testbed" and after(argv, "-m") == f"polar/{MODEL}" and task not in argv
    assert after(argv, "--format") == "json"  # its events on stdout, kept with the session's logs
    config = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    provider = config["provider"]["polar"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": f"{URL}/v1", "apiKey": KEY}
    assert provider["models"] == {
        MODEL: {"name": MODEL, "limit": {"context": 8192, "output": 512}, "options": {"top_p": 0.9}}
    }
    assert config["model"] == config["small_model"] == f"polar/{MODEL}" and config["enabled_providers"] == ["polar"]
    assert config["agent"]["title"]["disable"] is True  # no title call beside the agent's
    assert config["compaction"] == {"auto": False, "prune": False} and config["autoupdate"] is False
    for off in ("AUTOUPDATE", "AUTOCOMPACT", "PRUNE", "MODELS_FETCH", "SHARE", "LSP_DOWNLOAD", "DEFAULT_PLUGINS"):
        assert env[f"OPENCODE_DISABLE_{off}"] == "1"
    assert [env[f"XDG_{k}_HOME"] for k in ("CONFIG", "DATA", "CACHE", "STATE")] == [
        "/h/.config",
        "/h/.local/share",
        "/h/.cache",
        "/h/.local/state",
    ]
    assert KEY not in " ".join(argv)
    out.write_files(tmp_path)
    assert (tmp_path / ".polar/instruction.md").read_text() == task
    # the lock that keeps it from npm-installing its plugin package
    lock = json.loads((tmp_path / ".config/opencode/package-lock.json").read_text())
    assert "@opencode-ai/plugin" in lock["packages"][""]["dependencies"]
    assert (tmp_path / ".config/opencode/node_modules").is_dir()


def test_opencode_defaults_fit_a_small_context(tmp_path):
    out = launch(HARNESSES["opencode"](), tmp_path)
    limit = json.loads(out.env["OPENCODE_CONFIG_CONTENT"])["provider"]["polar"]["models"][MODEL]["limit"]
    assert limit == {"context": 32768, "output": 4096}  # its own default output, 32000, would not fit


@pytest.mark.parametrize(
    "dialect, api, base",
    [
        ("openai_chat", "openai-completions", f"{URL}/v1"),
        ("openai_responses", "openai-responses", f"{URL}/v1"),
        ("anthropic", "anthropic-messages", URL),
        ("gemini", "google-generative-ai", f"{URL}/v1beta"),
    ],
)
def test_pi_speaks_each_dialect(dialect, api, base, tmp_path):
    out = launch(Pi(dialect=dialect), tmp_path)
    argv = out.argv
    assert argv[:2] == [NODE, str(TOOLS / "node/bin/pi")] and argv[-1] == TASK
    assert {"-p", "--no-session", "--offline"} <= set(argv)
    assert after(argv, "--provider") == "polar" and after(argv, "--model") == MODEL
    provider = json.loads((tmp_path / "home/.pi/agent/models.json").read_text())["providers"]["polar"]
    assert provider["api"] == api and provider["baseUrl"] == base and provider["apiKey"] == KEY
    assert [m["id"] for m in provider["models"]] == [MODEL]


def test_pi_refuses_an_unknown_dialect():
    with pytest.raises(ValueError, match="pi speaks"):
        Pi(dialect="grpc")


def test_mini_swe_agent(tmp_path):
    out = launch(HARNESSES["mini_swe_agent"](), tmp_path)
    argv, env = out.argv, out.env
    # the toolchain's Python 3.11, isolated from the image's PYTHONPATH
    assert argv[:4] == [str(TOOLS / "python/bin/python3"), "-I", "-m", "minisweagent.run.mini"]
    assert after(argv, "-t") == TASK
    assert after(argv[4:], "-m") == f"openai/{MODEL}" and {"-y", "--exit-immediately"} <= set(argv)
    assert f"model.model_kwargs.api_base={URL}/v1" in argv and "agent.step_limit=7" in argv
    assert after(argv, "-o") == "/polar/home/trajectory.json"
    assert env["OPENAI_API_KEY"] == KEY and env["MSWEA_CONFIGURED"] == "true"  # no set-up wizard
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"


def test_openhands(tmp_path):
    out = launch(HARNESSES["openhands"](), tmp_path)
    argv, env = out.argv, out.env
    # the toolchain's Python 3.12, isolated so that nothing beside the runner shadows the SDK
    assert argv[:3] == [str(TOOLS / "openhands/bin/python3"), "-I", str(SCRIPTS / RUNNER.name)] and argv[-1] == TASK
    assert after(argv, "--base-url") == f"{URL}/v1" and after(argv, "--model") == MODEL
    assert after(argv, "--max-steps") == "7" and after(argv, "--workdir") == "/testbed"
    assert after(argv, "--persist") == "/polar/home/.openhands/conversations"
    assert env["POLAR_API_KEY"] == KEY and KEY not in " ".join(argv)
    assert env["OPENHANDS_SUPPRESS_BANNER"] == "1" and env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"


def test_openhands_runner_reads_its_arguments_without_the_sdk():
    import importlib.util

    spec = importlib.util.spec_from_file_location("openhands_runner", RUNNER)
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)  # stdlib only at import: the SDK is imported inside main()
    args = runner.parse(["--base-url", f"{URL}/v1", "--model", MODEL, "--workdir", "/w", "--max-steps", "3", TASK])
    assert (args.base_url, args.model, args.max_steps, args.task, args.persist) == (f"{URL}/v1", MODEL, 3, TASK, None)


def test_aider(tmp_path):
    out = launch(HARNESSES["aider"](), tmp_path)
    argv, env = out.argv, out.env
    assert argv[:4] == [str(TOOLS / "aider/bin/python3"), "-I", "-m", "aider"] and after(argv, "--message") == TASK
    model = f"openai/{MODEL}"  # main, weak (summaries, commit messages) and editor: all the served one
    assert after(argv, "--model") == after(argv, "--weak-model") == after(argv, "--editor-model") == model
    assert after(argv, "--openai-api-base") == f"{URL}/v1" and env["OPENAI_API_KEY"] == KEY and KEY not in argv
    off = {"--no-auto-commits", "--no-gitignore", "--analytics-disable", "--no-check-update", "--no-detect-urls"}
    assert "--yes-always" in argv and off <= set(argv)
    assert after(argv, "--chat-history-file").startswith("/polar/home/.aider/")  # never in the working copy
    meta = json.loads((tmp_path / "home/.aider/model.metadata.json").read_text())[model]
    assert meta["max_input_tokens"] == 32768 and env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    # a fresh, non-empty model-info cache: aider fetches litellm's price list from GitHub otherwise
    assert json.loads((tmp_path / "home/.aider/caches/model_prices_and_context_window.json").read_text())
    assert HARNESSES["aider"].stops_at_max_steps is False  # one message, its own reflections: the proxy holds it


def test_hermes(tmp_path):
    out = launch(HARNESSES["hermes"](), tmp_path)
    argv = out.argv
    assert argv[:6] == [str(TOOLS / "hermes/bin/python3"), "-I", "-m", "hermes_cli.main", "chat", "-Q"]
    assert after(argv, "-q") == TASK and "--yolo" in argv and after(argv, "-t") == "terminal,file"
    assert after(argv, "--max-turns") == "6"  # and its summary call at the limit: 7 calls in all
    assert KEY not in argv
    config = json.loads((tmp_path / "home/.hermes/config.yaml").read_text())  # JSON is YAML
    assert {k: config["model"][k] for k in ("provider", "default", "base_url", "api_key")} == {
        "provider": "custom",
        "default": MODEL,
        "base_url": f"{URL}/v1",
        "api_key": KEY,
    }
    assert config["model"]["context_length"] >= 65536  # it refuses a model it takes for less
    assert all(aux["model"] == MODEL and aux["base_url"] == f"{URL}/v1" for aux in config["auxiliary"].values())
    assert config["auxiliary"]["title_generation"]["enabled"] is False and config["compression"]["enabled"] is False
    assert config["memory"]["memory_enabled"] is False and config["security"]["tirith_enabled"] is False
    assert json.loads((tmp_path / "home/.hermes/.update_check").read_text())["ver"] == HARNESSES["hermes"].pin.version


def test_cline(tmp_path):
    task = "--help  -m x"
    out = HARNESSES["cline"]().launch(task, Endpoint(URL, KEY, MODEL), Inside(Path("/h"), Path("/testbed"), TOOLS), 7)
    argv = out.argv
    assert argv[0] == str(TOOLS / "node/lib/node_modules/cline/node_modules/@cline/cli-linux-x64/bin/cline")
    assert argv[-2:] == ["--", task] and after(argv, "-c") == "/testbed" and after(argv, "-m") == MODEL
    assert "--json" in argv and after(argv, "--compaction") == "off" and KEY not in argv
    assert out.env["CLINE_SESSION_BACKEND_MODE"] == "local"  # no hub daemon outliving the run
    out.write_files(tmp_path)
    settings = tmp_path / ".cline/data/settings"
    provider = json.loads((settings / "providers.json").read_text())["providers"]["openai-compatible"]
    wanted = {"provider": "openai-compatible", "apiKey": KEY, "model": MODEL, "baseUrl": f"{URL}/v1"}
    assert provider["settings"] == wanted
    assert provider["updatedAt"]  # an entry without it is ignored
    settings = json.loads((settings / "global-settings.json").read_text())
    assert settings == {"telemetryOptOut": True, "autoUpdateEnabled": False}


def test_kilocode(tmp_path):
    out = launch(HARNESSES.make("kilocode", {"max_tokens": 512, "body": {"top_p": 0.9}}), tmp_path)
    argv, env = out.argv, out.env
    binary = TOOLS / "node/lib/node_modules/@kilocode/cli/node_modules/@kilocode/cli-linux-x64/bin/kilo"
    assert argv[5:9] == ["/polar/home/.polar/instruction.md", str(binary), "run", "--auto"] and TASK not in argv
    assert (tmp_path / "home/.polar/instruction.md").read_text() == TASK  # on stdin
    config = json.loads(env["KILO_CONFIG_CONTENT"])
    assert config["provider"]["polar"]["options"] == {"baseURL": f"{URL}/v1", "apiKey": KEY}
    assert config["provider"]["polar"]["models"][MODEL]["limit"] == {"context": 32768, "output": 512}
    assert config["model"] == config["small_model"] == f"polar/{MODEL}" and config["enabled_providers"] == ["polar"]
    assert config["compaction"] == {"auto": False, "prune": False} and env["KILO_TELEMETRY_LEVEL"] == "off"
    assert env["KILO_NO_DAEMON"] == env["KILO_DISABLE_SESSION_INGEST"] == env["KILO_DISABLE_AUTOCOMPACT"] == "1"


def test_openclaw(tmp_path):
    out = launch(HARNESSES.make("openclaw", {"max_tokens": 512}), tmp_path)
    argv, env = out.argv, out.env
    assert argv[:4] == [str(TOOLS / "openclaw/bin/node"), str(TOOLS / "openclaw/bin/openclaw"), "agent", "exec"]
    assert after(argv, "--message-file") == "/polar/home/.polar/instruction.md"
    assert TASK not in argv and KEY not in argv
    assert (tmp_path / "home/.polar/instruction.md").read_text() == TASK
    assert after(argv, "--cwd") == "/testbed" and after(argv, "--model") == f"polar/{MODEL}"
    assert after(argv, "--state-dir") == "/polar/home/.openclaw/exec-state"
    assert (tmp_path / "home/.openclaw/exec-state").is_dir()  # it must exist before the run
    config = json.loads((tmp_path / "home/.openclaw/openclaw.json").read_text())
    assert after(argv, "--config") == "/polar/home/.openclaw/openclaw.json"
    assert config["models"]["mode"] == "replace" and list(config["models"]["providers"]) == ["polar"]
    provider = config["models"]["providers"]["polar"]
    assert (provider["baseUrl"], provider["apiKey"], provider["api"]) == (f"{URL}/v1", KEY, "openai-completions")
    assert [(m["id"], m["maxTokens"]) for m in provider["models"]] == [(MODEL, 512)]
    assert config["agents"]["defaults"]["model"] == {"primary": f"polar/{MODEL}"}
    assert config["update"]["checkOnStart"] is False and config["telemetry"]["enabled"] is False
    assert env["OPENCLAW_NO_AUTO_UPDATE"] == "1" and HARNESSES["openclaw"].stops_at_max_steps is False


def test_shell_exports_every_sdks_variables(tmp_path):
    out = launch(Shell(command="python agent.py"), tmp_path)
    assert out.argv == ["sh", "-c", "python agent.py"]
    env = out.env
    assert env["OPENAI_BASE_URL"] == f"{URL}/v1" and env["ANTHROPIC_BASE_URL"] == URL
    assert env["GOOGLE_GEMINI_BASE_URL"] == URL
    assert env["OPENAI_API_KEY"] == env["ANTHROPIC_API_KEY"] == env["GEMINI_API_KEY"] == KEY
    assert env["POLAR_TASK"] == TASK and env["POLAR_MAX_STEPS"] == "7" and env["POLAR_MODEL"] == MODEL


def test_shell_needs_a_command():
    with pytest.raises(ValueError, match="harness.command"):
        Shell()
