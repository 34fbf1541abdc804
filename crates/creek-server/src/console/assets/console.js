// The Creek console: polls /api/console once a second and draws it. No
// libraries: the charts are a few lines of canvas below.
"use strict";

const $ = (id) => document.getElementById(id);
const fmt = (v, digits = 0) => (v === null || v === undefined) ? "–" : Number(v).toFixed(digits);
const COLORS = { weak: "#2f7fd8", strong: "#8a4fd0", cweak: "#9cc3ef", cstrong: "#c9aff0",
                 tent: "#2f7fd8", stable: "#8a4fd0", acc: "#1f9d55", reexec: "#d43c3c" };

// A line chart of `lines` ({label, color, values, dash}) over `n` points on
// `canvas`; `opt.log` draws a log10 y axis, `opt.max` fixes its top,
// `opt.right` names lines drawn against a second axis (0..1 on the right).
function chart(canvas, lines, opt = {}) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== w * dpr || canvas.height !== h * dpr) { canvas.width = w * dpr; canvas.height = h * dpr; }
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const L = 44, R = opt.right ? 36 : 8, T = 8, B = 18;
  const pw = w - L - R, ph = h - T - B;
  const left = lines.filter((l) => !(opt.right || []).includes(l.label));
  const vals = left.flatMap((l) => l.values).filter((v) => v !== null && v !== undefined && isFinite(v));
  let lo = 0, hi = opt.max || Math.max(1, ...vals) * 1.15;
  const tf = opt.log ? (v) => Math.log10(Math.max(v, 1e-3)) : (v) => v;
  if (opt.log) { lo = Math.floor(tf(Math.max(Math.min(...vals, 1), 1e-3))); hi = Math.ceil(tf(Math.max(...vals, 1)) + 0.01); }
  const n = Math.max(2, opt.n || Math.max(...lines.map((l) => l.values.length)));
  const x = (i) => L + (pw * i) / (n - 1);
  const y = (v, a = lo, b = hi) => T + ph - (ph * (v - a)) / (b - a || 1);
  g.font = "10px system-ui, sans-serif"; g.fillStyle = "#6b7585"; g.strokeStyle = "#e6e9ef"; g.lineWidth = 1;
  const ticks = opt.log ? Array.from({ length: hi - lo + 1 }, (_, i) => lo + i) : [0, 0.25, 0.5, 0.75, 1].map((f) => lo + f * (hi - lo));
  for (const t of ticks) {
    const yy = Math.round(y(t)) + 0.5;
    g.beginPath(); g.moveTo(L, yy); g.lineTo(L + pw, yy); g.stroke();
    const label = opt.log ? (10 ** t >= 1 ? String(10 ** t) : (10 ** t).toPrecision(1)) : (t >= 100 ? t.toFixed(0) : t.toPrecision(2));
    g.textAlign = "right"; g.fillText(label, L - 4, yy + 3);
  }
  if (opt.right) {
    for (const f of [0, 0.5, 1]) { g.textAlign = "left"; g.fillText(f.toFixed(1), L + pw + 4, y(f, 0, 1) + 3); }
  }
  g.textAlign = "left"; g.fillText(`last ${n} s`, L, h - 4);
  for (const l of lines) {
    const onRight = (opt.right || []).includes(l.label);
    g.strokeStyle = l.color; g.lineWidth = 1.6; g.setLineDash(l.dash || []);
    g.beginPath();
    let pen = false;
    const off = n - l.values.length;
    l.values.forEach((v, i) => {
      if (v === null || v === undefined || !isFinite(v)) { pen = false; return; }
      const yy = onRight ? y(v, 0, 1) : y(tf(v));
      if (pen) g.lineTo(x(i + off), yy); else g.moveTo(x(i + off), yy);
      pen = true;
    });
    g.stroke(); g.setLineDash([]);
  }
}

function legend(el, lines) {
  el.innerHTML = lines.map((l) => `<span><i style="background:${l.color}"></i>${l.label}</span>`).join("");
}

function td(text, cls) {
  const c = document.createElement("td");
  c.textContent = text;
  if (cls) c.className = cls;
  return c;
}

