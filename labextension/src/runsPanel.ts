// The Runs panel (left sidebar): the newest 50 runs, newest first, with filter chips applied by
// the server before the cut, "50 of 312" next to Refresh, Queue #N / Any queue #N with the queue
// on hover, the queue_reason line under a waiting row, and Stop / Watch / CSV / Delete. Live: one
// /ws/execution subscription to every run; a run new to the list is read alone and drawn at once, a
// changed status is written on its row and refreshes the list (coalesced), and durations of active
// runs tick locally; no timer polls the server.
// Columns by priority (style/index.css, a container query on the panel's width): a narrow panel
// (the default sidebar) shows the run, its status and place (Queue #N, devices) on a line and the
// actions under them, the rest in the row's hover; wider panels add columns. "Open in main area"
// opens the same panel, all columns, as a main-area tab (the `wide` option).

import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { ApiError, CodefyApi } from './api';
import { download, h } from './dom';
import {
  Action, Chip, chipLabel, CHIPS, countLabel, csvFilename, displayName, durationOf, formatDuration, formatTime, isActive,
  rowSummary, Trans
} from './format';
import { LiveSocket } from './live';
import { renderError } from './messages';
import { RunList, runRow } from './runList';
import type { EventsFrame, Run } from './types';

export interface RunsPanelOptions {
  api: CodefyApi;
  trans: Trans;
  /** open a run's detail (Watch, or a click on its name) */
  openRun: (id: string) => void;
  /** New sweep from the open graph */
  newSweep?: () => void;
  /** the Studies panel */
  openStudies?: () => void;
  /** "Open in main area": the full table as a main-area tab (the sidebar panel has this) */
  openWide?: () => void;
  /** the main-area instance: its own id, every column whatever the width */
  wide?: boolean;
}

const REFRESH_COALESCE_MS = 250;

export class RunsPanel extends Widget {
  private readonly list = new RunList('all');
  private error = '';
  private live: LiveSocket | null = null;
  private refreshTimer: ReturnType<typeof setTimeout> | null = null;
  private inFlight: Promise<void> | null = null;
  private again = false;
  private tick: ReturnType<typeof setInterval> | null = null;
  private frame: number | null = null;
  private readonly body: HTMLElement;

  constructor(private readonly options: RunsPanelOptions) {
    super();
    this.id = options.wide ? 'codefy-runs-wide' : 'codefy-runs';
    this.addClass('cdf-panel');
    this.addClass('cdf-runs-panel');
    if (options.wide) {
      this.addClass('cdf-runs-wide');
    }
    this.body = h('div', { class: 'cdf-panel-body' });
    this.node.append(this.body);
    this.draw();
  }

  get trans(): Trans {
    return this.options.trans;
  }

  /** Start following: the first page, then the socket (every run, batched). */
  start(): Promise<void> {
    if (!this.live) {
      this.live = new LiveSocket({
        url: () => this.options.api.socketUrl(),
        subscription: () => ({ type: 'subscribe', all: true, batch: true }),
        onEvents: frame => this.onEvents(frame),
        onOpen: () => this.scheduleRefresh()
      });
    }
    if (!this.tick) {
      this.tick = setInterval(() => this.tickDurations(), 1000);
    }
    return this.refresh();
  }

  get runs(): Run[] {
    return this.list.runs;
  }

  private get chip(): Chip {
    return this.list.chip;
  }

  setChip(chip: Chip): Promise<void> {
    this.list.reset(chip);
    this.draw();
    return this.refresh();
  }

  /** Fetch the page now; a request made while one is in flight runs once after it. */
  refresh(): Promise<void> {
    if (this.inFlight) {
      this.again = true;
      return this.inFlight;
    }
    this.inFlight = (async () => {
      try {
        do {
          this.again = false;
          const read = this.list.beginRead();
          try {
            this.list.listed(read, await this.options.api.listRuns(this.chip));
            this.error = '';
          } catch (err) {
            this.error = err instanceof ApiError ? renderError(err.body, this.trans, err.message) : String(err);
          }
          this.draw();
        } while (this.again);
      } finally {
        this.inFlight = null;
      }
    })();
    return this.inFlight;
  }

  private scheduleRefresh(): void {
    if (this.refreshTimer === null) {
      this.refreshTimer = setTimeout(() => {
        this.refreshTimer = null;
        void this.refresh();
      }, REFRESH_COALESCE_MS);
    }
  }

