// swarm trace view: draws a swarm run's spans on one <canvas> (never one DOM node per span).
// Spans arrive as columns; they are kept in typed arrays, grouped per lane row in start
// order with a running max of end times, so each frame bisects to the visible window,
// merges sub-pixel spans per pixel column and issues one fill per colour batch.
"use strict";
(() => {
  const ROW_H = 7, ROW_GAP = 1, LANE_GAP = 3, LABEL_W = 150, AXIS_H = 22;
  const ROW_STEP = ROW_H + ROW_GAP;
  const BG = "#0b0e13", LANE_ALT = "#10141b", GRID = "#1b2230", CRIT = "#ff5d5d";
  const TIER_COLORS = { speed: "#4ea1ff", reasoning: "#b07cff" };
  const WAIT_COLORS = {
    queue: "#f5a524", rate_limit: "#ff6b6b", backoff: "#e0517f", hedge: "#e8d44d",
    dependency: "#8892b0", merge: "#c08a5b", check: "#9f7aea",
  };
  const MERGE_COLORS = { green: "#2f855a", red: "#f56565", cancelled: "#a0aec0", split: "#ed8936", "?": "#6b7280" };
  const KIND_COLORS = {
    other: "#6b7280", workflow: "#4a5568", agent: "#2b3445", chat: "#5fb3d9", tool: "#3ecf8e",
    wait: "#d0a040", workspace: "#718096",
  };
  const LEDGER_COLORS = [
    [/queue|slot|concurr/, "#f5a524"], [/rate/, "#ff6b6b"], [/backoff|retry/, "#e0517f"],
    [/hedge/, "#e8d44d"], [/ttft|first/, "#7cc4ff"], [/decode|generat/, "#4e7fff"],
    [/prefill/, "#9bb7ff"], [/test/, "#2bb5a0"], [/tool/, "#3ecf8e"], [/merge/, "#c08a5b"],
    [/depend/, "#8892b0"], [/reason/, "#b07cff"], [/check/, "#9f7aea"], [/workspace/, "#718096"],
  ];

  const $ = (id) => document.getElementById(id);
  const canvas = $("timeline"), ctx = canvas.getContext("2d", { alpha: false });
  const tooltip = $("tooltip");
  const V = (window.__viewer = {
    ready: false, summaryReady: false, spanCount: 0, drawnCount: 0, firstDrawMs: null,
    selected: -1, frames: 0, selectSpanAt, spanCenter, reveal, kindName, select,
    mergeLabel: (i) => (D.merges[i] ? D.merges[i].label : ""), laneName: (i) => D.lanes[D.lane[i]],
    view: () => ({ t0: viewT0, t1: viewT1, scrollY }),
    drawNow: () => { const t = performance.now(); draw(); return performance.now() - t; },
  });

  let D = null; // columns as typed arrays plus tables
  let order, pme, rowStart, laneTop, laneRows, rowBase, colorOf, palette, critIdx;
  let viewT0 = 0, viewT1 = 1, scrollY = 0, cssW = 0, cssH = 0, dpr = 1, pending = false;
  let runEnd = 1, critFocus = false;

  // ---------- data ----------
  function build(p) {
    const n = p.n;
    const f64 = (a) => Float64Array.from(a), i32 = (a) => Int32Array.from(a);
    D = {
      n, start: f64(p.start), end: f64(p.end), lane: i32(p.lane), depth: Uint8Array.from(p.depth),
      kind: Uint8Array.from(p.kind), tier: Uint16Array.from(p.tier), wait: Uint16Array.from(p.wait),
      parent: i32(p.parent), name: Uint32Array.from(p.name), crit: Uint8Array.from(p.crit),
      names: p.names, kinds: p.kinds, tiers: p.tiers, waits: p.waits, lanes: p.lanes,
      merges: p.merges || {}, mergeLane: p.merge_lane == null ? -1 : p.merge_lane,
    };
    V.mergeSpans = Object.keys(D.merges).map(Number);
    // colours: one palette entry per distinct (kind, tier, wait) style
    palette = []; const pIndex = new Map(); colorOf = new Uint16Array(n);
    const colorIndex = (c) => { if (!pIndex.has(c)) { pIndex.set(c, palette.length); palette.push(c); } return pIndex.get(c); };
    for (let i = 0; i < n; i++) colorOf[i] = colorIndex(spanColor(i));
    // lanes and rows
    const L = D.lanes.length;
    laneRows = new Uint8Array(L).fill(1);
    for (let i = 0; i < n; i++) { const r = D.depth[i] + 1; if (r > laneRows[D.lane[i]]) laneRows[D.lane[i]] = r; }
    laneTop = new Float64Array(L + 1); rowBase = new Int32Array(L + 1);
    for (let l = 0; l < L; l++) {
      laneTop[l + 1] = laneTop[l] + laneRows[l] * ROW_STEP + LANE_GAP;
      rowBase[l + 1] = rowBase[l] + laneRows[l];
    }
    // stable counting sort by row (the server sends spans in start order)
    const R = rowBase[L]; rowStart = new Int32Array(R + 1);
    const rowOf = new Int32Array(n);
    for (let i = 0; i < n; i++) { rowOf[i] = rowBase[D.lane[i]] + D.depth[i]; rowStart[rowOf[i] + 1]++; }
    for (let r = 0; r < R; r++) rowStart[r + 1] += rowStart[r];
    const fill = rowStart.slice(0, R); order = new Uint32Array(n);
    for (let i = 0; i < n; i++) order[fill[rowOf[i]]++] = i;
    pme = new Float64Array(n);
    for (let r = 0; r < R; r++) {
      let m = -Infinity;
      for (let k = rowStart[r]; k < rowStart[r + 1]; k++) { const e = D.end[order[k]]; if (e > m) m = e; pme[k] = m; }
    }
    const crit = []; runEnd = 1;
    for (let i = 0; i < n; i++) { if (D.crit[i]) crit.push(i); if (D.end[i] > runEnd) runEnd = D.end[i]; }
    critIdx = Uint32Array.from(crit);
    V.spanCount = n;
  }

  function spanColor(i) {
    const m = D.merges[i];
    if (m) return MERGE_COLORS[m.outcome] || MERGE_COLORS["?"];
    const k = D.kinds[D.kind[i]];
    if (k === "wait") return WAIT_COLORS[D.waits[D.wait[i]]] || KIND_COLORS.wait;
    if (k === "chat") return TIER_COLORS[D.tiers[D.tier[i]]] || KIND_COLORS.chat;
    return KIND_COLORS[k] || KIND_COLORS.other;
  }
  function kindName(i) { return D.kinds[D.kind[i]]; }

  // ---------- geometry ----------
  const plotW = () => Math.max(1, cssW - LABEL_W);
  const pxPerMs = () => plotW() / (viewT1 - viewT0);
  const xOf = (t) => LABEL_W + (t - viewT0) * pxPerMs();
  function laneAt(yy) { // largest l with laneTop[l] <= yy
    let a = 0, b = laneTop.length - 2;
    while (a < b) { const m = (a + b + 1) >> 1; if (laneTop[m] <= yy) a = m; else b = m - 1; }
    return a;
  }
  function firstAtOrAfter(lo, hi, t) { // first k in [lo, hi) with pme[k] >= t
    while (lo < hi) { const m = (lo + hi) >> 1; if (pme[m] < t) lo = m + 1; else hi = m; }
    return lo;
  }
  function rowY(i) { return AXIS_H + laneTop[D.lane[i]] + D.depth[i] * ROW_STEP - scrollY; }
  function totalH() { return laneTop[laneTop.length - 1]; }
  function clampView() {
    const span = Math.max(1e-3, viewT1 - viewT0), pad = Math.min(runEnd * 0.02, span * 0.05);
    if (span > runEnd + 2 * pad) { viewT0 = -pad; viewT1 = runEnd + pad; }
    if (viewT0 < -pad) { viewT1 += -pad - viewT0; viewT0 = -pad; }
    if (viewT1 > runEnd + pad) { viewT0 -= viewT1 - runEnd - pad; viewT1 = runEnd + pad; }
    scrollY = Math.max(0, Math.min(scrollY, totalH() - (cssH - AXIS_H) + 20));
  }

  // ---------- drawing ----------
  function resize() {
    const r = canvas.getBoundingClientRect();
    dpr = window.devicePixelRatio || 1; cssW = r.width; cssH = r.height;
    canvas.width = Math.round(cssW * dpr); canvas.height = Math.round(cssH * dpr);
    requestDraw();
  }
  function requestDraw() { if (!pending) { pending = true; requestAnimationFrame(draw); } }

  function draw() {
    pending = false;
    if (!D) return;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = BG; ctx.fillRect(0, 0, cssW, cssH);
    const k = pxPerMs(), W = cssW;
    const buckets = palette.map(() => []);
    const l0 = laneAt(scrollY), yMax = scrollY + cssH - AXIS_H;
    let drawn = 0, lEnd = l0;
    drawGrid(k);
    for (let l = l0; l < laneTop.length - 1 && laneTop[l] < yMax; l++) {
      lEnd = l;
      const y0 = AXIS_H + laneTop[l] - scrollY;
      if (l % 2) { ctx.fillStyle = LANE_ALT; ctx.fillRect(LABEL_W, y0 - 1, W - LABEL_W, laneRows[l] * ROW_STEP + LANE_GAP); }
      for (let d = 0; d < laneRows[l]; d++) {
        const r = rowBase[l] + d, hi = rowStart[r + 1], y = y0 + d * ROW_STEP;
        let lastPx = -1;
        for (let q = firstAtOrAfter(rowStart[r], hi, viewT0); q < hi; q++) {
          const i = order[q], s = D.start[i];
          if (s > viewT1) break;
          const e = D.end[i];
          if (e < viewT0) continue;
          let x0 = LABEL_W + (s - viewT0) * k, x1 = LABEL_W + (e - viewT0) * k;
          if (x0 < LABEL_W) x0 = LABEL_W;
          if (x1 > W) x1 = W;
          const b = buckets[colorOf[i]];
          if (x1 - x0 < 1) { // sub-pixel: one 1px column per pixel, first span wins
            const px = x0 | 0;
            if (px <= lastPx) continue;
            b.push(px, y, 1); lastPx = px;
          } else {
            b.push(x0, y, x1 - x0); if ((x1 | 0) > lastPx) lastPx = (x1 | 0) - 1;
          }
          drawn++;
        }
      }
    }
    ctx.globalAlpha = critFocus ? 0.2 : 1;
    for (let c = 0; c < palette.length; c++) {
      const b = buckets[c]; if (!b.length) continue;
      ctx.fillStyle = palette[c];
      for (let j = 0; j < b.length; j += 3) ctx.fillRect(b[j], b[j + 1], b[j + 2], ROW_H);
    }
    ctx.globalAlpha = 1;
    drawOverlays(k, l0, lEnd);
    drawLabels(l0, lEnd);
    drawAxis(k);
    drawScrollbar();
    if (!D.n) {
      ctx.fillStyle = "#7d889a"; ctx.font = "13px system-ui, sans-serif"; ctx.textBaseline = "middle";
      ctx.fillText("This trace has no spans.", LABEL_W + 16, AXIS_H + 40);
    }
    V.drawnCount = drawn; V.frames++;
    if (!V.ready) { V.firstDrawMs = performance.now(); V.ready = true; }
  }

  function visibleBox(i, k) {
    let x0 = LABEL_W + (D.start[i] - viewT0) * k, x1 = LABEL_W + (D.end[i] - viewT0) * k;
    if (x1 < LABEL_W || x0 > cssW) return null;
    x0 = Math.max(LABEL_W, x0); x1 = Math.min(cssW, Math.max(x1, x0 + 1));
    const y = rowY(i);
    if (y + ROW_H < AXIS_H || y > cssH) return null;
    return { x: x0, y, w: x1 - x0 };
  }
  function drawOverlays(k, l0, l1) {
    ctx.strokeStyle = CRIT; ctx.lineWidth = 1.5;
    ctx.beginPath();
    for (let j = 0; j < critIdx.length; j++) {
      const i = critIdx[j], l = D.lane[i];
      if (l < l0 || l > l1) continue;
      const bx = visibleBox(i, k); if (!bx) continue;
      if (critFocus) { ctx.fillStyle = palette[colorOf[i]]; ctx.fillRect(bx.x, bx.y, bx.w, ROW_H); }
      ctx.rect(bx.x + 0.5, bx.y - 0.25, Math.max(1, bx.w - 1), ROW_H + 0.5);
    }
    ctx.stroke();
    drawMergeLabels(k, l0, l1);
    if (V.selected >= 0) {
      const bx = visibleBox(V.selected, k);
      if (bx) { ctx.strokeStyle = "#ffffff"; ctx.lineWidth = 2; ctx.strokeRect(bx.x - 1, bx.y - 1.5, bx.w + 2, ROW_H + 3); }
    }
  }
  function drawMergeLabels(k, l0, l1) { // "batch of 4 · red" on bars wide enough to hold it
    if (D.mergeLane < l0 || D.mergeLane > l1) return;
    ctx.font = "8px system-ui, sans-serif"; ctx.textBaseline = "middle"; ctx.fillStyle = "#0b0e13";
    for (const i of V.mergeSpans) {
      const bx = visibleBox(i, k), label = D.merges[i].label;
      if (!bx || bx.w < 40) continue;
      ctx.save(); ctx.beginPath(); ctx.rect(bx.x, bx.y - 1, bx.w, ROW_H + 2); ctx.clip();
      ctx.fillText(label, bx.x + 2, bx.y + ROW_H / 2); ctx.restore();
    }
  }
  function drawLabels(l0, l1) {
    ctx.fillStyle = "#0e1218"; ctx.fillRect(0, AXIS_H, LABEL_W, cssH);
    ctx.fillStyle = "#262e3b"; ctx.fillRect(LABEL_W - 1, AXIS_H, 1, cssH);
    ctx.font = "10.5px system-ui, sans-serif"; ctx.textBaseline = "middle"; ctx.fillStyle = "#9aa5b8";
    for (let l = l0; l <= l1; l++) {
      const y = Math.max(AXIS_H + 6, AXIS_H + laneTop[l] - scrollY + Math.min(laneRows[l], 2) * ROW_STEP / 2);
      let label = D.lanes[l];
      if (label.length > 22) label = label.slice(0, 21) + "…";
      ctx.fillText(label, 8, y);
    }
  }
  function drawScrollbar() {
    const view = cssH - AXIS_H, total = totalH();
    if (total <= view) return;
    const h = Math.max(20, (view * view) / total), y = AXIS_H + (scrollY / (total - view)) * (view - h);
    ctx.fillStyle = "#3a4558"; ctx.fillRect(cssW - 5, Math.min(y, cssH - h), 4, h);
  }
  function niceStep(raw) {
    const p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
  }
  function fmtMs(ms) {
    if (ms === 0) return "0";
    if (Math.abs(ms) < 1) return `${(ms * 1000).toFixed(0)} µs`;
    if (Math.abs(ms) < 1000) return `${+ms.toFixed(1)} ms`;
    const s = ms / 1000;
    if (s < 120) return `${+s.toFixed(s < 10 ? 2 : 1)} s`;
    const m = Math.floor(s / 60), r = s - m * 60;
    return `${m}m${r.toFixed(0).padStart(2, "0")}s`;
  }
  function drawGrid(k) {
    const step = niceStep(100 / k);
    ctx.fillStyle = GRID;
    for (let t = Math.ceil(viewT0 / step) * step; t <= viewT1; t += step) ctx.fillRect(Math.round(xOf(t)), AXIS_H, 1, cssH);
  }
  function drawAxis(k) {
    ctx.fillStyle = "#0e1218"; ctx.fillRect(0, 0, cssW, AXIS_H);
    ctx.fillStyle = "#262e3b"; ctx.fillRect(0, AXIS_H - 1, cssW, 1);
    const step = niceStep(100 / k);
    ctx.fillStyle = "#9aa5b8"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "middle";
    for (let t = Math.ceil(viewT0 / step) * step; t <= viewT1; t += step) {
      const x = xOf(t); if (x < LABEL_W) continue;
      ctx.fillRect(Math.round(x), AXIS_H - 5, 1, 4); ctx.fillText(fmtMs(t), x + 3, AXIS_H / 2);
    }
    ctx.fillStyle = "#7d889a"; ctx.fillText(`${D.lanes.length - (D.mergeLane >= 0 ? 2 : 1)} agents`, 8, AXIS_H / 2);
  }

  // ---------- hit testing and interaction ----------
  function spanAt(x, y) {
    if (!D || x < LABEL_W || y < AXIS_H) return -1;
    const yy = y - AXIS_H + scrollY;
    if (yy < 0 || yy >= totalH()) return -1;
    const l = laneAt(yy), d = Math.floor((yy - laneTop[l]) / ROW_STEP);
    if (d >= laneRows[l] || yy - laneTop[l] - d * ROW_STEP > ROW_H + 0.5) return -1;
    const k = pxPerMs(), t = viewT0 + (x - LABEL_W) / k, tol = 3 / k, r = rowBase[l] + d;
    let best = -1, bestScore = Infinity;
    for (let q = firstAtOrAfter(rowStart[r], rowStart[r + 1], t - tol); q < rowStart[r + 1]; q++) {
      const i = order[q];
      if (D.start[i] > t + tol) break;
      if (D.end[i] < t - tol) continue;
      const inside = D.start[i] <= t && t <= D.end[i];
      const score = inside ? D.end[i] - D.start[i] : 1e15 + Math.min(Math.abs(D.start[i] - t), Math.abs(D.end[i] - t));
      if (score < bestScore) { bestScore = score; best = i; }
    }
    return best;
  }
  function selectSpanAt(x, y) { const i = spanAt(x, y); select(i); return i; }
  function spanCenter(i) {
    const bx = visibleBox(i, pxPerMs());
    return bx ? { x: bx.x + bx.w / 2, y: bx.y + ROW_H / 2, w: bx.w } : null;
  }
  function reveal(i) {
    const s = D.start[i], e = Math.max(D.end[i], s + 1e-3), pad = Math.max((e - s) * 1.5, 5);
    viewT0 = s - pad; viewT1 = e + pad;
    const top = laneTop[D.lane[i]];
    if (top < scrollY || top > scrollY + cssH - AXIS_H - 40) scrollY = Math.max(0, top - (cssH - AXIS_H) / 3);
    clampView(); requestDraw();
  }
  function select(i) {
    V.selected = i; requestDraw();
    if (i < 0) { $("details").innerHTML = '<p class="muted">Click a span in the timeline.</p>'; return; }
    fetch(`/api/span/${i}`).then((r) => r.json()).then(renderDetails);
  }

  let drag = null;
  canvas.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, y: ev.clientY, moved: false }; });
  window.addEventListener("mouseup", (ev) => {
    if (!drag) return;
    canvas.classList.remove("dragging");
    if (!drag.moved) { const r = canvas.getBoundingClientRect(); selectSpanAt(ev.clientX - r.left, ev.clientY - r.top); }
    drag = null;
  });
  window.addEventListener("mousemove", (ev) => {
    const r = canvas.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
    if (drag) {
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      drag.moved = true; canvas.classList.add("dragging"); tooltip.hidden = true;
      const dt = dx / pxPerMs(); viewT0 -= dt; viewT1 -= dt; scrollY -= dy;
      drag.x = ev.clientX; drag.y = ev.clientY; clampView(); requestDraw(); return;
    }
    if (x < 0 || y < 0 || x > cssW || y > cssH) { tooltip.hidden = true; return; }
    showTooltip(spanAt(x, y), x, y);
  });
  canvas.addEventListener("mouseleave", () => { tooltip.hidden = true; });
  canvas.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    if (!D) return;
    if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {
      scrollY += ev.shiftKey ? ev.deltaY : 0;
      const dt = (ev.shiftKey ? 0 : ev.deltaX) / pxPerMs(); viewT0 += dt; viewT1 += dt;
    } else {
      const r = canvas.getBoundingClientRect(), x = Math.max(LABEL_W, ev.clientX - r.left);
      const t = viewT0 + (x - LABEL_W) / pxPerMs(), f = Math.exp(ev.deltaY * 0.0015);
      viewT0 = t - (t - viewT0) * f; viewT1 = t + (viewT1 - t) * f;
    }
    clampView(); requestDraw();
  }, { passive: false });
  $("reset").addEventListener("click", fit);
  $("crit-focus").addEventListener("click", (ev) => {
    critFocus = !critFocus; ev.target.classList.toggle("on", critFocus); requestDraw();
  });
  function fit() { viewT0 = -runEnd * 0.01; viewT1 = runEnd * 1.01; scrollY = 0; clampView(); requestDraw(); }

  function showTooltip(i, x, y) {
    if (i < 0) { tooltip.hidden = true; return; }
    const k = kindName(i), extra = k === "wait" ? D.waits[D.wait[i]] : k === "chat" ? D.tiers[D.tier[i]] : "";
    const m = D.merges[i], name = esc(D.names[D.name[i]]);
    const title = m ? `${esc(m.label)} <span class="muted">${name}</span>` : name;
    tooltip.innerHTML = `<b>${title}</b>${esc(k)}${extra ? " · " + esc(extra) : ""}` +
      ` · ${fmtMs(D.end[i] - D.start[i])}<br><span class="muted">at ${fmtMs(D.start[i])}` +
      `${D.crit[i] ? " · on critical path" : ""}</span>`;
    tooltip.hidden = false;
    const tw = tooltip.offsetWidth;
    tooltip.style.left = `${Math.min(x + 14, cssW - tw - 4)}px`; tooltip.style.top = `${y + 14}px`;
  }

  // ---------- panels ----------
  function esc(s) { return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]); }
  const fmtNum = (v, d = 0) => (v == null ? "–" : Number(v).toLocaleString("en-US", { maximumFractionDigits: d }));
  const fmtUsd = (v) => (v == null ? "–" : `$${Number(v).toFixed(v < 0.01 ? 5 : 3)}`);
  function fmtVal(v) { return typeof v === "object" && v !== null ? JSON.stringify(v) : String(v); }

  function renderDetails(d) {
    const m = d.metrics || {};
    const cells = [["duration", fmtMs(d.duration_ms)], ["starts at", fmtMs(d.start_ms)]];
    if (m.ttft_s != null) cells.push(["TTFT", fmtMs(m.ttft_s * 1000)]);
    if (m.tokens_per_s != null) cells.push(["tok/s", fmtNum(m.tokens_per_s, 1)]);
    if (m.input_tokens != null) cells.push(["input tokens", fmtNum(m.input_tokens)]);
    if (m.output_tokens != null) cells.push(["output tokens", fmtNum(m.output_tokens)]);
    if (m.reasoning_tokens != null) cells.push(["reasoning tokens", fmtNum(m.reasoning_tokens)]);
    if (m.cached_input_tokens != null) cells.push(["cached input", fmtNum(m.cached_input_tokens)]);
    if (m.cost_usd != null) cells.push(["cost", fmtUsd(m.cost_usd)]);
    if (m.attempts != null) cells.push(["attempts", fmtNum(m.attempts)]);
    const attrs = Object.keys(d.attributes).sort().map((k) =>
      `<tr><td>${esc(k)}</td><td>${esc(fmtVal(d.attributes[k]))}</td></tr>`).join("");
    const events = d.events.map((e) => `<tr><td>event @ ${fmtMs(e.offset_ms)}</td><td>${esc(e.name)}</td></tr>`).join("");
    const links = d.links.map((l) => `<tr><td>link ${esc(fmtVal(l.attributes["swarm.link.type"] || ""))}</td>` +
      `<td>${l.index >= 0 ? `<a href="#" data-span="${l.index}">span ${l.index}</a>` : esc(l.span_id)}</td></tr>`).join("");
    const parent = d.parent >= 0 ? `<tr><td>parent</td><td><a href="#" data-span="${d.parent}">span ${d.parent}</a></td></tr>` : "";
    $("details").innerHTML =
      `<div class="title">${esc(d.name)} <span class="muted">${esc(d.kind)}${d.critical ? " · critical path" : ""}</span></div>` +
      `<div class="metrics">${cells.map(([k, v]) => `<div class="metric"><b>${esc(v)}</b><span>${esc(k)}</span></div>`).join("")}</div>` +
      `<table class="attrs" data-testid="attributes"><tbody>${attrs}${events}${links}${parent}` +
      `<tr><td>span id</td><td>${esc(d.span_id)}</td></tr></tbody></table>`;
    V.detail = d;
  }
  $("details").addEventListener("click", (ev) => {
    const a = ev.target.closest("[data-span]"); if (!a) return;
    ev.preventDefault(); const i = +a.dataset.span; reveal(i); select(i);
  });

  function ledgerColor(name, j) {
    for (const [re, c] of LEDGER_COLORS) if (re.test(name.toLowerCase())) return c;
    return ["#6b7280", "#94a3b8", "#a78bfa", "#f472b6"][j % 4];
  }
  function renderSummary(s) {
    const sm = s.summary || {}, tot = sm.totals || {}, cpSum = sm.critical_path || {};
    const wall = sm.wall_s != null ? sm.wall_s * 1000 : s.duration_ms;
    const stats = [[fmtMs(wall), "wall-clock"], [fmtNum(s.span_count), "spans"], [fmtNum(s.lane_count - 1), "agents"]];
    if (tot.calls != null) stats.push([fmtNum(tot.calls), "model calls"]);
    if (tot.output_tokens != null) stats.push([fmtNum(tot.output_tokens), "output tokens"]);
    if (tot.cost_usd != null) stats.push([fmtUsd(tot.cost_usd), "cost"]);
    if (cpSum.steps != null) stats.push([fmtNum(cpSum.steps), "critical-path steps"]);
    if (tot.ttft_p50_s != null) stats.push([fmtMs(tot.ttft_p50_s * 1000), "TTFT p50"]);
    $("stats").innerHTML = stats.map(([v, k]) => `<span class="stat"><b>${esc(v)}</b><span>${esc(k)}</span></span>`).join("");
    // ledger: the critical path's wall-clock by cause, next to the whole run's (shared)
    const crit = s.ledger || {}, run = s.ledger_run || {};
    const cats = Array.from(new Set([...Object.keys(crit), ...Object.keys(run)]))
      .filter((k) => (crit[k] || 0) > 0 || (run[k] || 0) > 0)
      .sort((a, b) => (crit[b] || 0) - (crit[a] || 0) || (run[b] || 0) - (run[a] || 0));
    const sum = (o) => cats.reduce((a, k) => a + (o[k] || 0), 0), ct = sum(crit), rt = sum(run);
    const bar = (o, tot, label) => `<div class="ledger-label">${label}</div><div class="ledger-bar">` +
      cats.filter((k) => o[k] > 0).map((k) => `<div title="${esc(k)}: ${fmtMs(o[k] * 1000)}" style="width:${(100 * o[k]) / tot}%;background:${ledgerColor(k, cats.indexOf(k))}"></div>`).join("") + "</div>";
    $("ledger").innerHTML = cats.length
      ? (ct > 0 ? bar(crit, ct, "latency ledger · critical path") : "") + (rt > 0 ? bar(run, rt, "all steps (parallel time shared)") : "") +
        `<div class="ledger-legend"><span class="muted">cause</span><span class="muted">critical path</span><span class="muted">share</span><span class="muted">all steps</span>` +
        cats.map((k, j) => `<span><i style="background:${ledgerColor(k, j)}"></i>${esc(k)}</span><span>${fmtMs((crit[k] || 0) * 1000)}</span>` +
          `<span class="muted">${ct > 0 ? ((100 * (crit[k] || 0)) / ct).toFixed(1) : "0.0"}%</span><span>${fmtMs((run[k] || 0) * 1000)}</span>`).join("") + "</div>"
      : '<p class="muted">No latency ledger in this trace.</p>';
    // critical path list
    const cp = s.critical_path || [];
    $("crit-total").textContent = `· ${cp.length} spans`;
    const rows = cp.filter((c) => c.kind !== "workflow" && c.kind !== "agent").slice(0, 400);
    $("crit-list").innerHTML = rows.map((c) => `<div class="crit-row" data-span="${c.index}"><span>${esc(c.name)}</span><span class="d">${fmtMs(c.duration_ms)}</span></div>`).join("");
    // histograms
    const hs = Object.entries(s.histograms || {});
    $("histograms").innerHTML = hs.length ? hs.map(([tier], j) =>
      `<div><div class="hist-title">${esc(tier)} · TTFT</div><canvas id="h-ttft-${j}"></canvas></div>` +
      `<div><div class="hist-title">${esc(tier)} · call latency</div><canvas id="h-lat-${j}"></canvas></div>`).join("")
      : '<p class="muted">No model calls in this trace.</p>';
    hs.forEach(([tier, h], j) => {
      drawHist($(`h-ttft-${j}`), h.ttft_s, TIER_COLORS[tier] || KIND_COLORS.chat);
      drawHist($(`h-lat-${j}`), h.latency_s, TIER_COLORS[tier] || KIND_COLORS.chat);
    });
    // what-if choices
    const opts = ['<option value="">(as recorded)</option>'].concat((s.catalog || []).map((m) => `<option>${esc(m)}</option>`)).join("");
    $("wf-speed").innerHTML = opts; $("wf-reasoning").innerHTML = opts;
    renderMerges(sm.merge_queue);
    V.summaryReady = true;
  }
  // the merge queue: batches, and its busy time split into checking, slot waits and git
  function renderMerges(m) {
    const panel = $("merge-panel");
    if (!m) { panel.hidden = true; return; }
    panel.hidden = false;
    const parts = [["checking", m.checking_s, MERGE_COLORS.green], ["waiting for a check slot", m.slot_wait_s, WAIT_COLORS.check],
      ["git (trees, build, land)", m.git_s, MERGE_COLORS["?"]]];
    const busy = m.busy_s || 0, pct = (v) => (busy > 0 ? `${((100 * v) / busy).toFixed(1)}%` : "–");
    const o = m.by_outcome || {};
    const rows = [
      ["batches", `${fmtNum(m.batches)} (${fmtNum(o.green)} green, ${fmtNum(o.red)} red, ${fmtNum(o.cancelled)} cancelled)`],
      ["batch size", `mean ${fmtNum(m.size_mean, 1)} · max ${fmtNum(m.size_max)}`],
      ["speculative batches", `${fmtNum(m.speculative)} (${fmtNum(m.rebuilt)} rebuilt)`],
      ["split rounds", fmtNum(m.splits)],
      ["checks run", `${fmtNum(m.checks)} · ${fmtMs(m.check_sum_s * 1000)} summed`],
      ["slot waits", `${fmtNum(m.slot_waits)} · ${fmtMs(m.slot_wait_sum_s * 1000)} summed`],
      ["subtasks' merge waits", `${fmtNum(m.waits)} · ${fmtMs(m.wait_s * 1000)} summed`],
    ];
    $("merges").innerHTML =
      `<div class="ledger-label">busy ${fmtMs(busy * 1000)} (a batch or split open)</div><div class="ledger-bar">` +
      parts.filter(([, v]) => v > 0).map(([k, v, c]) => `<div title="${esc(k)}: ${fmtMs(v * 1000)}" style="width:${(100 * v) / busy}%;background:${c}"></div>`).join("") +
      `</div><div class="ledger-legend merge-time">` +
      parts.map(([k, v, c]) => `<span><i style="background:${c}"></i>${esc(k)}</span><span>${fmtMs(v * 1000)}</span><span class="muted">${pct(v)}</span>`).join("") +
      `</div><table class="attrs merge-figures"><tbody>` +
      rows.map(([k, v]) => `<tr><td>${esc(k)}</td><td>${esc(v)}</td></tr>`).join("") + "</tbody></table>";
  }
  $("crit-list").addEventListener("click", (ev) => {
    const row = ev.target.closest("[data-span]"); if (!row) return;
    const i = +row.dataset.span; reveal(i); select(i);
  });

  function drawHist(c, h, color) {
    const r = c.getBoundingClientRect(), w = r.width, hh = r.height, g = c.getContext("2d");
    c.width = Math.round(w * dpr); c.height = Math.round(hh * dpr); g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.font = "10px system-ui, sans-serif"; g.fillStyle = "#7d889a";
    if (!h || !h.n) { g.fillText("no data", 8, hh / 2); return; }
    const max = Math.max(...h.counts), bw = (w - 8) / h.counts.length, base = hh - 14;
    g.fillStyle = color;
    h.counts.forEach((n, j) => { const bh = (n / max) * (base - 14); g.fillRect(4 + j * bw, base - bh, Math.max(1, bw - 1), bh); });
    g.fillStyle = "#9aa5b8"; g.textBaseline = "alphabetic";
    g.fillText("0", 4, hh - 3);
    const top = fmtMs(h.edges[h.edges.length - 1] * 1000); g.fillText(top, w - 4 - g.measureText(top).width, hh - 3);
    g.fillText(`n=${h.n}  p50 ${fmtMs(h.p50 * 1000)}  p90 ${fmtMs(h.p90 * 1000)}`, 4, 11);
  }

  $("whatif-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams({ speed: $("wf-speed").value, reasoning: $("wf-reasoning").value, max_agents: $("wf-max").value });
    const out = $("whatif-result"); out.innerHTML = '<span class="muted">predicting…</span>';
    fetch(`/api/whatif?${q}`).then(async (r) => {
      if (!r.ok) throw new Error(await r.text());
      return r.json();
    }).then((w) => { V.whatif = w; out.innerHTML = renderWhatif(w); })
      .catch((e) => { out.innerHTML = `<span class="err">${esc(e.message)}</span>`; });
  });
  function renderWhatif(w) {
    const rec = w.recorded || {}, pred = w.predicted || {};
    const wall = pred.wall_s, base = rec.wall_s;
    let html = `<div class="big">${wall != null ? fmtMs(wall * 1000) : "–"} <span class="muted">predicted wall-clock</span></div>`;
    if (base != null && wall) {
      const f = base / wall;
      html += `<div>recorded ${fmtMs(base * 1000)} · <b>${(f >= 1 ? f : 1 / f).toFixed(2)}× ${f >= 1 ? "faster" : "slower"}</b></div>`;
    }
    html += `<div>cost ${fmtUsd(pred.cost_usd)} <span class="muted">(recorded ${fmtUsd(rec.cost_usd)})</span></div>`;
    const rows = [["model calls re-timed", fmtNum(w.calls_changed)], ["max agents", fmtNum(w.max_agents)]];
    if (w.baseline_wall_s != null) rows.push(["simulated as recorded", fmtMs(w.baseline_wall_s * 1000)]);
    Object.entries(w.set || {}).forEach(([k, v]) => rows.push([`${k} →`, v]));
    html += `<table class="attrs"><tbody>${rows.map(([k, v]) => `<tr><td>${esc(k)}</td><td>${esc(v)}</td></tr>`).join("")}</tbody></table>`;
    return html;
  }

  function renderLegend() {
    const items = [["agent", KIND_COLORS.agent], ["tool", KIND_COLORS.tool]];
    D.tiers.forEach((t) => { if (t) items.push([`chat · ${t}`, TIER_COLORS[t] || KIND_COLORS.chat]); });
    items.push(["chat", KIND_COLORS.chat]);
    D.waits.forEach((w) => { if (w) items.push([`wait · ${w}`, WAIT_COLORS[w] || KIND_COLORS.wait]); });
    const outcomes = new Set(Object.values(D.merges).map((m) => m.outcome));
    ["green", "red", "cancelled", "split"].forEach((o) => { if (outcomes.has(o)) items.push([o === "split" ? "merge split" : `merge batch · ${o}`, MERGE_COLORS[o]]); });
    $("legend").innerHTML = items.map(([k, c]) => `<span><i style="background:${c}"></i>${esc(k)}</span>`).join("") +
      '<span class="crit"><i></i>critical path</span>';
  }

  // ---------- start ----------
  new ResizeObserver(resize).observe(canvas);
  fetch("/api/spans").then((r) => r.json()).then((p) => {
    build(p); renderLegend(); resize(); fit();
  });
  fetch("/api/summary").then((r) => r.json()).then(renderSummary);
})();
