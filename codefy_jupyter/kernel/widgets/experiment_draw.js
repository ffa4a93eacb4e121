// Drawing shared by SweepView and StudyView, shipped by _base.esm() after dom.js and
// run_view_draw.js (whose chart() and renderRunView() it uses) and before the view's own module.
// Every action is a message to Python: {action: "sort", key} | {action: "open", run_id} | {action}.

// A table whose sortable headers (keys in `sorts`) send {action: "sort", key}; the current sort
// key carries an arrow. columns: [[key, label], ...]; cell(row, key) draws one cell.
function expTable(model, columns, sorts, cell, rowProps) {
  const rows = model.get("rows") || [];
  if (!rows.length) return h("div", { class: "cdf-empty" }, "no variants yet");
  const current = model.get("sort_key");
  const arrow = model.get("descending") ? " ▼" : " ▲";
  const head = columns.map(([key, label]) => sorts.includes(key)
    ? h("th", { class: "cdf-sortable", dataset: { sort: key }, title: "sort (empty values stay last)",
      onclick: () => model.send({ action: "sort", key }) }, label + (key === current ? arrow : ""))
    : h("th", {}, label));
  const body = rows.map((row, i) => h("tr", { class: `cdf-row ${i % 2 === 0 ? "cdf-odd" : ""}`, ...rowProps(row) },
    columns.map(([key]) => h("td", { class: `cdf-col-${key}` }, cell(row, key)))));
  return h("table", { class: "cdf-exp-table" }, h("thead", {}, h("tr", {}, head)), h("tbody", {}, body));
}

// One chart line per key of `series` ({label: [[x, y], ...]}), in chart()'s format.
function expChart(series) {
  const metrics = {};
  for (const [label, points] of Object.entries(series || {})) if (points && points.length) metrics[label] = { v: points };
  return chart(metrics);
}

function expNotes(model) {
  const error = model.get("error");
  return [
    error ? h("div", { class: "cdf-error" }, error.message + (error.field ? ` (field: ${error.field})` : "")) : null,
    model.get("follow_error") ? h("div", { class: "cdf-error" }, `stopped following: ${model.get("follow_error")}`) : null,
    model.get("message") ? h("div", { class: "cdf-note" }, model.get("message")) : null,
  ];
}

// The opened run's RunView model (synced as `watched`), drawn in full inside `area`.
function expWatched(model, area) {
  let shown = { ref: null, cleanup: null };
  async function show() {
    const ref = model.get("watched");
    if (ref === shown.ref) return;
    if (shown.cleanup) shown.cleanup();
    shown = { ref, cleanup: null };
    area.replaceChildren();
    if (!ref) return;
    try {
      const child = await model.widget_manager.get_model(String(ref).replace(/^IPY_MODEL_/, ""));
      if (shown.ref !== ref) return;
      const el = h("div", { class: "cdf-watched" });
      area.replaceChildren(el);
      const cleanup = renderRunView({ model: child, el });
      shown.cleanup = () => { cleanup(); el.remove(); };
    } catch (err) {
      area.replaceChildren(h("div", { class: "cdf-note" }, `run view unavailable here (${err && err.message || err})`));
    }
  }
  model.on("change:watched", show);
  show();
  return () => { model.off("change:watched", show); if (shown.cleanup) shown.cleanup(); };
}

// Mount a view: draw() builds the top part; redraw on `keys`; CSV downloads; the opened run below.
function expMount(model, el, cls, keys, draw) {
  el.classList.add("cdf", cls);
  const root = h("div");
  const area = h("div", { class: "cdf-watch-area" });
  el.append(root, area);
  const redraw = () => root.replaceChildren(...draw().flat().filter(Boolean));
  for (const key of keys) model.on(`change:${key}`, redraw);
  const onMessage = (msg) => { if (msg && msg.type === "csv") download(msg.filename, msg.text); };
  model.on("msg:custom", onMessage);
  const unwatch = expWatched(model, area);
  redraw();
  return () => {
    for (const key of keys) model.off(`change:${key}`, redraw);
    model.off("msg:custom", onMessage);
    unwatch();
  };
}
