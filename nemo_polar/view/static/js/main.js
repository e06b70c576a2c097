// The page's router and change feed. Routes (in the URL's hash):
//   #/                      tasks and their sessions
//   #/s/<session>           one session: calls, rollup, chain tree, traces
//   #/s/<session>/t/<i>     one trace's tokens
import { renderList } from "./list.js";
import { renderSession } from "./session.js";
import { renderTrace } from "./trace.js";
import { esc, getJSON } from "./util.js";

const main = document.getElementById("main");
let current = null; // {kind, refresh(version)} of the view on screen
let rendering = 0;

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "s" && parts[1] && parts[2] === "t") return { kind: "trace", sid: parts[1], index: Number(parts[3]) };
  if (parts[0] === "s" && parts[1]) return { kind: "session", sid: parts[1] };
  return { kind: "list" };
}

async function show() {
  const token = ++rendering;
  const r = route();
  try {
    if (r.kind === "list") current = await renderList(main);
    else if (r.kind === "session") current = await renderSession(main, r.sid);
    else current = await renderTrace(main, r.sid, r.index);
  } catch (err) {
    if (token === rendering) main.innerHTML = `<p class="error">${esc(err.message)}</p>`;
    current = null;
  }
}

function follow() {
  const live = document.getElementById("live");
  const events = new EventSource("/api/events");
  events.addEventListener("open", () => {
    live.textContent = "● live";
    live.className = "live on";
  });
  events.addEventListener("version", (e) => {
    const { version } = JSON.parse(e.data);
    if (current?.refresh) current.refresh(version);
  });
  events.addEventListener("trouble", (e) => {
    live.textContent = "● " + JSON.parse(e.data).message;
    live.className = "live trouble";
  });
  events.addEventListener("error", () => {
    live.textContent = "○ reconnecting";
    live.className = "live";
  });
}

async function start() {
  const info = await getJSON("/api/info");
  document.getElementById("source").textContent = `${info.kind}: ${info.source}`;
  document.title = `polar view · ${info.source}`;
  window.addEventListener("hashchange", show);
  await show();
  follow();
}

start();
