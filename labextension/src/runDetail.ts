// A run's detail (Watch, or a click on its name in the Runs panel), in the main area: its id with
// Copy id, status, the device it ran on (requested device on hover), seed, Deterministic, Env (the
// first 12 characters of the environment digest, the whole on hover), the error, the metrics charts
// with its Download CSV button (the system metrics sampled while it ran in charts of their own;
// one chart per scale and a Log axis toggle), the recorded artifacts each with Copy path, a
// progress bar per node (progress events fold into it), and the newest 200 other events of its
// log with a filter by kind, which keep arriving while the run is active. Metrics and artifacts
// are read on open and again (at most once a second) after a metric, artifact or closing event.

import { Widget } from '@lumino/widgets';

import { ApiError, CodefyApi } from './api';
import { lineChart } from './chart';
import { copyText, download, h } from './dom';
import {
  csvFilename, devicesLabel, displayName, durationOf, formatDuration, formatLoss, formatTime, isActive, shortDigest,
  Trans, workerLabel
} from './format';
import { LiveSocket } from './live';
import { renderError, renderNotice } from './messages';
import {
  eventKinds, eventLine, EVENTS_KEPT, EVENTS_REPLAYED, eventsOfKind, foldProgress, mergeEvents, ProgressBar, progressText, withoutProgress
} from './events';
import { Artifact, artifactName, artifactPath, chartGroups, inputRows, metricSeries, RECORD_EVENTS } from './runRecords';
import { scaleGroups, Series } from './experiments';
import type { EventsFrame, Run, RunEvent } from './types';

/** Where a child run leads back to: its sweep, its study. */
export interface RunLinks {
  openSweep?: (id: string) => void;
  openStudy?: (id: string) => void;
}

export class RunDetail extends Widget {
  private run: Run | null = null;
  private events: RunEvent[] = [];
  private progress: ProgressBar[] = [];
  private kind = '';
  private lastSeq = 0;
  private log = false;
  private error = '';
  private live: LiveSocket | null = null;
  private series: Series[] = [];
  private systemSeries: Series[][] = [];  // percent, then bytes: the ones the run has
  private artifacts: Artifact[] = [];
  private copied = '';
  private recordsTimer: ReturnType<typeof setTimeout> | null = null;
  private readonly body: HTMLElement;

  constructor(private readonly api: CodefyApi, private readonly trans: Trans, readonly runId: string,
    private readonly links: RunLinks = {}) {
    super();
    this.id = `codefy-run-${runId}`;
    this.addClass('cdf-panel');
    this.addClass('cdf-run-detail');
    this.title.label = trans.__('Run %1', runId.slice(0, 12));
    this.title.closable = true;
    this.body = h('div', { class: 'cdf-panel-body' });
    this.node.append(this.body);
    void this.load();
  }

  private async load(): Promise<void> {
    try {
      this.run = await this.api.getRun(this.runId);
      this.title.label = displayName(this.run);
    } catch (err) {
      this.error = err instanceof ApiError ? renderError(err.body, this.trans, err.message) : String(err);
      this.draw();
      return;
    }
    void this.loadRecords();
    const cursor = Math.max(0, (this.run.last_seq ?? 0) - EVENTS_REPLAYED);
    this.live = new LiveSocket({
      url: () => this.api.socketUrl(),
      subscription: () => ({
        type: 'subscribe', run_id: this.runId,
        cursor: Math.max(cursor, this.lastSeq)
      }),
      onEvents: frame => this.onEvents(frame),
      onError: message => {
        this.error = message;
        this.draw();
      }
    });
    this.draw();
  }

  private onEvents(frame: EventsFrame): void {
    if (frame.run_id !== this.runId) {
      return;
    }
    this.lastSeq = frame.events.reduce((m, e) => Math.max(m, e.seq), this.lastSeq);
    this.progress = foldProgress(this.progress, frame.events);
    this.events = mergeEvents(this.events, withoutProgress(frame.events));
    if (!this.recordsTimer && frame.events.some(e => RECORD_EVENTS.has(e.type))) {
      this.recordsTimer = setTimeout(() => void this.loadRecords(), 1000);
    }
    const changed = this.run && this.run.status !== frame.status;
    if (this.run) {
      this.run.status = frame.status;
    }
    if (changed) {
      void this.api.getRun(this.runId).then(run => {
        this.run = run;
        this.draw();
      }).catch(() => undefined);
    }
    if (this.run && !isActive(frame.status)) {
      this.live?.dispose();
      this.live = null;
    }
    this.draw();
  }

