// The sweep and study views' rules, pure: sorting a table with empty cells kept at the bottom
// whichever way it sorts, a rank with its ties, the paired comparison against the best variant,
// and the points of the objective curves.

import { formatLoss, formatNumber, formatP, Trans } from './format';

export { formatP };
import type { StudyComparison, StudyVariant, SweepVariant } from './types';

export type SortDirection = 'asc' | 'desc';
export type Cell = number | string | null | undefined;

/** Rows sorted by `key`; rows with no value stay at the bottom in their order (stable). */
export function sortRows<T>(rows: T[], key: (row: T) => Cell, direction: SortDirection): T[] {
  const sign = direction === 'asc' ? 1 : -1;
  const keyed = rows.map((row, i) => ({ row, i, k: key(row) }));
  const empty = (k: Cell): boolean => k === null || k === undefined || k === '' || (typeof k === 'number' && Number.isNaN(k));
  keyed.sort((a, b) => {
    const ea = empty(a.k);
    const eb = empty(b.k);
    if (ea || eb) {
      return ea === eb ? a.i - b.i : ea ? 1 : -1;
    }
    const c = typeof a.k === 'number' && typeof b.k === 'number' ? a.k - b.k : String(a.k).localeCompare(String(b.k));
    return c * sign || a.i - b.i;
  });
  return keyed.map(k => k.row);
}

export type SweepColumn = 'rank' | 'status' | 'objective';

export function sweepKey(column: SweepColumn): (v: SweepVariant) => Cell {
  switch (column) {
    case 'rank': return v => v.rank;
    case 'status': return v => v.status;
    case 'objective': return v => v.objective;
  }
}

/** The sweep's variant number as its child runs are named: index + 1. */
export function variantNumber(v: { index: number }): number {
  return v.index + 1;
}

/** The sweep view's Worker and Devices cells: the worker a variant ran on, `any` while an any-variant
 * waits for one, "This server" for one placed here; its devices, else the queue it waits in. */
export function variantPlacement(v: SweepVariant, t: Trans): { worker: string; devices: string } {
  const worker = v.worker_id ?? (v.queue_key?.startsWith('any') ? 'any' : v.devices?.length ? t.__('This server') : '-');
  return { worker, devices: (v.devices ?? []).join(', ') || (v.queue_key ?? '-') };
}

/** "1", or "1=" for a rank shared with others (their labels on hover), as the notebook's study view. */
export function rankLabel(rank: number | null | undefined, tie: boolean): string {
  if (rank === null || rank === undefined) {
    return '-';
  }
  return tie ? `${rank}=` : String(rank);
}

/** The paired comparison's cell: "+0.012 [-0.003, 0.027] p=0.25 (n=5)"; the best reads "best". */
export function comparisonLabel(c: StudyComparison | null | undefined, isBest: boolean, t: Trans): string {
  if (isBest) {
    return t.__('best');
  }
  if (!c || c.mean_difference === null || c.mean_difference === undefined) {
    return '-';
  }
  const signed = (x: number): string => (x > 0 ? '+' : '') + formatLoss(x);
  let text = signed(c.mean_difference);
  if (c.ci95) {
    text += ` [${signed(c.ci95[0])}, ${signed(c.ci95[1])}]`;
  }
  if (c.p_value !== null && c.p_value !== undefined) {
    text += ` p=${formatP(c.p_value)}`;
  }
  return `${text} (n=${c.n})`;
}

/** The smallest p-value the paired comparison can give with n repetitions: the server's exact
 * two-sided sign-flip test can do no better than the observed signs and their mirror out of 2^n,
 * 2 / 2^n (as client/study_report.py says it); null below 2 (no test). */
export function smallestP(repetitions: number): number | null {
  return repetitions >= 2 ? 2 / 2 ** repetitions : null;
}

/** What the study view says under the table: the floor n can reach, and whether it reaches
 * `alpha` ('warn') or not; null without a test. */