  private onEvents(frame: EventsFrame): void {
    const action = this.list.onFrame(frame.run_id, frame.status);
    if (action.fetch) {
      void this.lookUp(frame.run_id);
    }
    if (action.status) {
      this.showStatus(frame.run_id, frame.status);
    }
    if (action.readNow) {
      void this.refresh();
    } else if (action.refresh) {
      this.scheduleRefresh();
    }
  }

  /** A run the list does not hold yet, read alone and drawn as soon as it answers: a run that ended
   * before the list showed it used to wait for the coalesced re-read of the whole list. */
  private async lookUp(id: string): Promise<void> {
    let run: Run;
    try {
      run = await this.options.api.getRun(id);
    } catch {
      this.list.lookupFailed(id);
      return;
    }
    if (this.isDisposed) {
      return;
    }
    const { changed, refresh } = this.list.fetched(run);
    if (changed) {
      this.drawSoon();
    }
    if (refresh) {
      this.scheduleRefresh();
    }
  }

  /** The new status on its row at once; the coalesced re-read brings the rest (actions, times,
   * loss) a moment later. Without it a status waited out the coalescing and a round trip. */
  private showStatus(runId: string, status: string): void {
    const row = this.node.querySelector<HTMLElement>(`tr.cdf-row[data-run-id="${CSS.escape(runId)}"]`);
    const pill = row?.querySelector('.cdf-col-status .cdf-status');
    if (row && pill) {
      row.dataset.status = status;
      pill.className = `cdf-status cdf-${status}`;
      pill.textContent = status;
    }
  }

  private tickDurations(): void {
    if (!this.isVisible) {
      return;
    }
    const now = Date.now() / 1000;
    for (const run of this.runs) {
      if (run.status === 'running') {
        const cell = this.node.querySelector(`tr[data-run-id="${CSS.escape(run.id)}"] .cdf-col-duration`);
        if (cell) {
          cell.textContent = formatDuration(durationOf(run, now));
        }
      }
    }
  }

  private async act(action: Action, run: Run): Promise<void> {
    const t = this.trans;
    try {
      if (action === 'stop') {
        await this.options.api.cancelRun(run.id);
        this.scheduleRefresh();
      } else if (action === 'watch') {
        this.options.openRun(run.id);
      } else if (action === 'csv') {
        download(csvFilename(run.id), await this.options.api.metricsCsv(run.id));
      } else if (action === 'delete') {
        const answer = await showDialog({
          title: t.__('Delete run %1?', displayName(run)),
          body: t.__('Its metrics, event log, artifact records and captured outputs are removed; checkpoint files on disk are kept.'),
          buttons: [Dialog.cancelButton({ label: t.__('Cancel') }), Dialog.warnButton({ label: t.__('Delete') })]
        });
        if (answer.button.accept) {
          await this.options.api.deleteRun(run.id);
          await this.refresh();
        }
      }
    } catch (err) {
      this.error = err instanceof ApiError ? renderError(err.body, t, err.message) : String(err);
      this.draw();
    }
  }

  private actionLabel(action: Action): string {
    const t = this.trans;
    return { stop: t.__('Stop'), watch: t.__('Watch'), csv: t.__('CSV'), delete: t.__('Delete') }[action];
  }

  private toolbar(): HTMLElement {
    const t = this.trans;
    return h('div', { class: 'cdf-toolbar' },
      h('div', { class: 'cdf-chips' }, CHIPS.map(chip => h('button', {
        class: 'cdf-chip' + (chip === this.chip ? ' cdf-active' : ''),
        dataset: { filter: chip },
        onclick: () => void this.setChip(chip)
      }, chipLabel(chip, t)))),
      h('span', { class: 'cdf-count', title: t.__('runs listed of the runs matching the filter') },
        this.list.page ? countLabel(this.runs.length, this.list.page.total, t) : ''),
      h('button', { class: 'cdf-refresh', onclick: () => void this.refresh() }, t.__('Refresh')),
      this.options.newSweep ? h('button', { class: 'cdf-new-sweep', title: t.__('Sweep parameters of the open graph'),
        onclick: () => this.options.newSweep!() }, t.__('New sweep')) : null,
      this.options.openStudies ? h('button', { class: 'cdf-studies', onclick: () => this.options.openStudies!() },
        t.__('Studies')) : null,
      this.options.openWide ? h('button', { class: 'cdf-open-wide', title: t.__('Every column, in a main-area tab'),
        onclick: () => this.options.openWide!() }, t.__('Open in main area')) : null);
  }

