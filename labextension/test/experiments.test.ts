import { describe, expect, it } from 'vitest';

import { plainTrans as t } from '../src/format';
import {
  bounds, comparisonLabel, formatP, meanLabel, rankLabel, sortRows, studyKey, sweepKey, variantPlacement
} from '../src/experiments';
import type { StudyVariant, SweepVariant } from '../src/types';

const v = (index: number, rank: number | null, objective: number | null, status = 'succeeded'): SweepVariant =>
  ({ index, run_id: `r${index}`, status, params: [], rank, objective });

describe('table sorting', () => {
  const rows = [v(0, 2, 0.5), v(1, null, null, 'running'), v(2, 1, 0.1), v(3, 2, 0.5), v(4, null, null, 'failed')];

  it('sorts by rank either way with unranked rows kept at the bottom in index order', () => {
    expect(sortRows(rows, sweepKey('rank'), 'asc').map(r => r.index)).toEqual([2, 0, 3, 1, 4]);
    expect(sortRows(rows, sweepKey('rank'), 'desc').map(r => r.index)).toEqual([0, 3, 2, 1, 4]);
  });

  it('sorts by objective and by status', () => {
    expect(sortRows(rows, sweepKey('objective'), 'desc').map(r => r.index)).toEqual([0, 3, 2, 1, 4]);
    expect(sortRows(rows, sweepKey('status'), 'asc').map(r => r.status))
      .toEqual(['failed', 'running', 'succeeded', 'succeeded', 'succeeded']);
  });

  it('sorts study variants by mean and average rank', () => {
    const sv = (label: string, mean: number | null, averageRank: number | null) =>
      ({ label, aggregate: { mean }, average_rank: averageRank } as unknown as StudyVariant);
    const variants = [sv('a', 0.3, 2), sv('b', null, null), sv('c', 0.1, 1)];
    expect(sortRows(variants, studyKey('mean'), 'asc').map(x => x.label)).toEqual(['c', 'a', 'b']);
    expect(sortRows(variants, studyKey('average_rank'), 'desc').map(x => x.label)).toEqual(['a', 'c', 'b']);
    expect(sortRows(variants, studyKey('label'), 'desc').map(x => x.label)).toEqual(['c', 'b', 'a']);
  });
});

describe('study cells', () => {
  it('marks a shared rank', () => {
    expect(rankLabel(1, true)).toBe('1=');
    expect(rankLabel(3, false)).toBe('3');
    expect(rankLabel(null, false)).toBe('-');
  });

  it('writes the paired difference with its interval, p-value and n', () => {
    expect(comparisonLabel({ n: 5, mean_difference: 0.012, ci95: [-0.003, 0.027], p_value: 0.25 }, false, t))
      .toBe('+0.012 [-0.003, +0.027] p=0.250 (n=5)');
    expect(comparisonLabel({ n: 1, mean_difference: 0.5, ci95: null, p_value: null }, false, t)).toBe('+0.5 (n=1)');
    expect(comparisonLabel(null, true, t)).toBe('best');
    expect(comparisonLabel(null, false, t)).toBe('-');
    expect(formatP(0.0001)).toBe('<0.001');
  });

  it('writes mean ± std', () => {
    const variant = (mean: number | null, std: number | null) => ({ aggregate: { mean, std } } as unknown as StudyVariant);
    expect(meanLabel(variant(0.25, 0.05))).toBe('0.25 ± 0.05');
    expect(meanLabel(variant(0.25, null))).toBe('0.25');
    expect(meanLabel(variant(null, null))).toBe('-');
  });
});

describe('chart bounds', () => {
  it('spans every point and pads a flat series', () => {
    expect(bounds([{ label: 'a', points: [[0, 1], [2, 3]] }, { label: 'b', points: [[1, -1]] }]))
      .toEqual({ x0: 0, x1: 2, y0: -1, y1: 3 });
    expect(bounds([{ label: 'a', points: [[1, 2]] }])).toEqual({ x0: 0, x1: 2, y0: 1.8, y1: 2.2 });
    expect(bounds([])).toBeNull();
  });
});

describe('where a sweep variant ran', () => {
  it('names its worker and devices, any while it waits for one, this server, or the queue it waits in', () => {
    const at = (extra: Partial<SweepVariant>) => variantPlacement({ ...v(0, null, null, 'queued'), ...extra }, t);
    expect(at({ worker_id: 'gpu-box', devices: ['cuda:1', 'cuda:0'], queue_key: 'gpu-box/cuda:1' }))
      .toEqual({ worker: 'gpu-box', devices: 'cuda:1, cuda:0' });
    expect(at({ queue_key: 'any/cuda' })).toEqual({ worker: 'any', devices: 'any/cuda' });
    expect(at({ devices: ['cpu'], queue_key: 'cpu' })).toEqual({ worker: 'This server', devices: 'cpu' });
    expect(at({})).toEqual({ worker: '-', devices: '-' });
  });
});
