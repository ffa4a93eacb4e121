// The graph viewer: a graph JSON file (`*.codefy.json`, or any JSON through Open with → Codefy
// graph) drawn left to right as an SVG (layout.ts), node type and params on hover and in the side
// panel on click. While a run of it is watched (Run, Queue on…), one /ws/execution subscription
// colours the nodes by status (nodeStatus.ts); nodes are recoloured in place, never redrawn.
// The drawing is fitted to the canvas on open and on resize until the user zooms or pans (wheel,
// + / − / Fit, drag; viewport.ts), and the running node is panned into view. Nodes a refusal names
// (Run, Queue on…) are marked with the reason; after a run from the cache its nodes read "from cache".

import { ABCWidgetFactory, DocumentRegistry, DocumentWidget } from '@jupyterlab/docregistry';
import { Toolbar, ToolbarButton } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { ApiError, CodefyApi } from './api';
import { svg } from './chart';
import { h } from './dom';
import { formatValue, isActive, Trans } from './format';
import { edgePath, layoutGraph, NODE_HEIGHT, NODE_WIDTH } from './layout';
import { LiveSocket } from './live';
import { renderError } from './messages';
import { applyEvents, coverByCache, initialStates, NodeStates, refusedNodes, stateCounts } from './nodeStatus';
import { interactiveBody } from './queueForm';
import type { EventsFrame, Graph, GraphNode, Run } from './types';
import { fitView, reveal, Size, transformOf, View, ZOOM_STEP, zoomAt } from './viewport';

export const FACTORY = 'Codefy graph';
export const FILE_TYPE = 'codefy-graph';

export interface ViewerActions {
  queueOn: (viewer: GraphViewer) => void;
  newSweep: (viewer: GraphViewer) => void;
  openRun: (id: string) => void;
}

/** The document's graph, or why it is not one. */
export function parseGraph(text: string): Graph | string {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return `not JSON: ${String(err)}`;
  }
  const graph = value as Graph;
  if (!graph || typeof graph !== 'object' || !Array.isArray(graph.nodes)) {
    return 'not a graph: no "nodes" list';
  }
  if (!graph.nodes.every(n => n && typeof n.id === 'string' && typeof n.type === 'string')) {
    return 'not a graph: every node needs an id and a type';
  }
  return graph;
}

function paramText(node: GraphNode): string {
  return Object.entries(node.params ?? {}).map(([k, v]) => `${k} = ${formatValue(v)}`).join('\n');
}

export class GraphViewer extends Widget {
  graph: Graph | null = null;
  private error = '';
  private runId: string | null = null;
  private run: Run | null = null;
  private states: NodeStates = new Map();
  private live: LiveSocket | null = null;
  private selected: string | null = null;
  private readonly canvas: HTMLElement;
  private readonly side: HTMLElement;
  private readonly status: HTMLElement;
  private readonly shapes = new Map<string, SVGGElement>();
  /** node id → why the server refused it (the last refusal of Run or Queue on…) */
  private refused = new Map<string, string>();
  private view: View = { scale: 1, x: 0, y: 0 };
  /** fit on resize until the user zooms or pans; Fit turns it back on */
  private autoFit = true;
  private content: Size = { width: 0, height: 0 };
  private viewport: SVGGElement | null = null;
  private running: string | null = null;
  private readonly resizes: ResizeObserver | null = null;

  constructor(readonly context: DocumentRegistry.Context, private readonly api: CodefyApi, private readonly trans: Trans,
    private readonly actions: ViewerActions) {
    super();
    this.addClass('cdf-panel');
    this.addClass('cdf-graph-viewer');
    this.status = h('div', { class: 'cdf-graph-status' });
    this.canvas = h('div', { class: 'cdf-graph-canvas' });
    this.side = h('div', { class: 'cdf-graph-side' });
    this.node.append(this.status, h('div', { class: 'cdf-graph-main' }, this.canvas, this.side));
    this.listenForViewChanges();
    if (typeof ResizeObserver !== 'undefined') {
      this.resizes = new ResizeObserver(() => (this.autoFit ? this.fit() : this.applyView()));
      this.resizes.observe(this.canvas);
    }
    void context.ready.then(() => {
      this.load();
      context.model.contentChanged.connect(() => this.load());
    });
  }

