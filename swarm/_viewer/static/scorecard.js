// swarm trace view: the scorecard panel. The numbers are `swarm trace scorecard`'s
// (/api/scorecard, from swarm/_analysis/scorecard.py); this script only formats them.
"use strict";
(() => {
  const S = (window.__scorecard = { ready: false, rows: 0, error: "" });
  const COLUMNS = [
    ["calls", "calls", (v) => String(v)],
    ["ttft_p50_s", "TTFT p50", (v) => sec(v)],
    ["ttft_p95_s", "p95", (v) => sec(v)],
    ["ttft_p99_s", "p99", (v) => sec(v)],
    ["tokens_per_s", "decode tok/s", (v) => (v ? v.toFixed(0) : "–")],
    ["error_rate", "errors", (v) => pct(v)],
    ["rate_limited_rate", "429s", (v) => pct(v)],
    ["usd_per_mtok", "$/M tok", (v) => "$" + (v || 0).toFixed(3)],
    ["cached_share", "cached in", (v) => pct(v)],
    ["cost_share", "cost share", (v) => pct(v)],
  ];
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  function sec(v) { return v == null ? "–" : v < 1 ? (v * 1000).toFixed(0) + " ms" : v.toFixed(2) + " s"; }
  function pct(v) { return v == null ? "–" : (v * 100).toFixed(1) + " %"; }

  function table(title, key, rows) {
    const names = Object.keys(rows);
    if (!names.length) return "";
    const head = `<tr><th>${esc(key)}</th>` + COLUMNS.map(([, label]) => `<th>${label}</th>`).join("") + "</tr>";
    const body = names.map((name) => {
      const r = rows[name];
      const cells = COLUMNS.map(([k, , fmt]) => {
        const bad = (k === "error_rate" || k === "rate_limited_rate") && r[k] > 0 ? ' class="bad"' : "";
        const bar = k === "cost_share" ? `<i class="share" style="width:${Math.round((r[k] || 0) * 60)}px"></i>` : "";
        return `<td data-key="${k}"${bad}>${bar}${fmt(r[k])}</td>`;
      }).join("");
      const why = Object.entries(r.reasons || {}).map(([w, n]) => `${w}: ${n}`).join("\n");
      return `<tr data-name="${esc(name)}" title="${esc(why)}"><td>${esc(name)}</td>${cells}</tr>`;
    }).join("");
    S.rows += names.length;
    return `<h3>${esc(title)}</h3><table data-group="${esc(key)}">${head}${body}</table>`;
  }

  function render(card) {
    const box = document.getElementById("scorecard");
    const html = table("By provider/model", "provider/model", card.by_candidate || {}) +
      table("By role", "role", card.by_role || {});
    box.innerHTML = html || '<p class="muted">No model calls in this trace.</p>';
    S.card = card;
    S.ready = true;
  }

  function load() {
    fetch("/api/scorecard")
      .then((r) => (r.ok ? r.json() : Promise.reject(new Error(`/api/scorecard: ${r.status}`))))
      .then(render)
      .catch((e) => { S.error = String(e); document.getElementById("scorecard").textContent = S.error; });
  }
  // asked for once the timeline is drawn: the first draw's payload goes first
  (function whenDrawn() {
    if (window.__viewer && window.__viewer.ready) load(); else setTimeout(whenDrawn, 50);
  })();
})();
