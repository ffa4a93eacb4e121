// A run's event log as the detail view keeps it, pure: the newest 200 events, one line each.

import { formatLoss } from './format';
import type { RunEvent } from './types';

export const EVENTS_KEPT = 200;

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
      bits.push(key === 'value' && typeof value === 'number' ? formatLoss(value) : String(value));
    }
  }
  return `#${event.seq} ${event.type}${bits.length ? ' · ' + bits.join(' · ') : ''}`;
}
