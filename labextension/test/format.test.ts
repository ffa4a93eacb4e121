import { describe, expect, it } from 'vitest';

import {
  allowedActions, budgetLabel, CHIPS, estimateLabel, chipLabel, countLabel, deviceCells, displayName, durationOf, formatDuration,
  formatLoss, heartbeatAge, inProgress, plainTrans as t, queueLabel, rowSummary, runsQuery, shortDigest, STATE_TONES, stateTone,
  workerLabel, workerRow, workerRows
} from '../src/format';
import type { Run } from '../src/types';

const run = (over: Partial<Run> = {}): Run => ({ id: '0123456789abcdef', status: 'queued', ...over });

describe('final loss', () => {
  it('uses scientific notation below 0.001', () => {
    expect(formatLoss(0.000123)).toBe('1.23e-4');
    expect(formatLoss(-0.0005)).toBe('-5.00e-4');
    expect(formatLoss(0.001)).toBe('0.001');
    expect(formatLoss(0.123456)).toBe('0.1235');
    expect(formatLoss(0)).toBe('0');
    expect(formatLoss(12345.6)).toBe('12350');
  });
  it('reads "-" without a value', () => {
    expect(formatLoss(null)).toBe('-');
    expect(formatLoss(undefined)).toBe('-');
    expect(formatLoss(NaN)).toBe('-');
  });
});

describe('durations and names', () => {
  it('formats like the notebook widgets', () => {
    expect(formatDuration(null)).toBe('-');
    expect(formatDuration(0.25)).toBe('250 ms');
    expect(formatDuration(3.21)).toBe('3.2 s');
    expect(formatDuration(125)).toBe('2 min 5 s');
    expect(formatDuration(7260)).toBe('2 h 1 min');
  });
  it('counts a running run up to now and a finished one to its end', () => {
    expect(durationOf(run({ status: 'running', started_at: 100 }), 130)).toBe(30);
    expect(durationOf(run({ status: 'succeeded', started_at: 100, finished_at: 110 }), 500)).toBe(10);
    expect(durationOf(run({ status: 'queued' }), 500)).toBeNull();
  });
  it('cuts names to 64 characters and falls back to the id', () => {
    expect(displayName(run({ name: 'x'.repeat(80) }))).toHaveLength(64);
    expect(displayName(run())).toBe('0123456789ab');
  });
});

describe('filter chips', () => {
  it('are the seed\'s seven, applied by the server before the 50-row cut', () => {
    expect(CHIPS.map(c => chipLabel(c, t))).toEqual(
      ['All', 'Running', 'Queued', 'Succeeded', 'Failed', 'Cancelled', 'Interrupted']);
    expect(runsQuery('all')).toBe('limit=50');
    expect(runsQuery('running')).toBe('limit=50&status=running%2Cdisconnected');
    expect(runsQuery('failed')).toBe('limit=50&status=failed');
  });
  it('shows the count as "50 of 312"', () => {
    expect(countLabel(50, 312, t)).toBe('50 of 312');
  });
});

describe('actions', () => {
  it('follow the seed: Stop and Watch while active, CSV always, Delete when finished', () => {
    expect(allowedActions('queued')).toEqual(['stop', 'watch', 'csv']);
    expect(allowedActions('running')).toEqual(['stop', 'watch', 'csv']);
    expect(allowedActions('disconnected')).toEqual(['stop', 'watch', 'csv']);
    for (const s of ['succeeded', 'failed', 'cancelled', 'interrupted']) {
      expect(allowedActions(s)).toEqual(['csv', 'delete']);
    }
  });
  it('counts runs in progress for the toast', () => {
    expect(inProgress([run(), run({ status: 'running' }), run({ status: 'failed' })])).toBe(2);
  });
});

