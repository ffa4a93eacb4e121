import { describe, expect, it } from 'vitest';

import { applyEvents, coverByCache, initialStates, refusedNodes, stateCounts } from '../src/nodeStatus';
import type { RunEvent } from '../src/types';

let seq = 0;
const ev = (type: string, payload: Record<string, unknown>): RunEvent => ({ seq: ++seq, type, payload, created_at: 0 });

describe('node states from a run\'s events', () => {
  it('follows queued, running with progress, done, cached and failed', () => {
    const states = initialStates(['a', 'b', 'c', 'd']);
    expect(applyEvents(states, [
      ev('execution_start', {}),
      ev('execution_cached', { nodes: ['a'] }),
      ev('node_status', { node_id: 'b', status: 'running' }),
      ev('progress', { node_id: 'b', value: 3, total: 4 })
    ])).toBe(true);
    expect(states.get('a')).toEqual({ state: 'cached', progress: null });
    expect(states.get('b')).toEqual({ state: 'running', progress: 0.75 });
    expect(states.get('c')!.state).toBe('queued');
    applyEvents(states, [
      ev('node_status', { node_id: 'b', status: 'done', elapsed_s: 0.1 }),
      ev('node_status', { node_id: 'c', status: 'failed', error: 'boom' }),
      ev('node_status', { node_id: 'd', status: 'running' }),
      ev('execution_error', {})
    ]);
    expect(states.get('b')!.state).toBe('done');
    expect(states.get('c')).toEqual({ state: 'failed', progress: null, error: 'boom' });
    expect(states.get('d')!.state).toBe('failed');
    expect(stateCounts(states)).toEqual({ queued: 0, running: 0, cached: 1, done: 1, failed: 2, cancelled: 0, skipped: 0 });
  });

  it('a node the run ended without (its consumers were cached) is skipped, not left queued', () => {
    const states = initialStates(['k', 's']);
    applyEvents(states, [ev('execution_start', {}), ev('execution_cached', { nodes: ['s'] }), ev('execution_complete', {})]);
    expect(states.get('k')!.state).toBe('skipped');
    expect(states.get('s')!.state).toBe('cached');
  });

  it('ignores nodes it does not draw (inner nodes, unknown ids) and progress of a node not running', () => {
    const states = initialStates(['a']);
    expect(applyEvents(states, [
      ev('inner_node_status', { node_id: 'blk/x', status: 'running' }),
      ev('node_status', { node_id: 'zz', status: 'running' }),
      ev('progress', { node_id: 'a', value: 1, total: 2 })
    ])).toBe(false);
    expect(states.get('a')!.state).toBe('queued');
  });

  it('a stopped run leaves its running nodes cancelled; progress without a total has no fraction', () => {
    const states = initialStates(['a']);
    applyEvents(states, [ev('node_status', { node_id: 'a', status: 'running' }), ev('progress', { node_id: 'a', value: 5 })]);
    expect(states.get('a')).toEqual({ state: 'running', progress: null });
    applyEvents(states, [ev('execution_stopped', { status: 'cancelled' })]);
    expect(states.get('a')!.state).toBe('cancelled');
  });
});

describe('done from cache', () => {
  const edges = [{ source: 'a', target: 'b' }, { source: 'b', target: 'c' }, { source: 'x', target: 'y' }];
  it('turns the nodes that never ran behind a cached output into cached, not skipped', () => {
    const states = initialStates(['a', 'b', 'c', 'x', 'y']);
    const ev = (type: string, payload: Record<string, unknown>, seq: number): RunEvent =>
      ({ seq, type, payload } as unknown as RunEvent);
    applyEvents(states, [ev('execution_start', {}, 1), ev('execution_cached', { nodes: ['c'] }, 2),
      ev('node_status', { node_id: 'x', status: 'running' }, 3), ev('node_status', { node_id: 'x', status: 'done' }, 4),
      ev('node_status', { node_id: 'y', status: 'running' }, 5), ev('node_status', { node_id: 'y', status: 'done' }, 6),
      ev('execution_complete', {}, 7)]);
    expect(states.get('a')!.state).toBe('skipped');
    expect(coverByCache(states, edges)).toBe(2);
    expect(Array.from(states, ([id, v]) => [id, v.state])).toEqual(
      [['a', 'cached'], ['b', 'cached'], ['c', 'cached'], ['x', 'done'], ['y', 'done']]);
  });

  it('leaves a skipped node with no cached node after it', () => {
    const states = initialStates(['a', 'b']);
    states.set('a', { state: 'skipped', progress: null });
    states.set('b', { state: 'done', progress: null });
    expect(coverByCache(states, [{ source: 'a', target: 'b' }])).toBe(0);
    expect(states.get('a')!.state).toBe('skipped');
  });
});

describe('refusedNodes', () => {
  it('names each node of an invalid_graph refusal with its reasons', () => {
    const body = { error: { code: 'invalid_graph', message: 'graph has 3 problems', params: { problems: [
      { code: 'unknown_type', message: "unknown node type 'Scael'", node_id: 's', field: 'type' },
      { code: 'missing_input', message: "required input 'x' is not connected", node_id: 'm', field: null },
      { code: 'missing_input', message: "required input 'y' is not connected", node_id: 'm', field: null },
      { code: 'no_nodes', message: 'graph-level', node_id: null }
    ] } } };
    const marked = refusedNodes(body);
    expect(Array.from(marked.keys())).toEqual(['s', 'm']);
    expect(marked.get('s')).toBe("type: unknown node type 'Scael'");
    expect(marked.get('m')).toBe("required input 'x' is not connected; required input 'y' is not connected");
  });

  it('marks nothing for another error or no body', () => {
    expect(refusedNodes({ error: { code: 'run_not_found', message: 'x', params: {} } }).size).toBe(0);
    expect(refusedNodes(null).size).toBe(0);
    expect(refusedNodes('oops').size).toBe(0);
  });
});
