"""The docs follow the code: every path the README and the docs pages name exists, every link between them
resolves, each table of plug-ins lists exactly what its registry holds (and each table of options what
`conf/` holds), no page states how many plug-ins there are, a figure that goes stale with the next one, every
configuration key and `polar` option a page names exists, the generated references describe every key and
option, and docs/traces.md's annotated trace is the line a run writes today."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from nemo_polar.evaluators import EVALUATORS
from nemo_polar.harnesses import HARNESSES
from nemo_polar.proxy.backends import BACKENDS
from nemo_polar.proxy.dialects import DIALECTS
from nemo_polar.runtimes import RUNTIMES
from nemo_polar.traces import BUILDERS

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# generated from the parsers and the settings models by `polar docs` (`polar docs --check` keeps them current);
# their backticks hold values, not paths, and their prose is the code's own
GENERATED = {ROOT / "docs" / "cli.md", ROOT / "docs" / "configuration.md"}
WRITTEN = [p for p in PAGES if p not in GENERATED]
SETUP = ROOT / "scripts" / "setup.sh"


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def prose(text: str) -> str:
    """The text without its fenced code blocks (commands and trees are examples, not references)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


# --- paths ------------------------------------------------------------------------------------------------------

# a backticked word that looks like a path: a folder/ or a file with an extension we keep
PATH = re.compile(r"`([\w./<>@-]+(?:/|\.py|\.yaml|\.md|\.sh|\.toml|\.json|\.c|\.png))`")
# not the repository's: inside a sandbox or a HOME (/polar/work, .codex/...), a placeholder (<task>/...), an
# environment variable, a URL, or what a run writes (runs/)
ELSEWHERE = ("/", ".", "$", "~", "http", "runs/")


def named_paths(text: str) -> set[str]:
    return {p for p in PATH.findall(text) if "<" not in p and not p.startswith(ELSEWHERE)}


def exists(path: str) -> bool:
    """A path as a page writes it: from the repository root, or inside the package."""
    return any((base / path).exists() for base in (ROOT, ROOT / "nemo_polar", ROOT / "tests"))


@cache
def deps_folders() -> tuple[set[str], set[str]]:
    """The folders the set-up and the code make under `.deps/` and under its toolchain, `.deps/tools/`."""
    setup = SETUP.read_text()
    code = "\n".join(p.read_text() for folder in ("nemo_polar", "tests") for p in (ROOT / folder).rglob("*.py"))
    deps = set(re.findall(r"\$DEPS/([\w.-]+)", setup)) | set(re.findall(r'DEPS / "([\w.-]+)"', code))
    versions = re.search(r'GYM_VERSIONS="([^"]+)"', setup).group(1).split()  # the newest in gym/, others gym-<v>/
    deps |= {"gym"} | {f"gym-{v}" for v in versions[1:]}
    tools = set(re.findall(r"\$TOOLS/([\w.-]+)", setup)) | set(re.findall(r'(?i)tools / "([\w.-]+)"', code))
    return deps, tools


def deps_path_known(path: str) -> bool:
    """`.deps/X/...`: X is a folder the set-up makes (and for `.deps/tools/Y/...`, Y one the toolchain holds)."""
    deps, tools = deps_folders()
    parts = path.split("/")
    if len(parts) < 2 or not parts[1]:
        return True
    if parts[1] == "tools" and len(parts) > 2 and parts[2]:
        return parts[2] in tools
    return parts[1] in deps


def deps_paths(text: str) -> set[str]:
    return {p for p in re.findall(r"`(\.deps/[^`\s]*)`", text) if "<" not in p}


@pytest.mark.parametrize("page", WRITTEN, ids=page_id)
def test_every_path_the_docs_name_exists(page):
    text = page.read_text()
    assert sorted(p for p in named_paths(text) if not exists(p)) == []
    assert sorted(p for p in deps_paths(text) if not deps_path_known(p)) == []


