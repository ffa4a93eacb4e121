// The one message catalog: everything the server says with a code ({code, message, params}: a
// queue_reason, a refusal, a worker's reject reason) is rendered here through Lab's translator,
// so a language pack can translate it (its msgids are the English templates below, with %1…
// placeholders). A code the catalog does not know shows the server's own English message.

import type { Notice } from './types';
import type { Trans } from './format';

type Params = Record<string, unknown>;
type Render = (t: Trans, p: Params) => string | null;

function list(value: unknown): string {
  return Array.isArray(value) ? value.map(String).join(', ') : String(value ?? '');
}

function has(p: Params, ...keys: string[]): boolean {
  return keys.every(k => p[k] !== undefined && p[k] !== null);
}

/** code -> its template(s); null when the params are not what the template needs. */
export const CATALOG: Record<string, Render> = {
  // waiting reasons (core/scheduling/placement.py, offer_pass.py)
  worker_disconnected: (t, p) => has(p, 'worker') ? t.__('waiting for worker %1 to reconnect', p.worker) : null,
  worker_draining: (t, p) => has(p, 'worker') ? t.__('worker %1 is draining', p.worker) : null,
  waiting_for_offer: (t, p) => {
    if (!has(p, 'devices')) {
      return null;
    }
    if (p.worker && p.worker !== 'any') {
      return t.__('waiting for worker %1 to offer %2', p.worker, list(p.devices));
    }
    const draining = Array.isArray(p.draining) ? p.draining : [];
    if (draining.length === 1) {
      return t.__('waiting for a worker that offers %1: %2 is draining', list(p.devices), draining[0]);
    }
    if (draining.length > 1) {
      return t.__('waiting for a worker that offers %1: %2 are draining', list(p.devices), list(draining));
    }
    return t.__('waiting for a worker that offers %1', list(p.devices));
  },
  one_shot_pool: (t, p) => has(p, 'devices') ? t.__('waiting for a one-shot worker that offers %1', list(p.devices)) : null,
  one_shot_taken: (t, p) => has(p, 'worker') ? t.__('one-shot worker %1 has already taken its run', p.worker) : null,
  one_shot_run_id: (t, p) => has(p, 'worker', 'run_id') ? t.__('one-shot worker %1 was started for run %2', p.worker, p.run_id) : null,
  seeded_run_executing: (t, p) => has(p, 'run_id')
    ? t.__('waiting for seeded run %1 to finish: a seeded run executes alone', p.run_id) : null,
  waiting_for_seeded_run: (t, p) => has(p, 'run_id')
    ? t.__('waiting for seeded run %1, which must execute alone, to start', p.run_id) : null,
  device_reserved: (t, p) => has(p, 'device', 'run_id')
    ? t.__('%1 is reserved for run %2, which waits ahead of this run', p.device, p.run_id) : null,
  waiting_for_set_devices: (t, p) => has(p, 'devices')
    ? t.__('waiting for %1: a device-set run starts when every device is free', list(p.devices)) : null,
  waiting_to_run_alone: (t, p) => {
    if (!has(p, 'running')) {
      return null;
    }
    return Number(p.running) === 1
      ? t.__('a seeded run executes alone: waiting for 1 run to finish')
      : t.__('a seeded run executes alone: waiting for %1 runs to finish', p.running);
  },
  behind_waiting_run: (t, p) => has(p, 'run_id')
    ? t.__('behind run %1, which waits for more than its turn', p.run_id) : null,
  // per-owner quotas (core/scheduling/quotas.py); owner null: the runs nobody is identified for
  owner_quota: (t, p) => {
    if (!has(p, 'running', 'limit')) {
      return null;
    }
    return p.owner
      ? t.__("waiting for %1's run quota (%2 running of %3)", p.owner, p.running, p.limit)
      : t.__('waiting for the shared run quota (%1 running of %2)', p.running, p.limit);
  },
  // a refusal of the requester's own submit, so it speaks to them
  owner_queue_full: (t, p) => {
    if (!has(p, 'queued', 'limit', 'adding')) {
      return null;
    }
    return Number(p.adding) === 1
      ? t.__('runs you have waiting: %1, at most %2 per user; submit again once one has started', p.queued, p.limit)
      : t.__('runs you have waiting: %1, at most %2 per user; %3 more would exceed it', p.queued, p.limit, p.adding);
  },
  // cards shared by memory (core/scheduling/memory_ledger.py)
  memory_wait: (t, p) => {
    if (!has(p, 'device', 'need_mib')) {
      return null;
    }
    return has(p, 'free_mib')
      ? t.__('waiting for memory on %1: needs %2 MiB (budget and CUDA context), %3 MiB free', p.device, p.need_mib, p.free_mib)
      : t.__('waiting for %1 to report its free memory (needs %2 MiB)', p.device, p.need_mib);
  },
  memory_no_budget: (t, p) => {
    if (!has(p, 'device')) {
      return null;
    }
    return p.whole === false
      ? t.__('waiting for %1: a run without a memory budget has the card whole', p.device)
      : t.__('waiting for %1 to empty: it is shared by memory and this run has no budget (options.target.memory_gib), so it takes the card whole', p.device);
  },
  budget_raised: (t, p) => has(p, 'device', 'estimate_gib', 'memory_gib')
    ? t.__('the estimated budget was raised from %1 to %2 GiB; waiting for it on %3', p.estimate_gib, p.memory_gib, p.device)
    : null,
  memory_budget_local: t => t.__('a memory budget applies to a worker\'s card shared by memory; this server\'s runs are admitted by slot count (name a worker, or any)'),
  memory_over_card: (t, p) => has(p, 'device', 'total_mib', 'need_mib')
    ? t.__('%1 has %2 MiB in all; this run needs %3 MiB (budget and CUDA context)', p.device, p.total_mib, p.need_mib) : null,
  // refusals the panels' actions can meet (server/handlers.py, core/workers/access.py)
  not_worker_owner: (t, p) => has(p, 'worker', 'action')
    ? t.__('only an admin or %1 may %2 worker %3', p.enrolled_by ?? t.__('an admin'), p.action, p.worker) : null,
  worker_not_found: (t, p) => has(p, 'worker') ? t.__('no worker %1', p.worker) : null,
  unauthenticated: t => t.__('not signed in: reload the page and sign in again'),
  forbidden: t => t.__('you are not allowed to do that on this server')
};

/** A notice in the panel's language: the catalog's template, else the server's message. */
export function renderNotice(notice: Notice | string | null | undefined, t: Trans): string {
  if (!notice) {
    return '';
  }
  if (typeof notice === 'string') {
    return notice;
  }
  const render = CATALOG[notice.code];
  const text = render ? render(t, notice.params || {}) : null;
  return text ?? notice.message ?? notice.code;
}

/** The error of a refused request (`{"error": {...}}`), with the failing field when it has one. */
export function renderError(body: unknown, t: Trans, fallback: string): string {
  const error = (body as { error?: Notice } | null)?.error;
  if (!error || typeof error !== 'object') {
    return fallback;
  }
  const text = renderNotice(error, t);
  const field = error.params?.field;
  return field ? t.__('%1 (field: %2)', text, field) : text;
}
