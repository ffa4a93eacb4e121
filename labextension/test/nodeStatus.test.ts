import { describe, expect, it } from 'vitest';

import { applyEvents, initialStates, stateCounts } from '../src/nodeStatus';
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
