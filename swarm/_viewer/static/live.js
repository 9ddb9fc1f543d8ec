// The live view of a running swarm (served only when following a run: `solve --view`, `trace view
// --follow`). Long-polls /api/live and draws, above the ordinary viewer: a lane per agent filling
// in as spans end, the estimated finish with its range (and how it moved), waits in progress by
// kind, the merge queue, spend against the budget, per-provider TTFT and tok/s over the last
// minute, agents stuck or retrying, the live critical path. When the run ends the section goes and
// the page loads the finished trace: no reload.
(function () {
  "use strict";
  const RETRY_MS = 500; // after a failed request; otherwise the server answers on news
  const LAGS = 20000;
  const COLORS = { chat: "#5fb3d9", tool: "#3ecf8e", wait: "#d0a040", agent: "#2b3445", other: "#6b7280" };
  // lag_ms: per bar, the time from its span's end to the page having drawn it (meaningful
  // for a run on the real clock: a simulated run's spans are on a virtual one)
  const state = window.__live = { updates: 0, lanes: 0, estimates: [], done: false, bars: [], lag_ms: [] };
  let labels = [], last = null, resolveSpans;
  window.__spans = new Promise((resolve) => { resolveSpans = resolve; });

  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const sec = (v) => (v == null ? "–" : v < 1 ? `${Math.round(v * 1000)} ms` : `${v.toFixed(1)} s`);

  function build() {
    const box = el("section", { id: "live", class: "live", "data-testid": "live" });
    box.innerHTML = `
      <h2>Live <span id="live-clock" class="muted"></span></h2>
      <div class="live-figures">
        <div data-testid="live-estimate" id="live-estimate">estimated finish: measuring…</div>
        <div data-testid="live-spend" id="live-spend"></div>
        <div data-testid="live-subtasks" id="live-subtasks"></div>
        <div data-testid="live-merge" id="live-merge"></div>
        <div data-testid="live-waits" id="live-waits"></div>
      </div>
      <canvas id="live-lanes" data-testid="live-lanes" class="live-lanes"></canvas>
      <div class="live-tables">
        <div><h3>Providers, last minute</h3><table data-testid="live-providers" id="live-providers"></table></div>
        <div><h3>Critical path ahead</h3><div data-testid="live-critical" id="live-critical"></div></div>
        <div><h3>Agents</h3><div data-testid="live-agents" id="live-agents"></div></div>
        <div><h3>Estimate as it moved</h3><canvas id="live-trend" data-testid="live-trend" class="live-trend"></canvas></div>
      </div>`;
    document.body.insertBefore(box, document.body.firstChild);
    const style = el("style", { id: "live-style" });
    style.textContent = `
      .live { padding: 8px 16px; border-bottom: 1px solid #2b3445; }
      .live h2 { margin: 4px 0; font-size: 15px; } .live h3 { margin: 4px 0; font-size: 12px; color: #9aa4b2; }
      .live-figures { display: flex; flex-wrap: wrap; gap: 6px 24px; font-size: 13px; }
      .live-lanes { width: 100%; height: 220px; display: block; margin: 6px 0; background: #11151c; }
      .live-tables { display: grid; grid-template-columns: repeat(4, minmax(0, 1fr)); gap: 12px; font-size: 12px; }
      .live-tables td, .live-tables th { padding: 1px 6px; white-space: nowrap; text-align: right; }
      .live-tables td:first-child { text-align: left; }
      .live-trend { width: 100%; height: 80px; background: #11151c; }`;
    document.head.appendChild(style);
  }

  function drawLanes() {
    const c = document.getElementById("live-lanes");
    const w = c.clientWidth, h = c.clientHeight, dpr = window.devicePixelRatio || 1;
    c.width = w * dpr; c.height = h * dpr;
    const g = c.getContext("2d");
    g.scale(dpr, dpr);
    const n = Math.max(1, labels.length), row = Math.max(1, Math.min(14, h / n));
    const end = Math.max(1, (last && last.now_s) || 1) * 1.02;
    const left = row >= 9 ? 130 : 0, span = w - left - 4;
    g.font = "10px sans-serif"; g.textBaseline = "middle";
    for (const [lane, s, e, kind] of state.bars) {
      g.fillStyle = COLORS[kind] || COLORS.other;
      g.fillRect(left + (s / end) * span, lane * row, Math.max(1, ((e - s) / end) * span), Math.max(1, row - 1));
    }
    if (left) {
      g.fillStyle = "#c9d1d9";
      labels.forEach((t, i) => g.fillText(t.slice(0, 22), 2, i * row + row / 2));
    }
  }

  function drawTrend(estimates) {
    const c = document.getElementById("live-trend");
    const w = c.clientWidth, h = c.clientHeight;
    c.width = w; c.height = h;
    if (!estimates.length) return;
    const g = c.getContext("2d");
    const ends = estimates.map(([t, l, lo, hi]) => [t, t + l, t + (lo ?? l), t + (hi ?? l)]);
    const top = Math.max(...ends.map((e) => e[3]), 1), xs = Math.max(...ends.map((e) => e[0]), 1);
    const x = (t) => (t / xs) * (w - 4) + 2, y = (v) => h - 2 - (v / top) * (h - 4);
    g.fillStyle = "rgba(95,179,217,0.25)";
    ends.forEach(([t, , lo, hi]) => g.fillRect(x(t) - 1, y(hi), 3, Math.max(1, y(lo) - y(hi))));
    g.strokeStyle = "#5fb3d9"; g.beginPath();
    ends.forEach(([t, e], i) => (i ? g.lineTo(x(t), y(e)) : g.moveTo(x(t), y(e))));
    g.stroke();
  }

  function show(d) {
    const p = d.pulse || {};
    document.getElementById("live-clock").textContent = `${sec(d.now_s)} · ${d.spans.toLocaleString()} spans`;
    const est = d.estimates[d.estimates.length - 1];
    if (est) {
      const [t, l, lo, hi] = est;
      document.getElementById("live-estimate").textContent =
        `estimated finish: in ${sec(l)} (range ${sec(lo ?? l)}–${sec(hi ?? l)}; at ${sec(t + l)} of the run)`;
    }
    const budget = p.budget_usd ? ` of $${p.budget_usd.toFixed(2)} (${((100 * (p.spent_usd || 0)) / p.budget_usd).toFixed(1)} %)` : " (no budget)";
    document.getElementById("live-spend").textContent = `spend $${(p.spent_usd || 0).toFixed(4)}${budget}`;
    const st = p.subtasks || {};
    document.getElementById("live-subtasks").textContent =
      `subtasks ${st.merged || 0}/${st.total || 0} merged · ${st.running || 0} running · ${st.queued || 0} queued · ${st.failed || 0} failed`;
    document.getElementById("live-merge").textContent = `merge queue: ${p.merge_queued || 0} waiting`;
    const waits = Object.entries(p.waiting || {}).map(([k, n]) => `${k} ${n}`).join(" · ");
    document.getElementById("live-waits").textContent = `waiting now: ${waits || "none"}`;
    const prov = document.getElementById("live-providers");
    prov.innerHTML = "<tr><th>provider</th><th>calls</th><th>TTFT p50</th><th>tok/s</th></tr>";
    for (const [name, r] of Object.entries(d.providers)) {
      const tr = el("tr", { "data-name": name });
      for (const v of [name, r.calls, sec(r.ttft_p50_s), Math.round(r.tokens_per_s)]) tr.appendChild(el("td", {}, String(v)));
      prov.appendChild(tr);
    }
    document.getElementById("live-critical").textContent = (p.critical || []).join(" → ") || "–";
    document.getElementById("live-agents").textContent =
      `${labels.length} lanes · stuck: ${d.stuck.join(", ") || "none"} · retrying: ${d.retrying.join(", ") || "none"}`;
    drawLanes();
    drawTrend(d.estimates);
  }

  async function poll() {
    let cursor = 0, version = -1;
    for (;;) {
      try { // the server answers once it has read something new (a long poll)
        const r = await fetch(`/api/live?since=${cursor}&v=${version}`, { cache: "no-store" });
        const d = await r.json();
        if (!d.live) break;
        for (const b of d.bars) state.bars.push(b);
        cursor = d.cursor; version = d.version; labels = d.labels; last = d;
        state.updates += 1; state.lanes = labels.length; state.estimates = d.estimates;
        show(d);
        const now = Date.now();
        for (const b of d.bars) if (state.lag_ms.length < LAGS) state.lag_ms.push(now - (d.t0_ms + b[2] * 1000));
        state.estimate = document.getElementById("live-estimate").textContent;
        if (d.done) break;
      } catch (err) { // the server is busy loading: try again shortly
        await new Promise((res) => setTimeout(res, RETRY_MS));
      }
    }
    state.done = true;
    document.getElementById("live")?.remove();
    document.getElementById("live-style")?.remove();
    resolveSpans(fetch("/api/spans"));
  }

  document.addEventListener("DOMContentLoaded", () => { build(); poll(); });
})();