def test_the_pages_name_paths():
    assert len(named_paths((ROOT / "docs" / "architecture.md").read_text())) > 30  # an empty set would pass anything
    assert len(set().union(*(named_paths(p.read_text()) for p in WRITTEN))) > 100


def test_a_missing_path_is_found():
    assert named_paths("see `nemo_polar/nope.py` and `proxy/`") == {"nemo_polar/nope.py", "proxy/"}
    assert not exists("nemo_polar/nope.py") and exists("proxy/")
    assert named_paths("`<task>/tests/test.sh`, `/polar/work/`, `.codex/config.toml`, `runs/up/`") == set()
    assert not deps_path_known(".deps/node/lib") and not deps_path_known(".deps/mini/")
    assert deps_path_known(".deps/tools/node/") and deps_path_known(".deps/gym/") and deps_path_known(".deps/vllm/")
    assert not deps_path_known(".deps/tools/nowhere/")


# --- links ------------------------------------------------------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6}\s+(.+)$", prose(page.read_text()), flags=re.M):
        base = slug(heading)
        n = found.get(base, 0)
        found[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in anchors(dest)):
            broken.append(target)
    return broken


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_link_between_the_pages_resolves(page):
    assert broken_links(page) == []


def test_a_broken_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A `polar learn`: title\n\n[ok](#a-polar-learn-title) [gone](other.md) [bad](#nope)\n")
    assert broken_links(page) == ["other.md", "#nope"]


# --- tables -----------------------------------------------------------------------------------------------------


def tables(heading: str) -> list[tuple[str, list[list[str]]]]:
    """Every table of the pages whose header row's first cell is `heading`: (page, its rows' cells)."""
    out = []
    for page in PAGES:
        lines = prose(page.read_text()).splitlines()
        for i, line in enumerate(lines):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not line.startswith("|") or cells[0] != heading or i + 1 >= len(lines):
                continue
            rule = lines[i + 1]
            if not rule.startswith("|") or not set(rule.replace("|", "").strip()) <= set("-: "):
                continue  # not a header row
            rows = []
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))])
            out.append((page_id(page), rows))
    return out


def names(cell: str) -> set[str]:
    return set(re.findall(r"`([a-z_][a-z0-9_-]*)`", cell))


def conf_options(group: str) -> set[str]:
    return {p.stem for p in (ROOT / "conf" / group).glob("*.yaml")}


def setup_parts() -> set[str]:
    """The parts `scripts/setup.sh` knows: its apt parts, those it runs first and those it runs side by side."""
    text = SETUP.read_text()
    lists = (re.search(rf"^{group}=\((.*)\)", text, re.M)[1] for group in ("APT", "SERIAL", "PARALLEL"))
    return {part for found in lists for part in found.split()}


REGISTRIES = {
    "harness": lambda: set(HARNESSES),
    "runtime": lambda: set(RUNTIMES),
    "evaluator": lambda: set(EVALUATORS),
    "builder": lambda: set(BUILDERS),
    "dialect": lambda: set(DIALECTS),
    "engine": lambda: set(BACKENDS),
    "dataset": lambda: conf_options("dataset"),
    "part": setup_parts,
}


@pytest.mark.parametrize("heading", list(REGISTRIES))
def test_each_table_lists_exactly_what_is_registered(heading):
    found = tables(heading)
    assert found, f"no page has a table of every {heading}"
    for page, rows in found:
        assert set().union(*(names(r[0]) for r in rows)) == REGISTRIES[heading](), page


def test_the_group_table_lists_every_group_and_its_options():
    groups = {d.name for d in (ROOT / "conf").iterdir() if d.is_dir() and any(d.glob("*.yaml"))}
    found = tables("group")
    assert found
    for page, rows in found:
        assert {r[0].strip("`") for r in rows} == groups, page
        for row in rows:
            assert names(row[1]) == conf_options(row[0].strip("`")), (page, row[0])


