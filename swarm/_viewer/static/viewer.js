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

  const PROVIDER_COLORS = ["#4ea1ff", "#3ecf8e", "#f5a524", "#e0517f", "#b07cff", "#2bb5a0", "#ff8c42", "#9bb7ff", "#e8d44d", "#c08a5b"];
  const MUTED = "#3a4150", TTFT_MARK = "rgba(255,255,255,0.85)", GROUP_H = 14;

  const $ = (id) => document.getElementById(id);
  const canvas = $("timeline"), ctx = canvas.getContext("2d", { alpha: false });
  const ov = $("overview"), ovCtx = ov.getContext("2d", { alpha: false });
  const tooltip = $("tooltip");
  const V = (window.__viewer = {
    ready: false, complete: false, summaryReady: false, spanCount: 0, total: 0, loaded: 0, drawnCount: 0, firstDrawMs: null,
    selected: -1, frames: 0, selectSpanAt, spanCenter, reveal, kindName, select,
    mergeLabel: (i) => (D.merges[i] ? D.merges[i].label : ""), laneName: (i) => D.lanes[D.lane[i]],
    view: () => ({ t0: viewT0, t1: viewT1, scrollY }),
    drawNow: () => { const t = performance.now(); draw(); return performance.now() - t; },
    search: (q) => runSearch(q), matchCount: 0, ttftMarks: 0, critLane: -1, overviewLanes: 0,
    laneVisible: (l) => { const top = laneTop[posOf[l]] - scrollY; return top >= 0 && top + ROW_STEP <= cssH - AXIS_H; },
    groupBy: (g) => setGroup(g), colorBy: (m) => setColor(m), jumpToCritical: () => jumpToCritical(),
    groups: () => groups.map((g) => g.label), laneLabel: (l) => D.lanes[l], laneOf: (i) => D.lane[i],
    columns: () => D, // every span's columns and tables (slowest.js reads them)
  });

  let D = null; // columns as typed arrays plus tables
  let order, pme, rowStart, laneRows, rowBase, colorOf, palette, critIdx;
  let laneOrder, posOf, laneTop, groups = [], laneProv, match = null, matchList = [], matchAt = -1;
  let viewT0 = 0, viewT1 = 1, scrollY = 0, cssW = 0, cssH = 0, dpr = 1, pending = false;
  let runEnd = 1, critFocus = false, colorMode = "tier", groupMode = "none", ovImage = null;

  // ---------- data: a stream of frames, drawn as they arrive ----------
  // See swarm/_viewer/payload.py. The first frame brings the tables, the lanes and every
  // lane's top row plus the first screen's lanes; each further frame more lanes; the last
  // one the critical path. After each batch of frames the row index is rebuilt over the
  // spans received so far (`loaded`) and the view redrawn; `?whole` draws only at the end.
  // A trace the server must parse first sends a preview of its head (`preview` in its first
  // header, no last frame), then the whole trace's stream: its first frame starts afresh.
  const TYPED = { d: Float64Array, f: Float32Array, i: Int32Array, I: Uint32Array, H: Uint16Array, B: Uint8Array };
  const PROGRESSIVE = !new URLSearchParams(location.search).has("whole");
  let loaded = 0, colored = 0, finalSeen = false, fresh = false;
  function frameOf(buf) { // header length, JSON header, 8-aligned columns
    const hlen = new DataView(buf).getUint32(0, true);
    const f = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 4, hlen)));
    let at = 4 + hlen; f.cols = {};
    for (const [name, tc, len] of f.columns) {
      at += (8 - (at % 8)) % 8; const A = TYPED[tc];
      f.cols[name] = new A(buf, at, len); at += len * A.BYTES_PER_ELEMENT;
    }
    return f;
  }
  function begin(p) { // the first frame's header: what the whole stream shares
    D = {
      n: p.n, names: p.names, kinds: p.kinds, tiers: p.tiers, waits: p.waits, providers: p.providers, lanes: p.lanes,
      roles: p.roles, laneRole: p.lane_role, subtasks: p.subtasks, laneSubtask: p.lane_subtask,
      merges: {}, mergeLane: p.merge_lane == null ? -1 : p.merge_lane,
    };
    for (const [name, tc] of p.schema) D[name] = new TYPED[tc](p.n);
    runEnd = Math.max(1, p.run_end_ms); V.total = p.n; colorOf = new Uint16Array(p.n);
    if (V.preview && !p.preview) $("stats").textContent = "loading…";
    loaded = 0; colored = 0; finalSeen = false; V.preview = !!p.preview; fresh = true;
    if (V.preview) $("stats").textContent = "drawing the trace's head while the whole file is read…";
  }
  function receive(f) {
    if (f.n !== undefined) begin(f);
    for (const name in f.cols) D[name].set(f.cols[name], f.first);
    Object.assign(D.merges, f.merges || {});
    if (f.final) finalSeen = true; else loaded = Math.max(loaded, f.first + f.count);
  }
  async function load(response) {
    const reader = response.body.getReader(), st = { parts: [], have: 0 };
    let need = -1, got = false;
    for (;;) {
      const { done, value } = await reader.read();
      if (value) { st.parts.push(value); st.have += value.length; }
      for (;;) {
        if (need < 0 && st.have >= 4) need = new DataView(take(st, 4).buffer).getUint32(0, true);
        if (need < 0 || st.have < need) break;
        receive(frameOf(take(st, need).buffer)); need = -1; got = true;
      }
      if (got && (PROGRESSIVE || done)) {
        got = false; index(); if (fresh) { fresh = false; renderLegend(); resize(); fit(); draw(); } else requestDraw(); }
      if (done) break;
    }
    V.streamEndMs = performance.now();
  }
  function take(st, k) { // the first k pending bytes, as one buffer of their own
    const out = new Uint8Array(k); let o = 0;
    while (o < k) {
      const c = st.parts[0], m = Math.min(c.length, k - o);
      out.set(c.subarray(0, m), o); o += m;
      if (m === c.length) st.parts.shift(); else st.parts[0] = c.subarray(m);
    }
    st.have -= k; return out;
  }
  function index() { // rows, lanes and the critical path over the spans received so far
    const n = loaded;
    V.mergeSpans = Object.keys(D.merges).map(Number);
    const L = D.lanes.length, CHAT = D.kinds.indexOf("chat");
    laneRows = new Uint8Array(L).fill(1); rowBase = new Int32Array(L + 1);
    const provCount = new Map(); // lane's provider: the one most of its model calls went to
    for (let i = 0; i < n; i++) {
      const l = D.lane[i], r = D.depth[i] + 1; if (r > laneRows[l]) laneRows[l] = r;
      if (D.kind[i] === CHAT && D.provider[i]) { const k = l * 65536 + D.provider[i]; provCount.set(k, (provCount.get(k) || 0) + 1); }
    }
    laneProv = new Uint16Array(L); const best = new Float64Array(L);
    for (const [k, c] of provCount) { const l = Math.floor(k / 65536); if (c > best[l]) { best[l] = c; laneProv[l] = k % 65536; } }
    for (let l = 0; l < L; l++) rowBase[l + 1] = rowBase[l] + laneRows[l];
    // stable counting sort by row (within a row, the server sends spans in start order)
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
    const crit = [], critTime = new Float64Array(L);
    if (finalSeen) for (let i = 0; i < n; i++) if (D.crit[i]) { crit.push(i); critTime[D.lane[i]] += D.end[i] - D.start[i]; }
    critIdx = Uint32Array.from(crit);
    V.critLane = -1; // the lane holding most of the critical path's time
    for (let l = 0, most = 0; l < L; l++) if (critTime[l] > most) { most = critTime[l]; V.critLane = l; }
    V.spanCount = n; V.loaded = n;
    recolor(colored); layout();
    if (match !== null) runSearch($("search").value);
  }

  // colours: one palette entry per distinct style; `colorMode` picks what chat spans show
  let pIndex = new Map();
  function recolor(from) { // spans from `from` on (0: all, afresh)
    if (!from) { palette = []; pIndex = new Map(); }
    const colorIndex = (c) => { let k = pIndex.get(c); if (k === undefined) { k = palette.length; pIndex.set(c, k); palette.push(c); } return k; };
    for (let i = from; i < loaded; i++) colorOf[i] = colorIndex(spanColor(i));
    colored = loaded; ovImage = null;
  }
  const providerColor = (code) => PROVIDER_COLORS[(code - 1) % PROVIDER_COLORS.length];
  function spanColor(i) {
    const m = D.merges[i];
    if (m) return MERGE_COLORS[m.outcome] || MERGE_COLORS["?"];
    const k = D.kinds[D.kind[i]];
    if (colorMode === "provider") {
      if (k === "chat") return D.provider[i] ? providerColor(D.provider[i]) : KIND_COLORS.chat;
      return k === "agent" || k === "workflow" ? KIND_COLORS[k] : MUTED;
    }
    if (k === "wait") return WAIT_COLORS[D.waits[D.wait[i]]] || KIND_COLORS.wait;
    if (colorMode === "wait") return k === "agent" || k === "workflow" ? KIND_COLORS[k] : MUTED;
    if (k === "chat") return TIER_COLORS[D.tiers[D.tier[i]]] || KIND_COLORS.chat;
    return KIND_COLORS[k] || KIND_COLORS.other;
  }
  function kindName(i) { return D.kinds[D.kind[i]]; }

  // lanes in display order, in groups (by provider, subtask or role) with a header each
  function groupKey(l) {
    if (l === 0 || l === D.mergeLane) return "";
    if (groupMode === "provider") return laneProv[l] ? `provider · ${D.providers[laneProv[l]]}` : "no model calls";
    if (groupMode === "subtask") return D.laneSubtask[l] ? `subtask · ${D.subtasks[D.laneSubtask[l]]}` : "no subtask";
    if (groupMode === "role") return `role · ${D.roles[D.laneRole[l]] || "?"}`;
    return "";
  }
  function layout() {
    const L = D.lanes.length, keys = [];
    for (let l = 0; l < L; l++) keys.push(groupKey(l));
    laneOrder = Int32Array.from(keys.map((_, l) => l));
    if (groupMode !== "none") laneOrder.sort((a, b) => (keys[a] === keys[b] ? a - b : !keys[a] ? -1 : !keys[b] ? 1 : keys[a] < keys[b] ? -1 : 1));
    posOf = new Int32Array(L); laneTop = new Float64Array(L + 1); groups = [];
    let y = 0;
    for (let q = 0; q < L; q++) {
      const l = laneOrder[q]; posOf[l] = q;
      if (keys[l] && (q === 0 || keys[laneOrder[q - 1]] !== keys[l])) { groups.push({ label: keys[l], top: y, lanes: 0 }); y += GROUP_H; }
      if (keys[l]) groups[groups.length - 1].lanes++;
      laneTop[q] = y; y += laneRows[l] * ROW_STEP + LANE_GAP;
    }
    laneTop[L] = y; ovImage = null;
  }
  function setGroup(g) { groupMode = g; $("group-by").value = g; layout(); clampView(); requestDraw(); }
  function setColor(m) { colorMode = m; $("color-by").value = m; recolor(0); renderLegend(); requestDraw(); }

  // search: span names, lane labels, providers, tiers and wait kinds containing the text
  function runSearch(q) {
    q = (q || "").trim().toLowerCase();
    if (!q) { match = null; matchList = []; V.matchCount = 0; $("search-count").textContent = ""; ovImage = null; requestDraw(); return 0; }
    const hit = (table) => Uint8Array.from(table, (s) => (s && String(s).toLowerCase().includes(q) ? 1 : 0));
    const hn = hit(D.names), hl = hit(D.lanes), hp = hit(D.providers), ht = hit(D.tiers), hw = hit(D.waits);
    match = new Uint8Array(D.n); matchList = [];
    for (let i = 0; i < loaded; i++) {
      if (hn[D.name[i]] || hl[D.lane[i]] || hp[D.provider[i]] || ht[D.tier[i]] || hw[D.wait[i]]) { match[i] = 1; matchList.push(i); }
    }
    V.matchCount = matchList.length; matchAt = -1;
    $("search-count").textContent = `${matchList.length.toLocaleString("en-US")} spans`;
    ovImage = null; requestDraw();
    return matchList.length;
  }
  function nextMatch() {
    if (!matchList.length) return;
    matchAt = (matchAt + 1) % matchList.length; const i = matchList[matchAt];
    reveal(i); select(i);
  }
  function jumpToCritical() {
    critFocus = true; $("crit-focus").classList.add("on");
    if (!critIdx.length) { requestDraw(); return; }
    let t0 = Infinity, t1 = -Infinity;
    for (const i of critIdx) { t0 = Math.min(t0, D.start[i]); t1 = Math.max(t1, D.end[i]); }
    const pad = (t1 - t0) * 0.02 + 1; viewT0 = t0 - pad; viewT1 = t1 + pad;
    scrollY = Math.max(0, laneTop[posOf[V.critLane]] - (cssH - AXIS_H) / 3);
    clampView(); requestDraw();
  }

  // ---------- geometry ----------
  const plotW = () => Math.max(1, cssW - LABEL_W);
  const pxPerMs = () => plotW() / (viewT1 - viewT0);
  const xOf = (t) => LABEL_W + (t - viewT0) * pxPerMs();
  function laneAt(yy) { // largest position q with laneTop[q] <= yy
    let a = 0, b = laneTop.length - 2;
    while (a < b) { const m = (a + b + 1) >> 1; if (laneTop[m] <= yy) a = m; else b = m - 1; }
    return a;
  }
  function firstAtOrAfter(lo, hi, t) { // first k in [lo, hi) with pme[k] >= t
    while (lo < hi) { const m = (lo + hi) >> 1; if (pme[m] < t) lo = m + 1; else hi = m; }
    return lo;
  }
  function rowY(i) { return AXIS_H + laneTop[posOf[D.lane[i]]] + D.depth[i] * ROW_STEP - scrollY; }
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
    if (!D || !order) return;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = BG; ctx.fillRect(0, 0, cssW, cssH);
    const k = pxPerMs(), W = cssW, CHAT = D.kinds.indexOf("chat");
    const buckets = palette.map(() => []), dimmed = palette.map(() => []), ticks = [];
    const q0 = laneAt(scrollY), yMax = scrollY + cssH - AXIS_H;
    let drawn = 0, qEnd = q0;
    drawGrid(k);
    for (let q = q0; q < laneTop.length - 1 && laneTop[q] < yMax; q++) {
      qEnd = q;
      const l = laneOrder[q], y0 = AXIS_H + laneTop[q] - scrollY;
      if (q % 2) { ctx.fillStyle = LANE_ALT; ctx.fillRect(LABEL_W, y0 - 1, W - LABEL_W, laneRows[l] * ROW_STEP + LANE_GAP); }
      for (let d = 0; d < laneRows[l]; d++) {
        const r = rowBase[l] + d, hi = rowStart[r + 1], y = y0 + d * ROW_STEP;
        let lastPx = -1;
        for (let j = firstAtOrAfter(rowStart[r], hi, viewT0); j < hi; j++) {
          const i = order[j], s = D.start[i];
          if (s > viewT1) break;
          const e = D.end[i];
          if (e < viewT0) continue;
          let x0 = LABEL_W + (s - viewT0) * k, x1 = LABEL_W + (e - viewT0) * k;
          if (x0 < LABEL_W) x0 = LABEL_W;
          if (x1 > W) x1 = W;
          const dim = (critFocus && !D.crit[i]) || (match !== null && !match[i]);
          const b = (dim ? dimmed : buckets)[colorOf[i]];
          if (x1 - x0 < 1) { // sub-pixel: one 1px column per pixel, first span wins
            const px = x0 | 0;
            if (px <= lastPx) continue;
            b.push(px, y, 1); lastPx = px;
          } else {
            b.push(x0, y, x1 - x0); if ((x1 | 0) > lastPx) lastPx = (x1 | 0) - 1;
            if (D.kind[i] === CHAT && D.ttft[i] >= 0 && x1 - x0 >= 4) { // first-token mark
              const tx = LABEL_W + (s + D.ttft[i] - viewT0) * k;
              if (tx > x0 && tx < x1) ticks.push(tx, y);
            }
          }
          drawn++;
        }
      }
    }
    fillBuckets(dimmed, 0.2); fillBuckets(buckets, 1);
    ctx.fillStyle = TTFT_MARK;
    for (let j = 0; j < ticks.length; j += 2) ctx.fillRect(ticks[j] - 0.5, ticks[j + 1], 1.5, ROW_H);
    V.ttftMarks = ticks.length / 2;
    drawOverlays(k, q0, qEnd);
    drawLabels(q0, qEnd);
    drawAxis(k);
    drawScrollbar();
    drawOverview();
    if (!D.n) {
      ctx.fillStyle = "#7d889a"; ctx.font = "13px system-ui, sans-serif"; ctx.textBaseline = "middle";
      ctx.fillText("This trace has no spans.", LABEL_W + 16, AXIS_H + 40);
    }
    V.drawnCount = drawn; V.frames++;
    if (!V.ready) { V.firstDrawMs = performance.now(); V.firstDrawSpans = loaded; V.ready = true; }
    if (finalSeen && !V.complete) {
      V.completeMs = performance.now(); V.complete = true;
      window.dispatchEvent(new Event("viewer-complete"));
    }
  }
  function fillBuckets(bs, alpha) {
    ctx.globalAlpha = alpha;
    for (let c = 0; c < palette.length; c++) {
      const b = bs[c]; if (!b.length) continue;
      ctx.fillStyle = palette[c];
      for (let j = 0; j < b.length; j += 3) ctx.fillRect(b[j], b[j + 1], b[j + 2], ROW_H);
    }
    ctx.globalAlpha = 1;
  }

  // ---------- overview: every lane, the whole run, squeezed into one strip ----------
  function overviewImage(w, h) {
    const img = ovCtx.createImageData(w, h), px = img.data, L = laneOrder.length;
    for (let j = 0; j < px.length; j += 4) { px[j] = 11; px[j + 1] = 14; px[j + 2] = 19; px[j + 3] = 255; }
    const rgb = palette.map((c) => [1, 3, 5].map((o) => parseInt(c.slice(o, o + 2), 16)));
    const AGENT = D.kinds.indexOf("agent"), WF = D.kinds.indexOf("workflow"), sx = w / runEnd;
    const lanesPerRow = L / h, rows = new Set();
    for (let i = 0; i < loaded; i++) {
      // an agent's own bar only while its lane's detail has not arrived: a coarse picture
      if (D.kind[i] === WF || (D.kind[i] === AGENT && laneRows[D.lane[i]] > 1)) continue;
      const q = posOf[D.lane[i]], y0 = Math.floor(q / lanesPerRow), y1 = Math.max(y0 + 1, Math.floor((q + 1) / lanesPerRow));
      const x0 = Math.max(0, Math.floor(D.start[i] * sx)), x1 = Math.min(w, Math.max(x0 + 1, Math.ceil(D.end[i] * sx)));
      const c = rgb[colorOf[i]], f = match !== null && !match[i] ? 0.25 : 1;
      rows.add(q);
      for (let y = y0; y < Math.min(y1, h); y++) {
        for (let x = x0; x < x1; x++) { const o = (y * w + x) * 4; px[o] = c[0] * f; px[o + 1] = c[1] * f; px[o + 2] = c[2] * f; }
      }
    }
    V.overviewLanes = rows.size;
    return img;
  }
  function drawOverview() {
    const r = ov.getBoundingClientRect(), w = Math.max(1, Math.round(r.width)), h = Math.max(1, Math.round(r.height));
    if (ov.width !== w || ov.height !== h) { ov.width = w; ov.height = h; ovImage = null; }
    if (!ovImage) ovImage = overviewImage(w, h);
    ovCtx.putImageData(ovImage, 0, 0);
    const total = totalH(), x0 = (viewT0 / runEnd) * w, x1 = (viewT1 / runEnd) * w;
    const y0 = total ? (scrollY / total) * h : 0, y1 = total ? Math.min(h, ((scrollY + cssH - AXIS_H) / total) * h) : h;
    ovCtx.strokeStyle = "#ffffff"; ovCtx.lineWidth = 1;
    ovCtx.strokeRect(Math.max(0.5, x0) + 0.5, y0 + 0.5, Math.max(2, Math.min(w - 1, x1) - Math.max(0, x0) - 1), Math.max(2, y1 - y0 - 1));
  }
  function overviewGo(x, y) { // centre the timeline on this point of the overview
    const r = ov.getBoundingClientRect(), t = (x / r.width) * runEnd, half = (viewT1 - viewT0) / 2;
    viewT0 = t - half; viewT1 = t + half;
    scrollY = (y / r.height) * totalH() - (cssH - AXIS_H) / 2;
    clampView(); requestDraw();
  }
  let ovDrag = false;
  ov.addEventListener("mousedown", (ev) => { ovDrag = true; overviewGo(ev.offsetX, ev.offsetY); });
  ov.addEventListener("mousemove", (ev) => { if (ovDrag) overviewGo(ev.offsetX, ev.offsetY); });
  window.addEventListener("mouseup", () => { ovDrag = false; });

  function visibleBox(i, k) {
    let x0 = LABEL_W + (D.start[i] - viewT0) * k, x1 = LABEL_W + (D.end[i] - viewT0) * k;
    if (x1 < LABEL_W || x0 > cssW) return null;
    x0 = Math.max(LABEL_W, x0); x1 = Math.min(cssW, Math.max(x1, x0 + 1));
    const y = rowY(i);
    if (y + ROW_H < AXIS_H || y > cssH) return null;
    return { x: x0, y, w: x1 - x0 };
  }
  function drawOverlays(k, q0, q1) { // the critical path: a red rule under its own spans only
    ctx.fillStyle = CRIT;
    for (let j = 0; j < critIdx.length; j++) {
      const i = critIdx[j], q = posOf[D.lane[i]];
      if (q < q0 || q > q1) continue;
      const bx = visibleBox(i, k); if (!bx) continue;
      ctx.fillRect(bx.x, bx.y + ROW_H - 2, bx.w, 2.5);
    }
    drawMergeLabels(k, q0, q1);
    if (V.selected >= 0) {
      const bx = visibleBox(V.selected, k);
      if (bx) { ctx.strokeStyle = "#ffffff"; ctx.lineWidth = 2; ctx.strokeRect(bx.x - 1, bx.y - 1.5, bx.w + 2, ROW_H + 3); }
    }
  }
  function drawMergeLabels(k, l0, l1) { // "batch of 4 · red" on bars wide enough to hold it
    if (D.mergeLane < 0 || posOf[D.mergeLane] < l0 || posOf[D.mergeLane] > l1) return;
    ctx.font = "8px system-ui, sans-serif"; ctx.textBaseline = "middle"; ctx.fillStyle = "#0b0e13";
    for (const i of V.mergeSpans) {
      const bx = visibleBox(i, k), label = D.merges[i].label;
      if (!bx || bx.w < 40) continue;
      ctx.save(); ctx.beginPath(); ctx.rect(bx.x, bx.y - 1, bx.w, ROW_H + 2); ctx.clip();
      ctx.fillText(label, bx.x + 2, bx.y + ROW_H / 2); ctx.restore();
    }
  }
  function drawLabels(q0, q1) {
    ctx.fillStyle = "#0e1218"; ctx.fillRect(0, AXIS_H, LABEL_W, cssH);
    ctx.fillStyle = "#262e3b"; ctx.fillRect(LABEL_W - 1, AXIS_H, 1, cssH);
    ctx.font = "10.5px system-ui, sans-serif"; ctx.textBaseline = "middle"; ctx.fillStyle = "#9aa5b8";
    for (let q = q0; q <= q1; q++) {
      const l = laneOrder[q];
      const y = Math.max(AXIS_H + 6, AXIS_H + laneTop[q] - scrollY + Math.min(laneRows[l], 2) * ROW_STEP / 2);
      let label = D.lanes[l];
      if (label.length > 22) label = label.slice(0, 21) + "…";
      ctx.fillText(label, 8, y);
    }
    ctx.font = "600 10.5px system-ui, sans-serif";
    for (const g of groups) { // group headers across the whole width
      const y = AXIS_H + g.top - scrollY;
      if (y < AXIS_H - GROUP_H || y > cssH) continue;
      ctx.fillStyle = "#1a2130"; ctx.fillRect(0, y, cssW, GROUP_H - 2);
      ctx.fillStyle = "#d8dee9"; ctx.fillText(`${g.label}  (${g.lanes} lanes)`, 8, y + GROUP_H / 2 - 1);
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
    const q = laneAt(yy), l = laneOrder[q], d = Math.floor((yy - laneTop[q]) / ROW_STEP);
    if (d < 0 || d >= laneRows[l] || yy - laneTop[q] - d * ROW_STEP > ROW_H + 0.5) return -1;
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
    const top = laneTop[posOf[D.lane[i]]];
    if (top < scrollY || top > scrollY + cssH - AXIS_H - 40) scrollY = Math.max(0, top - (cssH - AXIS_H) / 3);
    clampView(); requestDraw();
  }
  function select(i) {
    V.selected = i; requestDraw();
    if (i < 0) { $("details").innerHTML = '<p class="muted">Click a span in the timeline.</p>'; return; }
    if (V.preview) { $("details").innerHTML = '<p class="muted">Details once the whole trace is read.</p>'; return; }
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
    if (critFocus) { critFocus = false; ev.target.classList.remove("on"); requestDraw(); } else jumpToCritical();
  });
  $("group-by").addEventListener("change", (ev) => setGroup(ev.target.value));
  $("color-by").addEventListener("change", (ev) => setColor(ev.target.value));
  $("search").addEventListener("input", (ev) => runSearch(ev.target.value));
  $("search").addEventListener("keydown", (ev) => { if (ev.key === "Enter") { ev.preventDefault(); nextMatch(); } });
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
      ? (ct > 0 ? bar(crit, ct, "critical path: the run's wall-clock by cause, one step at a time") : "") +
        (rt > 0 ? bar(run, rt, "whole run: each instant split among the steps running then") : "") +
        `<div class="ledger-legend" data-testid="ledger-columns"><span class="muted">cause</span>` +
        `<span class="muted" title="seconds of the run's wall-clock spent on this cause along the critical path">critical path</span>` +
        `<span class="muted" title="this cause's part of the critical path">% of path</span>` +
        `<span class="muted" title="seconds of the whole run's wall-clock, each instant shared among the steps running then; not a sum of span durations">whole run (shared)</span>` +
        cats.map((k, j) => `<span title="${esc(k)}"><i style="background:${ledgerColor(k, j)}"></i>${esc(k)}</span><span>${fmtMs((crit[k] || 0) * 1000)}</span>` +
          `<span class="muted">${ct > 0 ? ((100 * (crit[k] || 0)) / ct).toFixed(1) : "0.0"}%</span><span>${fmtMs((run[k] || 0) * 1000)}</span>`).join("") + "</div>"
      : '<p class="muted">No latency ledger in this trace.</p>';
    // critical path list
    const cp = s.critical_path || [];
    $("crit-total").textContent = `· ${cp.length} spans`;
    const rows = cp.filter((c) => c.kind !== "workflow" && c.kind !== "agent").slice(0, 400);
    $("crit-list").innerHTML = rows.map((c) => `<div class="crit-row" data-span="${c.index}"><span title="${esc(c.name)}">${esc(c.name)}</span><span class="d">${fmtMs(c.duration_ms)}</span></div>`).join("");
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
    const items = [["agent", KIND_COLORS.agent]];
    if (colorMode === "provider") D.providers.forEach((p, c) => { if (p) items.push([`chat · ${p}`, providerColor(c)]); });
    if (colorMode === "tier") {
      items.push(["tool", KIND_COLORS.tool]);
      D.tiers.forEach((t) => { if (t) items.push([`chat · ${t}`, TIER_COLORS[t] || KIND_COLORS.chat]); });
      items.push(["chat", KIND_COLORS.chat]);
    }
    if (colorMode !== "provider") D.waits.forEach((w) => { if (w) items.push([`wait · ${w}`, WAIT_COLORS[w] || KIND_COLORS.wait]); });
    if (colorMode !== "tier") items.push(["other steps", MUTED]);
    const outcomes = new Set(Object.values(D.merges).map((m) => m.outcome));
    ["green", "red", "cancelled", "split"].forEach((o) => { if (outcomes.has(o)) items.push([o === "split" ? "merge split" : `merge batch · ${o}`, MERGE_COLORS[o]]); });
    $("legend").innerHTML = items.map(([k, c]) => `<span><i style="background:${c}"></i>${esc(k)}</span>`).join("") +
      '<span class="crit"><i></i>critical path</span><span class="ttft"><i></i>first token</span>';
  }

  // ---------- start ----------
  new ResizeObserver(resize).observe(canvas);
  (window.__spans || fetch("/api/spans")).then(load);
  fetch("/api/summary").then((r) => r.json()).then(renderSummary);
})();
