import { describe, expect, it } from 'vitest';

import { eventLine, mergeEvents } from '../src/events';
import { eventsFrames } from '../src/live';
import type { RunEvent } from '../src/types';

const ev = (seq: number, type = 'node_status', payload: Record<string, unknown> = {}): RunEvent =>
  ({ seq, type, payload, created_at: 0 });

describe('the detail view\'s event log', () => {
  it('keeps the newest 200 in order, without the duplicates of a replay', () => {
    let kept: RunEvent[] = [];
    kept = mergeEvents(kept, Array.from({ length: 150 }, (_, i) => ev(i + 1)));
    kept = mergeEvents(kept, Array.from({ length: 150 }, (_, i) => ev(i + 101)));  // 101..150 again
    expect(kept).toHaveLength(200);
    expect(kept[0].seq).toBe(51);
    expect(kept[199].seq).toBe(250);
  });
  it('writes one line per event', () => {
    expect(eventLine(ev(3, 'metric', { node_id: 'train', name: 'loss', value: 0.0001, step: 2 })))
      .toBe('#3 metric · train · loss · 1.00e-4 · 2');
    expect(eventLine(ev(1, 'execution_start'))).toBe('#1 execution_start');
  });
});

describe('socket frames', () => {
  it('unpacks batch frames in order and ignores others', () => {
    const a = { type: 'events' as const, run_id: 'a', events: [], cursor: 1, status: 'running' };
    const b = { ...a, run_id: 'b' };
    expect(eventsFrames({ type: 'batch', frames: [a, b] }).map(f => f.run_id)).toEqual(['a', 'b']);
    expect(eventsFrames(a)).toEqual([a]);
    expect(eventsFrames({ type: 'submitted' })).toEqual([]);
  });
});
