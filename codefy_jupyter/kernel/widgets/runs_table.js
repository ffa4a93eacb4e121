// RunsTable: the newest 50 runs with filter chips, "50 of 312", and Stop / Watch / CSV / Delete.
// Plain ESM for anywidget (no build step). Every action is a message to the Python side, which
// calls the REST API: {action: "refresh" | "stop" | "watch" | "csv" | "delete", run_id}.
// h() comes from dom.js, which _base.esm() ships in front of this module.

const COLUMNS = [
  ["name", "Run"], ["status", "Status"], ["worker", "Worker"], ["devices", "Devices"],
  ["budget", "Budget"], ["started", "Started"], ["duration", "Duration"], ["final_loss", "Final loss"],
];
const ACTION_LABELS = { stop: "Stop", watch: "Watch", csv: "CSV", delete: "Delete" };

function progressText(p) {
  if (!p) return "";
  const total = p.total ? `/${p.total}` : "";
  return `${p.value}${total} ${p.label || ""}`.trim();
}

function render({ model, el }) {
  el.classList.add("cdf", "cdf-runs");
  const root = h("div");
  el.append(root);
  const send = (msg) => model.send(msg);

  function toolbar() {
    const current = model.get("filter");
    const chips = (model.get("filters") || []).map(([key, label]) =>
      h("button", {
        class: "cdf-chip" + (key === current ? " cdf-active" : ""), dataset: { filter: key },
        onclick: () => { model.set("filter", key); model.save_changes(); },
      }, label));
    return h("div", { class: "cdf-toolbar" }, chips,
      h("span", { class: "cdf-count", title: "runs listed of the runs matching the filter" }, model.get("count")),
      h("button", { class: "cdf-refresh", onclick: () => send({ action: "refresh" }) }, "Refresh"));
  }

  function cell(row, key) {
    if (key === "status") return h("span", { class: `cdf-status cdf-${row.status}` }, row.status);
    if (key === "name") return [h("span", { title: row.id }, row.name), h("span", { class: "cdf-sub cdf-mono" }, row.id.slice(0, 12))];
    if (key === "devices") {
      return [h("span", { class: "cdf-device-list", title: row.devices_title || "" }, row.devices), row.queue ? h("span", { class: "cdf-sub cdf-queue", title: row.queue_title }, row.queue) : null];
    }
    if (key === "final_loss") return h("span", { title: row.final_loss_title }, row.final_loss);
    return row[key];
  }

  function table() {
    const rows = model.get("rows") || [];
    if (!rows.length) return h("div", { class: "cdf-empty" }, "no runs");
    const body = [];
    rows.forEach((row, i) => {
      const odd = i % 2 === 0 ? "cdf-odd" : "";
      body.push(h("tr", { class: `cdf-row ${odd}`, dataset: { runId: row.id, status: row.status } },
        COLUMNS.map(([key]) => h("td", { class: `cdf-col-${key}` }, cell(row, key))),
        h("td", { class: "cdf-actions" }, (row.actions || []).map((action) =>
          h("button", {
            class: action === "delete" || action === "stop" ? "cdf-danger" : "", dataset: { action },
            onclick: () => send({ action, run_id: row.id }),
          }, ACTION_LABELS[action] || action)))));
      if (row.reason) {
        body.push(h("tr", { class: `cdf-reason-row ${odd}` },
          h("td", { class: "cdf-reason", colspan: COLUMNS.length + 1 }, row.reason)));
      }
    });
    return h("table", {},
      h("thead", {}, h("tr", {}, COLUMNS.map(([, label]) => h("th", {}, label)), h("th", {}, ""))),
      h("tbody", {}, body));
  }

  function watchStrip() {
    const w = model.get("watch_state");
    if (!w || !w.run_id) return null;
    const last = Object.entries(w.last || {}).map(([k, v]) => `${k} ${v === null ? "-" : Number(v).toPrecision(4)}`);
    const where = w.status === "queued" && w.queue_position ? `Queue #${w.queue_position}` : "";
    return h("div", { class: "cdf-strip cdf-watch" },
      h("span", {}, "Watching ", h("b", {}, w.name || w.run_id.slice(0, 12))),
      h("span", { class: `cdf-status cdf-${w.status}` }, w.status), where,
      w.queue_reason ? h("i", {}, w.queue_reason) : null,
      h("span", {}, `nodes ${w.nodes_done}/${w.nodes_seen}`),
      w.node ? h("span", {}, `${w.node} ${progressText(w.progress)}`) : null,
      last.length ? h("span", { class: "cdf-mono" }, last.join(" · ")) : null,
      w.message ? h("span", { class: "cdf-error" }, w.message) : null);
  }

  function notes() {
    const error = model.get("error");
    return [
      error ? h("div", { class: "cdf-error" }, error.message + (error.field ? ` (field: ${error.field})` : "")) : null,
      model.get("message") ? h("div", { class: "cdf-note" }, model.get("message")) : null,
    ];
  }

  const draw = () => root.replaceChildren(...[toolbar(), table(), watchStrip(), ...notes()].filter(Boolean));
  const keys = ["rows", "count", "filter", "filters", "error", "message", "watch_state"];
  for (const key of keys) model.on(`change:${key}`, draw);
  const onMessage = (msg) => { if (msg && msg.type === "csv") download(msg.filename, msg.text); };
  model.on("msg:custom", onMessage);
  draw();
  return () => {
    for (const key of keys) model.off(`change:${key}`, draw);
    model.off("msg:custom", onMessage);
  };
}

export default { render };
