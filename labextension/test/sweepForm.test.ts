import { describe, expect, it } from 'vitest';

import { plainTrans as t } from '../src/format';
import {
  capWarnings, domainSize, emptyEntry, entryOf, paramKey, SweepEntry, SweepForm, sweepableParams, sweepBody,
  variantCount
} from '../src/sweepForm';
import type { Graph, NodeDefinition } from '../src/types';

const definitions: NodeDefinition[] = [
  { type: 'Optimizer', params: { kind: { type: 'select', options: ['adam', 'sgd'] }, lr: { type: 'float', default: 0.001 },
    note: { type: 'string' }, key: { type: 'secret' } } },
  { type: 'DataLoader', params: { batch_size: { type: 'int', default: 32 }, shuffle: { type: 'bool' } } }
];
const graph: Graph = {
  nodes: [
    { id: 'opt', type: 'Optimizer', label: 'Optimizer', params: { lr: 0.003 } },
    { id: 'loader', type: 'DataLoader', params: {} },
    { id: 'mystery', type: 'NotRegistered', params: { x: 1 } }
  ],
  edges: []
};
const form = (over: Partial<SweepForm> = {}): SweepForm => ({
  name: '', method: 'grid', samples: '', seed: '', seedVariants: false, metric: 'train_loss', direction: 'minimize',
  nodeId: '', entries: [], ...over
});

describe('sweepable parameters', () => {
  it('lists int, float, bool and select params of registered top-level nodes, named by label and id', () => {
    const params = sweepableParams(graph, definitions);
    expect(params.map(p => p.label)).toEqual([
      'Optimizer (opt) · kind', 'Optimizer (opt) · lr', 'DataLoader (loader) · batch_size', 'DataLoader (loader) · shuffle'
    ]);
    expect(params[1].current).toBe(0.003);
    expect(params[2].current).toBe(32);
    expect(emptyEntry(params[3]).values).toBe('true, false');
    expect(emptyEntry(params[0]).values).toBe('adam, sgd');
  });

  it('leaves out a node id used twice', () => {
    const twice: Graph = { nodes: [graph.nodes[0], { ...graph.nodes[0] }] };
    expect(sweepableParams(twice, definitions)).toEqual([]);
  });
});

describe('variant count', () => {
  const [, lr, batch, shuffle] = sweepableParams(graph, definitions);
  const entry = (p: typeof lr, over: object) => entryOf(p, { ...emptyEntry(p), ...over }, t) as SweepEntry;

  it('is the product of the domains for a grid', () => {
    const a = entry(lr, { mode: 'range', min: '1e-4', max: '1e-1', count: '4', scale: 'log' });
    const b = entry(batch, { values: '32, 64, 128' });
    const c = entry(shuffle, {});
    expect([domainSize(a), domainSize(b), domainSize(c)]).toEqual([4, 3, 2]);
    expect(variantCount('grid', [a, b, c], '')).toBe(24);
    expect(variantCount('random', [a, b, c], '5')).toBe(5);
    expect(variantCount('grid', [], '')).toBe(0);
  });

  it('an int range that collapses onto fewer values counts fewer', () => {
    expect(domainSize(entry(batch, { mode: 'range', min: '1', max: '3', count: '10' }))).toBe(3);
  });

  it('refuses values that do not fit the parameter, and repeats', () => {
    expect(entryOf(batch, { ...emptyEntry(batch), values: '32, 6.5' }, t)).toBe('DataLoader (loader) · batch_size: 6.5 is not a int');
    expect(entryOf(batch, { ...emptyEntry(batch), values: '32, 32' }, t)).toContain('listed twice');
    expect(entryOf(lr, { ...emptyEntry(lr), mode: 'range', min: '0', max: '1', scale: 'log' }, t)).toContain('positive min');
  });

  it('warns past the default caps, naming the setting', () => {
    const big = entry(lr, { mode: 'range', min: '0', max: '1', count: '40' });
    const warnings = capWarnings([big], 40, t);
    expect(warnings.join('\n')).toContain('CODEFY_MAX_SWEEP_RUNS');
    expect(warnings.join('\n')).toContain('CODEFY_MAX_SWEEP_DOMAIN');
    expect(capWarnings([big, big, big, big, big], 1, t).join('\n')).toContain('CODEFY_MAX_SWEEP_PARAMS');
  });
});

describe('the request body', () => {
  const params = sweepableParams(graph, definitions);
  const lrEntry = { ...emptyEntry(params[1]), values: '0.1, 0.01' };

  it('a grid sweep with the objective, the target options and a name from the tab', () => {
    const body = sweepBody(graph, params, form({ entries: [lrEntry] }), { device: 'cpu' }, 'train.codefy.json', t);
    expect(body).toEqual({
      base_graph: graph, name: 'train.codefy.json',
      sweep_spec: { method: 'grid', params: [{ node_id: 'opt', param: 'lr', values: [0.1, 0.01] }] },
      objective: { metric: 'train_loss', direction: 'minimize' },
      options: { device: 'cpu' }
    });
  });

  it('random needs samples and a seed; seeding every variant needs a seed', () => {
    expect(sweepBody(graph, params, form({ entries: [lrEntry], method: 'random', samples: '2' }), {}, '', t))
      .toBe('a random sweep needs a seed');
    expect(sweepBody(graph, params, form({ entries: [lrEntry], seedVariants: true }), {}, '', t))
      .toBe('Seed every variant needs a seed');
    const body = sweepBody(graph, params, form({ entries: [lrEntry], method: 'random', samples: '2', seed: '3',
      seedVariants: true, nodeId: 'train', name: 'x'.repeat(80) }), {}, '', t);
    expect(body).toMatchObject({ sweep_spec: { method: 'random', samples: 2, seed: 3 }, seed_variants: true,
      objective: { node_id: 'train' } });
    expect((body as { name: string }).name).toHaveLength(64);
  });

  it('needs a parameter and a metric', () => {
    expect(sweepBody(graph, params, form(), {}, '', t)).toBe('pick at least one parameter to sweep');
    expect(sweepBody(graph, params, form({ entries: [lrEntry], metric: ' ' }), {}, '', t)).toBe('name the objective metric');
    expect(paramKey('a', 'b')).not.toBe(paramKey('a\u0000b', ''));
  });
});
