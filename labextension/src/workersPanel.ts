// The Workers panel (left sidebar): each worker's state pill (every state the API returns has a
// tone), a degraded pill naming the node types it lacks, devices with slots (taken/limit) and
// same-card marks, heartbeat age, the runs it executes; Drain / Undrain / Remove; and "Add
// worker", which issues a one-time enrollment token and shows the exact `codefy agent start`
// command with a Copy button; under the cards, the agents the server refused (version mismatch,
// name taken), by name, with the reason. Worker state is not on /ws/execution: the panel re-reads
// the list every 10 s (the Settings Editor's refreshSeconds) while it is visible (and on
// Refresh); the heartbeat age ticks locally each second.

import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { ApiError, CodefyApi } from './api';
import { copyText, h } from './dom';
import { deviceCells, heartbeatAge, Trans, workerCount, WorkerRow, workerRows } from './format';
import { renderError, renderNotice } from './messages';
import { DEFAULT_PREFERENCES } from './settings';
import type { Enrollment, Worker, WorkerList } from './types';

export class WorkersPanel extends Widget {
  private listing: WorkerList | null = null;
  private enrollment: Enrollment | null = null;
  private error = '';
  private copied = false;
  private timer: ReturnType<typeof setInterval> | null = null;
  private ticks = 0;
  /** the Settings Editor's refreshSeconds; index.ts keeps it current */
  refreshSeconds = DEFAULT_PREFERENCES.refreshSeconds;
  private readonly body: HTMLElement;

  constructor(private readonly api: CodefyApi, private readonly trans: Trans) {
    super();
    this.id = 'codefy-workers';
    this.addClass('cdf-panel');
    this.addClass('cdf-workers-panel');
    this.body = h('div', { class: 'cdf-panel-body' });
    this.node.append(this.body);
    this.draw();
  }

  start(): Promise<void> {
    if (!this.timer) {
      this.timer = setInterval(() => {
        if (!this.isVisible) {
          return;
        }
        this.ticks += 1;
        if (this.ticks >= this.refreshSeconds) {
          this.ticks = 0;
          void this.refresh();
        } else {
          this.tickAges();
        }
      }, 1000);
    }
    return this.refresh();
  }

  /** Shown again (its sidebar tab clicked): read the list now rather than at the next poll. */
  protected onAfterShow(): void {
    this.ticks = 0;
    void this.refresh();
  }

  async refresh(): Promise<void> {
    try {
      this.listing = await this.api.listWorkers();
      this.error = '';
    } catch (err) {
      this.error = this.describe(err);
    }
    this.draw();
  }

  private describe(err: unknown): string {
    return err instanceof ApiError ? renderError(err.body, this.trans, err.message) : String(err);
  }

  private worker(id: string): Worker | undefined {
    return this.listing?.workers.find(w => (w.id || w.name) === id);
  }

  private async act(action: 'drain' | 'undrain' | 'remove', row: WorkerRow): Promise<void> {
    const t = this.trans;
    try {
      if (action === 'remove') {
        const answer = await showDialog({
          title: t.__('Remove worker %1?', row.name),
          body: t.__('Its token is revoked, it is disconnected, and the runs queued for it fail.'),
          buttons: [Dialog.cancelButton({ label: t.__('Cancel') }), Dialog.warnButton({ label: t.__('Remove') })]
        });
        if (!answer.button.accept) {
          return;
        }
        await this.api.removeWorker(row.id);
      } else {
        await this.api.drain(row.id, action === 'drain');
      }
    } catch (err) {
      this.error = this.describe(err);
    }
    await this.refresh();
  }

  async addWorker(): Promise<void> {
    try {
      this.enrollment = await this.api.enroll();
      this.copied = false;
      this.error = '';
    } catch (err) {
      this.error = this.describe(err);
    }
    this.draw();
  }

  private tickAges(): void {
    const now = Date.now() / 1000;
    for (const cell of Array.from(this.node.querySelectorAll<HTMLElement>('.cdf-heartbeat'))) {
      const worker = this.worker(cell.dataset.worker || '');
      if (worker) {
        cell.textContent = heartbeatAge(worker.last_seen_at, now, this.trans);
      }
    }
  }

  private actionLabel(action: 'drain' | 'undrain' | 'remove'): string {
    const t = this.trans;
    return { drain: t.__('Drain'), undrain: t.__('Undrain'), remove: t.__('Remove') }[action];
  }

