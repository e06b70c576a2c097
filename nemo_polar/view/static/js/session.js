// One session: what it was, its rollup, its calls in order (each with its native request and answer),
// the builder's chain tree, its traces and its state transitions.
import { renderTree } from "./tree.js";
import { STAGES, esc, getJSON, markPainted, num, reward, runBar, secs, short, stageBar, stateBadge } from "./util.js";

const sessionPath = (sid) => `/api/sessions/${encodeURIComponent(sid)}`;

function facts(s) {
  const rows = [
    ["task", s.task_id],
    ["sample", s.sample_index],
    ["harness", s.harness],
    ["runtime", s.runtime],
    ["builder", s.builder],
    ["node", s.node_id],
    ["capture session", s.proxy_session_id],
  ].filter(([, v]) => v !== null && v !== undefined && v !== "");
  const instruction = s.instruction ? `<dt>instruction</dt><dd><pre class="instruction">${esc(s.instruction)}</pre></dd>` : "";
  return `<dl class="facts">${rows.map(([k, v]) => `<dt>${k}</dt><dd>${esc(v)}</dd>`).join("")}${instruction}</dl>`;
}

function header(d) {
  const s = d.session;
  const masked = s.masked ? `<span class="masked">masked</span> <span class="why">${esc(s.error || "")}</span>` : "";
  const error = !s.masked && s.error ? `<span class="why">${esc(s.error)}</span>` : "";
  return `<nav><a href="#/">← sessions</a></nav>
    <h2>${esc(s.session_id)} ${stateBadge(s.state)} <span class="reward">reward ${reward(s.reward)}</span> ${masked}${error}</h2>
    ${facts(s)}
    ${s.result ? `<details class="result"><summary>result as the node reported it</summary><pre class="json">${esc(JSON.stringify(s.result, null, 2))}</pre></details>` : ""}`;
}

function rollupCards(r) {
  if (!r) return "";
  const byStatus = Object.entries(r.calls_by_status || {}).map(([k, v]) => `${esc(k)} ${v}`).join(", ");
  const stages = STAGES.map((st) => `<span class="key ${st.cls}"></span>${st.label} ${secs(r.stages?.[st.key])}`).join(" ");
  return `<section class="rollup"><h3>Rollup</h3>
    <div class="cards">
      <div><b>${num(r.calls)}</b><span>calls</span><small>${byStatus}</small></div>
      <div><b>${num(r.prompt_tokens)}</b><span>prompt tokens</span></div>
      <div><b>${num(r.completion_tokens)}</b><span>completion tokens</span></div>
      <div><b>${num(r.trained_tokens)}</b><span>trained tokens</span></div>
      <div><b>${secs(r.model_s)}</b><span>waiting on the model</span></div>
      <div><b>${secs(r.tools_s)}</b><span>in tools (between calls)</span></div>
    </div>
    <p class="bars"><span class="label">RUN</span>${runBar(r)}
      <span class="key r-model"></span>model ${secs(r.model_s)} <span class="key r-tools"></span>tools ${secs(r.tools_s)}
      <span class="key r-harness"></span>harness start and exit ${secs(r.harness_s)}</p>
    <p class="bars"><span class="label">stages</span>${stageBar(r)} ${stages}</p></section>`;
}

function timeline(calls) {
  if (!calls.length) return "";
  const end = Math.max(...calls.map((c) => c.start_s + c.latency_s)) || 1;
  const lanes = []; // a lane per overlap level: sub-agents' calls side by side
  const bars = calls.map((c) => {
    let lane = lanes.findIndex((until) => until <= c.start_s);
    if (lane < 0) lane = lanes.push(0) - 1;
    lanes[lane] = c.start_s + c.latency_s;
    const left = (100 * c.start_s) / end, width = Math.max(0.3, (100 * c.latency_s) / end);
    return `<i class="call-bar st-${esc(c.status)}" style="left:${left}%;width:${width}%;top:${lane * 14}px"
      title="#${c.seq} ${esc(c.dialect)} ${esc(c.status)} at +${secs(c.start_s)} for ${secs(c.latency_s)}"></i>`;
  });
  return `<div class="timeline" style="height:${lanes.length * 14 + 4}px">${bars.join("")}</div>
    <p class="muted small">calls from the first call's start (+0) to the last call's end (${secs(end)}); gaps are tools</p>`;
}

function callRows(calls) {
  return calls
    .map(
      (c) => `<tr class="call" data-rid="${esc(c.id)}" id="call-${esc(c.id)}">
      <td>#${c.seq}</td><td>${esc(c.dialect)}${c.stream ? ' <span class="muted">stream</span>' : ""}</td>
      <td>${stateBadge(c.status)}</td><td class="n">+${secs(c.start_s)}</td><td class="n">${secs(c.latency_s)}</td>
      <td class="n">${c.ttft_s === null ? "–" : secs(c.ttft_s)}</td><td class="n">${num(c.prompt_tokens)}</td>
      <td class="n">${num(c.completion_tokens)}</td><td>${esc(c.finish_reason || "")}</td>
      <td>${esc(c.policy_version ?? "")}</td><td class="why">${esc(short(c.error || "", 60))}</td></tr>`,
    )
    .join("");
}