  /** The document's session: stable for the file, so Run reuses its cache. */
  get session(): string {
    return `lab:${this.context.path}`;
  }

  get name(): string {
    return this.context.path.split('/').pop() ?? this.context.path;
  }

  private load(): void {
    const parsed = parseGraph(this.context.model.toString());
    if (typeof parsed === 'string') {
      this.graph = null;
      this.error = parsed;
    } else {
      this.graph = parsed;
      this.error = '';
      this.refused.clear(); // the file changed: the user is fixing what was refused
      const ids = parsed.nodes.map(n => n.id);
      const before = this.states;
      this.states = initialStates(ids);
      if (this.runId) {
        for (const id of ids) {
          const kept = before.get(id);
          if (kept) {
            this.states.set(id, kept);
          }
        }
      }
    }
    this.draw();
  }

  /** Colour the nodes by a run of this graph, live until it ends. */
  watch(run: Run): void {
    this.live?.dispose();
    this.runId = run.id;
    this.run = run;
    this.refused.clear();
    this.states = initialStates(this.graph?.nodes.map(n => n.id) ?? []);
    this.recolour();
    this.live = new LiveSocket({
      url: () => this.api.socketUrl(),
      // From the start each time: the states are rebuilt from the whole log after a reconnect.
      subscription: () => ({ type: 'subscribe', run_id: run.id, cursor: 0 }),
      onOpen: () => {
        this.states = initialStates(this.graph?.nodes.map(n => n.id) ?? []);
      },
      onEvents: frame => this.onEvents(frame),
      onError: message => {
        this.error = message;
        this.drawStatus();
      }
    });
  }

  get watchedRun(): string | null {
    return this.runId;
  }

  private onEvents(frame: EventsFrame): void {
    if (frame.run_id !== this.runId) {
      return;
    }
    if (this.run) {
      this.run.status = frame.status;
    }
    applyEvents(this.states, frame.events);
    if (frame.status === 'succeeded') {
      coverByCache(this.states, this.graph?.edges ?? []);
    }
    this.recolour();
    if (!isActive(frame.status)) {
      this.live?.dispose();
      this.live = null;
    }
  }

  async runInteractive(): Promise<void> {
    if (!this.graph) {
      return;
    }
    try {
      this.watch(await this.api.submitRun(interactiveBody(this.graph, this.session, this.name)));
    } catch (err) {
      this.error = err instanceof ApiError ? renderError(err.body, this.trans, err.message) : String(err);
      if (err instanceof ApiError) {
        this.markRefused(err.body);
      }
      this.drawStatus();
    }
  }

  /** Mark the nodes a refusal's problems name, with the reason (on hover and in the side panel). */
  markRefused(body: unknown): void {
    this.refused = refusedNodes(body);
    this.recolour();
    this.drawSide();
  }

  /** Show the whole graph, and keep fitting it on resize. */
  fit(): void {
    this.autoFit = true;
    this.view = fitView(this.content, this.canvasSize());
    this.applyView();
  }

  /** Zoom by `factor` about a canvas point (its centre by default); stops fitting on resize. */
  zoom(factor: number, at?: { x: number; y: number }): void {
    const size = this.canvasSize();
    this.autoFit = false;
    this.view = zoomAt(this.view, factor, at?.x ?? size.width / 2, at?.y ?? size.height / 2);
    this.applyView();
  }

  private canvasSize(): Size {
    return { width: this.canvas.clientWidth, height: this.canvas.clientHeight };
  }

