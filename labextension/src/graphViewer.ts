// The graph viewer: a graph JSON file (`*.codefy.json`, or any JSON through Open with → Codefy
// graph) drawn left to right as an SVG (layout.ts), node type and params on hover and in the side
// panel on click. While a run of it is watched (Run, Queue on…), one /ws/execution subscription
// colours the nodes by status (nodeStatus.ts); nodes are recoloured in place, never redrawn.

import { ABCWidgetFactory, DocumentRegistry, DocumentWidget } from '@jupyterlab/docregistry';
import { Toolbar, ToolbarButton } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { ApiError, CodefyApi } from './api';
import { svg } from './chart';
import { h } from './dom';
import { isActive, Trans } from './format';
import { edgePath, layoutGraph, NODE_HEIGHT, NODE_WIDTH } from './layout';
import { LiveSocket } from './live';
import { renderError } from './messages';
import { applyEvents, initialStates, NodeStates, stateCounts } from './nodeStatus';
import { interactiveBody } from './queueForm';
import type { EventsFrame, Graph, GraphNode, Run } from './types';

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
  return Object.entries(node.params ?? {}).map(([k, v]) => `${k} = ${JSON.stringify(v)}`).join('\n');
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

  constructor(readonly context: DocumentRegistry.Context, private readonly api: CodefyApi, private readonly trans: Trans,
    private readonly actions: ViewerActions) {
    super();
    this.addClass('cdf-panel');
    this.addClass('cdf-graph-viewer');
    this.status = h('div', { class: 'cdf-graph-status' });
    this.canvas = h('div', { class: 'cdf-graph-canvas' });
    this.side = h('div', { class: 'cdf-graph-side' });
    this.node.append(this.status, h('div', { class: 'cdf-graph-main' }, this.canvas, this.side));
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
      this.drawStatus();
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
      g.setAttribute('data-state', this.runId ? view.state : 'idle');
      const bar = g.querySelector('.cdf-node-progress');
      bar?.setAttribute('width', String(view.state === 'running' && view.progress !== null ? NODE_WIDTH * view.progress : 0));
    }
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
        Object.entries(node.params ?? {}).map(([k, v]) => [h('dt', {}, k), h('dd', { class: 'cdf-mono' }, JSON.stringify(v))])));
  }

  private draw(): void {
    this.shapes.clear();
    const graph = this.graph;
    if (!graph) {
      this.canvas.replaceChildren();
      this.drawStatus();
      this.drawSide();
      return;
    }
    // Timed for benchmarks/lab_graph.py (read back from the canvas's data-layout-ms, -draw-ms, -paint-ms).
    const started = performance.now();
    const edges = (graph.edges ?? []).map(e => ({ source: e.source, target: e.target }));
    const layout = layoutGraph(graph.nodes, edges);
    const laidOut = performance.now();
    const pad = 12;
    const root = svg('svg', { class: 'cdf-graph', width: layout.width + 2 * pad, height: layout.height + 2 * pad });
    const edgeLayer = svg('g', { class: 'cdf-edges', transform: `translate(${pad},${pad})` });
    for (const e of graph.edges ?? []) {
      const a = layout.nodes.get(e.source);
      const b = layout.nodes.get(e.target);
      if (a && b) {
        const path = svg('path', { d: edgePath(a, b), class: 'cdf-edge' });
        path.append(svg('title', {}, `${e.source}.${e.source_port} → ${e.target}.${e.target_port}`));
        edgeLayer.append(path);
      }
    }
    const nodeLayer = svg('g', { class: 'cdf-nodes', transform: `translate(${pad},${pad})` });
    const byId = new Map(graph.nodes.map(n => [n.id, n]));
    for (const placed of layout.nodes.values()) {
      const node = byId.get(placed.id)!;
      const g = svg('g', { class: 'cdf-node', transform: `translate(${placed.x},${placed.y})`, 'data-node-id': node.id,
        'data-state': 'idle' }) as SVGGElement;
      g.append(
        svg('title', {}, [`${node.label || node.id} (${node.type})`, paramText(node)].filter(Boolean).join('\n')),
        svg('rect', { class: 'cdf-node-box', width: NODE_WIDTH, height: NODE_HEIGHT, rx: 6 }),
        svg('rect', { class: 'cdf-node-progress', x: 0, y: NODE_HEIGHT - 4, width: 0, height: 4 }),
        svg('text', { class: 'cdf-node-label', x: 8, y: 18 }, (node.label || node.id).slice(0, 22)),
        svg('text', { class: 'cdf-node-type', x: 8, y: 34 }, node.type.slice(0, 26)));
      g.addEventListener('click', () => {
        this.selected = node.id;
        this.drawSide();
      });
      this.shapes.set(node.id, g);
      nodeLayer.append(g);
    }
    root.append(edgeLayer, nodeLayer);
    this.canvas.replaceChildren(root);
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