  private async loadRecords(): Promise<void> {
    this.recordsTimer = null;
    try {
      const [metrics, artifacts] = await Promise.all([this.api.metrics(this.runId), this.api.artifacts(this.runId)]);
      const groups = chartGroups(metrics.metrics);
      this.series = metricSeries(groups.own);
      this.systemSeries = [metricSeries(groups.percent), metricSeries(groups.bytes)].filter(s => s.length);
      this.artifacts = artifacts;
    } catch (err) {
      this.error = err instanceof ApiError ? renderError(err.body, this.trans, err.message) : String(err);
    }
    if (!this.isDisposed) {
      this.draw();
    }
  }

  private records(): HTMLElement[] {
    const t = this.trans;
    const parts: HTMLElement[] = [];
    if (this.series.length) {
      parts.push(h('div', { class: 'cdf-subtitle' }, t.__('Metrics'), ' ',
        h('label', { class: 'cdf-log-axis', title: t.__('A log10 y axis: values at or below 0 are left out') },
          h('input', { type: 'checkbox', checked: this.log, onchange: (e: Event) => {
            this.log = (e.target as HTMLInputElement).checked;
            this.draw();
          } }), ' ', t.__('Log axis'))),
      ...scaleGroups(this.series).map(group =>
        h('div', { class: 'cdf-curves cdf-run-metrics' }, lineChart(group, t.__('step'), { log: this.log }))));
    }
    if (this.systemSeries.length) {
      parts.push(h('div', { class: 'cdf-subtitle' }, t.__('System (sampled while it ran)')),
        ...this.systemSeries.map(series =>
          h('div', { class: 'cdf-curves cdf-run-system' }, lineChart(series, t.__('sample'), { log: this.log }))));
    }
    const inputs = inputRows(this.run?.inputs);
    if (inputs.length) {  // options.provenance: what the run read, identified by content
      parts.push(h('div', { class: 'cdf-subtitle' }, t.__('Data and models')),
        h('table', { class: 'cdf-table cdf-inputs' }, h('tbody', {}, inputs.map(r =>
          h('tr', { class: 'cdf-input', dataset: { kind: r.kind, path: r.path } },
            h('td', {}, r.kind),
            h('td', { class: 'cdf-mono', title: r.path }, r.path),
            h('td', { class: 'cdf-mono', title: r.digest }, `sha256:${r.digest}`),
            h('td', {}, r.detail))))));
    }
    if (this.artifacts.length) {
      parts.push(h('div', { class: 'cdf-subtitle' }, t.__('Artifacts')),
        h('table', { class: 'cdf-table cdf-artifacts' }, h('tbody', {}, this.artifacts.map(a => {
          const path = artifactPath(a);
          return h('tr', { class: 'cdf-artifact', dataset: { kind: a.kind, path } },
            h('td', {}, a.kind),
            h('td', { class: 'cdf-mono', title: path }, artifactName(a)),
            h('td', {}, h('button', { class: 'cdf-copy-path', onclick: async () => {
              this.copied = (await copyText(path)) ? path : '';
              this.draw();
            } }, this.copied === path ? t.__('Copied') : t.__('Copy path'))));
        }))));
    }
    return parts;
  }