  private applyView(): void {
    this.viewport?.setAttribute('transform', transformOf(this.view));
    this.canvas.dataset.scale = this.view.scale.toFixed(4);
  }

  /** Wheel zooms about the cursor; a drag on the canvas pans (a click without moving still selects). */
  private listenForViewChanges(): void {
    this.canvas.addEventListener('wheel', (e: WheelEvent) => {
      e.preventDefault();
      const rect = this.canvas.getBoundingClientRect();
      this.zoom(e.deltaY < 0 ? ZOOM_STEP : 1 / ZOOM_STEP, { x: e.clientX - rect.left, y: e.clientY - rect.top });
    }, { passive: false });
    let drag: { x: number; y: number; view: View; moved: boolean } | null = null;
    this.canvas.addEventListener('pointerdown', (e: PointerEvent) => {
      if (e.button === 0 && !(e.target as Element).closest('.cdf-graph-zoom')) {
        drag = { x: e.clientX, y: e.clientY, view: this.view, moved: false };
      }
    });
    this.canvas.addEventListener('pointermove', (e: PointerEvent) => {
      if (!drag) {
        return;
      }
      const dx = e.clientX - drag.x;
      const dy = e.clientY - drag.y;
      if (drag.moved || Math.abs(dx) + Math.abs(dy) > 3) {
        drag.moved = true;
        this.autoFit = false;
        this.view = { ...drag.view, x: drag.view.x + dx, y: drag.view.y + dy };
        this.applyView();
      }
    });
    const end = (): void => {
      drag = null;
    };
    this.canvas.addEventListener('pointerup', end);
    this.canvas.addEventListener('pointerleave', end);
  }

  private zoomButtons(): HTMLElement {
    const t = this.trans;
    return h('div', { class: 'cdf-graph-zoom' },
      h('button', { class: 'cdf-zoom-in', title: t.__('Zoom in (or the mouse wheel)'), onclick: () => this.zoom(ZOOM_STEP) }, '+'),
      h('button', { class: 'cdf-zoom-out', title: t.__('Zoom out'), onclick: () => this.zoom(1 / ZOOM_STEP) }, '−'),
      h('button', { class: 'cdf-zoom-fit', title: t.__('Show the whole graph'), onclick: () => this.fit() }, t.__('Fit')));
  }

  /** Pan the running node into view when it changes (a no-op while it shows). */
  private keepRunningInView(): void {
    const running = Array.from(this.states).find(([, v]) => v.state === 'running')?.[0] ?? null;
    if (running === this.running) {
      return;
    }
    this.running = running;
    const g = running ? this.shapes.get(running) : undefined;
    const at = g?.getAttribute('transform')?.match(/translate\(([-\d.]+),([-\d.]+)\)/);
    if (at) {
      this.view = reveal(this.view, { x: Number(at[1]), y: Number(at[2]), width: NODE_WIDTH, height: NODE_HEIGHT },
        this.canvasSize());
      this.applyView();
    }
  }

  private drawStatus(): void {
    const t = this.trans;
    const bits: (HTMLElement | string)[] = [];
    if (this.error) {
      bits.push(h('span', { class: 'cdf-error' }, this.error));
    }
    if (this.runId) {
      const counts = stateCounts(this.states);
      bits.push(h('a', {
        class: 'cdf-run-link', href: '#', dataset: { runId: this.runId },
        onclick: (e: Event) => {
          e.preventDefault();
          this.actions.openRun(this.runId!);
        }
      }, t.__('Run %1', this.runId.slice(0, 12))));
      bits.push(h('span', { class: `cdf-status cdf-${this.run?.status ?? ''}`, dataset: { role: 'run-status' } },
        this.run?.status ?? ''));
      bits.push(h('span', { class: 'cdf-legend' }, (Object.keys(counts) as (keyof typeof counts)[])
        .filter(k => counts[k]).map(k => h('span', { class: `cdf-chip-state cdf-node-${k}` }, `${k} ${counts[k]}`))));
    } else if (this.graph) {
      bits.push(h('span', { class: 'cdf-note' },
        t.__('%1 nodes, %2 edges', this.graph.nodes.length, this.graph.edges?.length ?? 0)));
    }
    this.status.replaceChildren(...bits);
  }

