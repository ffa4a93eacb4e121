// Shared DOM helpers for the widgets' ES modules. Not a module of its own: anywidget loads each
// widget's `_esm` as one module text (relative imports do not resolve), so _base.esm() ships this
// text in front of every widget's module. Declare here only what every widget may use; a widget
// must not declare these names again.

// h("tr", { class, style, dataset, onclick, title… }, …children): an element. Props that are
// undefined, null or false are left off; true sets an empty attribute; on<event> adds a listener.
function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "style") node.style.cssText = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// download("runs.csv", text): the browser saves `text` (a CSV the Python side sent) as a file.
function download(filename, text) {
  const url = URL.createObjectURL(new Blob([text], { type: "text/csv" }));
  const a = h("a", { href: url, download: filename });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
