// The builder's tree of calls. A chain of calls that each continue the one before stays in one column;
// a fork (a call continued by several calls) opens one indented branch per continuation. Each leaf is
// one trace (one chain, from its root): the page has as many leaves as the builder produced traces.
import { esc, num } from "./util.js";

const ROLE = {
  start: ["chain start", "role-start"],
  "sub-agent": ["sub-agent", "role-sub"],
  compaction: ["compaction", "role-compaction"],
  "new history": ["new chain", "role-new"],
  "new chain": ["new chain", "role-new"],
  repaired: ["repaired", "role-repaired"],
  continues: ["", ""],
};

function driftLabel(n, role) {
  const d = n.drift;
  if (!d) return "";
  const where = `from #${d.from_seq ?? "?"}, first differs at token ${num(d.position)}`;
  const what = d.repaired ? `repaired: ${d.cause}` : `drift: ${d.cause}`;
  const detail = d.detail ? ` — ${d.detail}` : "";
  const badge = d.cause === role ? "" : `<span class="drift ${d.repaired ? "fixed" : "broke"}" title="${esc(where + detail)}">${esc(what)}</span>`;
  return `${badge}<span class="note" title="${esc(detail)}">${esc(where)}</span>`;
}

function line(sid, n, byId) {
  let [role, cls] = n.parent === null ? ROLE[n.role] || [n.role, "role-new"] : ["", ""]; // a chain's start only
  if (n.side_call) [role, cls] = [`side call: ${n.side_call}`, "role-side"]; // named by the harness
  const fork = n.children.length > 1 ? `<span class="fork">fork ×${n.children.length}</span>` : "";
  const leaf =
    n.trace !== null && n.trace !== undefined
      ? `<a class="to-trace" href="#/s/${encodeURIComponent(sid)}/t/${n.trace}">→ trace ${n.trace}</a>`
      : "";
  // a call above a fork is in several traces and trained in one of them
  const trained = n.in_traces > 1 ? `<span class="note">in ${n.in_traces} traces, trained in trace ${n.trained_in}</span>` : "";
  return `<span class="node" data-call="${esc(n.id)}" title="call ${esc(n.id)}"><b>#${n.seq}</b>
    <span class="muted">${esc(n.dialect)} · ${num(n.prompt_tokens)} → ${num(n.completion_tokens)} tok</span></span>
    ${role ? `<span class="role ${cls}">${esc(role)}</span>` : ""}${driftLabel(n, role)}${fork}${leaf}${trained}`;
}

function branch(sid, id, byId) {
  const items = [];
  let n = byId[id];
  for (;;) {
    const leaf = n.children.length === 0;
    items.push(`<li class="${leaf ? "leaf" : "call"}" data-trace="${leaf ? n.trace : ""}">${line(sid, n, byId)}</li>`);
    if (n.children.length !== 1) break;
    n = byId[n.children[0]];
  }
  if (n.children.length > 1) {
    const forks = n.children.map((c) => `<li class="branch">${branch(sid, c, byId)}</li>`).join("");
    items.push(`<li class="forks"><ul>${forks}</ul></li>`);
  }
  return `<ol class="chain">${items.join("")}</ol>`;
}

export function renderTree(sid, tree) {
  const byId = Object.fromEntries(tree.nodes.map((n) => [n.id, n]));
  const roots = tree.roots.map((id) => `<li class="root">${branch(sid, id, byId)}</li>`).join("");
  const outside = tree.outside.length
    ? `<details class="outside"><summary>${tree.outside.length} calls in no chain</summary><ul>${tree.outside
        .map((o) => `<li>#${o.seq} ${esc(o.why)}</li>`)
        .join("")}</ul></details>`
    : "";
  return `<p class="tree-summary"><b class="chains">${tree.chains}</b> chains (traces) from ${tree.roots.length} roots ·
    ${tree.forks} forks · ${tree.nodes.length} calls placed</p>
    <ul class="tree" data-chains="${tree.chains}">${roots}</ul>${outside}`;
}
