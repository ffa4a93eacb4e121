// StudyView: status, revision, budget use or halt, the variants sortable by their headers (label,
// mean ± std, n, values per repetition, rank with ties, why not ranked, difference against the
// best with its 95% interval and p, average rank), the objective per repetition as a chart,
// Cancel / Resume, Download CSV. Plain ESM for anywidget; helpers from dom.js, run_view_draw.js
// and experiment_draw.js, shipped in front of this text.

const STUDY_COLUMNS = [["rank", "Rank"], ["label", "Variant"], ["mean", "Mean ± std"], ["n", "n"],
  ["values", "Per repetition"], ["eligible", "Eligible"], ["diff", "vs best [95% CI]"], ["p_value", "p"],
  ["average_rank", "Avg rank"]];
const STUDY_SORTS = ["rank", "label", "mean", "average_rank", "diff", "p_value"];
const STUDY_CANCELLABLE = ["queued", "running", "interrupted", "halted", "failed"];

function render({ model, el }) {
  const send = (msg) => model.send(msg);
  function cell(row, key) {
    if (key === "rank") return h("span", { title: row.tied_with.length ? `tied with ${row.tied_with.join(", ")}` : "" }, row.rank_text);
    if (key === "label") return [row.label, row.best ? h("span", { class: "cdf-sub" }, "best") : null];
    if (key === "mean") return row.mean_text;
    if (key === "n") return String(row.n);
    if (key === "values") return h("span", { class: "cdf-mono" }, row.values_text.join(", "));
    if (key === "eligible") return row.eligible ? "yes" : h("span", { class: "cdf-warn" }, `no: ${row.reason}`);
    if (key === "diff") return row.diff_text;
    if (key === "p_value") return row.p_text;
    if (key === "average_rank") return row.average_rank_text;
    return "";
  }
  function draw() {
    const status = model.get("status");
    const p = model.get("progress") || {};
    const halt = model.get("halt");
    const rep = p.repetition === null || p.repetition === undefined ? "all repetitions" : `repetition ${p.repetition + 1}/${p.repetitions}`;
    return [
      h("div", { class: "cdf-head" },
        h("span", { class: "cdf-title" }, `Study ${model.get("name") || model.get("study_id").slice(0, 12)}`),
        h("span", { class: `cdf-status cdf-${status}` }, status),
        h("span", { class: "cdf-revision" }, `rev ${model.get("revision")}`),
        h("span", {}, model.get("objective")),
        h("span", { class: "cdf-count cdf-progress-text" }, `${p.done || 0}/${p.total || 0} done · ${rep}`),
        h("button", { class: "cdf-danger cdf-cancel", disabled: !STUDY_CANCELLABLE.includes(status),
          onclick: () => send({ action: "cancel" }) }, "Cancel"),
        h("button", { class: "cdf-resume", disabled: !["cancelled", "interrupted", "failed", "halted"].includes(status), onclick: () => send({ action: "resume" }) }, "Resume"),
        h("button", { class: "cdf-csv", onclick: () => send({ action: "csv" }) }, "Download CSV")),
      h("div", { class: "cdf-note cdf-budget" }, `budget: ${model.get("budget_text") || "-"}`,
        halt ? h("span", { class: "cdf-warn" }, ` · halted: ${halt.budget} used ${halt.used} of ${halt.limit}`) : null),
      expTable(model, STUDY_COLUMNS, STUDY_SORTS, cell, (row) => ({ dataset: { label: row.label, rank: row.rank_text } })),
      expChart(model.get("series")),
      ...expNotes(model),
    ];
  }
  return expMount(model, el, "cdf-study-view", ["rows", "status", "revision", "progress", "budget_text", "halt",
    "series", "sort_key", "descending", "error", "message", "follow_error", "name", "objective"], draw);
}

export default { render };
