// The New sweep dialog's objective suggestions, taken from the runs the Runs panel lists: the metric
// names those runs recorded (the Objective field's suggestions) and, for a name, the nodes that
// logged it (Objective node), with a warning when Any node would meet more than one of them (the
// server leaves such a variant unranked rather than pick a producer). Pure: the dialog reads the
// runs' metrics (GET runs/{id}/metrics) and hands the rows in.

import type { Trans } from './format';
import type { MetricRow } from './runRecords';
import type { GraphNode, Run } from './types';

/** How many of the listed runs the dialog reads: each read is every point the run logged. */
export const RUNS_READ = 20;

export interface Recorded {
  /** the names the runs recorded, the most runs first (then by name), then the defaults not among them */
  metrics: string[];
  /** name -> the nodes that logged it in those runs, sorted */
  producers: Map<string, string[]>;
}

/** The listed runs worth reading, in list order (newest first): a waiting run has logged nothing. */
export function runsToRead(runs: Run[], max = RUNS_READ): string[] {
  return runs.filter(r => r.status !== 'queued').slice(0, max).map(r => r.id);
}

/** What the runs recorded: `perRun` holds each run's metric rows. System metrics (`system/...`,
 * sampled by the server, never a node's series) are left out. */
export function recordedObjectives(perRun: MetricRow[][], defaults: string[] = []): Recorded {
  const runs = new Map<string, number>();
  const producers = new Map<string, Set<string>>();
  for (const rows of perRun) {
    const seen = new Set<string>();
    for (const row of rows) {
      if (!row.name || row.name.startsWith('system/')) {
        continue;
      }
      if (!seen.has(row.name)) {
        seen.add(row.name);
        runs.set(row.name, (runs.get(row.name) ?? 0) + 1);
      }
      if (row.node_id) {
        const nodes = producers.get(row.name) ?? new Set<string>();
        nodes.add(row.node_id);
        producers.set(row.name, nodes);
      }
    }
  }
  const names = [...runs.keys()].sort((a, b) => runs.get(b)! - runs.get(a)! || (a < b ? -1 : a > b ? 1 : 0));
  return {
    metrics: [...names, ...defaults.filter(d => !runs.has(d))],
    producers: new Map([...producers].map(([name, nodes]) => [name, [...nodes].sort()]))
  };
}

export function producersOf(recorded: Recorded, metric: string): string[] {
  return recorded.producers.get(metric.trim()) ?? [];
}

/** The Objective node choices: Any node, the nodes the runs saw log `metric` (first, marked), then
 * the graph's other nodes. A producer the graph does not hold at the top (a block's `block/inner`)
 * is listed too: the server reads a flattened id. */
export function nodeChoices(recorded: Recorded, metric: string, nodes: GraphNode[], t: Trans): [string, string][] {
  const producers = producersOf(recorded, metric);
  const byId = new Map(nodes.map(n => [n.id, n]));
  const name = (id: string): string => {
    const node = byId.get(id);
    return node ? `${node.label || node.type} (${id})` : id;
  };
  return [
    ['', t.__('Any node')],
    ...producers.map(id => [id, t.__('%1 · logs %2', name(id), metric.trim())] as [string, string]),
    ...nodes.filter(n => !producers.includes(n.id)).map(n => [n.id, name(n.id)] as [string, string])
  ];
}

/** '' unless Any node is chosen for a name the listed runs saw more than one node log. */
export function producerWarning(recorded: Recorded, metric: string, nodeId: string, t: Trans): string {
  const producers = producersOf(recorded, metric);
  if (nodeId || producers.length < 2) {
    return '';
  }
  return t.__('The listed runs show %1 nodes logging %2 (%3): with Any node, a variant where more than one logs it gets no rank. Choose one under Objective node.',
    producers.length, metric.trim(), producers.join(', '));
}
