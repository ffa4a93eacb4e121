import { describe, expect, it } from 'vitest';

import { eventKinds, eventsOfKind, foldProgress, progressText, withoutProgress } from '../src/events';
import { logSeries, scaleGroups, Series } from '../src/experiments';
import { formatNumber, formatValue, plainTrans, workerCount } from '../src/format';
import type { RunEvent } from '../src/types';

describe('the one number formatter', () => {
  it('gives long floats 4 significant digits', () => {
    expect(formatNumber(0.03727593720314938)).toBe('0.03728');
    expect(formatNumber(2.718281828)).toBe('2.718');
    expect(formatNumber(-123.456789)).toBe('-123.5');
    expect(formatNumber(0.1)).toBe('0.1');
  });
  it('keeps integers whole, and goes scientific for the very small and very large', () => {
    expect(formatNumber(1000)).toBe('1000');
    expect(formatNumber(0)).toBe('0');
    expect(formatNumber(0.0001)).toBe('1e-4');
    expect(formatNumber(0.000012346)).toBe('1.235e-5');
    expect(formatNumber(2500000.5)).toBe('2.5e+6');
    expect(formatNumber(12345678)).toBe('1.235e+7');
  });
  it('names what is not a number', () => {
    expect(formatNumber(null)).toBe('-');
    expect(formatNumber(undefined)).toBe('-');
    expect(formatNumber(NaN)).toBe('-');
    expect(formatNumber(Infinity)).toBe('∞');
  });
  it('formats values of every kind as a cell shows them', () => {
    expect(formatValue(0.03727593720314938)).toBe('0.03728');
    expect(formatValue('adam')).toBe('adam');
    expect(formatValue([0.123456, 'a', 2])).toBe('[0.1235, "a", 2]');
    expect(formatValue(true)).toBe('true');
    expect(formatValue({ a: 1 })).toBe('{"a":1}');
    expect(formatValue(undefined)).toBe('-');
  });
});

const ev = (seq: number, type: string, payload: Record<string, unknown> = {}): RunEvent =>
  ({ seq, type, payload, created_at: 0 });

describe('progress folded into bars', () => {
  it('keeps the newest report per node, in the order nodes first reported', () => {
    const events = [
      ev(1, 'progress', { node_id: 'train', value: 1, total: 10 }),
      ev(2, 'progress', { node_id: 'eval', value: 3, total: null, label: 'batches' }),
      ev(3, 'progress', { node_id: 'train', value: 4, total: 10 })
    ];
    const bars = foldProgress([], events);
    expect(bars.map(b => [b.nodeId, b.value, b.fraction])).toEqual([['train', 4, 0.4], ['eval', 3, null]]);
    // a replay of an older report does not move a bar back
    expect(foldProgress(bars, [events[0]])[0].value).toBe(4);
    expect(progressText(bars[0])).toBe('4 / 10');
    expect(progressText(bars[1])).toBe('3 batches');
  });
  it('leaves progress out of the log, and filters the log by kind', () => {
    const events = [ev(1, 'progress', { node_id: 'a', value: 1 }), ev(2, 'metric'), ev(3, 'node_status'), ev(4, 'metric')];
    const log = withoutProgress(events);
    expect(log.map(e => e.seq)).toEqual([2, 3, 4]);
    expect(eventKinds(log)).toEqual([['metric', 2], ['node_status', 1]]);
    expect(eventsOfKind(log, 'metric').map(e => e.seq)).toEqual([2, 4]);
    expect(eventsOfKind(log, '')).toHaveLength(3);
  });
});

const line = (label: string, ys: number[]): Series => ({ label, points: ys.map((y, i) => [i, y]) });

describe('one axis per scale', () => {
  it('gives a loss its own axis beside a step count', () => {
    const groups = scaleGroups([line('steps', [100, 1000]), line('loss', [0.5, 0.02]), line('acc', [0.1, 0.9])]);
    expect(groups.map(g => g.map(s => s.label))).toEqual([['loss', 'acc'], ['steps']]);
  });
  it('keeps series of one scale together', () => {
    expect(scaleGroups([line('a', [1, 2]), line('b', [3, 10])])).toHaveLength(1);
    expect(scaleGroups([line('zero', [0, 0]), line('one', [1])])).toHaveLength(2);
  });
  it('takes log10 of the values a log axis can show', () => {
    expect(logSeries([line('loss', [100, 0, 0.01])])[0].points).toEqual([[0, 2], [2, -2]]);
  });
});

describe('counts read as English', () => {
  it('says 1 worker, not 1 workers', () => {
    expect(workerCount(1, plainTrans)).toBe('1 worker');
    expect(workerCount(0, plainTrans)).toBe('0 workers');
    expect(workerCount(3, plainTrans)).toBe('3 workers');
  });
});

describe('the smallest p-value a study can reach', () => {
  it('is 2 / 2^n, and 0.05 needs 6 repetitions', async () => {
    const { pFloorNote, smallestP } = await import('../src/experiments');
    expect(smallestP(1)).toBeNull();
    expect(smallestP(3)).toBe(0.25);
    expect(pFloorNote(3, plainTrans)).toEqual({ text: 'with 3 repetitions no p-value goes below 0.25: 0.05 needs 6 or more', warn: true });
    expect(pFloorNote(6, plainTrans)).toEqual({ text: 'with 6 repetitions the smallest p-value is 0.03125', warn: false });
    expect(pFloorNote(0, plainTrans)).toBeNull();
  });
});
