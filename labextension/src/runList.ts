// What the Runs panel lists and how a socket frame changes it, pure (the panel does the requests
// and the drawing). A frame for a run the list does not hold yet asks for that one run (GET
// runs/{id}) and the answer is placed in the list at once: waiting for the coalesced re-read of the
// whole list put 250 ms and a list query between a short run's end and its row. One lookup per run,
// however many frames it streams meanwhile, and a few at a time: when many runs are new at once
// (a sweep, a burst of submits) one list read at once brings them all, where a lookup each queued
// behind the browser's few connections and redrew the table per answer. A status change of a listed
// run is written on its row and leaves the re-read of the rest (actions, times, loss) to the
// coalesced refresh.

import {
  allowedActions, budgetLabel, cardsTitle, devicesLabel, displayName, durationOf, FILTERS, formatDuration, formatLoss, LIST_LIMIT,
  queueLabel, workerLabel
} from './format';
import type { Action, Chip, Trans } from './format';
import { renderNotice } from './messages';
import type { Run, RunPage } from './types';

/** What the panel should do about one frame. */
export interface FrameAction {
  /** GET this run and hand it to `fetched` */
  fetch: boolean;
  /** the listed run's status changed: write it on its row */
  status: boolean;
  /** schedule the coalesced re-read of the list */
  refresh: boolean;
  /** read the list now: too many lookups are out already */
  readNow: boolean;
}

const NOTHING: FrameAction = { fetch: false, status: false, refresh: false, readNow: false };

/** Lookups out at once; the next new run is brought by a list read. */
export const MAX_LOOKUPS = 2;

interface Lookup {
  /** the newest status a frame gave while the run is being read */
  status: string;
  /** left to the list read begun after this read number (not looked up alone) */
  byRead?: number;
}

/** Later in a run's life is higher: a frame that arrives while its run is being read may be newer
 * than the answer. */
function stage(status: string): number {
  if (status === 'queued') {
    return 0;
  }
  return status === 'running' || status === 'disconnected' ? 1 : 2;
}

export function listedBy(chip: Chip, status: string): boolean {
  const statuses = FILTERS[chip];
  return statuses === null || statuses.includes(status);
}

/** `page` with `run` in it, newest submit first, cut at `limit`; null when the run would not be
 * listed (not in the chip, or older than the last row of a full page). A run already listed is
 * replaced where it is; a new one adds one to the total. */
export function placeRun(page: RunPage, run: Run, chip: Chip, limit = LIST_LIMIT): RunPage | null {
  if (!listedBy(chip, run.status)) {
    return null;
  }
  const at = page.runs.findIndex(r => r.id === run.id);
  if (at >= 0) {
    const runs = page.runs.slice();
    runs[at] = run;
    return { ...page, runs };
  }
  const submitted = run.submitted_at ?? Infinity;
  let index = page.runs.findIndex(r => (r.submitted_at ?? 0) < submitted);
  if (index < 0) {
    index = page.runs.length;
  }
  if (index >= limit) {
    return null;
  }
  const runs = page.runs.slice(0, index).concat([run], page.runs.slice(index)).slice(0, limit);
  return { ...page, runs, total: page.total + 1 };
}

export class RunList {
  private current: RunPage | null = null;
  private statuses = new Map<string, string>();
  private lookups = new Map<string, Lookup>();
  /** runs placed from a lookup, with the list read that was in flight then */
  private placed = new Map<string, { run: Run; read: number }>();
  private reads = 0;

  constructor(public chip: Chip = 'all', private readonly maxLookups = MAX_LOOKUPS) {}

  get page(): RunPage | null {
    return this.current;
  }

  get runs(): Run[] {
    return this.current?.runs ?? [];
  }

  /** A list read starts; its number goes back with its answer to `listed`. */
  beginRead(): number {
    return ++this.reads;
  }

  /** A list read's answer. A run placed while it was in flight and missing from it (the read
   * began before the run existed) is kept: nothing else would bring back a run that has ended. */
  listed(read: number, page: RunPage): void {
    for (const [id, lookup] of this.lookups) {
      // a read begun after the run was left to it has it, or it is not listed (its next frame asks again)
      if (lookup.byRead !== undefined && lookup.byRead < read) {
        this.lookups.delete(id);
      }
    }
    let next = page;
    for (const [id, entry] of this.placed) {
      if (entry.read < read) {
        this.placed.delete(id);
      } else if (!next.runs.some(r => r.id === id)) {
        next = placeRun(next, entry.run, this.chip) ?? next;
      }
    }
    this.setPage(next);
  }

