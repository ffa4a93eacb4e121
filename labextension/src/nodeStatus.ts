// The graph viewer's colours, pure: a watched run's events folded into one status per top-level
// node (queued, running with progress, cached, done, failed, cancelled; skipped: the run ended
// without it, e.g. every consumer's output came from the cache). Inner nodes of blocks (`inner_*`)
// are the block's business and left out.

import type { RunEvent } from './types';

export type NodeState = 'queued' | 'running' | 'cached' | 'done' | 'failed' | 'cancelled' | 'skipped';

export interface NodeView {
  state: NodeState;
  /** 0..1 while running and the node reported a total */
  progress: number | null;
  error?: string;
}

export type NodeStates = Map<string, NodeView>;

/** Every node queued: a run that was just submitted, or has not started. */
export function initialStates(ids: string[]): NodeStates {
  return new Map(ids.map(id => [id, { state: 'queued', progress: null }]));
}

const ENGINE_STATES: Record<string, NodeState> = {
  pending: 'queued',
  running: 'running',
  cached: 'cached',
  done: 'done',
  failed: 'failed',
  cancelled: 'cancelled'
};

/** Fold events (in seq order) into `states`; returns whether anything changed. */
export function applyEvents(states: NodeStates, events: RunEvent[]): boolean {
  let changed = false;
  const set = (id: unknown, view: NodeView): void => {
    if (typeof id === 'string' && states.has(id)) {
      states.set(id, view);
      changed = true;
    }
  };
  for (const event of events) {
    const p = event.payload || {};
    if (event.type === 'node_status') {
      const state = ENGINE_STATES[String(p.status)];
      if (state) {
        set(p.node_id, { state, progress: null, error: typeof p.error === 'string' ? p.error : undefined });
      }
    } else if (event.type === 'progress') {
      const id = p.node_id;
      const value = Number(p.value);
      const total = p.total === null || p.total === undefined ? null : Number(p.total);
      if (typeof id === 'string' && states.get(id)?.state === 'running') {
        const fraction = total && total > 0 && Number.isFinite(value) ? Math.min(1, Math.max(0, value / total)) : null;
        set(id, { state: 'running', progress: fraction });
      }
    } else if (event.type === 'execution_cached') {
      for (const id of Array.isArray(p.nodes) ? p.nodes : []) {
        set(id, { state: 'cached', progress: null });
      }
    } else if (event.type === 'execution_start') {
      for (const id of states.keys()) {
        set(id, { state: 'queued', progress: null });
      }
    } else if (event.type === 'execution_stopped' || event.type === 'execution_error' || event.type === 'execution_complete') {
      // Nodes still running when the run closed did not finish; nodes still waiting never ran.
      for (const [id, view] of states) {
        if (view.state === 'running') {
          set(id, { state: event.type === 'execution_error' ? 'failed' : 'cancelled', progress: null });
        } else if (view.state === 'queued') {
          set(id, { state: 'skipped', progress: null });
        }
      }
    }
  }
  return changed;
}

/** How many nodes are in each state (the viewer's legend line). */
export function stateCounts(states: NodeStates): Record<NodeState, number> {
  const counts: Record<NodeState, number> = {
    queued: 0, running: 0, cached: 0, done: 0, failed: 0, cancelled: 0, skipped: 0
  };
  for (const view of states.values()) {
    counts[view.state]++;
  }
  return counts;
}

/** After a run that succeeded: a node that never ran because the nodes after it came from the
 * cache is "done from cache" too (its result is in theirs), not grey. `edges` source → target;
 * returns how many nodes changed. */
export function coverByCache(states: NodeStates, edges: { source: string; target: string }[]): number {
  const succ = new Map<string, string[]>();
  for (const e of edges) {
    succ.set(e.source, [...(succ.get(e.source) ?? []), e.target]);
  }
  // walk back from every cached node through skipped predecessors
  const preds = new Map<string, string[]>();
  for (const [source, targets] of succ) {
    for (const target of targets) {
      preds.set(target, [...(preds.get(target) ?? []), source]);
    }
  }
  const stack = Array.from(states).filter(([, v]) => v.state === 'cached').map(([id]) => id);
  let changed = 0;
  while (stack.length) {
    for (const p of preds.get(stack.pop()!) ?? []) {
      if (states.get(p)?.state === 'skipped') {
        states.set(p, { state: 'cached', progress: null });
        changed++;
        stack.push(p);
      }
    }
  }
  return changed;
}

/** The nodes a refusal names (a 400 invalid_graph's params.problems: unknown type, missing input,
 * ...), node id → its reasons joined; graph-level problems (no node_id) are left to the message. */
export function refusedNodes(body: unknown): Map<string, string> {
  const out = new Map<string, string>();
  const problems = (body as { error?: { params?: { problems?: unknown } } } | null)?.error?.params?.problems;
  if (!Array.isArray(problems)) {
    return out;
  }
  for (const p of problems as { node_id?: unknown; message?: unknown; field?: unknown }[]) {
    if (p && typeof p.node_id === 'string' && typeof p.message === 'string') {
      const reason = p.field ? `${String(p.field)}: ${p.message}` : p.message;
      out.set(p.node_id, out.has(p.node_id) ? `${out.get(p.node_id)}; ${reason}` : reason);
    }
  }
  return out;
}
