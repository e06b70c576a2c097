// One trace's tokens, coloured by what training does with them: the first call's prompt and the context
// between sampled spans (mask 0), the sampled tokens trained here (mask 1), and sampled tokens trained in
// another trace of the session. Hover a token for its position, id, text and the sampled token's logprob.
// A trace of 100,000 tokens is drawn in blocks: the first at once, the rest a few blocks per frame.
import { esc, getJSON, markPainted, num } from "./util.js";

const BLOCK = 2000; // tokens per block
const FIRST = 3; // blocks drawn before the first paint
const KIND = { p: "prompt (context)", c: "context", t: "sampled, trained here", o: "sampled, trained in another trace" };

function tokenText(t, i) {
  const text = t.vocab ? t.vocab[t.ids[i]] ?? `<${t.ids[i]}>` : String(t.ids[i]);
  return text.replace(/\n/g, "↵\n");
}

function block(t, from, to, starts) {
  const out = [];
  for (let i = from; i < to; i++) {
    const seg = starts.has(i) ? " seg" : "";
    out.push(`<span class="tok k-${t.kinds[i]}${seg}">${esc(tokenText(t, i))}</span>`);
  }
  return out.join("");
}

function segmentAt(t, i) {
  let lo = 0, hi = t.segments.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1, s = t.segments[mid];
    if (i < s.start) hi = mid - 1;
    else if (i >= s.end) lo = mid + 1;
    else return s;
  }
  return null;
}

function tip(t, i) {
  const kind = t.kinds[i];
  const lp = t.logprobs[i];
  const seg = segmentAt(t, i);
  const pos = i < t.prompt_len ? `prompt position ${num(i)}` : `response position ${num(i - t.prompt_len)}`;
  const rows = [
    `<b>position ${num(i)}</b> <span class="muted">(${pos})</span>`,
    `token id ${t.ids[i]}${t.vocab ? ` <code>${esc(JSON.stringify(t.vocab[t.ids[i]] ?? ""))}</code>` : ""}`,
    `${esc(KIND[kind])}`,
  ];
  if (lp !== null && lp !== undefined) rows.push(`logprob ${lp.toFixed(4)} (p ${Math.exp(lp).toFixed(3)})`);
  if (seg) rows.push(`sampled by call #${seg.seq ?? "?"}`);
  return rows.join("<br>");
}

function hover(box, t) {
  const tipEl = document.getElementById("tip");
  box.addEventListener("mouseover", (e) => {
    const span = e.target.closest(".tok");
    if (!span) return;
    const blockEl = span.parentElement;
    const i = Number(blockEl.dataset.from) + Array.prototype.indexOf.call(blockEl.children, span);
    tipEl.innerHTML = tip(t, i);
    tipEl.hidden = false;
    const r = span.getBoundingClientRect();
    tipEl.style.left = `${Math.min(r.left, window.innerWidth - 320)}px`;
    tipEl.style.top = `${r.bottom + 6}px`;
  });
  box.addEventListener("mouseleave", () => (tipEl.hidden = true));
}

function draw(box, t, starts, done) {
  const blocks = [];
  for (let from = 0; from < t.ids.length; from += BLOCK) blocks.push(from);
  const drawOne = (from) => {
    const div = document.createElement("div");
    div.className = "block";
    div.dataset.from = from;
    div.innerHTML = block(t, from, Math.min(from + BLOCK, t.ids.length), starts);
    box.appendChild(div);
  };
  blocks.slice(0, FIRST).forEach(drawOne);
  let next = FIRST;
  const more = () => {
    if (!box.isConnected) return; // the page moved on
    for (let k = 0; k < 4 && next < blocks.length; k++) drawOne(blocks[next++]);
    if (next < blocks.length) requestAnimationFrame(more);
    else done();
  };
  requestAnimationFrame(more);
}

export async function renderTrace(main, sid, index) {
  const t = await getJSON(`/api/sessions/${encodeURIComponent(sid)}/traces/${index}`);
  const counts = { p: 0, c: 0, t: 0, o: 0 };
  for (const k of t.kinds) counts[k]++;
  const starts = new Set(t.segments.map((s) => s.start));
  const repairs = (t.metadata.repairs || []).map((r) => esc(r.cause)).join(", ") || "none";
  main.innerHTML = `<nav><a href="#/s/${encodeURIComponent(sid)}">← session ${esc(sid)}</a></nav>
    <h2>trace ${index} <span class="muted">of ${esc(sid)}</span></h2>
    <p class="facts-line">${num(t.ids.length)} tokens: ${num(t.prompt_len)} prompt, ${num(t.ids.length - t.prompt_len)} response,
      <b>${num(counts.t)}</b> trained · ${t.segments.length} calls · repairs: ${repairs} ·
      ${t.vocab ? `text by ${esc(t.tokenizer)}` : "token ids (no tokenizer known: polar view --tokenizer DIR)"}</p>
    <p class="legend">
      <span class="tok k-p">prompt ${num(counts.p)}</span>
      <span class="tok k-c">context ${num(counts.c)}</span>
      <span class="tok k-t">trained ${num(counts.t)}</span>
      <span class="tok k-o">trained in another trace ${num(counts.o)}</span>
      <span class="tok seg">a call's sampled span starts</span></p>
    <div id="tokens" class="tokens${t.vocab ? "" : " ids"}"></div>`;
  const box = main.querySelector("#tokens");
  hover(box, t);
  document.body.dataset.view = "trace";
  document.body.dataset.traceComplete = "";
  draw(box, t, starts, () => {
    document.body.dataset.traceComplete = "1";
    markPainted("trace-complete");
  });
  markPainted("trace-rendered");
  return { kind: "trace", refresh() {} };
}
