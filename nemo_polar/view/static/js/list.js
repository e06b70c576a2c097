// Tasks and their sessions, with filters (state, harness, masked), search and sorting.
import { esc, getJSON, markPainted, num, reward, runBar, secs, short, stageBar, stateBadge } from "./util.js";

const BLOCK = 100; // rows per block
const filters = { q: "", state: "", harness: "", masked: "", sort: "task" };
const collapsed = new Set();
let data = null; // {tasks, version}

const SORTS = {
  task: null,
  reward: (s) => -(s.reward ?? -Infinity),
  calls: (s) => -(s.rollup?.calls ?? -1),
  tokens: (s) => -((s.rollup?.prompt_tokens ?? 0) + (s.rollup?.completion_tokens ?? 0)),
  run: (s) => -(s.rollup?.stages?.run_s ?? -1),
  model: (s) => -(s.rollup?.model_s ?? -1),
};

function matches(s, task) {
  if (filters.state && s.state !== filters.state) return false;
  if (filters.harness && (s.harness || "") !== filters.harness) return false;
  if (filters.masked === "yes" && !s.masked) return false;
  if (filters.masked === "no" && s.masked) return false;
  if (!filters.q) return true;
  const hay = [s.session_id, s.task_id, s.harness, s.runtime, s.error, s.node_id, task.instruction, s.proxy_session_id]
    .join(" ")
    .toLowerCase();
  return filters.q
    .toLowerCase()
    .split(/\s+/)
    .every((word) => hay.includes(word));
}

function sessionRow(s) {
  const r = s.rollup || {};
  const why = s.masked ? `<span class="masked" title="${esc(s.error || "")}">masked</span> <span class="why">${esc(short(s.error || "", 48))}</span>` : "";
  return `<div class="row session" data-sid="${esc(s.session_id)}">
    <span><a href="#/s/${encodeURIComponent(s.session_id)}">${esc(short(s.session_id, 20))}</a><span class="muted"> #${s.sample_index ?? ""}</span></span>
    <span>${stateBadge(s.state)}</span>
    <span class="n">${reward(s.reward)}</span>
    <span>${why}</span>
    <span>${esc(s.harness || "")}</span>
    <span>${esc(s.runtime || "")}</span>
    <span class="n">${num(r.calls)}</span>
    <span class="n">${num(r.prompt_tokens)}</span>
    <span class="n">${num(r.completion_tokens)}</span>
    <span class="n">${num(r.trained_tokens)}</span>
    <span class="n">${r.model_s === undefined ? "–" : secs(r.model_s)}</span>
    <span class="n">${r.tools_s === undefined ? "–" : secs(r.tools_s)}</span>
    <span>${runBar(r)}</span>
    <span>${stageBar(r)}</span>
  </div>`;
}

function taskRow(task, shown) {
  const done = task.sessions.filter((s) => s.reward !== null && s.reward !== undefined && !s.masked);
  const mean = done.length ? done.reduce((a, s) => a + s.reward, 0) / done.length : null;
  const open = !collapsed.has(task.task_id);
  return `<div class="row task${open ? "" : " closed"}" data-task="${esc(task.task_id)}"><span>
    <span class="caret">${open ? "▾" : "▸"}</span><b>${esc(task.task_id)}</b> ${stateBadge(task.status)}
    <span class="muted">${esc(task.harness || "")} · ${esc(task.runtime || "")} · ${esc(task.evaluator || "")} ·
    ${shown}/${task.sessions.length} sessions · mean reward ${reward(mean)}</span>
    <span class="instruction">${esc(short(task.instruction, 120))}</span></span></div>`;
}

function summary(rows) {
  const by = {};
  let masked = 0, calls = 0, tokens = 0, trained = 0, rewards = [];
  for (const s of rows) {
    by[s.state] = (by[s.state] || 0) + 1;
    masked += s.masked ? 1 : 0;
    calls += s.rollup?.calls || 0;
    tokens += (s.rollup?.prompt_tokens || 0) + (s.rollup?.completion_tokens || 0);
    trained += s.rollup?.trained_tokens || 0;
    if (s.reward !== null && s.reward !== undefined && !s.masked) rewards.push(s.reward);
  }
  const states = Object.entries(by).map(([k, v]) => `${stateBadge(k)} ${v}`).join(" ");
  const mean = rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : null;
  return `${num(rows.length)} sessions ${states} · masked ${masked} · mean reward ${reward(mean)} ·
    ${num(calls)} calls · ${num(tokens)} tokens · ${num(trained)} trained`;
}

function options(values, selected, all) {
  return [`<option value="">${all}</option>`]
    .concat([...values].sort().map((v) => `<option${v === selected ? " selected" : ""}>${esc(v)}</option>`))
    .join("");
}

