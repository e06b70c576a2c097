"""`polar runtime check --fidelity`: what the proxy made of each harness's calls, one row per configuration.

Each configuration runs two sessions in the runtime: one against the served model (the tiny vLLM unless
`--upstream` names another), and a tool loop against the fake upstream, which answers every call with a tool
call so that only the harness's own step limit or the session's budget of calls ends it. From the store and
the proxy's counts (`proxy.sessions.Tally`): the dialect and whether it streamed, the side calls seen (the
harness's own names, `Harness.side_calls`), chains per session on the served model (the prefix-merged traces;
the fake upstream's made-up ids merge nothing, so the tool loop's are not counted), calls recorded
against calls made (a call refused before it was forwarded, as past a budget, is counted apart), tokens in
the traces against tokens sampled, the proxy's own time per call, and what ended the tool loop.
`--markdown FILE` writes the table between FILE's `<!-- fidelity -->` markers (docs/harnesses.md's).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..harnesses import HARNESSES
from ..proxy.app import Proxy
from ..traces import build

START, END = "<!-- fidelity -->", "<!-- /fidelity -->"
# the tool loop: the fake upstream answers every call with a tool call (the task carries its marker), so nothing
# but the harness's own step limit or the session's budget of calls ends the session
TOOL_LOOP_TASK = "List the files here with a tool, then list them again. [fault:tool_call]"
TOOL_LOOP_STEPS, TOOL_LOOP_CALLS = 4, 6


@dataclass(frozen=True)
class Ran:
    session_id: str
    rc: int
    seconds: float


def fidelity_row(name: str, options: dict[str, Any], ran: dict[str, Ran], proxy: Proxy) -> dict[str, Any]:
    """The row of one configuration from its sessions (`ran`: pass -> session); empty where it did not run."""
    cls = HARNESSES[options["name"]]
    version = options.get("version") or (cls.pin.version if cls.pin else "")
    row: dict[str, Any] = {"configuration": name, "version": version}
    if "served" not in ran:
        return row
    dialects, streams, sides = set(), set(), Counter()
    made = recorded = refused = trained = sampled = timed = 0
    added = added_max = 0.0
    for each, session in ran.items():
        records = proxy.store.records(session.session_id)
        tally = proxy.sessions.tally(session.session_id)
        made, recorded, refused = made + tally.arrived, recorded + len(records), refused + tally.refused
        timed, added, added_max = timed + tally.timed, added + tally.added_s, max(added_max, tally.added_max_s)
        dialects |= {r.dialect for r in records}
        streams |= {r.stream for r in records}
        sides.update(s for r in records if (s := cls.side_call(r.native_request)))
        built = build(records)
        if each == "served":
            row["chains"] = len(built.traces)
        trained += sum(t.trained_tokens for t in built.traces)
        sampled += sum(len(r.completion_token_ids) for r in records if r.trainable)
        if each == "tool_loop":
            row["tool_loop_calls"] = len(records)
            row["stopped_by"] = ended_by(tally.refused, len(records), session.rc)
    return row | {
        "dialect": ", ".join(sorted(dialects)),
        "streamed": {frozenset({True}): "yes", frozenset({False}): "no"}.get(frozenset(streams), "both"),
        "side_calls": dict(sides),
        "calls_made": made,
        "calls_recorded": recorded,
        "calls_refused": refused,
        "tokens_trained": trained,
        "tokens_sampled": sampled,
        "added_ms_mean": round(1000 * added / timed, 2) if timed else None,
        "added_ms_max": round(1000 * added_max, 2) if timed else None,
    }


def ended_by(refused: int, calls: int, rc: int) -> str:
    """What ended a tool loop: the session's budget (a call refused), the harness's step limit, or itself."""
    if refused:
        return "budget"
    return f"{'its step limit' if calls >= TOOL_LOOP_STEPS else 'itself'} (exit {rc})"


def markdown(rows: list[dict[str, Any]], runtime: str) -> str:
    """The table of `rows`, as docs/harnesses.md shows it."""
    lines = [
        "| configuration | version | dialect | streamed | side calls | chains | calls recorded / made (refused) "
        "| tool loop: calls, ended by | tokens trained / sampled | proxy ms per call (mean, max) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "dialect" not in r:
            lines.append(f"| `{r['configuration']}` | {r['version']} | did not run in {runtime} |" + " |" * 7)
            continue
        sides = ", ".join(f"{k} ×{v}" for k, v in sorted(r["side_calls"].items())) or "none"
        same = "=" if r["tokens_trained"] == r["tokens_sampled"] else "≠"
        latency = "–" if r["added_ms_mean"] is None else f"{r['added_ms_mean']:.1f}, {r['added_ms_max']:.1f}"
        calls = f"{r['calls_recorded']} / {r['calls_made']} ({r['calls_refused']})"
        loop = f"{r.get('tool_loop_calls', '–')}, {r.get('stopped_by', '–')}"
        lines.append(
            f"| `{r['configuration']}` | {r['version']} | `{r['dialect']}` | {r['streamed']} | {sides} "
            f"| {r['chains']} | {calls} | {loop} | {r['tokens_trained']} {same} {r['tokens_sampled']} | {latency} |"
        )
    return "\n".join(lines)


def write_table(path: Path, table: str, note: str) -> None:
    """`table` (and a line saying how it was made) between the file's markers, the rest kept."""
    text = path.read_text()
    if START not in text or END not in text:
        raise ValueError(f"{path} has no {START} ... {END} markers for the fidelity table")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{START}\n{note}\n\n{table}\n{END}{tail}")