export function pFloorNote(repetitions: number, t: Trans, alpha = 0.05): { text: string; warn: boolean } | null {
  const floor = smallestP(repetitions);
  if (floor === null) {
    return null;
  }
  if (floor <= alpha) {
    return { text: t.__('with %1 repetitions the smallest p-value is %2', repetitions, formatNumber(floor)), warn: false };
  }
  let needed = repetitions;
  while ((smallestP(needed) ?? 1) > alpha) {
    needed += 1;
  }
  return {
    text: t.__('with %1 repetitions no p-value goes below %2: %3 needs %4 or more', repetitions, formatNumber(floor),
      formatNumber(alpha), needed),
    warn: true
  };
}

export type StudyColumn = 'rank' | 'label' | 'mean' | 'average_rank';

export function studyKey(column: StudyColumn): (v: StudyVariant) => Cell {
  switch (column) {
    case 'rank': return v => v.rank;
    case 'label': return v => v.label;
    case 'mean': return v => v.aggregate?.mean;
    case 'average_rank': return v => v.average_rank;
  }
}

export function meanLabel(v: StudyVariant): string {
  const a = v.aggregate;
  if (!a || a.mean === null || a.mean === undefined) {
    return '-';
  }
  return a.std === null || a.std === undefined ? formatLoss(a.mean) : `${formatLoss(a.mean)} ± ${formatLoss(a.std)}`;
}

export interface Series {
  label: string;
  points: [number, number][];
}

/** A chart's scale: the bounds of every point, padded when flat. */
export function bounds(series: Series[]): { x0: number; x1: number; y0: number; y1: number } | null {
  const xs: number[] = [];
  const ys: number[] = [];
  for (const s of series) {
    for (const [x, y] of s.points) {
      if (Number.isFinite(x) && Number.isFinite(y)) {
        xs.push(x);
        ys.push(y);
      }
    }
  }
  if (!xs.length) {
    return null;
  }
  let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) {
    x0 -= 1;
    x1 += 1;
  }
  if (y0 === y1) {
    const pad = Math.abs(y0) * 0.1 || 1;
    y0 -= pad;
    y1 += pad;
  }
  return { x0, x1, y0, y1 };
}

/** How far apart (a ratio of their largest values) series may be and still share an axis. */
export const SCALE_RATIO = 20;

/** The largest |y| of a series, 0 when it has none. */
function magnitude(s: Series): number {
  return s.points.reduce((m, [, y]) => (Number.isFinite(y) ? Math.max(m, Math.abs(y)) : m), 0);
}

/** Series grouped by scale, one chart (one y axis) per group, so a loss near 0.01 is not drawn
 * flat at the bottom of an axis that reaches a learning-rate step count of 1000. Groups run
 * from the smallest scale up; a group spans at most SCALE_RATIO between its extremes. */
export function scaleGroups(series: Series[]): Series[][] {
  const sorted = series.map(s => ({ s, m: magnitude(s) })).sort((a, b) => a.m - b.m);
  const groups: { first: number; members: Series[] }[] = [];
  for (const { s, m } of sorted) {
    const last = groups[groups.length - 1];
    if (last && (last.first === 0 ? m === 0 : m / last.first <= SCALE_RATIO)) {
      last.members.push(s);
    } else {
      groups.push({ first: m, members: [s] });
    }
  }
  return groups.map(g => g.members);
}

/** Series on a log10 axis: each y replaced by its log10; points at or below 0 left out (a log
 * axis has no place for them). */
export function logSeries(series: Series[]): Series[] {
  return series.map(s => ({ label: s.label, points: s.points.filter(([, y]) => y > 0).map(([x, y]) => [x, Math.log10(y)]) }));
}

/** The study statuses POST studies/{id}/resume accepts (the server's RESUMABLE). */
export const RESUMABLE_STUDY = new Set(['interrupted', 'cancelled', 'failed', 'halted']);

export function canResumeStudy(status: string): boolean {
  return RESUMABLE_STUDY.has(status);
}
