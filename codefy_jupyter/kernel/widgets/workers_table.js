// WorkersTable: the worker agents the server lists (name, state, devices, slots, running runs),
// or "no workers connected". Plain ESM for anywidget; Refresh is a message to the Python side.
// h() comes from dom.js, which _base.esm() ships in front of this module.

// The pill's tone comes with each row (workers_rows.py STATE_TONES, one table for every state).
function pills(row) {
  return [h("span", { class: `cdf-status cdf-tone-${row.tone || "unknown"}`, dataset: { tone: row.tone || "unknown" } }, row.state),
    row.degraded ? h("span", { class: "cdf-status cdf-tone-warn cdf-degraded", dataset: { tone: "warn" },
      title: (row.missing_types || []).length ? `lacks node types: ${row.missing_types.join(", ")}` : "node catalog differs" },
    "degraded") : null];
}

function render({ model, el }) {
  el.classList.add("cdf", "cdf-workers");
  const root = h("div");
  el.append(root);

  function table() {
    const rows = model.get("rows") || [];
    if (!rows.length) return h("div", { class: "cdf-empty" }, model.get("message") || "no workers connected");
    return h("table", {},
      h("thead", {}, h("tr", {}, ["Worker", "State", "Devices", "Slots", "Running"].map((c) => h("th", {}, c)))),
      h("tbody", {}, rows.map((row, i) => h("tr", { class: `cdf-row ${i % 2 === 0 ? "cdf-odd" : ""}`, dataset: { worker: row.name } },
        h("td", {}, row.name, row.same_host ? h("span", { class: "cdf-sub" }, "this machine") : null),
        h("td", { class: "cdf-state" }, pills(row)),
        h("td", { class: "cdf-mono" }, row.devices),
        h("td", {}, row.slots),
        h("td", { title: (row.running_ids || []).join("\n") }, String(row.running))))));
  }

  function draw() {
    const local = model.get("local");
    const error = model.get("error");
    root.replaceChildren(...[
      h("div", { class: "cdf-toolbar" }, h("b", {}, "Workers"),
        local ? h("span", { class: "cdf-note" }, `This server: ${local.devices} (slots ${local.slots})`) : null,
        h("span", { class: "cdf-count" }, ""),
        h("button", { class: "cdf-refresh", onclick: () => model.send({ action: "refresh" }) }, "Refresh")),
      table(),
      error ? h("div", { class: "cdf-error" }, error.message) : null,
    ].filter(Boolean));
  }

  const keys = ["rows", "local", "message", "error"];
  for (const key of keys) model.on(`change:${key}`, draw);
  draw();
  return () => { for (const key of keys) model.off(`change:${key}`, draw); };
}

export default { render };
