// RunView's ES module. The drawing lives in run_view_draw.js, which _base.esm() ships in front of
// this text (with dom.js): the Queue on… dialog's Watch draws the same live view with it.

const render = renderRunView;

export default { render };