function answer(message) {
  if (!message) return `<p class="muted">no answer</p>`;
  const parts = [];
  if (message.reasoning) parts.push(`<h5>reasoning</h5><pre>${esc(message.reasoning)}</pre>`);
  if (message.content) parts.push(`<h5>content</h5><pre>${esc(message.content)}</pre>`);
  if (message.tool_calls?.length) parts.push(`<h5>tool calls</h5><pre>${esc(JSON.stringify(message.tool_calls, null, 2))}</pre>`);
  return parts.join("") || `<pre>${esc(JSON.stringify(message, null, 2))}</pre>`;
}

async function toggleCall(sid, row) {
  const next = row.nextElementSibling;
  if (next?.classList.contains("call-detail")) return next.remove();
  const detail = document.createElement("tr");
  detail.className = "call-detail";
  detail.innerHTML = `<td colspan="11" class="muted">loading…</td>`;
  row.after(detail);
  const c = await getJSON(`${sessionPath(sid)}/calls/${encodeURIComponent(row.dataset.rid)}`);
  const upstream = c.upstream ? `${esc(c.upstream.engine)} ${esc(c.upstream.model)} at ${esc(c.upstream.url)}` : "";
  detail.innerHTML = `<td colspan="11"><div class="call-body">
    <div><h4>native request <span class="muted">(${esc(c.dialect)}, as the harness sent it)</span></h4>
      <pre class="json">${esc(JSON.stringify(c.native_request, null, 2))}</pre></div>
    <div><h4>answer <span class="muted">(${num(c.completion_tokens)} tokens, ${esc(c.finish_reason || "")})</span></h4>
      ${answer(c.message)}
      ${c.error ? `<h5>error</h5><pre class="error">${esc(c.error)}</pre>` : ""}
      <h5>upstream</h5><p>${upstream}; usage ${esc(JSON.stringify(c.usage))}</p></div>
  </div></td>`;
}

function traces(sid, list) {
  if (!list.length) return `<p class="muted">no traces</p>`;
  const rows = list
    .map(
      (t) => `<tr><td><a href="#/s/${encodeURIComponent(sid)}/t/${t.index}">trace ${t.index}</a>${
        t.side_call ? ` <span class="role role-side">side call: ${esc(t.side_call)}</span>` : ""}</td>
      <td class="n">${t.calls}</td><td class="n">${num(t.prompt_tokens)}</td><td class="n">${num(t.response_tokens)}</td>
      <td class="n">${num(t.trained_tokens)}</td><td>${t.repairs.map((r) => esc(r.cause)).join(", ")}</td>
      <td>${esc(t.finish_reason || "")}${t.truncated ? " (truncated)" : ""}</td></tr>`,
    )
    .join("");
  return `<table class="traces"><thead><tr><th>trace</th><th>calls</th><th>prompt</th><th>response</th><th>trained</th>
    <th>repairs</th><th>finish</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function transitions(list) {
  if (!list?.length) return "";
  const t0 = list[0].at;
  const rows = list
    .map((t) => `<tr><td class="n">+${secs(t.at - t0)}</td><td>${esc(t.from || "")}</td><td>${esc(t.to)}</td><td>${esc(t.cause)}</td></tr>`)
    .join("");
  return `<details class="transitions"><summary>state transitions (${list.length})</summary>
    <table><thead><tr><th>at</th><th>from</th><th>to</th><th>cause</th></tr></thead><tbody>${rows}</tbody></table></details>`;
}

function render(main, d) {
  const sid = d.session.session_id;
  const buildError = d.build_error ? `<p class="error">traces could not be built: ${esc(d.build_error)}</p>` : "";
  main.innerHTML = `${header(d)}${rollupCards(d.rollup)}
    <section><h3>Calls <span class="muted">(${d.calls.length}, click one for its request and answer)</span></h3>
      ${timeline(d.calls)}
      <table class="calls"><thead><tr><th>call</th><th>dialect</th><th>status</th><th>start</th><th>latency</th><th>first token</th>
      <th>prompt tok</th><th>completion tok</th><th>finish</th><th>policy</th><th>error</th></tr></thead>
      <tbody>${callRows(d.calls)}</tbody></table></section>
    <section><h3>Chain tree <span class="muted">(as the prefix-tree builder placed the calls)</span></h3>${buildError}
      ${d.tree ? renderTree(sid, d.tree) : ""}</section>
    <section><h3>Traces</h3>${traces(sid, d.traces)}</section>
    ${transitions(d.session.transitions)}`;
  main.querySelector("table.calls tbody").addEventListener("click", (e) => {
    const row = e.target.closest("tr.call");
    if (row) toggleCall(sid, row).catch((err) => console.warn(err));
  });
  main.querySelectorAll(".tree [data-call]").forEach((el) =>
    el.addEventListener("click", () => document.getElementById(`call-${el.dataset.call}`)?.scrollIntoView({ block: "center" })),
  );
}

export async function renderSession(main, sid) {
  let d = await getJSON(sessionPath(sid));
  render(main, d);
  document.body.dataset.view = "session";
  markPainted("session-rendered");
  let pending = null;
  return {
    kind: "session",
    refresh() {
      if (d.session.final || pending) return; // a final session no longer changes
      pending = setTimeout(async () => {
        pending = null;
        d = await getJSON(sessionPath(sid));
        if (document.body.dataset.view === "session") render(main, d);
      }, 250);
    },
  };
}
