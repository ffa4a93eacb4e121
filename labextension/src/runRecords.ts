// A run's recorded metrics and artifacts as its detail shows them, pure: the metrics as chart series
// (one per node and name, x the step or, with no step, the order logged) and the artifacts as rows
// with the path Copy path puts on the clipboard.

import type { Series } from './experiments';

export interface MetricRow {
  node_id: string | null;
  name: string;
  step: number | null;
  value: number | null;
}

export interface Artifact {
  kind: string;
  path: string;
  backend?: string;
  mount_label?: string | null;
  relative_path?: string;
  node_id?: string | null;
  meta?: Record<string, unknown> | null;
}

/** One series per (node, metric name), in the order first logged. A name logged by one node only is
 * labelled by the name; by several, `node.name`. Non-finite values are left out. */
export function metricSeries(rows: MetricRow[]): Series[] {
  const byKey = new Map<string, { node: string | null; name: string; points: [number, number][] }>();
  for (const row of rows) {
    const key = `${row.node_id ?? ''}\u0000${row.name}`;
    let entry = byKey.get(key);
    if (!entry) {
      entry = { node: row.node_id, name: row.name, points: [] };
      byKey.set(key, entry);
    }
    if (row.value === null || !Number.isFinite(row.value)) {
      continue;
    }
    const x = row.step ?? entry.points.length;
    entry.points.push([x, row.value]);
  }
  const nodesPerName = new Map<string, number>();
  for (const e of byKey.values()) {
    nodesPerName.set(e.name, (nodesPerName.get(e.name) ?? 0) + 1);
  }
  return [...byKey.values()].filter(e => e.points.length).map(e => ({
    label: (nodesPerName.get(e.name) ?? 0) > 1 && e.node ? `${e.node}.${e.name}` : e.name,
    points: e.points
  }));
}

/** A run's metric rows by the chart they go in: its own metrics, and its system metrics
 * (`system/...`, sampled while it ran: wire/system_metrics.py) in two charts of their own, percent
 * and bytes, so that their scales never flatten the training curves (RunView draws them alike). */
export function chartGroups(rows: MetricRow[]): { own: MetricRow[]; percent: MetricRow[]; bytes: MetricRow[] } {
  const groups = { own: [] as MetricRow[], percent: [] as MetricRow[], bytes: [] as MetricRow[] };
  for (const row of rows) {
    if (!row.name.startsWith('system/')) {
      groups.own.push(row);
    } else if (/_bytes(\/|$)/.test(row.name)) {
      groups.bytes.push(row);
    } else {
      groups.percent.push(row);
    }
  }
  return groups;
}

/** The path Copy path copies: where the file is on this server (for every backend, as GET
 * runs/{id}/artifacts documents it). */
export function artifactPath(a: Artifact): string {
  return a.path;
}

/** The file's name, for the row's label. */
export function artifactName(a: Artifact): string {
  const path = artifactPath(a);
  const cut = Math.max(path.lastIndexOf('/'), path.lastIndexOf('\\'));
  return path.slice(cut + 1) || path;
}

/** Event types after which the detail reads metrics and artifacts again. */
export const RECORD_EVENTS = new Set(['metric', 'artifact', 'execution_complete', 'execution_error', 'execution_stopped']);

/** One file a run read (options.provenance), as GET runs/{id} carries it under `inputs`. */
export interface InputRecord {
  node_id: string | null;
  kind: string;
  path: string;
  sha256: string;
  size: number;
  revision: string | null;
  rows: number | null;
}

export interface InputRow {
  kind: string;
  path: string;
  digest: string;
  detail: string;
}

/** The "Data and models" rows of a run's detail: the first 12 hex digits of each file's sha256 (the
 * whole digest goes in the title), its size, and a dataset's rows and revision when known. */
export function inputRows(inputs: InputRecord[] | undefined): InputRow[] {
  return (inputs ?? []).map(r => {
    const parts = [`${r.size} bytes`];
    if (r.rows !== null && r.rows !== undefined) {
      parts.push(`${r.rows} rows`);
    }
    if (r.revision) {
      parts.push(`revision ${r.revision}`);
    }
    return { kind: r.kind, path: r.path, digest: r.sha256.slice(0, 12), detail: parts.join(', ') };
  });
}