  private row(run: Run, odd: boolean, now: number): HTMLElement[] {
    const t = this.trans;
    const text = runRow(run, now, t);
    const { queue, worker, budget, duration } = text;
    const cls = odd ? 'cdf-row cdf-odd' : 'cdf-row';
    const started = formatTime(run.started_at);
    const lossText = text.final_loss;
    // In priority order: the narrow panel shows the first three (and the actions).
    const cells: [string, HTMLElement | string][] = [
      ['name', h('span', {},
        h('a', { class: 'cdf-run-link', title: run.id, href: '#', onclick: (e: Event) => {
          e.preventDefault();
          this.options.openRun(run.id);
        } }, text.name),
        h('span', { class: 'cdf-sub cdf-mono' }, run.id.slice(0, 12)))],
      ['status', h('span', { class: `cdf-status cdf-${run.status}` }, run.status)],
      ['devices', h('span', {}, h('span', { class: 'cdf-device-list', title: text.devices_title }, text.devices),
        queue ? h('span', { class: 'cdf-sub cdf-queue', title: text.queue_title }, queue) : null)],
      ['duration', duration],
      ['worker', worker],
      ['budget', budget],
      ['started', started],
      ['loss', h('span', { title: text.final_loss_title }, lossText)]
    ];
    const title = rowSummary([[t.__('Worker'), worker], [t.__('Budget'), budget], [t.__('Started'), started],
      [t.__('Duration'), duration], [t.__('Final loss'), lossText]]);
    const rows = [h('tr', { class: cls, title, dataset: { runId: run.id, status: run.status } },
      cells.map(([key, content]) => h('td', { class: `cdf-col-${key}` }, content)),
      h('td', { class: 'cdf-actions' }, text.actions.map(action => h('button', {
        class: action === 'stop' || action === 'delete' ? 'cdf-danger' : '',
        dataset: { action },
        onclick: () => void this.act(action, run)
      }, this.actionLabel(action)))))];
    const reason = text.reason;
    if (reason) {
      rows.push(h('tr', { class: `cdf-reason-row ${odd ? 'cdf-odd' : ''}`, dataset: { runId: run.id } },
        h('td', { class: 'cdf-reason', title: reason, colspan: String(cells.length + 1) }, reason)));
    }
    return rows;
  }

  private table(): HTMLElement {
    const t = this.trans;
    if (!this.runs.length) {
      return h('div', { class: 'cdf-empty' }, this.list.page ? t.__('no runs') : t.__('loading…'));
    }
    const now = Date.now() / 1000;
    const headers: [string, string][] = [['name', t.__('Run')], ['status', t.__('Status')], ['devices', t.__('Devices')],
      ['duration', t.__('Duration')], ['worker', t.__('Worker')], ['budget', t.__('Budget')],
      ['started', t.__('Started')], ['loss', t.__('Final loss')], ['actions', '']];
    return h('table', { class: 'cdf-table cdf-runs-table' },
      h('thead', {}, h('tr', {}, headers.map(([key, label]) => h('th', { class: `cdf-col-${key}` }, label)))),
      h('tbody', {}, this.runs.flatMap((run, i) => this.row(run, i % 2 === 0, now))));
  }

  /** One redraw at the next frame for the lookups that answer before it. */
  private drawSoon(): void {
    if (this.frame === null) {
      this.frame = requestAnimationFrame(() => {
        this.frame = null;
        this.draw();
      });
    }
  }

  private draw(): void {
    this.body.replaceChildren(...[
      h('div', { class: 'cdf-title' }, this.trans.__('Runs')),
      this.toolbar(),
      this.error ? h('div', { class: 'cdf-error' }, this.error) : null,
      h('div', { class: 'cdf-scroll' }, this.table())
    ].filter((n): n is HTMLElement => n !== null));
  }

  /** How many listed runs are queued or running (the toast on load). */
  activeCount(): number {
    return this.runs.filter(r => isActive(r.status)).length;
  }

  /** The main-area tab is gone once closed (its socket and timer with it); the sidebar's stays. */
  protected onCloseRequest(msg: Parameters<Widget['processMessage']>[0]): void {
    super.onCloseRequest(msg);
    if (this.options.wide) {
      this.dispose();
    }
  }

  dispose(): void {
    this.live?.dispose();
    if (this.tick) {
      clearInterval(this.tick);
    }
    if (this.refreshTimer) {
      clearTimeout(this.refreshTimer);
    }
    if (this.frame !== null) {
      cancelAnimationFrame(this.frame);
    }
    super.dispose();
  }
}