  /** The chip changed or a read failed: forget what was placed. */
  reset(chip: Chip): void {
    this.chip = chip;
    this.placed.clear();
    this.lookups.clear();
  }

  statusOf(id: string): string | undefined {
    return this.statuses.get(id);
  }

  onFrame(runId: string, status: string): FrameAction {
    const known = this.statuses.get(runId);
    if (known === undefined) {
      const lookup = this.lookups.get(runId);
      if (lookup) {
        lookup.status = status;
        return NOTHING;
      }
      if (!listedBy(this.chip, status)) {
        return NOTHING;
      }
      let out = 0;
      for (const l of this.lookups.values()) {
        out += l.byRead === undefined ? 1 : 0;
      }
      if (out >= this.maxLookups) {
        this.lookups.set(runId, { status, byRead: this.reads });
        return { ...NOTHING, readNow: true };
      }
      this.lookups.set(runId, { status });
      return { ...NOTHING, fetch: true };
    }
    if (known === status) {
      return NOTHING;
    }
    this.statuses.set(runId, status);
    const run = this.runs.find(r => r.id === runId);
    if (run) {
      run.status = status;
    }
    return { ...NOTHING, status: true, refresh: true };
  }

  /** The answer of a lookup: `changed` when the list changed (redraw); `refresh` when a frame that
   * came meanwhile, or the list itself, was later than the answer (its status wins; the re-read
   * brings the rest). */
  fetched(run: Run): { changed: boolean; refresh: boolean } {
    const framed = this.lookups.get(run.id)?.status;
    this.lookups.delete(run.id);
    let refresh = false;
    for (const seen of [framed, this.statuses.get(run.id)]) {
      if (seen !== undefined && stage(seen) > stage(run.status)) {
        run = { ...run, status: seen };
        refresh = true;
      }
    }
    if (!listedBy(this.chip, run.status)) {
      return { changed: false, refresh };
    }
    if (this.current === null) {
      // the first read is still out: its answer takes the run in (see `listed`)
      this.placed.set(run.id, { run, read: this.reads });
      return { changed: false, refresh };
    }
    const next = placeRun(this.current, run, this.chip);
    if (!next) {
      return { changed: false, refresh };
    }
    this.placed.set(run.id, { run: next.runs.find(r => r.id === run.id)!, read: this.reads });
    this.setPage(next);
    return { changed: true, refresh };
  }

  /** A lookup failed (the run was deleted meanwhile, or the server is away): the next frame asks
   * again. */
  lookupFailed(id: string): void {
    this.lookups.delete(id);
  }

  private setPage(page: RunPage): void {
    this.current = page;
    this.statuses = new Map(page.runs.map(r => [r.id, r.status]));
  }
}

/** The text of one run's row in the Runs table, every cell a string (the started time aside): the
 * same rule as the notebook's table (kernel/widgets/runs_rows.py table_row), held to it by
 * tests/shared/run_row_vectors.json. */
export interface RunRowText {
  name: string;
  status: string;
  worker: string;
  devices: string;
  devices_title: string;
  queue: string;
  queue_title: string;
  reason: string;
  budget: string;
  duration: string;
  final_loss: string;
  final_loss_title: string;
  actions: Action[];
}

export function runRow(run: Run, now: number, t: Trans): RunRowText {
  const [queue, queueTitle] = queueLabel(run, t);
  const loss = run.final_loss;
  return {
    name: displayName(run),
    status: run.status,
    worker: workerLabel(run, t),
    devices: devicesLabel(run),
    devices_title: cardsTitle(run, t),
    queue,
    queue_title: queueTitle,
    reason: run.status === 'queued' ? renderNotice(run.queue_reason, t) : '',
    budget: budgetLabel(run, t),
    duration: formatDuration(durationOf(run, now)),
    final_loss: formatLoss(loss?.value),
    final_loss_title: loss?.name ?? '',
    actions: allowedActions(run.status)
  };
}