  private recolour(): void {
    for (const [id, view] of this.states) {
      const g = this.shapes.get(id);
      if (!g) {
        continue;
      }
      const state = this.runId ? view.state : 'idle';
      g.setAttribute('data-state', state);
      const bar = g.querySelector('.cdf-node-progress');
      bar?.setAttribute('width', String(view.state === 'running' && view.progress !== null ? NODE_WIDTH * view.progress : 0));
      const reason = this.refused.get(id);
      g.toggleAttribute('data-refused', reason !== undefined);
      const note = g.querySelector('.cdf-node-note');
      if (note) {
        note.textContent = reason !== undefined ? this.trans.__('refused') : state === 'cached' ? this.trans.__('from cache') : '';
      }
      const title = g.querySelector('title');
      if (title) {
        title.textContent = [g.dataset.title, reason].filter(Boolean).join('\n');
      }
    }
    this.keepRunningInView();
    this.drawStatus();
  }

  private drawSide(): void {
    const t = this.trans;
    const node = this.graph?.nodes.find(n => n.id === this.selected);
    if (!node) {
      this.side.replaceChildren(h('div', { class: 'cdf-note' }, t.__('Click a node for its params.')));
      return;
    }
    const view = this.states.get(node.id);
    this.side.replaceChildren(
      h('div', { class: 'cdf-subtitle' }, node.label || node.id),
      h('dl', { class: 'cdf-facts' },
        h('dt', {}, t.__('Id')), h('dd', { class: 'cdf-mono' }, node.id),
        h('dt', {}, t.__('Type')), h('dd', {}, node.type),
        this.runId && view ? [h('dt', {}, t.__('Status')), h('dd', {}, view.state)] : null,
        view?.error ? [h('dt', {}, t.__('Error')), h('dd', { class: 'cdf-error' }, view.error)] : null,
        this.refused.has(node.id) ? [h('dt', {}, t.__('Refused')), h('dd', { class: 'cdf-error' }, this.refused.get(node.id)!)] : null,
        Object.entries(node.params ?? {}).map(([k, v]) => [h('dt', {}, k), h('dd', { class: 'cdf-mono' }, formatValue(v))])));
  }