function renderMembers(r) {
  const body = $("members").querySelector("tbody");
  body.replaceChildren();
  for (const m of r.members) {
    const tr = document.createElement("tr");
    tr.dataset.replica = m.replica;
    tr.dataset.health = m.health;
    tr.className = m.health === "up" ? "" : "down";
    tr.append(
      td(m.replica + (m.replica === r.replica ? " (this)" : ""), m.replica === r.replica ? "me" : ""),
      td(m.health, "health " + m.health),
      td(m.role || "–"), td(m.membership), td(m.leader ? m.leader : "–"), td(fmt(m.term)),
      td(fmt(m.committed)), td(fmt(m.tentative)), td(fmt(m.gossip_backlog)),
      td(m.peer_link === null ? "–" : (m.peer_link ? "connected" : "disconnected")),
      td(m.last_seen_s === null ? "never" : (m.last_seen_s < 1.5 ? "now" : `${m.last_seen_s.toFixed(0)} s ago`)),
      td(m.client_addr));
    if (m.error) tr.title = m.error;
    body.append(tr);
  }
}

function renderProcedures(r) {
  const body = $("procedures").querySelector("tbody");
  body.replaceChildren();
  const ms = (x) => (x === null || x === undefined ? "–" : x < 10 ? x.toFixed(2) : x.toFixed(0));
  const pct = (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(1) + " %");
  for (const p of r.procedures || []) {
    const tr = document.createElement("tr");
    tr.dataset.procedure = p.procedure;
    tr.append(td(p.procedure), td(fmt(p.weak)), td(fmt(p.strong)), td(fmt(p.aborts)),
      td(pct(p.accuracy)), td(fmt(p.confirmed)), td(fmt(p.corrected), p.corrected ? "corrected" : ""),
      td(p.reexecutions_per_final === null ? "–" : p.reexecutions_per_final.toFixed(2)),
      td(`${ms(p.preliminary_p50_ms)} / ${ms(p.preliminary_p99_ms)}`),
      td(`${ms(p.final_p50_ms)} / ${ms(p.final_p99_ms)}`));
    body.append(tr);
  }
}

function renderShards(r) {
  const sec = $("shards");
  sec.hidden = !r.shards;
  if (!r.shards) return;
  $("shards-epoch").textContent = r.shards.epoch;
  $("shards-serves").textContent = r.shards.serves;
  $("shards-moving").textContent = r.shards.moving ? "Moving keys: " + r.shards.moving : "";
  const body = $("shards-table").querySelector("tbody");
  body.replaceChildren();
  for (const g of r.shards.groups) {
    const tr = document.createElement("tr");
    tr.dataset.group = g.name;
    const own = g.name === r.shards.serves;
    const down = g.replicas.filter((x) => x.health !== "up").length;
    tr.className = g.leader ? "" : "down";
    const reps = document.createElement("td");
    for (const x of g.replicas) {
      const span = document.createElement("span");
      span.className = "health " + x.health;
      span.textContent = `${x.replica} ${x.role || x.health}`;
      span.title = x.client_addr;
      span.style.marginRight = "1em";
      reps.append(span);
    }
    const num = (v) => (v === null || v === undefined ? "–" : v);
    tr.append(td(g.name + (own ? " (this)" : ""), own ? "me" : ""), td(g.leader ? g.leader : "none"),
      td(down ? `${down} down` : "all up", "health " + (down ? (g.leader ? "unreachable" : "down") : "up")),
      td(num(g.versions)), td(num(g.committed)), td(g.moving_in || ""), reps);
    body.append(tr);
  }
}

