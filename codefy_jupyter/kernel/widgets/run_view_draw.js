// The live view of one run — status, place in line and its reason, per-node status, progress
// bars (batches and epochs) and a metrics chart drawn as SVG (no chart library) — and whether the
// kernel that feeds it is still there. All state arrives as a RunView's traits from the Python
// side, which follows the run's event log. Not a module of its own: _base.esm() ships this text
// in front of run_view.js (RunView) and queue_dialog.js (the dialog's Watch draws the same view
// from the watched RunView's model), so it exports nothing.
// h() comes from dom.js, shipped in front of this text.

const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a7ea4", "#6e7781"];
const NODE_MARK = { done: "✓", cached: "✓", failed: "✗", cancelled: "■", running: "▸", pending: "○" };
const CHART = { width: 560, height: 220, left: 56, right: 12, top: 10, bottom: 28 };

function s(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function fmt(v) {
  if (v === null || v === undefined) return "-";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2);
  return Number(v.toPrecision(4)).toString();
}

function seconds(x) {
  if (x === null || x === undefined) return "";
  if (x < 1) return `${Math.round(x * 1000)} ms`;
  if (x < 120) return `${x.toFixed(1)} s`;
  return `${Math.floor(x / 60)} min ${Math.floor(x % 60)} s`;
}

function bar(value, total, title) {
  const frac = total ? Math.max(0, Math.min(1, value / total)) : 0;
  return h("div", { class: "cdf-bar", title }, h("div", { style: `width:${(frac * 100).toFixed(1)}%` }));
}