def test_the_harness_table_states_each_pin_and_its_set_up_part():
    for page, rows in tables("harness"):
        for row in rows:
            (name,) = names(row[0])
            pin = HARNESSES[name].pin
            line = " | ".join(row)
            if pin is None:
                assert "–" in row, (page, name)
            else:
                assert f"`{pin.package}` {pin.version}" in line and f"`{pin.part}`" in line, (page, name)


# --- no counts of plug-ins --------------------------------------------------------------------------------------

NUMBER = r"(?<![\w.,:/=])(?:\d+|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen)"
# plural: "512 harness sessions" counts sessions, "five dialects" counts plug-ins
PLUGIN = (
    r"(?:harnesses|runtimes|evaluators|dialects|builders|backends|engines|CLIs|APIs|configurations|plug-?ins|kinds)"
)
# a number, at most two words, then a word for a kind of plug-in: "the six npm CLIs", "12 harness configurations"
COUNT = re.compile(rf"\b{NUMBER}(?:[\s-]+[\w-]+){{0,2}}?[\s-]+{PLUGIN}\b", re.I)


def counts(text: str) -> list[str]:
    return [m.group(0) for m in COUNT.finditer(" ".join(text.split()))]


def test_a_count_of_plugins_is_found():
    for phrase in (
        "the six npm CLIs",
        "12 harness configurations",
        "five dialects",
        "all 9 harnesses",
        "Pi on each of its four APIs",
        "the four runtimes",
        "twelve configurations ran",
        '{"harnesses": 12, ...} for 12\nharness configurations',
    ):
        assert counts(phrase), phrase
    for phrase in (
        "every harness",
        "one harness instead of the list",
        "Python 3.12 relocated",
        "8 tasks of 8 sessions",
        "44 of 44 sessions completed",
        "2 RUN slots",
        "10,000 mutated requests on each model route",
        "512 harness sessions streaming, 8 harness threads",
        "a 500 reaches the harness in its dialect",
        "proxy.upstream.url=http://gpu-1:8000 harness=codex",
    ):
        assert counts(phrase) == [], phrase


@pytest.mark.parametrize("page", WRITTEN, ids=page_id)
def test_no_page_counts_the_plugins(page):
    assert counts(page.read_text()) == []


# --- every key and option a page names exists ------------------------------------------------------------------

SPAN = re.compile(r"`([^`\n]+)`")
# `key=value` (Hydra's `+`/`++` allowed): a command-line setting wherever it is written
SETTING = re.compile(r"\+{0,2}([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)*)=(\S*)")
# a bare dotted key, `runtime.limits.memory` or `budget.on_spent: score`; checked when its first part is a key of ours
# (so `chat.same_prefix`, a module's name, is not taken for one)
DOTTED = re.compile(r"([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)+)(?::\s.*)?")
FILES = {"py", "md", "log", "json", "jsonl", "yaml", "toml", "sqlite", "sh", "txt", "c", "so"}
# written as `key=value` but not one of ours: placeholders, a typo shown being refused, a request field
NOT_KEYS = {"key", "group", "stpes", "n"}


@cache
def known_keys() -> tuple[frozenset[str], frozenset[str]]:
    """Every key a user can set (each command's file, each group's keys, each plug-in's settings in its group, a
    task's keys) and the keys under which any name goes (a mapping). A model that takes extra keys (a harness, a
    runtime) takes its plug-ins' settings, which are walked one by one."""
    from nemo_polar.cli import parser
    from nemo_polar.cli.config_reference import PLUGIN_GROUPS, _model, group_models
    from nemo_polar.cli.parsing import commands
    from nemo_polar.contracts import TaskSpec

    keys: set[str] = set()
    open_: set[str] = set()

    def walk(model, prefix: str) -> None:
        for name, info in model.model_fields.items():
            keys.add(prefix + name)
            inner = _model(info.annotation)
            if inner is not None:
                walk(inner, f"{prefix}{name}.")
            elif "dict" in str(info.annotation) or "Any" in str(info.annotation):
                open_.add(prefix + name)

    configs = {c.config for c in commands(parser()) if c.config is not None}
    for config in configs:
        walk(config.settings(), "")
    for group, model in group_models(list(configs)).items():
        if model is not None:
            walk(model, f"{group}.")
    walk(TaskSpec, "")  # a task's keys, as a row or the rollout server's API takes them
    for group, (registry, inside) in PLUGIN_GROUPS.items():
        for name in registry:
            walk(registry[name].Settings, f"{group}.{inside}")
    return frozenset(keys), frozenset(open_)


