// The graph viewer's layout, pure (no DOM): a layered drawing left to right. Layers by longest
// path from the sources, then a few barycentric sweeps order each layer by its neighbours'
// positions, which removes most crossings of an ML graph at O(sweeps * (V + E + V log V)).
// A cycle (the server refuses those, but a file may hold one) does not stop it: the nodes left
// after the topological pass go one layer past the last.

export interface LayoutNode {
  id: string;
}

export interface LayoutEdge {
  source: string;
  target: string;
}

export interface Placed {
  id: string;
  layer: number;
  order: number;
  x: number;
  y: number;
}

export interface Layout {
  nodes: Map<string, Placed>;
  layers: string[][];
  width: number;
  height: number;
}

export interface LayoutOptions {
  nodeWidth?: number;
  nodeHeight?: number;
  gapX?: number;
  gapY?: number;
  sweeps?: number;
}

export const NODE_WIDTH = 168;
export const NODE_HEIGHT = 44;

/** Longest-path layer of each node (sources 0); nodes on a cycle after every other. */
export function assignLayers(ids: string[], edges: LayoutEdge[]): Map<string, number> {
  const known = new Set(ids);
  const succ = new Map<string, string[]>(ids.map(id => [id, []]));
  const indeg = new Map<string, number>(ids.map(id => [id, 0]));
  for (const e of edges) {
    if (known.has(e.source) && known.has(e.target) && e.source !== e.target) {
      succ.get(e.source)!.push(e.target);
      indeg.set(e.target, indeg.get(e.target)! + 1);
    }
  }
  const layer = new Map<string, number>(ids.map(id => [id, 0]));
  const ready = ids.filter(id => indeg.get(id) === 0);
  const seen = new Set<string>();
  for (let i = 0; i < ready.length; i++) {
    const id = ready[i];
    seen.add(id);
    for (const next of succ.get(id)!) {
      layer.set(next, Math.max(layer.get(next)!, layer.get(id)! + 1));
      const left = indeg.get(next)! - 1;
      indeg.set(next, left);
      if (left === 0) {
        ready.push(next);
      }
    }
  }
  if (seen.size < ids.length) {
    const past = Math.max(0, ...Array.from(seen, id => layer.get(id)!)) + 1;
    for (const id of ids) {
      if (!seen.has(id)) {
        layer.set(id, Math.max(layer.get(id)!, past));
      }
    }
  }
  return layer;
}

function barycenter(id: string, neighbours: Map<string, string[]>, position: Map<string, number>): number | null {
  const around = neighbours.get(id)!;
  if (!around.length) {
    return null;
  }
  let sum = 0;
  for (const n of around) {
    sum += position.get(n)!;
  }
  return sum / around.length;
}

/** Reorder one layer by its neighbours' mean position; a node without neighbours keeps its place. */
function orderLayer(layer: string[], neighbours: Map<string, string[]>, position: Map<string, number>): string[] {
  const keyed = layer.map((id, i) => ({ id, i, key: barycenter(id, neighbours, position) ?? position.get(id)! }));
  keyed.sort((a, b) => a.key - b.key || a.i - b.i);
  return keyed.map(k => k.id);
}

export function layoutGraph(nodes: LayoutNode[], edges: LayoutEdge[], options: LayoutOptions = {}): Layout {
  const width = options.nodeWidth ?? NODE_WIDTH;
  const height = options.nodeHeight ?? NODE_HEIGHT;
  const gapX = options.gapX ?? 64;
  const gapY = options.gapY ?? 18;
  const sweeps = options.sweeps ?? 4;
  const ids = Array.from(new Set(nodes.map(n => n.id)));
  const layerOf = assignLayers(ids, edges);
  const depth = ids.length ? Math.max(...Array.from(layerOf.values())) + 1 : 0;
  const layers: string[][] = Array.from({ length: depth }, () => []);
  for (const id of ids) {
    layers[layerOf.get(id)!].push(id);
  }
  const preds = new Map<string, string[]>(ids.map(id => [id, []]));
  const succs = new Map<string, string[]>(ids.map(id => [id, []]));
  for (const e of edges) {
    if (preds.has(e.target) && succs.has(e.source) && e.source !== e.target) {
      preds.get(e.target)!.push(e.source);
      succs.get(e.source)!.push(e.target);
    }
  }
  // Positions are normalised to [0, 1] within a layer, so layers of different sizes compare.
  const position = new Map<string, number>();
  const place = (layer: string[]): void => layer.forEach((id, i) => position.set(id, (i + 0.5) / layer.length));
  layers.forEach(place);
  for (let s = 0; s < sweeps; s++) {
    const down = s % 2 === 0;
    const order = down ? layers.map((_, i) => i).slice(1) : layers.map((_, i) => i).reverse().slice(1);
    for (const i of order) {
      layers[i] = orderLayer(layers[i], down ? preds : succs, position);
      place(layers[i]);
    }
  }
  const tallest = Math.max(0, ...layers.map(l => l.length));
  const placed = new Map<string, Placed>();
  layers.forEach((layer, li) => {
    // Centre a short layer against the tallest so the picture reads as a flow, not a staircase.
    const offset = ((tallest - layer.length) * (height + gapY)) / 2;
    layer.forEach((id, order) => {
      placed.set(id, { id, layer: li, order, x: li * (width + gapX), y: offset + order * (height + gapY) });
    });
  });
  return {
    nodes: placed,
    layers,
    width: depth ? depth * width + (depth - 1) * gapX : 0,
    height: tallest ? tallest * height + (tallest - 1) * gapY : 0
  };
}

/** Edges whose ends sit in adjacent layers but cross each other: the quality the sweeps improve. */
export function crossings(layout: Layout, edges: LayoutEdge[]): number {
  const spans = edges
    .map(e => [layout.nodes.get(e.source), layout.nodes.get(e.target)] as const)
    .filter(([a, b]) => a && b && b.layer === a.layer + 1) as [Placed, Placed][];
  let count = 0;
  for (let i = 0; i < spans.length; i++) {
    for (let j = i + 1; j < spans.length; j++) {
      const [a1, b1] = spans[i];
      const [a2, b2] = spans[j];
      if (a1.layer === a2.layer && (a1.order - a2.order) * (b1.order - b2.order) < 0) {
        count++;
      }
    }
  }
  return count;
}

/** A cubic path from the right edge of `a` to the left edge of `b`. */
export function edgePath(a: Placed, b: Placed, width = NODE_WIDTH, height = NODE_HEIGHT): string {
  const x1 = a.x + width;
  const y1 = a.y + height / 2;
  const x2 = b.x;
  const y2 = b.y + height / 2;
  const bend = Math.max(24, (x2 - x1) / 2);
  return `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`;
}
