// QueueDialog ("Queue on…"): target, device or device set, seed, name, and Submit. Plain ESM for
// anywidget. The form is built once (typing is never interrupted by a redraw); the fields are
// saved to the model and Submit is a message the Python side answers by submitting through the
// REST API, then showing the new run's id; Watch shows the run's full live view: the Python side
// syncs the watched RunView as `watched` (a model reference), and the dialog draws that model with
// renderRunView, the RunView's own drawing.
// h() comes from dom.js and renderRunView from run_view_draw.js, which _base.esm() ships in front
// of this module.

let uid = 0;

function render({ model, el }) {
  el.classList.add("cdf", "cdf-queue-dialog");
  const listId = `cdf-devices-${++uid}`;
  const target = h("select", { name: "target" });
  const device = h("input", { name: "device", list: listId, autocomplete: "off" });
  const devices = h("input", { name: "devices", placeholder: "e.g. cuda:0,cuda:1", autocomplete: "off" });
  const seed = h("input", { name: "seed", inputmode: "numeric", autocomplete: "off" });
  const noSeed = h("input", { name: "no_seed", type: "checkbox" });
  const name = h("input", { name: "name", autocomplete: "off" });
  const datalist = h("datalist", { id: listId });
  const submit = h("button", { class: "cdf-submit", type: "button" }, "Submit");
  const fields = { target, device, devices, seed, no_seed: noSeed, name };
  const title = h("div", { class: "cdf-head" });
  const result = h("div", { class: "cdf-result-area" });
  // Its own element: the result area is redrawn on every change, the live view draws itself.
  const watchArea = h("div", { class: "cdf-watch-area" });

  const label = (text, input, extra) => [h("label", {}, text), h("span", {}, input, extra || null)];
  el.append(h("div", {}, title,
    h("div", { class: "cdf-form" },
      label("Target", target), label("Device", device), label("Devices", devices),
      label("Seed", seed, h("label", { class: "cdf-note" }, " ", noSeed, " No seed")), label("Name", name),
      h("span", {}), h("span", {}, submit)),
    datalist, result, watchArea));

  const read = () => ({ target: target.value, device: device.value, devices: devices.value, seed: seed.value,
    no_seed: noSeed.checked, name: name.value });

  function save() {
    for (const [key, value] of Object.entries(read())) model.set(key, value);
    model.save_changes();
  }
  for (const input of Object.values(fields)) input.addEventListener("change", save);
  submit.addEventListener("click", () => {
    save();
    model.send({ action: "submit", form: read() });
  });

  function fill() {
    // Options and placeholders follow the model; values only where the user is not typing.
    const current = model.get("target");
    target.replaceChildren(...(model.get("targets") || []).map(([value, text]) =>
      h("option", { value, selected: value === current }, text)));
    datalist.replaceChildren(...(model.get("device_choices") || []).map((d) => h("option", { value: d })));
    device.placeholder = model.get("graph_device") || "graph's device, else cpu";
    const gs = model.get("graph_seed");
    seed.placeholder = gs === null || gs === undefined ? "unseeded" : `graph's seed: ${gs}`;
    for (const key of ["device", "devices", "seed", "name"]) {
      if (document.activeElement !== fields[key]) fields[key].value = model.get(key) || "";
    }
    noSeed.checked = !!model.get("no_seed");
    title.replaceChildren(h("span", { class: "cdf-title" }, "Queue on…"),
      h("span", { class: "cdf-note" }, `${model.get("graph_name")} · ${model.get("graph_nodes")} nodes`));
  }

  // The watched RunView's model, drawn in watchArea: {ref, cleanup} of what is drawn now.
  let shown = { ref: null, cleanup: null, failed: "" };
  async function showWatched() {
    const ref = model.get("watched");
    if (ref === shown.ref) return;
    if (shown.cleanup) shown.cleanup();
    shown = { ref, cleanup: null, failed: "" };
    watchArea.replaceChildren();
    if (!ref) return outcome();
    const manager = model.widget_manager;
    try {
      if (!manager || !manager.get_model) throw new Error("this frontend gives widgets no widget manager");
      const child = await manager.get_model(String(ref).replace(/^IPY_MODEL_/, ""));
      if (shown.ref !== ref) return;  // replaced while we waited
      const el = h("div", { class: "cdf-watched" });
      watchArea.replaceChildren(el);
      const cleanup = renderRunView({ model: child, el });
      shown.cleanup = () => { cleanup(); el.remove(); };
    } catch (err) {
      // Without the model the digest strip (watch_state) still follows the run.
      if (shown.ref === ref) shown.failed = `live view unavailable here (${err && err.message || err}); showing a summary`;
    }
    outcome();
  }

  function outcome() {
    const error = model.get("error");
    for (const [key, input] of Object.entries(fields)) {
      const field = error && error.field ? error.field.replace(/^options\.(target\.)?/, "") : "";
      input.classList.toggle("cdf-invalid", field === key || (key === "target" && field === "worker"));
    }
    submit.disabled = !!model.get("busy");
    const run = model.get("run");
    const w = model.get("watch_state");
    result.replaceChildren(...[
      error ? h("div", { class: "cdf-error" }, error.message + (error.field ? ` (field: ${error.field})` : "")) : null,
      run ? h("div", { class: "cdf-strip cdf-submitted" }, "Submitted run ",
        h("b", { class: "cdf-mono cdf-run-id" }, run.id),
        h("span", { class: `cdf-status cdf-${run.status}` }, run.status),
        run.queue_key ? h("span", { class: "cdf-note" }, `queue ${run.queue_key}`) : null,
        h("button", { class: "cdf-watch", onclick: () => model.send({ action: "watch" }) }, "Watch")) : null,
      shown.failed ? h("div", { class: "cdf-note" }, shown.failed) : null,
      w && w.run_id && !shown.cleanup ? h("div", { class: "cdf-strip cdf-watch" },
        h("span", { class: `cdf-status cdf-${w.status}` }, w.status),
        w.status === "queued" && w.queue_position ? `Queue #${w.queue_position}` : null,
        w.queue_reason ? h("i", {}, w.queue_reason) : null,
        h("span", {}, `nodes ${w.nodes_done}/${w.nodes_seen}`),
        w.message ? h("span", { class: "cdf-error" }, w.message) : null) : null,
    ].filter(Boolean));
  }

  const formKeys = ["targets", "device_choices", "target", "device", "devices", "seed", "no_seed", "name",
    "graph_name", "graph_nodes", "graph_seed", "graph_device"];
  const resultKeys = ["error", "busy", "run", "watch_state"];
  for (const key of formKeys) model.on(`change:${key}`, fill);
  for (const key of resultKeys) model.on(`change:${key}`, outcome);
  model.on("change:watched", showWatched);
  fill();
  outcome();
  showWatched();
  return () => {
    for (const key of formKeys) model.off(`change:${key}`, fill);
    for (const key of resultKeys) model.off(`change:${key}`, outcome);
    model.off("change:watched", showWatched);
    if (shown.cleanup) shown.cleanup();
  };
}

export default { render };