  private facts(run: Run): HTMLElement {
    const t = this.trans;
    const requested = run.options?.requested_device;
    const rows: [string, HTMLElement | string][] = [
      // The 12 characters Lab shows everywhere: every client and REST reader takes them (a unique
      // prefix of 8 or more stands for its id); Copy id puts the whole id on the clipboard.
      [t.__('Id'), h('span', {}, h('span', { class: 'cdf-mono cdf-run-id', title: run.id }, run.id.slice(0, 12)), ' ',
        h('button', { class: 'cdf-copy-id', onclick: async () => {
          this.copied = (await copyText(run.id)) ? run.id : '';
          this.draw();
        } }, this.copied === run.id ? t.__('Copied') : t.__('Copy id')))],
      [t.__('Status'), h('span', { class: `cdf-status cdf-${run.status}` }, run.status)],
      [t.__('Worker'), workerLabel(run, t)],
      [t.__('Device'), h('span', { title: requested && requested !== run.device ? t.__('requested %1', requested) : '' },
        devicesLabel(run))],
      [t.__('Started'), formatTime(run.started_at)],
      [t.__('Duration'), formatDuration(durationOf(run, Date.now() / 1000))],
      [t.__('Final loss'), formatLoss(run.final_loss?.value)]
    ];
    if (run.seed !== null && run.seed !== undefined) {
      rows.push([t.__('Seed'), String(run.seed)]);
    }
    if (run.deterministic) {
      rows.push([t.__('Deterministic'), t.__('yes')]);
    }
    if (run.fingerprint_digest) {
      rows.push([t.__('Env'), h('span', { class: 'cdf-mono', title: run.fingerprint_digest },
        shortDigest(run.fingerprint_digest))]);
    }
    if (run.status === 'queued' && run.queue_reason) {
      rows.push([t.__('Waiting'), renderNotice(run.queue_reason, t)]);
    }
    return h('dl', { class: 'cdf-facts' }, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
  }

  private runError(run: Run): HTMLElement | null {
    const error = run.error;
    if (!error) {
      return null;
    }
    const where = error.node_id ? `${String(error.node_id)}: ` : '';
    const text = typeof error.code === 'string'
      ? renderNotice(error as never, this.trans)
      : `${where}${String(error.type ?? '')} ${String(error.message ?? '')}`.trim();
    return h('div', { class: 'cdf-error cdf-run-error' }, text);
  }

  private draw(): void {
    const t = this.trans;
    const run = this.run;
    this.body.replaceChildren(...[
      h('div', { class: 'cdf-title' }, run ? displayName(run) : this.runId,
        h('span', { class: 'cdf-sub cdf-mono' }, this.runId)),
      this.error ? h('div', { class: 'cdf-error' }, this.error) : null,
      run ? this.facts(run) : null,
      run ? this.runError(run) : null,
      run ? h('div', { class: 'cdf-toolbar' },
        h('button', { class: 'cdf-csv', onclick: () => void this.csv() }, t.__('Download CSV')),
        run.sweep_id && this.links.openSweep ? h('button', { class: 'cdf-open-sweep',
          onclick: () => this.links.openSweep!(run.sweep_id!) }, t.__('Open parent sweep')) : null,
        run.study_id && this.links.openStudy ? h('button', { class: 'cdf-open-study',
          onclick: () => this.links.openStudy!(run.study_id!) }, t.__('Open study')) : null) : null,
      ...this.records(),
      ...this.progressBars(),
      ...this.eventLog()
    ].filter((n): n is HTMLElement => n !== null));
  }

  private progressBars(): HTMLElement[] {
    if (!this.progress.length) {
      return [];
    }
    return [h('div', { class: 'cdf-subtitle' }, this.trans.__('Progress')),
      h('div', { class: 'cdf-progress-list' }, this.progress.map(bar =>
        h('div', { class: 'cdf-progress-row', dataset: { node: bar.nodeId } },
          h('span', { class: 'cdf-mono' }, bar.nodeId),
          h('progress', bar.fraction === null ? {} : { max: 1, value: bar.fraction }),
          h('span', { class: 'cdf-sub-inline' }, progressText(bar)))))];
  }

  private eventLog(): HTMLElement[] {
    const t = this.trans;
    const kinds = eventKinds(this.events);
    if (this.kind && !kinds.some(([k]) => k === this.kind)) {
      this.kind = '';
    }
    const shown = eventsOfKind(this.events, this.kind);
    const select = h('select', { class: 'cdf-event-kind', 'aria-label': t.__('Event kind'), onchange: (e: Event) => {
      this.kind = (e.target as HTMLSelectElement).value;
      this.draw();
    } }, h('option', { value: '' }, t.__('All kinds (%1)', this.events.length)),
    kinds.map(([kind, n]) => h('option', { value: kind }, `${kind} (${n})`)));
    (select as HTMLSelectElement).value = this.kind;
    return [
      h('div', { class: 'cdf-subtitle' }, t.__('Events'), ' ', select, ' ',
        h('span', { class: 'cdf-sub-inline' }, t.__('newest %1, progress in the bars above', EVENTS_KEPT))),
      h('ol', { class: 'cdf-events cdf-mono' }, shown.map(e => h('li', { dataset: { type: e.type } }, eventLine(e))))
    ];
  }

  private async csv(): Promise<void> {
    try {
      download(csvFilename(this.runId), await this.api.metricsCsv(this.runId));
    } catch (err) {
      this.error = err instanceof ApiError ? renderError(err.body, this.trans, err.message) : String(err);
      this.draw();
    }
  }

  dispose(): void {
    if (this.recordsTimer) {
      clearTimeout(this.recordsTimer);
    }
    this.live?.dispose();
    super.dispose();
  }
}
