// An in-page model implementing anywidget's model interface (get/set/on/off/save_changes/send,
// and widget_manager.get_model for a widget that draws another widget's model), for the test
// pages that render the widgets' ES modules. `emit` is what the frontend itself triggers (a
// `comm:close` when the kernel side's comm closes).
export class Model {
  constructor(state, models = {}) {
    this.state = { ...state }; this.handlers = {}; this.sent = []; this.saved = 0;
    this.widget_manager = {
      get_model: async (id) => {
        if (!(id in models)) throw new Error(`no model ${id}`);
        return models[id];
      },
    };
  }
  get(key) { return this.state[key]; }
  set(key, value) { this.state[key] = value; this.emit(`change:${key}`); }
  on(event, fn) { (this.handlers[event] ||= []).push(fn); }
  off(event, fn) { this.handlers[event] = (this.handlers[event] || []).filter((f) => f !== fn); }
  emit(event, ...args) { for (const fn of this.handlers[event] || []) fn(...args); }
  save_changes() { this.saved += 1; }
  send(content) { this.sent.push(content); }
}