describe('worker, devices, queue, budget', () => {
  it('names where a run goes', () => {
    expect(workerLabel(run(), t)).toBe('This server');
    expect(workerLabel(run({ options: { target: { worker: 'local' } } }), t)).toBe('This server');
    expect(workerLabel(run({ options: { target: { worker: 'any' } } }), t)).toBe('Any available');
    expect(workerLabel(run({ options: { target: { worker: 'any' } }, worker_id: 'gpu-box' }), t)).toBe('gpu-box');
    expect(workerLabel(run({ options: { target: { pool: 'one-shot' } } }), t)).toBe('pool one-shot');
  });
  it('shows Queue #N, or Any queue #N for an any run, with the queue for the hover', () => {
    expect(queueLabel(run({ queue_key: 'cpu', queue_position: 2 }), t)).toEqual(['Queue #2', 'cpu']);
    expect(queueLabel(run({ queue_key: 'any/cuda', queue_position: 1 }), t)).toEqual(['Any queue #1', 'any/cuda']);
    expect(queueLabel(run({ status: 'running', queue_key: 'cpu' }), t)).toEqual(['', '']);
  });
  it('shows the budget only for a run with a memory budget', () => {
    expect(budgetLabel(run(), t)).toBe('-');
    expect(budgetLabel(run({ options: { target: { memory_gib: 6 } } }), t)).toBe('6 GiB');
    expect(budgetLabel(run({ options: { target: { memory_gib: 6, memory_source: 'estimate' } } }), t)).toBe('6 GiB est.');
    expect(budgetLabel(run({ options: { target: { memory_gib: 2.5, memory_source: 'estimate', estimate_raised_from: 1 } } }), t))
      .toBe('2.5 GiB est. (raised from 1 GiB)');
  });
  it('offers an estimate as est., naming what it leaves out once', () => {
    const est = { memory_gib: 1.25, bytes: 1, parameters: 1, parts: {}, unknown: [] };
    expect(estimateLabel(est, t)).toBe('1.25 GiB est.');
    const partial = { ...est, unknown: [{ node_id: 'csv', why: 'a' }, { node_id: 'csv', why: 'b' }, { node_id: 'm', why: 'c' }] };
    expect(estimateLabel(partial, t)).toBe('1.25 GiB est. (leaves out csv, m)');
  });
  it('shortens digests to 12 characters', () => {
    expect(shortDigest('abcdef0123456789')).toBe('abcdef012345');
    expect(shortDigest(null)).toBe('-');
  });
});

describe('workers', () => {
  it('gives every API state a tone, and an unknown one its own', () => {
    for (const s of ['connected', 'draining', 'disconnected', 'offline', 'online', 'degraded']) {
      expect(STATE_TONES[s]).toBeDefined();
    }
    expect(stateTone('something-new')).toBe('unknown');
  });
  it('lists devices with taken/limit slots and same-card marks', () => {
    expect(deviceCells([
      { device: 'cuda:0', slots: { limit: 2, taken: 1 }, same_card: ['local'] },
      { device: 'cpu', shared_with: 'local' }
    ], t)).toEqual([
      { name: 'cuda:0', slots: '1/2', marks: ['same card as local'] },
      { name: 'cpu', slots: '-', marks: ['shared with this server'] }
    ]);
  });
  it('offers Drain to a connected worker, Undrain to a draining one, Remove to all', () => {
    expect(workerRow({ id: 'w1', name: 'a', state: 'connected' }, t).actions).toEqual(['drain', 'remove']);
    expect(workerRow({ id: 'w1', name: 'a', state: 'draining', draining: true }, t).actions).toEqual(['undrain', 'remove']);
    expect(workerRow({ id: 'w1', name: 'a', state: 'offline' }, t).actions).toEqual(['remove']);
  });
  it('marks a degraded worker with the node types it lacks', () => {
    const row = workerRow({ id: 'w', name: 'a', state: 'connected', status: 'degraded', missing_types: ['Conv2d'] }, t);
    expect(row.degraded).toBe(true);
    expect(row.missingTypes).toEqual(['Conv2d']);
    expect(row.tone).toBe('ok');
  });
  it('sorts workers by name', () => {
    expect(workerRows([{ id: '2', name: 'b', state: 'offline' }, { id: '1', name: 'a', state: 'connected' }], t)
      .map(r => r.name)).toEqual(['a', 'b']);
  });
  it('reads the heartbeat age', () => {
    expect(heartbeatAge(null, 100, t)).toBe('-');
    expect(heartbeatAge(95, 100, t)).toBe('5 s ago');
    expect(heartbeatAge(100 - 600, 100, t)).toBe('10 min ago');
    expect(heartbeatAge(100 - 3 * 3600, 100, t)).toBe('3 h ago');
  });
});

describe('rowSummary', () => {
  it('lists every column a narrow panel leaves out, one a line, without the empty ones', () => {
    expect(rowSummary([['Worker', 'This server'], ['Budget', '-'], ['Started', ''], ['Final loss', '0.25']]))
      .toBe('Worker: This server\nBudget: -\nFinal loss: 0.25');
  });
});
