// The Runs and Workers panels' rules, pure (no Lab, no DOM): filter chips, columns, the count,
// which actions a row offers, worker pills and slots. The same rules as the notebook widgets
// (codefy_jupyter/kernel/widgets/runs_rows.py, workers_rows.py); test/format.test.ts covers them.
// Words a person reads go through `Trans` (Lab's TranslationBundle in the panels).

import type { MemoryEstimate, Run, Worker, WorkerDevice } from './types';

/** The part of Lab's TranslationBundle we use: `__(msgid, ...args)` with %1, %2 placeholders. */
export interface Trans {
  __(msgid: string, ...args: unknown[]): string;
}

/** A Trans that only fills placeholders (tests, and before Lab hands us one). */
export const plainTrans: Trans = {
  __: (msgid: string, ...args: unknown[]) =>
    msgid.replace(/%(\d+)/g, (all, n) => (Number(n) - 1 < args.length ? String(args[Number(n) - 1]) : all))
};

export const LIST_LIMIT = 50;
export const NAME_MAX = 64;
export const ACTIVE = new Set(['queued', 'running', 'disconnected']);
export const FINISHED = new Set(['succeeded', 'failed', 'cancelled', 'interrupted']);

export type Chip = 'all' | 'running' | 'queued' | 'succeeded' | 'failed' | 'cancelled' | 'interrupted';
/** Chip -> the statuses it lists (null: every run); disconnected runs are listed as running. */
export const FILTERS: Record<Chip, string[] | null> = {
  all: null,
  running: ['running', 'disconnected'],
  queued: ['queued'],
  succeeded: ['succeeded'],
  failed: ['failed'],
  cancelled: ['cancelled'],
  interrupted: ['interrupted']
};
export const CHIPS = Object.keys(FILTERS) as Chip[];

export function chipLabel(chip: Chip, t: Trans): string {
  switch (chip) {
    case 'all': return t.__('All');
    case 'running': return t.__('Running');
    case 'queued': return t.__('Queued');
    case 'succeeded': return t.__('Succeeded');
    case 'failed': return t.__('Failed');
    case 'cancelled': return t.__('Cancelled');
    case 'interrupted': return t.__('Interrupted');
  }
}

/** The query string of `GET runs` for a chip: the filter applies before the 50-row cut. */
export function runsQuery(chip: Chip, limit = LIST_LIMIT): string {
  const statuses = FILTERS[chip];
  const query = new URLSearchParams({ limit: String(limit) });
  if (statuses) {
    query.set('status', statuses.join(','));
  }
  return query.toString();
}

export type Action = 'stop' | 'watch' | 'csv' | 'delete';

/** Stop and Watch for queued or running runs, CSV for every run, Delete for finished runs (the
 * seed's rules; a finished run's detail opens by clicking its name). */
export function allowedActions(status: string): Action[] {
  const actions: Action[] = [];
  if (ACTIVE.has(status)) {
    actions.push('stop', 'watch');
  }
  actions.push('csv');
  if (FINISHED.has(status)) {
    actions.push('delete');
  }
  return actions;
}

export const SIGNIFICANT = 4;

/** The one number formatter of every view (a sweep's `lr`, a chart tick, a metric, a param):
 * integers whole up to a million, other numbers to 4 significant digits, scientific below 0.001
 * and from a million on, trailing zeros dropped ("0.03728", "1e-4", "2.5e+6"). */
export function formatNumber(value: number | null | undefined): string {
  if (value === null || value === undefined || Number.isNaN(value)) {
    return '-';
  }
  if (!Number.isFinite(value)) {
    return value > 0 ? '∞' : '-∞';
  }
  const size = Math.abs(value);
  if (Number.isInteger(value) && size < 1e6) {
    return String(value);
  }
  if (value !== 0 && (size < 1e-3 || size >= 1e6)) {
    return Number(value.toPrecision(SIGNIFICANT)).toExponential();
  }
  return String(Number(value.toPrecision(SIGNIFICANT)));
}

/** A parameter or payload value as a cell shows it: numbers through `formatNumber` (also in
 * lists), strings as they are, anything else as JSON. */
export function formatValue(value: unknown): string {
  if (typeof value === 'number') {
    return formatNumber(value);
  }
  if (value === null || value === undefined) {
    return '-';
  }
  if (typeof value === 'string') {
    return value;
  }
  if (Array.isArray(value)) {
    return `[${value.map(v => (typeof v === 'string' ? JSON.stringify(v) : formatValue(v))).join(', ')}]`;
  }
  return JSON.stringify(value);
}

/** Scientific notation below 0.001, as every view of the final loss (3 significant digits there,
 * as the notebook widgets print it), else `formatNumber` (the same characters as
 * codefy_jupyter/client/numbers.py; tests/shared/run_row_vectors.json holds the two together). */
