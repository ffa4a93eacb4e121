// SweepView: state, objective, counts, the variants sortable by Rank / Status / Objective, each
// child's objective curve, Stop sweep, Download CSV, Open run. Plain ESM for anywidget; the helpers
// come from dom.js, run_view_draw.js and experiment_draw.js, shipped in front of this text.

const SWEEP_COLUMNS = [["rank", "Rank"], ["index", "#"], ["params", "Params"], ["objective", "Objective"],
  ["status", "Status"], ["worker", "Worker / devices"], ["final", "Final metrics"], ["open", ""]];
const SWEEP_SORTS = ["rank", "status", "objective", "index"];

function render({ model, el }) {
  const send = (msg) => model.send(msg);
  function cell(row, key) {
    if (key === "rank") return row.rank_text;
    if (key === "index") return `#${row.number}`;
    if (key === "params") return h("span", { class: "cdf-mono" }, row.params.join(" · "));
    if (key === "objective") return row.objective_text;
    if (key === "status") return h("span", { class: `cdf-status cdf-${row.status}` }, row.status);
    if (key === "worker") return [row.worker || "this server", row.devices ? h("span", { class: "cdf-sub" }, row.devices) : null];
    if (key === "final") return h("span", { class: "cdf-mono" }, row.final_metrics);
    if (key === "open") return row.can_open ? h("button", { dataset: { action: "open" }, onclick: () => send({ action: "open", run_id: row.run_id }) }, "Open run") : null;
    return "";
  }
  function draw() {
    const state = model.get("state");
    const settled = state === "finished" || state === "failed";
    return [
      h("div", { class: "cdf-head" },
        h("span", { class: "cdf-title" }, `Sweep ${model.get("name") || model.get("sweep_id").slice(0, 12)}`),
        h("span", { class: `cdf-status cdf-${state}` }, state),
        h("span", {}, model.get("objective")),
        h("span", { class: "cdf-count" }, model.get("counts_text")),
        h("button", { class: "cdf-danger cdf-stop", disabled: settled || state === "cancelling", onclick: () => send({ action: "stop" }) }, "Stop sweep"),
        h("button", { class: "cdf-csv", onclick: () => send({ action: "csv" }) }, "Download CSV")),
      model.get("warning") ? h("div", { class: "cdf-note cdf-warning" }, model.get("warning")) : null,
      expTable(model, SWEEP_COLUMNS, SWEEP_SORTS, cell, (row) => ({ dataset: { variant: row.number, status: row.status } })),
      expChart(model.get("curves")),
      ...expNotes(model),
    ];
  }
  return expMount(model, el, "cdf-sweep-view", ["rows", "state", "counts_text", "objective", "warning", "curves",
    "sort_key", "descending", "error", "message", "follow_error", "name"], draw);
}

export default { render };
