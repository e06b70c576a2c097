"""The docs follow the code: every path the README and the docs pages name exists, every link between them
resolves, each table of plug-ins lists exactly what its registry holds (and each table of options what
`conf/` holds), and no page states how many plug-ins there are, a figure that goes stale with the next one."""

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
    """The parts `scripts/setup.sh` knows: those it runs in order and those it runs side by side."""
    text = SETUP.read_text()
    lists = (re.search(rf"^{group}=\((.*)\)", text, re.M)[1] for group in ("SERIAL", "PARALLEL"))
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