function renderCharts(r) {
  const s = r.series, col = (k) => s.map((p) => p[k]);
  const rates = [
    { label: "weak, cluster", color: COLORS.cweak, values: col("cluster_weak_per_s") },
    { label: "strong, cluster", color: COLORS.cstrong, values: col("cluster_strong_per_s") },
    { label: "weak, here", color: COLORS.weak, values: col("weak_per_s") },
    { label: "strong, here", color: COLORS.strong, values: col("strong_per_s") },
  ];
  legend($("legend-rates"), rates); chart($("chart-rates"), rates, { n: 120 });
  const lat = [
    { label: "preliminary p50", color: COLORS.tent, values: col("tentative_p50_ms") },
    { label: "preliminary p99", color: COLORS.tent, values: col("tentative_p99_ms"), dash: [4, 3] },
    { label: "final p50", color: COLORS.stable, values: col("stable_p50_ms") },
    { label: "final p99", color: COLORS.stable, values: col("stable_p99_ms"), dash: [4, 3] },
  ];
  legend($("legend-latency"), lat); chart($("chart-latency"), lat, { log: true, n: 120 });
  const spec = [
    { label: "re-executions/s", color: COLORS.reexec, values: col("reexecutions_per_s") },
    { label: "accuracy (right axis)", color: COLORS.acc, values: col("accuracy") },
  ];
  legend($("legend-spec"), spec); chart($("chart-spec"), spec, { n: 120, right: ["accuracy (right axis)"] });
  const l = r.local;
  $("accuracy").textContent = l.accuracy === null ? "–" : (100 * l.accuracy).toFixed(1) + " %";
  $("exec-ratio").textContent = fmt(l.execution_ratio, 3);
  $("reexec").textContent = l.reexecutions;
}

let lastLanes = { committed: new Set(), tentative: new Set() };

function chipEl(c, cls) {
  const e = document.createElement("span");
  e.className = "chip" + (c.procedure ? " here " + c.level : "") + (c.corrected ? " corrected" : "") + (cls ? " " + cls : "");
  e.dataset.id = c.id;
  e.textContent = c.id;
  e.title = `#${c.position} ${c.id}` + (c.procedure ? ` ${c.level} ${c.procedure}` : "") + (c.corrected ? " — speculation corrected" : "");
  return e;
}

function renderStrip(r) {
  const st = r.strip;
  $("strip-committed-len").textContent = st.committed_len;
  $("strip-tentative-len").textContent = st.tentative_len;
  const seen = new Set([...lastLanes.committed, ...lastLanes.tentative]);
  $("lane-committed").replaceChildren(...st.committed.map((c) =>
    chipEl(c, lastLanes.tentative.has(c.id) ? "moved" : (seen.has(c.id) ? "" : "enter"))));
  $("lane-tentative").replaceChildren(...st.tentative.map((c) => chipEl(c, seen.has(c.id) ? "" : "enter")));
  lastLanes = { committed: new Set(st.committed.map((c) => c.id)), tentative: new Set(st.tentative.map((c) => c.id)) };
  const body = $("recent").querySelector("tbody");
  body.replaceChildren();
  for (const o of st.recent.slice().reverse().slice(0, 16)) {
    const tr = document.createElement("tr");
    const corrected = o.final_kind === "corrected" || o.preliminary_views > 1;
    tr.dataset.id = o.id;
    tr.append(td(o.id), td(o.procedure), td(o.level), td(o.preliminary || "–"),
      td(o.preliminary_ms === null ? "" : o.preliminary_ms.toFixed(2) + " ms"),
      td(o.snapshot || "–"),
      td(o.snapshot_ms === null ? "" : o.snapshot_ms.toFixed(2) + " ms"),
      td(o.final_kind ? `${o.final_kind}: ${o.final_outcome}` : "–", corrected ? "corrected" : ""),
      td(o.final_ms === null ? "" : o.final_ms.toFixed(1) + " ms"),
      td(String(o.preliminary_views + (o.snapshot ? 1 : 0) + (o.final_kind ? 1 : 0))),
      td(o.committed_at === null ? "–" : "#" + o.committed_at));
    body.append(tr);
  }
}

// The report's time and when it last changed: a report that stops
// changing means the replica's sampler cannot reach its node loop.
let lastUpdate = { ms: -1, at: 0 };