function table(main) {
  const states = new Set(), harnesses = new Set();
  for (const t of data.tasks) for (const s of t.sessions) states.add(s.state), harnesses.add(s.harness || "");
  main.querySelector("#f-state").innerHTML = options(states, filters.state, "every state");
  main.querySelector("#f-harness").innerHTML = options(harnesses, filters.harness, "every harness");
  const html = [], shownRows = [];
  const key = SORTS[filters.sort];
  if (key) {
    const rows = data.tasks.flatMap((t) => t.sessions.filter((s) => matches(s, t)));
    rows.sort((a, b) => key(a) - key(b));
    rows.forEach((s) => html.push(sessionRow(s)));
    shownRows.push(...rows);
  } else {
    for (const task of data.tasks) {
      const rows = task.sessions.filter((s) => matches(s, task));
      if (!rows.length) continue;
      html.push(taskRow(task, rows.length));
      if (!collapsed.has(task.task_id)) rows.forEach((s) => html.push(sessionRow(s)));
      shownRows.push(...rows);
    }
  }
  // rows in blocks the browser lays out only when they scroll into view (content-visibility)
  const blocks = [];
  for (let i = 0; i < html.length; i += BLOCK) blocks.push(`<div class="rows-block">${html.slice(i, i + BLOCK).join("")}</div>`);
  main.querySelector("#rows").innerHTML = blocks.join("") || `<p class="muted">no session matches</p>`;
  const summaryEl = main.querySelector("#summary");
  summaryEl.innerHTML = summary(shownRows);
  // final sessions whose rollup is still being computed from their records (it fills in by itself)
  summaryEl.dataset.pending = data.tasks.reduce(
    (n, t) => n + t.sessions.filter((s) => s.proxy_session_id && s.rollup?.prompt_tokens === undefined).length,
    0,
  );
}

export async function renderList(main) {
  data = await getJSON("/api/tasks");
  performance.mark("tasks-fetched");
  main.innerHTML = `
    <section class="toolbar">
      <input id="q" type="search" placeholder="search: task, session, harness, node, error, instruction" value="${esc(filters.q)}">
      <select id="f-state"></select>
      <select id="f-harness"></select>
      <select id="f-masked">${options(["masked", "not masked"], { yes: "masked", no: "not masked" }[filters.masked] || "", "masked or not")}</select>
      <select id="f-sort">${Object.keys(SORTS).map((k) => `<option value="${k}"${k === filters.sort ? " selected" : ""}>sort: ${k}</option>`).join("")}</select>
    </section>
    <p id="summary" class="summary"></p>
    <div class="sessions">
      <div class="row head"><span>session</span><span>state</span><span class="n">reward</span><span>masked: why</span>
      <span>harness</span><span>runtime</span><span class="n">calls</span><span class="n" title="prompt tokens, summed over calls">prompt</span>
      <span class="n" title="sampled tokens, summed over calls">sampled</span><span class="n" title="tokens trained (mask 1)">trained</span>
      <span class="n" title="wall time with a model call in flight">model</span><span class="n" title="wall time between calls">tools</span>
      <span title="RUN: waiting on the model · in tools · the harness starting and exiting">RUN split</span>
      <span title="queued · INIT · READY · RUN · POST-RUN">stages</span></div>
      <div id="rows"></div>
    </div>`;
  main.querySelector("#q").addEventListener("input", (e) => ((filters.q = e.target.value), table(main)));
  main.querySelector("#f-state").addEventListener("change", (e) => ((filters.state = e.target.value), table(main)));
  main.querySelector("#f-harness").addEventListener("change", (e) => ((filters.harness = e.target.value), table(main)));
  main.querySelector("#f-masked").addEventListener("change", (e) => {
    filters.masked = { masked: "yes", "not masked": "no" }[e.target.value] || "";
    table(main);
  });
  main.querySelector("#f-sort").addEventListener("change", (e) => ((filters.sort = e.target.value), table(main)));
  main.querySelector("#rows").addEventListener("click", (e) => {
    const row = e.target.closest(".row.task");
    if (!row) return;
    const id = row.dataset.task;
    collapsed.has(id) ? collapsed.delete(id) : collapsed.add(id);
    table(main);
  });
  table(main);
  markPainted("list-rendered");
  document.body.dataset.view = "list";

  let pending = null;
  return {
    kind: "list",
    refresh(version) {
      if (version === data.version || pending) return;
      pending = setTimeout(async () => {
        pending = null;
        data = await getJSON("/api/tasks");
        if (document.body.dataset.view === "list") table(main);
      }, 250);
    },
  };
}