  private draw(): void {
    this.shapes.clear();
    const graph = this.graph;
    if (!graph) {
      this.canvas.replaceChildren();
      this.viewport = null;
      this.drawStatus();
      this.drawSide();
      return;
    }
    // Timed for benchmarks/lab_graph.py (read back from the canvas's data-layout-ms, -draw-ms, -paint-ms).
    const started = performance.now();
    const edges = (graph.edges ?? []).map(e => ({ source: e.source, target: e.target }));
    const layout = layoutGraph(graph.nodes, edges);
    const laidOut = performance.now();
    const root = svg('svg', { class: 'cdf-graph', width: '100%', height: '100%' });
    const viewport = svg('g', { class: 'cdf-viewport' }) as SVGGElement;
    const edgeLayer = svg('g', { class: 'cdf-edges' });
    for (const e of graph.edges ?? []) {
      const a = layout.nodes.get(e.source);
      const b = layout.nodes.get(e.target);
      if (a && b) {
        const path = svg('path', { d: edgePath(a, b), class: 'cdf-edge' });
        path.append(svg('title', {}, `${e.source}.${e.source_port} → ${e.target}.${e.target_port}`));
        edgeLayer.append(path);
      }
    }
    const nodeLayer = svg('g', { class: 'cdf-nodes' });
    const byId = new Map(graph.nodes.map(n => [n.id, n]));
    for (const placed of layout.nodes.values()) {
      const node = byId.get(placed.id)!;
      const g = svg('g', { class: 'cdf-node', transform: `translate(${placed.x},${placed.y})`, 'data-node-id': node.id,
        'data-state': 'idle' }) as SVGGElement;
      g.dataset.title = [`${node.label || node.id} (${node.type})`, paramText(node)].filter(Boolean).join('\n');
      g.append(
        svg('title', {}, g.dataset.title),
        svg('rect', { class: 'cdf-node-box', width: NODE_WIDTH, height: NODE_HEIGHT, rx: 6 }),
        svg('rect', { class: 'cdf-node-progress', x: 0, y: NODE_HEIGHT - 4, width: 0, height: 4 }),
        svg('text', { class: 'cdf-node-label', x: 8, y: 18 }, (node.label || node.id).slice(0, 22)),
        svg('text', { class: 'cdf-node-type', x: 8, y: 34 }, node.type.slice(0, 26)),
        // above the box, in the gap between rows: "from cache", "refused"
        svg('text', { class: 'cdf-node-note', x: NODE_WIDTH, y: -4, 'text-anchor': 'end' }, ''));
      g.addEventListener('click', () => {
        this.selected = node.id;
        this.drawSide();
      });
      this.shapes.set(node.id, g);
      nodeLayer.append(g);
    }
    viewport.append(edgeLayer, nodeLayer);
    root.append(viewport);
    this.viewport = viewport;
    this.content = { width: layout.width, height: layout.height };
    this.canvas.replaceChildren(root, this.zoomButtons());
    if (this.autoFit) {
      this.fit();
    } else {
      this.applyView();
    }
    this.running = null;
    this.recolour();
    this.drawSide();
    this.canvas.dataset.layoutMs = (laidOut - started).toFixed(2);
    this.canvas.dataset.drawMs = (performance.now() - started).toFixed(2);
    // ...and to the frame after: the browser's style, layout and paint of the new SVG included.
    delete this.canvas.dataset.paintMs;
    requestAnimationFrame(() => setTimeout(() => {
      this.canvas.dataset.paintMs = (performance.now() - started).toFixed(2);
    }, 0));
  }

  dispose(): void {
    this.live?.dispose();
    this.resizes?.disconnect();
    super.dispose();
  }
}

export class GraphViewerFactory extends ABCWidgetFactory<DocumentWidget<GraphViewer>, DocumentRegistry.IModel> {
  constructor(options: DocumentRegistry.IWidgetFactoryOptions<DocumentWidget<GraphViewer>>,
    private readonly api: CodefyApi, private readonly trans: Trans, private readonly actions: ViewerActions) {
    super(options);
  }

  protected createNewWidget(context: DocumentRegistry.Context): DocumentWidget<GraphViewer> {
    const t = this.trans;
    const content = new GraphViewer(context, this.api, t, this.actions);
    const widget = new DocumentWidget({ content, context });
    widget.addClass('cdf-graph-document');
    const toolbar: Toolbar = widget.toolbar;
    toolbar.addItem('codefy-run', new ToolbarButton({
      label: t.__('Run'), tooltip: t.__('Run now on this server (interactive lane; this document\'s cache is reused)'),
      className: 'cdf-tb-run', onClick: () => void content.runInteractive()
    }));
    toolbar.addItem('codefy-queue', new ToolbarButton({
      label: t.__('Queue on…'), tooltip: t.__('Queue this graph on this server, a worker or any available'),
      className: 'cdf-tb-queue', onClick: () => this.actions.queueOn(content)
    }));
    toolbar.addItem('codefy-sweep', new ToolbarButton({
      label: t.__('New sweep'), tooltip: t.__('Sweep parameters of this graph'),
      className: 'cdf-tb-sweep', onClick: () => this.actions.newSweep(content)
    }));
    return widget;
  }
}