  private card(row: WorkerRow, worker: Worker, now: number): HTMLElement {
    const t = this.trans;
    return h('div', { class: 'cdf-worker', dataset: { worker: row.name, state: row.state } },
      h('div', { class: 'cdf-worker-head' },
        h('b', { class: 'cdf-worker-name' }, row.name),
        h('span', { class: `cdf-status cdf-tone-${row.tone}`, dataset: { tone: row.tone } }, row.state),
        row.degraded ? h('span', {
          class: 'cdf-status cdf-tone-warn cdf-degraded',
          title: row.missingTypes.length ? t.__('lacks node types: %1', row.missingTypes.join(', ')) : t.__('node catalog differs')
        }, t.__('degraded')) : null,
        row.sameHost ? h('span', { class: 'cdf-sub-inline' }, t.__('this machine')) : null,
        h('span', { class: 'cdf-heartbeat', dataset: { worker: row.id }, title: t.__('last heard from') },
          heartbeatAge(worker.last_seen_at, now, t))),
      row.degraded && row.missingTypes.length
        ? h('div', { class: 'cdf-note' }, t.__('lacks node types: %1', row.missingTypes.join(', '))) : null,
      this.devices(row.devices),
      h('div', { class: 'cdf-worker-foot' },
        h('span', { class: 'cdf-sub-inline', title: row.running.join('\n') }, t.__('running: %1', row.running.length)),
        h('span', { class: 'cdf-actions' }, row.actions.map(action => h('button', {
          class: action === 'remove' ? 'cdf-danger' : '', dataset: { action },
          onclick: () => void this.act(action, row)
        }, this.actionLabel(action))))));
  }

  private devices(devices: ReturnType<typeof deviceCells>): HTMLElement {
    const t = this.trans;
    if (!devices.length) {
      return h('div', { class: 'cdf-sub' }, t.__('no devices reported'));
    }
    return h('table', { class: 'cdf-table cdf-devices' },
      h('thead', {}, h('tr', {}, h('th', {}, t.__('Device')), h('th', {}, t.__('Slots')), h('th', {}, ''))),
      h('tbody', {}, devices.map(d => h('tr', {},
        h('td', { class: 'cdf-mono' }, d.name),
        h('td', { title: t.__('taken/limit') }, d.slots),
        h('td', { class: 'cdf-sub-inline' }, d.marks.join('; '))))));
  }

  private enrollBox(): HTMLElement | null {
    const t = this.trans;
    const e = this.enrollment;
    if (!e) {
      return null;
    }
    const expires = new Date(e.expires_at * 1000).toLocaleString();
    return h('div', { class: 'cdf-enroll' },
      h('div', {}, t.__('On the new worker, run (the token works once, until %1):', expires)),
      h('pre', { class: 'cdf-command cdf-mono' }, e.command),
      h('div', { class: 'cdf-toolbar' },
        h('button', { class: 'cdf-copy', onclick: async () => {
          this.copied = await copyText(e.command);
          this.draw();
        } }, this.copied ? t.__('Copied') : t.__('Copy')),
        h('button', { onclick: () => { this.enrollment = null; this.draw(); } }, t.__('Done'))));
  }

  private draw(): void {
    const t = this.trans;
    const now = Date.now() / 1000;
    const workers = this.listing?.workers ?? [];
    const rows = workerRows(workers, t);
    const local = deviceCells(this.listing?.local, t);
    this.body.replaceChildren(...[
      h('div', { class: 'cdf-title' }, t.__('Workers')),
      h('div', { class: 'cdf-toolbar' },
        h('button', { class: 'cdf-add-worker', onclick: () => void this.addWorker() }, t.__('Add worker')),
        h('span', { class: 'cdf-count' }, this.listing ? workerCount(workers.length, t) : ''),
        h('button', { class: 'cdf-refresh', onclick: () => void this.refresh() }, t.__('Refresh'))),
      this.error ? h('div', { class: 'cdf-error' }, this.error) : null,
      this.enrollBox(),
      local.length ? h('div', { class: 'cdf-worker cdf-local' },
        h('div', { class: 'cdf-worker-head' }, h('b', {}, t.__('This server'))), this.devices(local)) : null,
      rows.length
        ? h('div', { class: 'cdf-workers' }, rows.map(row => this.card(row, this.worker(row.id)!, now)))
        : h('div', { class: 'cdf-empty' }, this.listing ? t.__('no workers connected') : t.__('loading…')),
      this.refusals(now)
    ].filter((n): n is HTMLElement => n !== null));
  }

  /** Agents the server turned away, by name, with the reason (until that name connects). */
  private refusals(now: number): HTMLElement | null {
    const t = this.trans;
    const refused = this.listing?.refused ?? [];
    if (!refused.length) {
      return null;
    }
    return h('div', { class: 'cdf-refusals' }, h('div', { class: 'cdf-subtitle' }, t.__('Refused agents')),
      refused.map(r => h('div', { class: 'cdf-refusal-row', dataset: { worker: r.name, code: r.code } },
        h('b', {}, r.name), ' ', h('span', { class: 'cdf-sub-inline' }, heartbeatAge(r.at, now, t)),
        h('div', { class: 'cdf-error' }, renderNotice(r, t)))));
  }

  dispose(): void {
    if (this.timer) {
      clearInterval(this.timer);
    }
    super.dispose();
  }
}
