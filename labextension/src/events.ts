// A run's event log as the detail view keeps it, pure: progress events folded into one bar per
// node (a long node reports thousands, which would push everything else out of the log), the
// newest 200 other events, one line each, and the kinds a filter offers.

import { formatLoss, formatNumber } from './format';
import type { RunEvent } from './types';

export const EVENTS_KEPT = 200;
/** How far back the detail view asks the server to replay on open: enough to find 200 events
 * that are not progress in a run that reports progress every step. */
export const EVENTS_REPLAYED = 5000;
export const PROGRESS = 'progress';

/** Keep the newest `keep` events, in seq order, without duplicates (a replay after reconnect). */
export function mergeEvents(kept: RunEvent[], incoming: RunEvent[], keep = EVENTS_KEPT): RunEvent[] {
  const last = kept.length ? kept[kept.length - 1].seq : 0;
  const merged = kept.concat(incoming.filter(e => e.seq > last));
  return merged.length > keep ? merged.slice(merged.length - keep) : merged;
}

/** One event as a line of the log: its seq, type and the payload's telling fields. */
export function eventLine(event: RunEvent): string {
  const p = event.payload || {};
  const bits: string[] = [];
  for (const key of ['node_id', 'status', 'name', 'value', 'step', 'message']) {
    const value = p[key];
    if (value !== undefined && value !== null && value !== '') {
      bits.push(typeof value !== 'number' ? String(value) : key === 'value' ? formatLoss(value) : formatNumber(value));
    }
  }
  return `#${event.seq} ${event.type}${bits.length ? ' · ' + bits.join(' · ') : ''}`;
}

/** A node's latest progress report: `fraction` is null without a total. */
export interface ProgressBar {
  nodeId: string;
  value: number;
  total: number | null;
  fraction: number | null;
  label: string;
  seq: number;
}

/** Fold progress events into one bar per node (the newest report wins), in the order the nodes
 * first reported. */
export function foldProgress(bars: ProgressBar[], events: RunEvent[]): ProgressBar[] {
  const byNode = new Map(bars.map(b => [b.nodeId, b]));
  for (const event of events) {
    const p = event.payload || {};
    const value = Number(p.value);
    if (event.type !== PROGRESS || typeof p.node_id !== 'string' || !Number.isFinite(value)) {
      continue;
    }
    const previous = byNode.get(p.node_id);
    if (previous && previous.seq >= event.seq) {
      continue;
    }
    const total = typeof p.total === 'number' && p.total > 0 ? p.total : null;
    byNode.set(p.node_id, {
      nodeId: p.node_id, value, total,
      fraction: total === null ? null : Math.min(1, Math.max(0, value / total)),
      label: typeof p.label === 'string' ? p.label : '',
      seq: event.seq
    });
  }
  return Array.from(byNode.values());
}

/** "35 / 100" or "35" (no total), with the node's label when it gave one. */
export function progressText(bar: ProgressBar): string {
  const count = bar.total === null ? formatNumber(bar.value) : `${formatNumber(bar.value)} / ${formatNumber(bar.total)}`;
  return bar.label ? `${count} ${bar.label}` : count;
}

/** The events of a log that are not progress (those go to the bars). */
export function withoutProgress(events: RunEvent[]): RunEvent[] {
  return events.filter(e => e.type !== PROGRESS);
}

/** The kinds in a log with their counts, most frequent first (then by name), for the filter. */
export function eventKinds(events: RunEvent[]): [string, number][] {
  const counts = new Map<string, number>();
  for (const e of events) {
    counts.set(e.type, (counts.get(e.type) ?? 0) + 1);
  }
  return Array.from(counts.entries()).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
}

/** The events of one kind; every event for '' (All). */
export function eventsOfKind(events: RunEvent[], kind: string): RunEvent[] {
  return kind ? events.filter(e => e.type === kind) : events;
}