@cache
def recipe_roots() -> set[str]:
    """The top-level keys of NeMo-RL's recipes (`grpo.max_num_steps=10`): NeMo-RL's own, judged by `polar recipes
    check`, not here."""
    import yaml

    return {key for path in (ROOT / "recipes").glob("*.yaml") for key in yaml.safe_load(path.read_text())}


def key_known(key: str) -> bool:
    keys, open_ = known_keys()
    return key in keys or any(key.startswith(o + ".") for o in open_)


def unknown_setting(key: str) -> bool:
    root = key.split(".")[0]
    if root in NOT_KEYS or root in recipe_roots() or (ROOT / "conf" / key).is_dir():  # `group=option`
        return False
    return not key_known(key)


def unknown_keys(text: str) -> list[str]:
    """The spans of the prose that name a configuration key no settings model has."""
    roots = {k.split(".")[0] for k in known_keys()[0]}
    found = []
    for span in SPAN.findall(prose(text)):
        if setting := SETTING.fullmatch(span):
            if unknown_setting(setting.group(1)):
                found.append(span)
        elif dotted := DOTTED.fullmatch(span):
            key = dotted.group(1)
            if key.split(".")[0] in roots and key.rsplit(".", 1)[1] not in FILES and not key_known(key):
                found.append(span)
    return found


def command_lines(text: str) -> list[str]:
    """`polar ...` as the prose quotes it, and the command lines of its code blocks (continuations joined)."""
    lines = [span for span in SPAN.findall(prose(text)) if span.startswith("polar ")]
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.strip().removeprefix("$ ").removeprefix(".venv/bin/")
            if line.startswith("polar "):
                lines.append(line.split(" #")[0])
    return lines


@cache
def polar_commands() -> dict[str, set[str]]:
    """Each `polar` command and its options."""
    from nemo_polar.cli import parser
    from nemo_polar.cli.parsing import commands

    return {c.name: {o for a in c.arguments for o in a.option_strings} for c in commands(parser())}


def unknown_options(text: str) -> list[str]:
    """What the `polar` command lines of a page give that their command does not take: an option, or a setting."""
    found = []
    for line in command_lines(text):
        words = line.split()
        if not re.fullmatch(r"[a-z-]+", words[1]):
            continue  # prose that begins with "polar", not a command line
        names = (" ".join(words[:n]) for n in range(len(words), 1, -1))
        name = next((n for n in names if n in polar_commands()), None)
        if name is None:
            found.append(line)
            continue
        given = [w.strip("[]") for w in words[len(name.split()) :]]  # `[--session ID]`: optional, still one
        for before, word in zip(["", *given], given, strict=False):
            option = word.split("=")[0]
            if word.startswith("--") and option not in polar_commands()[name]:
                found.append(f"{name} {option}")
            elif before.startswith("--") and "=" not in before:
                continue  # an option's value (`--version codex=0.170.0`), not a setting
            elif (setting := SETTING.fullmatch(word.strip("'\""))) and unknown_setting(setting.group(1)):
                found.append(f"{name} {word}")
    return found


@pytest.mark.parametrize("page", WRITTEN, ids=page_id)
def test_every_key_and_option_a_page_names_exists(page):
    text = page.read_text()
    assert unknown_keys(text) == []
    assert unknown_options(text) == []


