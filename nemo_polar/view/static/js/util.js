// Small helpers every view shares: fetching JSON, escaping, numbers and seconds.

export async function getJSON(path) {
  const response = await fetch(path, { headers: { accept: "application/json" } });
  const body = await response.json();
  if (!response.ok) throw new Error(body?.error?.message || `${path}: ${response.status}`);
  return body;
}

const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
export const esc = (value) => String(value ?? "").replace(/[&<>"']/g, (c) => ESC[c]);

export const num = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
export const secs = (s) => (s === null || s === undefined ? "–" : s < 10 ? `${Number(s).toFixed(2)} s` : `${Number(s).toFixed(1)} s`);
export const reward = (r) => (r === null || r === undefined ? "–" : Number(r).toFixed(3).replace(/\.?0+$/, "") || "0");
export const short = (id, n = 14) => (id && id.length > n ? id.slice(0, n) + "…" : id ?? "");

export function stateBadge(state) {
  return `<span class="state st-${esc(state)}">${esc(state)}</span>`;
}

// A horizontal bar of parts [{label, value, cls}], widths by value; the numbers in its title.
export function bar(parts, unit = "s") {
  const total = parts.reduce((a, p) => a + (p.value || 0), 0);
  if (!total) return `<span class="bar empty"></span>`;
  const title = parts.map((p) => `${p.label} ${unit === "s" ? secs(p.value) : num(p.value)}`).join(" · ");
  const cells = parts
    .filter((p) => p.value > 0)
    .map((p) => `<i class="${p.cls}" style="width:${((100 * p.value) / total).toFixed(2)}%"></i>`)
    .join("");
  return `<span class="bar" title="${esc(title)}">${cells}</span>`;
}

export const STAGES = [
  { key: "queued_s", label: "queued", cls: "s-queued" },
  { key: "init_s", label: "INIT", cls: "s-init" },
  { key: "ready_wait_s", label: "READY", cls: "s-ready" },
  { key: "run_s", label: "RUN", cls: "s-run" },
  { key: "postrun_s", label: "POST-RUN", cls: "s-post" },
];

export function stageBar(rollup) {
  const stages = rollup?.stages;
  if (!stages) return "";
  return bar(STAGES.map((s) => ({ label: s.label, value: stages[s.key], cls: s.cls })));
}

// RUN split three ways: waiting on the model, in tools (between calls), the harness starting and exiting.
export function runBar(rollup) {
  if (!rollup || rollup.model_s === undefined) return "";
  return bar([
    { label: "model", value: rollup.model_s, cls: "r-model" },
    { label: "tools", value: rollup.tools_s, cls: "r-tools" },
    { label: "harness", value: rollup.harness_s || 0, cls: "r-harness" },
  ]);
}

// A performance mark once the browser has painted what is in the DOM now (the next frame, then a task).
export function markPainted(name) {
  requestAnimationFrame(() => setTimeout(() => performance.mark(name), 0));
}