export function formatLoss(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) {
    return '-';
  }
  if (value !== 0 && Math.abs(value) < 1e-3) {
    return value.toExponential(2);
  }
  return formatNumber(value);
}

/** A p-value: three decimals, "<0.001" under that (client/numbers.py format_p). */
export function formatP(p: number | null | undefined): string {
  if (p === null || p === undefined || !Number.isFinite(p)) {
    return '-';
  }
  return p < 0.001 ? '<0.001' : p.toFixed(3);
}

/** A variant's average rank: two decimals (client/numbers.py format_average_rank). */
export function formatAverageRank(rank: number | null | undefined): string {
  return rank === null || rank === undefined || !Number.isFinite(rank) ? '-' : rank.toFixed(2);
}

export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined) {
    return '-';
  }
  if (seconds < 1) {
    return `${Math.round(seconds * 1000)} ms`;
  }
  if (seconds < 120) {
    return `${seconds.toFixed(1)} s`;
  }
  if (seconds < 7200) {
    return `${Math.floor(seconds / 60)} min ${Math.floor(seconds % 60)} s`;
  }
  return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
}

function pad(n: number): string {
  return n < 10 ? `0${n}` : String(n);
}

/** Local time, `YYYY-MM-DD HH:MM:SS`; "-" when the run has not started. */
export function formatTime(ts: number | null | undefined): string {
  if (!ts) {
    return '-';
  }
  const d = new Date(ts * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function durationOf(run: Run, now: number): number | null {
  if (!run.started_at) {
    return null;
  }
  const end = run.finished_at || (ACTIVE.has(run.status) ? now : null);
  return end ? Math.max(0, end - run.started_at) : null;
}

export function displayName(run: Run): string {
  let name = run.name || '';
  if (name.length > NAME_MAX) {
    name = name.slice(0, NAME_MAX - 1) + '…';
  }
  return name || run.id.slice(0, 12);
}

/** This server for a local run, Any available for an any run not placed yet, else the worker. */
export function workerLabel(run: Run, t: Trans): string {
  if (run.worker_id) {
    return run.worker_id;
  }
  const target = run.options?.target || {};
  const worker = target.worker;
  if (worker === null || worker === undefined || worker === '' || worker === 'local') {
    return target.pool ? t.__('pool %1', target.pool) : t.__('This server');
  }
  if (worker === 'any') {
    return t.__('Any available');
  }
  return worker;
}

export function devicesLabel(run: Run): string {
  const devices = run.devices && run.devices.length ? run.devices : run.device ? [run.device] : [];
  return devices.join(', ') || '-';
}

/** The Devices hover: one line per card the run holds (its `cards`), with its name and, on a worker
 * that renumbered it, the name the run used for it; '' for a run without cards. */
export function cardsTitle(run: Run, t: Trans): string {
  return (run.cards ?? []).map(card => {
    const line = card.name ? `${card.device}: ${card.name}` : card.device;
    return card.in_run && card.in_run !== card.device ? `${line} (${t.__('%1 in the run', card.in_run)})` : line;
  }).join('\n');
}

/** [place in line, the queue's name for the hover] of a waiting run; ['', ''] otherwise. */
export function queueLabel(run: Run, t: Trans): [string, string] {
  if (run.status !== 'queued') {
    return ['', ''];
  }
  const key = run.queue_key || '';
  const pos = run.queue_position;
  const any = key.startsWith('any/');
  if (pos) {
    return [any ? t.__('Any queue #%1', pos) : t.__('Queue #%1', pos), key];
  }
  return [any ? t.__('Any queue') : t.__('Queue'), key];
}

/** The memory budget of a run on a card shared by memory (est. for an estimate), else "-". */
export function budgetLabel(run: Run, t: Trans): string {
  const target = run.options?.target || {};
  const gib = target.memory_gib;
  if (typeof gib !== 'number') {
    return '-';
  }
  const text = `${gib} GiB`;
  if (target.memory_source !== 'estimate') {
    return text;
  }
  const from = target.estimate_raised_from;
  return typeof from === 'number' ? t.__('%1 est. (raised from %2 GiB)', text, from) : t.__('%1 est.', text);
}

/** The Queue on… dialog's offer: the suggested budget, and what the estimate left out. */
export function estimateLabel(estimate: MemoryEstimate, t: Trans): string {
  const text = t.__('%1 est.', `${estimate.memory_gib} GiB`);
  const left = estimate.unknown.map(u => u.node_id).filter((id, i, all) => all.indexOf(id) === i);
  return left.length ? t.__('%1 (leaves out %2)', text, left.join(', ')) : text;
}

/** "1 worker", "0 workers", "3 workers". */
export function workerCount(n: number, t: Trans): string {
  return n === 1 ? t.__('1 worker') : t.__('%1 workers', n);
}

export function countLabel(shown: number, total: number, t: Trans): string {
  return t.__('%1 of %2', shown, total);
}

export function csvFilename(runId: string): string {
  return `run-${runId}-metrics.csv`;
}

export function isActive(status: string): boolean {
  return ACTIVE.has(status);
}

/** Runs in progress (queued, running, disconnected) of a page, for the toast on load. */
export function inProgress(runs: Run[]): number {
  return runs.filter(r => ACTIVE.has(r.status)).length;
}

/** The first 12 characters of a digest, the whole one for the hover. */
export function shortDigest(digest: string | null | undefined): string {
  return digest ? digest.slice(0, 12) : '-';
}

// -- workers ---------------------------------------------------------------------------------

/** Every worker state and catalog status the API lists gets a tone the CSS colours
 * (core/workers/registry.py states, core/workers/handshake.py catalog status). */
export const STATE_TONES: Record<string, string> = {
  connected: 'ok',
  online: 'ok',
  draining: 'warn',
  degraded: 'warn',
  disconnected: 'bad',
  offline: 'off'
};
export const UNKNOWN_TONE = 'unknown';

export function stateTone(state: string): string {
  return STATE_TONES[state] ?? UNKNOWN_TONE;
}

export function deviceName(device: WorkerDevice | string): string {
  if (typeof device === 'string') {
    return device;
  }
  return String(device.device || device.id || device.name || '?');
}

export interface DeviceCell {
  name: string;
  /** taken/limit, or "-" without slots */
  slots: string;
  /** "this server's card too", "same card as …" */
  marks: string[];
}

export function deviceCells(devices: WorkerDevice[] | undefined, t: Trans): DeviceCell[] {
  return (devices || []).map(d => {
    const limit = d.slots?.limit;
    const taken = d.slots?.taken ?? 0;
    const marks: string[] = [];
    if (d.shared_with === 'local') {
      marks.push(t.__('shared with this server'));
    }
    if (d.same_card && d.same_card.length) {
      marks.push(t.__('same card as %1', d.same_card.join(', ')));
    }
    return {
      name: deviceName(d),
      slots: typeof limit === 'number' ? `${taken}/${limit}` : '-',
      marks
    };
  });
}

/** Seconds since the worker's last frame, as "4 s ago" / "3 min ago" / "-". */
export function heartbeatAge(lastSeen: number | null | undefined, now: number, t: Trans): string {
  if (!lastSeen) {
    return '-';
  }
  const age = Math.max(0, now - lastSeen);
  if (age < 120) {
    return t.__('%1 s ago', Math.floor(age));
  }
  if (age < 7200) {
    return t.__('%1 min ago', Math.floor(age / 60));
  }
  return t.__('%1 h ago', Math.floor(age / 3600));
}

export interface WorkerRow {
  id: string;
  name: string;
  state: string;
  tone: string;
  /** a connected worker whose node catalog differs: a second pill, naming what it lacks */
  degraded: boolean;
  missingTypes: string[];
  devices: DeviceCell[];
  running: string[];
  sameHost: boolean;
  draining: boolean;
  actions: ('drain' | 'undrain' | 'remove')[];
}

export function workerRow(worker: Worker, t: Trans): WorkerRow {
  const state = String(worker.state || worker.status || '-');
  const degraded = worker.status === 'degraded' && state !== 'degraded';
  const draining = !!worker.draining || state === 'draining';
  const actions: WorkerRow['actions'] = [];
  if (state !== 'offline' && state !== 'disconnected') {
    actions.push(draining ? 'undrain' : 'drain');
  } else if (draining) {
    actions.push('undrain');
  }
  actions.push('remove');
  return {
    id: worker.id || worker.name,
    name: worker.name || worker.id || '?',
    state,
    tone: stateTone(state),
    degraded,
    missingTypes: degraded ? (worker.missing_types || []).map(String) : [],
    devices: deviceCells(worker.devices, t),
    running: (worker.runs || []).map(String),
    sameHost: !!worker.same_host,
    draining,
    actions
  };
}

export function workerRows(workers: Worker[], t: Trans): WorkerRow[] {
  return workers.map(w => workerRow(w, t)).sort((a, b) => a.name.localeCompare(b.name));
}

/** The hover of a run's row: every column as "label: value", one a line, so what a narrow Runs
 * panel leaves out (worker, budget, started, duration, loss) is one hover away. */
export function rowSummary(columns: [string, string][]): string {
  return columns.filter(([, value]) => value !== '').map(([label, value]) => `${label}: ${value}`).join('\n');
}