def test_a_key_or_option_that_does_not_exist_is_found():
    stale = (
        "Build with `repair=False` to train only on-policy contexts; lower `agent_timeuot_s`; `budget.cals=3`; "
        "`runtime.limits.memroy`; `polar traces [--no-repiar]`; `polar up harness.max_stpes=3`; `polar tracez --json`"
    )
    assert unknown_keys(stale) == ["repair=False", "budget.cals=3", "runtime.limits.memroy"]  # a bare word: prose
    assert unknown_options(stale) == [
        "polar traces --no-repiar",
        "polar up harness.max_stpes=3",
        "polar tracez --json",
    ]
    fine = (
        "`budget.calls=5`, `runtime.limits.memory=4g`, `harness.max_steps`, `budget.on_spent: score`, "
        "`harness=codex`, `proxy.upstream.sampling.temperature=0.7`, `grpo.max_num_steps=10`, "
        "`chat.same_prefix`, `serving.py`, `polar traces --no-repair --json`, "
        "`polar up harness=codex runtime.limits.memory=4g`"
    )
    assert unknown_keys(fine) == [] and unknown_options(fine) == []


def test_the_pages_name_keys_and_options():
    pages = "\n".join(p.read_text() for p in WRITTEN)
    named = [s for s in SPAN.findall(prose(pages)) if SETTING.fullmatch(s) or DOTTED.fullmatch(s)]
    assert len(named) > 100 and len(command_lines(pages)) > 100  # an empty match would pass anything


# --- the generated pages: every key and option described; the annotated trace current ---------------------------


def undescribed(page: str) -> list[str]:
    """The rows of a generated page's key and argument tables (`| key | type | default | description |`, `| argument
    | value | default | description |`) whose description is empty (`–`)."""
    missing, header = [], None
    for line in page.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))] if line.startswith("|") else []
        if not cells:
            header = None
        elif header is None:
            header = cells if cells[0] in ("key", "argument") and cells[-1] == "description" else []
        elif header and set(cells[0]) - set("-: ") and cells[-1] in ("", "–"):
            missing.append(cells[0])
    return missing


GENERATED_NAMES = sorted(p.name for p in GENERATED)


def test_every_key_and_option_of_the_reference_pages_has_a_description():
    from nemo_polar.cli import docs, parser

    pages = docs.written(parser())
    rows = sum(len([line for line in pages[name].splitlines() if line.startswith("| `")]) for name in GENERATED_NAMES)
    assert rows > 300  # the tables were read
    assert {name: undescribed(pages[name]) for name in GENERATED_NAMES} == {name: [] for name in GENERATED_NAMES}


def test_a_key_without_a_description_is_found():
    page = "| key | type | default | description |\n| --- | --- | --- | --- |\n| `a` | text | `x` | – |\n"
    page += (
        "| `b` | text | `y` | what b is |\n\n| argument | value | default | description |\n| --- | --- | --- | --- |\n"
    )
    page += "| `--c` | flag | – | – |\n"
    assert undescribed(page) == ["`a`", "`--c`"]


def test_the_annotated_trace_is_a_line_as_a_run_writes_it(tmp_path):
    """docs/traces.md's example is what `polar docs` writes now, and its JSON is the line the gateway's writer
    makes of the recorded session (the builder, each call's text, the JSONL schema)."""
    import json

    from nemo_polar.cli import trace_example
    from nemo_polar.traces import build
    from nemo_polar.traces.export import with_messages, write_jsonl

    text = (ROOT / "docs" / "traces.md").read_text()
    assert trace_example.page(text) == text, "docs/traces.md's trace is stale: run `polar docs`"
    recorded = trace_example.records()
    built = build(recorded, "prefix_tree")
    with_messages(built.traces, recorded)
    write_jsonl(built, tmp_path / "t.jsonl", session_id=recorded[0].session_id)
    shown = re.search(r"```json\n(.*?)\n```", text.partition(trace_example.BEGIN)[2], flags=re.S).group(1)
    assert json.loads(shown) == json.loads((tmp_path / "t.jsonl").read_text().splitlines()[0])
    assert len(recorded) > 1 and {r.status for r in recorded} == {"ok"}  # a chain of calls, recorded whole
