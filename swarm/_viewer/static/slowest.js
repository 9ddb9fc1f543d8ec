// swarm trace view: the slowest calls and waits. A table of the longest model calls, tool
// calls and waits of the run, built in the page from the span columns it already holds
// (no request): filtered by provider, role, subtask and kind, sorted by any column (click
// its head; again for the other way), each row a link to its span in the timeline. It is
// built once the whole trace has arrived (viewer.js's `viewer-complete` event).
"use strict";
(() => {
  const ROWS = 200;
  const T = (window.__slowest = { ready: false, rows: 0, matched: 0, sort: "dur", desc: true, shown: [] });
  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  const ms = (v) => (v < 1000 ? `${v.toFixed(v < 10 ? 1 : 0)} ms` : `${(v / 1000).toFixed(2)} s`);
  const COLUMNS = [ // key, head, value of span i, shown as
    ["name", "span", (c, i) => c.names[c.name[i]], esc],
    ["kind", "kind", (c, i) => kindOf(c, i), esc],
    ["provider", "provider", (c, i) => c.providers[c.provider[i]] || "", esc],
    ["role", "role", (c, i) => c.roles[c.laneRole[c.lane[i]]] || "", esc],
    ["subtask", "subtask", (c, i) => c.subtasks[c.laneSubtask[c.lane[i]]] || "", esc],
    ["start", "start", (c, i) => c.start[i], ms],
    ["ttft", "TTFT", (c, i) => (c.ttft[i] >= 0 ? c.ttft[i] : -1), (v) => (v >= 0 ? ms(v) : "–")],
    ["dur", "duration", (c, i) => c.end[i] - c.start[i], ms],
  ];
  const FILTERS = ["provider", "role", "subtask", "kind"];
  let cols = null, spans = null;

  function kindOf(c, i) {
    const k = c.kinds[c.kind[i]];
    return k === "wait" ? `wait · ${c.waits[c.wait[i]] || "?"}` : k === "chat" ? "model call" : "tool call";
  }

  function build() {
    cols = window.__viewer.columns();
    const CHAT = cols.kinds.indexOf("chat"), TOOL = cols.kinds.indexOf("tool"), WAIT = cols.kinds.indexOf("wait");
    spans = [];
    for (let i = 0; i < cols.n; i++) { const k = cols.kind[i]; if (k === CHAT || k === TOOL || k === WAIT) spans.push(i); }
    for (const f of FILTERS) { // each filter offers the values its spans have
      const get = COLUMNS.find((c) => c[0] === f)[2], seen = new Set();
      for (const i of spans) seen.add(get(cols, i));
      const select = $(`slowest-${f}`);
      select.innerHTML = `<option value="">any ${f}</option>` +
        [...seen].filter((v) => v !== "").sort().map((v) => `<option>${esc(v)}</option>`).join("");
    }
    render();
    T.ready = true;
  }

  function render() {
    const want = FILTERS.map((f) => [COLUMNS.find((c) => c[0] === f)[2], $(`slowest-${f}`).value]).filter(([, v]) => v);
    const [, , key] = COLUMNS.find((c) => c[0] === T.sort);
    const rows = [];
    for (const i of spans) if (want.every(([get, v]) => get(cols, i) === v)) rows.push([key(cols, i), i]);
    const dir = T.desc ? -1 : 1;
    rows.sort((a, b) => (a[0] < b[0] ? -dir : a[0] > b[0] ? dir : a[1] - b[1]));
    const top = rows.slice(0, ROWS);
    T.matched = rows.length; T.rows = top.length; T.shown = top.map(([, i]) => i);
    $("slowest-head").innerHTML = COLUMNS.map(([k, head]) =>
      `<th data-sort="${k}" class="${k === T.sort ? (T.desc ? "desc" : "asc") : ""}">${head}</th>`).join("");
    $("slowest-body").innerHTML = top.map(([, i]) => `<tr data-span="${i}">` +
      COLUMNS.map(([, , get, show]) => { const v = show(get(cols, i)); return `<td title="${v}">${v}</td>`; }).join("") + "</tr>").join("");
    $("slowest-count").textContent = `${rows.length.toLocaleString()} matching · ${top.length} shown`;
  }

  $("slowest-head").addEventListener("click", (ev) => {
    const th = ev.target.closest("[data-sort]"); if (!th || !cols) return;
    const k = th.dataset.sort;
    if (k === T.sort) T.desc = !T.desc; else { T.sort = k; T.desc = !["name", "kind", "provider", "role", "subtask"].includes(k); }
    render();
  });
  for (const f of FILTERS) $(`slowest-${f}`).addEventListener("change", () => { if (cols) render(); });
  $("slowest-body").addEventListener("click", (ev) => {
    const row = ev.target.closest("[data-span]"); if (!row) return;
    const i = +row.dataset.span; window.__viewer.reveal(i); window.__viewer.select(i);
  });
  if (window.__viewer.complete) build(); // a small trace may be whole before this script runs
  else window.addEventListener("viewer-complete", build);
})();