// On a cluster that checks users, the console's API needs a token: asked
// for once, kept for this tab only, sent as `Authorization: Bearer`.
function withToken(headers) {
  const token = sessionStorage.getItem("creek-token");
  return token ? { ...headers, Authorization: "Bearer " + token } : (headers || {});
}
$("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem("creek-token", $("token").value.trim());
  $("token").value = "";
  $("token-form").hidden = true;
  poll(); loadProcedures();
});

async function poll() {
  try {
    const res = await fetch("/api/console", { cache: "no-store", headers: withToken() });
    $("token-form").hidden = res.status !== 401;
    if (!res.ok) throw new Error((await res.json()).error || res.statusText);
    const r = await res.json();
    $("replica").textContent = r.replica;
    $("leader").textContent = r.leader || "none";
    $("term").textContent = r.term;
    const me = r.members.find((m) => m.replica === r.replica);
    $("committed").textContent = me ? me.committed : "–";
    $("tentative").textContent = me ? me.tentative : "–";
    const now = performance.now();
    if (r.updated_ms !== lastUpdate.ms) lastUpdate = { ms: r.updated_ms, at: now };
    const staleS = (now - lastUpdate.at) / 1000;
    $("error").textContent = staleS > 3 ? `no new sample for ${staleS.toFixed(0)} s: the replica's node loop is busy or stuck`
      : r.local.quorum_lost ? "a majority lost its data: strong ops are refused" : (r.local.standing_detail || "");
    renderMembers(r); renderShards(r); renderProcedures(r); renderCharts(r); renderStrip(r);
    document.body.dataset.updated = r.updated_ms;
  } catch (e) {
    $("error").textContent = "this replica does not answer: " + e.message;
  }
}

$("invoke-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const log = $("invoke-log");
  const t0 = performance.now();
  let args;
  try { args = JSON.parse($("args").value || "[]"); } catch (e) { log.textContent = "arguments are not JSON: " + e.message; return; }
  if (!Array.isArray(args)) { log.textContent = "arguments must be a JSON array, e.g. [\"key\", 1]"; return; }
  log.textContent = "";
  const show = (line) => { log.textContent += line + "\n"; };
  try {
    const res = await fetch("/api/invoke", { method: "POST", headers: withToken({ "Content-Type": "application/json" }),
      body: JSON.stringify({ procedure: $("proc").value, args, level: $("level").value }) });
    if (!res.ok) { show(`HTTP ${res.status}: ${await res.text()}`); return; }
    const reader = res.body.getReader(), dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i); buf = buf.slice(i + 1);
        if (!line) continue;
        const e = JSON.parse(line);
        const at = `${(performance.now() - t0).toFixed(1)} ms`.padStart(10);
        if (e.event === "accepted") show(`${at}  accepted as ${e.op}`);
        else if (e.event === "view") show(`${at}  ${e.kind.padEnd(11)} ${"abort" in e ? "abort: " + e.abort : ("value" in e ? JSON.stringify(e.value) : "(same as preliminary)")}`);
        else if (e.event === "error") show(`${at}  error ${e.code}: ${e.error}`);
        else if (e.event === "end") show(`${at}  done`);
      }
    }
  } catch (e) { show("failed: " + e.message); }
});

// The procedures this replica runs, for the form: names to pick from and
// the chosen one's signature.
let procedures = [];
function showSignature() {
  const p = procedures.find((q) => q.name === $("proc").value);
  $("signature").textContent = !p ? "" :
    `${p.name}(${p.params.map((a) => `${a.name}: ${a.type}`).join(", ")})` +
    (p.returns ? ` → ${p.returns}` : "") + (p.summary ? ` — ${p.summary}` : "") + (p.read_only ? " (read-only)" : "");
}
function loadProcedures() {
  fetch("/api/procedures", { headers: withToken() }).then((r) => r.json()).then((r) => {
    procedures = r.procedures || [];
    $("procs").replaceChildren(...procedures.map((p) => { const o = document.createElement("option"); o.value = p.name; return o; }));
    showSignature();
  }).catch(() => {});
}
loadProcedures();
$("proc").addEventListener("input", showSignature);

poll();
setInterval(poll, 1000);
window.addEventListener("resize", poll);
