import { describe, expect, it } from 'vitest';

import { assignLayers, crossings, edgePath, layoutGraph, NODE_HEIGHT, NODE_WIDTH } from '../src/layout';

const e = (source: string, target: string) => ({ source, target });

describe('layers', () => {
  it('puts each node one past its longest incoming path', () => {
    const layers = assignLayers(['a', 'b', 'c', 'd'], [e('a', 'b'), e('b', 'c'), e('a', 'c'), e('a', 'd')]);
    expect(Object.fromEntries(layers)).toEqual({ a: 0, b: 1, c: 2, d: 1 });
  });

  it('places the nodes of a cycle past the others instead of looping', () => {
    const layers = assignLayers(['a', 'b', 'c'], [e('a', 'b'), e('b', 'c'), e('c', 'b')]);
    expect(layers.get('a')).toBe(0);
    expect(layers.get('b')).toBeGreaterThanOrEqual(1);
    expect(layers.get('c')).toBeGreaterThanOrEqual(1);
  });

  it('ignores edges to unknown nodes and self loops', () => {
    const layers = assignLayers(['a', 'b'], [e('a', 'zz'), e('b', 'b'), e('a', 'b')]);
    expect(Object.fromEntries(layers)).toEqual({ a: 0, b: 1 });
  });
});

describe('layout', () => {
  it('runs left to right: every edge goes to a layer further right', () => {
    const nodes = ['data', 'split', 'loader', 'model', 'opt', 'train'].map(id => ({ id }));
    const edges = [e('data', 'split'), e('split', 'loader'), e('split', 'model'), e('model', 'opt'),
      e('model', 'train'), e('opt', 'train'), e('loader', 'train')];
    const layout = layoutGraph(nodes, edges);
    for (const edge of edges) {
      expect(layout.nodes.get(edge.target)!.x).toBeGreaterThan(layout.nodes.get(edge.source)!.x);
    }
    expect(layout.layers.map(l => l.length)).toEqual([1, 1, 2, 1, 1]);
    expect(layout.width).toBe(5 * NODE_WIDTH + 4 * 64);
  });

  it('orders a layer by its neighbours, removing the crossings of a twisted input order', () => {
    // a1-b1, a2-b2, listed so the second layer starts twisted
    const nodes = ['a1', 'a2', 'b2', 'b1'].map(id => ({ id }));
    const edges = [e('a1', 'b1'), e('a2', 'b2')];
    const layout = layoutGraph(nodes, edges, { sweeps: 0 });
    expect(crossings(layout, edges)).toBe(1);
    const swept = layoutGraph(nodes, edges);
    expect(crossings(swept, edges)).toBe(0);
  });

  it('lays out 1,000 nodes with every node placed once and no overlap within a layer', () => {
    const nodes = Array.from({ length: 1000 }, (_, i) => ({ id: `n${i}` }));
    const edges = [];
    for (let i = 1; i < 1000; i++) {
      edges.push(e(`n${Math.floor((i - 1) / 3)}`, `n${i}`));
      if (i > 10) {
        edges.push(e(`n${i - 10}`, `n${i}`));
      }
    }
    const layout = layoutGraph(nodes, edges);
    expect(layout.nodes.size).toBe(1000);
    for (const layer of layout.layers) {
      const ys = layer.map(id => layout.nodes.get(id)!.y).sort((a, b) => a - b);
      for (let i = 1; i < ys.length; i++) {
        expect(ys[i] - ys[i - 1]).toBeGreaterThanOrEqual(NODE_HEIGHT);
      }
    }
  });

  it('draws an edge from the right side of one node to the left side of the next', () => {
    const layout = layoutGraph([{ id: 'a' }, { id: 'b' }], [e('a', 'b')]);
    const path = edgePath(layout.nodes.get('a')!, layout.nodes.get('b')!);
    expect(path.startsWith(`M${NODE_WIDTH},${NODE_HEIGHT / 2}`)).toBe(true);
    expect(path.endsWith(`${NODE_WIDTH + 64},${NODE_HEIGHT / 2}`)).toBe(true);
  });

  it('an empty graph is an empty picture', () => {
    const layout = layoutGraph([], []);
    expect(layout.width).toBe(0);
    expect(layout.height).toBe(0);
  });
});