// One line per (metric, node) series; x is the step, y the value, both scaled to the data.
function chart(metrics) {
  const series = [];
  for (const [name, byNode] of Object.entries(metrics || {})) {
    const nodes = Object.keys(byNode);
    for (const node of nodes) {
      const points = (byNode[node] || []).filter((p) => p[1] !== null && Number.isFinite(p[1]));
      if (points.length) series.push({ label: nodes.length > 1 ? `${name} (${node})` : name, points });
    }
  }
  if (!series.length) return null;
  const xs = series.flatMap((q) => q.points.map((p) => p[0]));
  const ys = series.flatMap((q) => q.points.map((p) => p[1]));
  let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { const pad = Math.abs(y0) * 0.1 || 1; y0 -= pad; y1 += pad; }
  const { width, height, left, right, top, bottom } = CHART;
  const X = (x) => left + ((x - x0) / (x1 - x0)) * (width - left - right);
  const Y = (y) => top + (1 - (y - y0) / (y1 - y0)) * (height - top - bottom);
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "cdf-chart-svg" });
  svg.append(s("line", { x1: left, y1: height - bottom, x2: width - right, y2: height - bottom, stroke: "#8c959f" }));
  svg.append(s("line", { x1: left, y1: top, x2: left, y2: height - bottom, stroke: "#8c959f" }));
  for (const [y, anchor] of [[y1, top + 4], [y0, height - bottom]]) {
    svg.append(s("text", { x: left - 4, y: anchor, "text-anchor": "end", "font-size": 10, fill: "#59636e" }, fmt(y)));
  }
  svg.append(s("text", { x: left, y: height - 8, "font-size": 10, fill: "#59636e" }, fmt(x0)));
  svg.append(s("text", { x: width - right, y: height - 8, "text-anchor": "end", "font-size": 10, fill: "#59636e" }, fmt(x1)));
  const legend = h("div", { class: "cdf-legend" });
  series.forEach((q, i) => {
    const color = COLORS[i % COLORS.length];
    const d = q.points.map((p, j) => `${j ? "L" : "M"}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(" ");
    svg.append(s("path", { d, fill: "none", stroke: color, "stroke-width": 2, class: "cdf-series", "data-series": q.label }));
    if (q.points.length === 1) svg.append(s("circle", { cx: X(q.points[0][0]), cy: Y(q.points[0][1]), r: 3, fill: color }));
    const last = q.points[q.points.length - 1][1];
    legend.append(h("span", { style: `--cdf-swatch:${color}` }, `${q.label} ${fmt(last)}`));
  });
  return h("div", { class: "cdf-chart" }, svg, legend);
}

// The run's own metrics in one chart; its system metrics (`system/...`, wire/system_metrics.py) in
// two of their own, percent and bytes, so that their scales never flatten the training curves.
function charts(metrics) {
  const own = {}, percent = {}, bytes = {};
  for (const [name, byNode] of Object.entries(metrics || {})) {
    if (!name.startsWith("system/")) own[name] = byNode;
    else if (/_bytes(\/|$)/.test(name)) bytes[name] = byNode;
    else percent[name] = byNode;
  }
  return [chart(own), chart(percent), chart(bytes)];
}

// A run in one of these statuses changes no more, so its view cannot go stale; the same list as
// run_state_view.py FINISHED (tests/unit/test_widget_exports.py holds them equal).
const RUN_FINISHED = ["succeeded", "failed", "cancelled", "interrupted"];
// Beats in a row that may go missing before the view says it is disconnected: one late beat (a
// busy kernel, a tab the browser throttled) must not flash the banner.
const MISSED_BEATS = 3;

// Whether a view has lost its kernel: it follows a run that can still change (the kernel beats
// only then: run_state_view.py needs_heartbeat), and either the model's comm closed or no
// heartbeat arrived for MISSED_BEATS beats. Beats, not comm events, decide: anywidget
// gives render() a model without a comm, and frontends differ in what, if anything, they signal
// when a kernel restarts or a page is reopened from its saved widget state; a missing beat means
// the same in all of them, and the view heals itself when beats come back.
function disconnected(status, following, sinceBeatMs, beatMs, commClosed) {
  if (RUN_FINISHED.includes(status) || following === false) return false;
  return commClosed || sinceBeatMs > MISSED_BEATS * beatMs;
}

function clockTime(ms) {
  return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

function renderRunView({ model, el }) {
  el.classList.add("cdf", "cdf-run-view");
  const root = h("div");
  el.append(root);
  const get = (key) => model.get(key);

  // Rendering counts as word from the kernel: a view displayed just now had one; a page reopened
  // from saved widget state has none, and after MISSED_BEATS beats says so.
  let lastBeat = performance.now();
  let lastBeatAt = Date.now();
  let commClosed = false;
  let stale = false;
  const beatMs = () => Math.max(0.05, Number(get("heartbeat_s")) || 2) * 1000;

  function staleBanner() {
    if (!stale) return null;
    const command = get("show_command") || `%codefy show ${get("run_id")}`;
    return h("div", { class: "cdf-stale-banner", role: "status" },
      h("b", {}, "⚠ disconnected"),
      ` · this view stopped updating: its kernel went away (no word since ${clockTime(lastBeatAt)}). `,
      `The run belongs to the server and goes on without it; it was last seen ${get("status")}. For a live view, run `,
      h("code", { class: "cdf-mono cdf-show-command" }, command), " in a notebook cell.");
  }

  function header() {
    const status = get("status");
    const id = get("run_id");
    const facts = [get("device") && `on ${(get("devices") || []).join(", ") || get("device")}`,
      get("worker") && get("worker") !== "local" ? `worker ${get("worker")}` : "",
      get("seed") !== null && get("seed") !== undefined ? `seed ${get("seed")}` : "",
      get("duration_s") !== null && get("duration_s") !== undefined ? seconds(get("duration_s")) : ""].filter(Boolean);
    return h("div", { class: "cdf-head" },
      h("span", { class: "cdf-title" }, get("name") || "run"),
      h("span", { class: "cdf-mono cdf-sub" }, id),
      h("span", { class: `cdf-status cdf-${status}${stale ? " cdf-stale" : ""}`, title: stale ? "last seen" : undefined }, status),
      h("span", { class: "cdf-note" }, facts.join(" · ")));
  }

  function queueLine() {
    if (get("status") !== "queued") return null;
    const pos = get("queue_position");
    const where = pos ? `position ${pos} on ${get("queue_key")}` : `on ${get("queue_key")}`;
    return h("div", { class: "cdf-queue" }, `○ queued · ${where}`,
      get("queue_reason") ? h("div", { class: "cdf-reason" }, get("queue_reason")) : null);
  }

  function nodes() {
    const all = get("nodes") || {};
    const types = get("node_types") || {};
    const ids = Object.keys(all);
    if (!ids.length) return null;
    const inner = Object.values(get("inner_nodes") || {});
    const innerDone = inner.filter((x) => x === "done" || x === "cached").length;
    return h("div", { class: "cdf-nodes" }, ids.map((id) =>
      h("span", { class: `cdf-node cdf-${all[id]}`, dataset: { node: id, status: all[id] }, title: types[id] || "" },
        `${NODE_MARK[all[id]] || "·"} ${id}`)),
      inner.length ? h("span", { class: "cdf-node cdf-pending" }, `${innerDone}/${inner.length} inner nodes done`) : null);
  }

  function progress() {
    const all = get("progress") || {};
    const rows = [];
    for (const [node, p] of Object.entries(all)) {
      if (p.epochs && p.total) {
        // TrainingLoop counts batches over the whole run; the label names the epoch.
        const perEpoch = p.total / p.epochs;
        const within = Math.max(0, p.value - (p.epoch - 1) * perEpoch);
        rows.push(h("span", { class: "cdf-mono" }, node),
          bar(p.epoch - 1 + within / perEpoch, p.epochs, "epochs"),
          h("span", { class: "cdf-note" }, `epoch ${p.epoch}/${p.epochs}`));
        rows.push(h("span", {}, ""), bar(within, perEpoch, "batches"),
          h("span", { class: "cdf-note" }, `batch ${Math.round(within)}/${Math.round(perEpoch)}`));
      } else {
        rows.push(h("span", { class: "cdf-mono" }, node), bar(p.value, p.total, "progress"),
          h("span", { class: "cdf-note" }, p.total ? `${p.value}/${p.total} ${p.label || ""}` : `${p.value} ${p.label || ""}`));
      }
    }
    return rows.length ? h("div", { class: "cdf-progress" }, rows) : null;
  }

  // Data and models: the dataset and weights files a run queued with provenance read, each by its
  // content (sha256: the first 12 digits, the whole digest on hover), as Lab's run detail shows them.
  function inputs() {
    const rows = get("inputs") || [];
    if (!rows.length) return null;
    return h("div", { class: "cdf-inputs-block" }, h("div", { class: "cdf-subtitle" }, "Data and models"),
      h("table", { class: "cdf-table cdf-inputs" }, h("tbody", {}, rows.map((r) =>
        h("tr", { class: "cdf-input", dataset: { kind: r.kind, path: r.path } },
          h("td", {}, r.kind),
          h("td", { class: "cdf-mono", title: r.path }, r.path),
          h("td", { class: "cdf-mono", title: r.sha256 }, `sha256:${r.digest}`),
          h("td", { class: "cdf-note" }, r.detail))))));
  }

  function outcome() {
    const out = [];
    const error = get("error");
    if (error) {
      const where = error.node_id ? `${error.node_id}${error.node_type ? ` (${error.node_type})` : ""}: ` : "";
      out.push(h("div", { class: "cdf-error" }, `✗ ${where}${error.message || "failed"}`));
    }
    if (get("stop_reason")) out.push(h("div", { class: "cdf-note" }, `■ ${get("status")}: ${get("stop_reason")}`));
    const result = get("result") || {};
    const entries = Object.entries(result).filter(([, v]) => typeof v === "number");
    if (get("status") === "succeeded") {
      out.push(h("div", { class: "cdf-note cdf-result" }, "✓ run complete",
        entries.length ? ` · ${entries.map(([k, v]) => `${k} ${fmt(v)}`).join(" · ")}` : ""));
    }
    for (const w of (get("warnings") || []).slice(-5)) out.push(h("div", { class: "cdf-note" }, `! ${w}`));
    if (get("follow_error")) out.push(h("div", { class: "cdf-error" }, get("follow_error")));
    return out;
  }

  const draw = () => {
    el.dataset.viewState = stale ? "disconnected" : "live";
    root.replaceChildren(
      ...[staleBanner(), header(), queueLine(), nodes(), progress(), ...charts(get("metrics")), inputs(), ...outcome()].filter(Boolean));
  };
  const keys = ["status", "name", "queue_position", "queue_reason", "queue_key", "nodes", "inner_nodes", "progress",
    "metrics", "error", "stop_reason", "result", "warnings", "follow_error", "duration_s", "device", "seed",
    "show_command", "inputs"];
  // Many traits change together (one push per page of events): draw once per frame.
  let pending = false;
  const schedule = () => {
    if (pending) return;
    pending = true;
    (globalThis.requestAnimationFrame || setTimeout)(() => { pending = false; draw(); });
  };
  for (const key of keys) model.on(`change:${key}`, schedule);

  function check() {
    const now = disconnected(get("status"), get("following"), performance.now() - lastBeat, beatMs(), commClosed);
    if (now !== stale) { stale = now; schedule(); }
  }
  const beat = () => { lastBeat = performance.now(); lastBeatAt = Date.now(); commClosed = false; check(); };
  const commClose = () => { commClosed = true; check(); };
  model.on("change:heartbeat", beat);
  model.on("comm:close", commClose);
  // Also when the status changes: a finished run's view is never stale.
  model.on("change:status", check);
  model.on("change:following", check);
  const timer = setInterval(check, 500);
  draw();
  return () => {
    clearInterval(timer);
    for (const key of keys) model.off(`change:${key}`, schedule);
    model.off("change:heartbeat", beat);
    model.off("comm:close", commClose);
    model.off("change:status", check);
    model.off("change:following", check);
  };
}
