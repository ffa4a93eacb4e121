// A sweep's view (main area): its state, objective, a count per status, the variants' table
// (params, objective, rank, final metrics, Worker and Devices; Rank, Status and Objective sort it,
// empty cells stay at the bottom), the objective curves below, Open run per row, Stop sweep and
// Download CSV. Until the sweep has settled it follows it by long-poll: read again as soon as a child
// starts or ends, and every 2 seconds while one runs (for its objective curve).

import { Widget } from '@lumino/widgets';

import { ApiError, CodefyApi } from './api';
import { lineChart } from './chart';
import { download, h } from './dom';
import { Follow } from './follow';
import { Series, sortRows, SortDirection, SweepColumn, sweepKey, variantNumber, variantPlacement } from './experiments';
import { formatLoss, formatValue, Trans } from './format';
import { renderError } from './messages';
import type { Sweep, SweepVariant } from './types';

const WAIT_S = 25; // a follow's long-poll when no variant runs
const CURVES_S = 2; // ... and while one runs: its curve grows without the sweep changing
const RETRY_MS = 2000; // after a read that failed
const SETTLED = new Set(['finished', 'failed']);

export class SweepView extends Widget {
  private error = '';
  private sort: { column: SweepColumn; direction: SortDirection } = { column: 'rank', direction: 'asc' };
  private readonly follow: Follow<Sweep>;
  private readonly curves = new Map<string, Series>();
  private readonly finishedCurves = new Set<string>();
  private readonly body: HTMLElement;

  constructor(private readonly api: CodefyApi, private readonly trans: Trans, readonly sweepId: string,
    private readonly openRun: (id: string) => void) {
    super();
    this.id = `codefy-sweep-${sweepId}`;
    this.addClass('cdf-panel');
    this.addClass('cdf-sweep-view');
    this.title.label = trans.__('Sweep %1', sweepId.slice(0, 12));
    this.title.closable = true;
    this.body = h('div', { class: 'cdf-panel-body' });
    this.node.append(this.body);
    this.follow = new Follow<Sweep>({
      read: async (held, signal) => {
        const wait = held?.variants.some(v => v.status === 'running') ? CURVES_S : WAIT_S;
        const sweep = await this.api.getSweep(this.sweepId, held?.changes !== undefined && !SETTLED.has(held.state)
          ? { changes: held.changes, wait, signal } : undefined);
        await this.readCurves(sweep);
        return sweep;
      },
      live: sweep => !SETTLED.has(sweep.state),
      show: (sweep, err) => {
        if (sweep) {
          this.title.label = this.trans.__('Sweep %1', sweep.name || this.sweepId.slice(0, 12));
        }
        this.error = err === null ? '' : err instanceof ApiError ? renderError(err.body, this.trans, err.message)
          : String(err);
        this.draw();
      }
    }, RETRY_MS);
    this.follow.now();
  }

  private get sweep(): Sweep | null {
    return this.follow.doc;
  }

  /** The objective series of each variant's run; a finished run's is read once. */
  private async readCurves(sweep: Sweep): Promise<void> {
    const metric = sweep.objective.metric;
    await Promise.all(sweep.variants.map(async v => {
      if (!v.run_id || v.run_exists === false || this.finishedCurves.has(v.run_id) || v.status === 'queued') {
        return;
      }
      try {
        const { metrics } = await this.api.metrics(v.run_id);
        const node = v.objective_node_id ?? sweep.objective.node_id ?? null;
        const points = metrics.filter(m => m.name === metric && (node === null || m.node_id === node) && m.value !== null)
          .map((m, i) => [m.step ?? i, m.value as number] as [number, number]);
        this.curves.set(v.run_id, { label: `#${variantNumber(v)}`, points });
        if (!['running', 'disconnected'].includes(v.status)) {
          this.finishedCurves.add(v.run_id);
        }
      } catch {
        // a run deleted meanwhile keeps its row; it just has no curve
      }
    }));
  }

  private async stop(): Promise<void> {
    try {
      await this.api.cancelSweep(this.sweepId);
    } catch (err) {
      this.error = err instanceof ApiError ? renderError(err.body, this.trans, err.message) : String(err);
    }
    this.draw(); // now: the next read may be a long-poll
    this.follow.now();
  }

  private async csv(): Promise<void> {
    try {
      download(`sweep-${this.sweepId}.csv`, await this.api.sweepCsv(this.sweepId));
    } catch (err) {
      this.error = err instanceof ApiError ? renderError(err.body, this.trans, err.message) : String(err);
      this.draw();
    }
  }

  private header(column: SweepColumn, label: string): HTMLElement {
    const active = this.sort.column === column;
    return h('th', {
      class: 'cdf-sortable' + (active ? ' cdf-sorted' : ''), dataset: { sort: column },
      onclick: () => {
        this.sort = { column, direction: active && this.sort.direction === 'asc' ? 'desc' : 'asc' };
        this.draw();
      }
    }, label, active ? (this.sort.direction === 'asc' ? ' ▲' : ' ▼') : '');
  }

  private table(sweep: Sweep): HTMLElement {
    const t = this.trans;
    const metricNames = Array.from(new Set(sweep.variants.flatMap(v => Object.keys(v.final_metrics ?? {})))).sort();
    const metricsNode = sweep.variants.find(v => v.final_metrics_node_id)?.final_metrics_node_id;
    const rows = sortRows(sweep.variants, sweepKey(this.sort.column), this.sort.direction);
    const row = (v: SweepVariant): HTMLElement => h('tr', { class: 'cdf-row', dataset: { index: String(v.index),
      runId: v.run_id ?? '', status: v.status } },
      h('td', {}, `#${variantNumber(v)}`),
      sweep.params.map(p => h('td', { class: 'cdf-mono' },
        formatValue(v.params.find(x => x.node_id === p.node_id && x.param === p.param)?.value))),
      h('td', { class: 'cdf-col-objective' }, formatLoss(v.objective ?? null)),
      h('td', { class: 'cdf-col-rank', title: v.tied_with?.length ? t.__('tied with %1', v.tied_with.map(i => `#${i + 1}`).join(', ')) : '' },
        v.rank === null || v.rank === undefined ? '-' : (v.tied_with?.length ? `=${v.rank}` : String(v.rank))),
      h('td', {}, h('span', { class: `cdf-status cdf-${v.status}` }, v.status)),
      metricNames.map(m => h('td', {}, formatLoss(v.final_metrics?.[m] ?? null))),
      h('td', { class: 'cdf-col-worker' }, variantPlacement(v, t).worker),
      h('td', {}, variantPlacement(v, t).devices),
      h('td', {}, v.run_id && v.run_exists !== false
        ? h('button', { class: 'cdf-open-run', onclick: () => this.openRun(v.run_id!) }, t.__('Open run')) : ''));
    return h('table', { class: 'cdf-table cdf-sweep-table' },
      h('thead', {}, h('tr', {},
        h('th', {}, '#'),
        sweep.params.map(p => h('th', { title: p.node_id }, `${p.node_id} · ${p.param}`)),
        this.header('objective', t.__('Objective')),
        this.header('rank', t.__('Rank')),
        this.header('status', t.__('Status')),
        metricNames.map(m => h('th', { title: metricsNode ? t.__('from node %1', metricsNode) : '' }, m)),
        h('th', {}, t.__('Worker')), h('th', {}, t.__('Devices')), h('th', {}, ''))),
      h('tbody', {}, rows.map(row)));
  }

  private draw(): void {
    const t = this.trans;
    const sweep = this.sweep;
    const o = sweep?.objective;
    const series = Array.from(this.curves.values()).filter(s => s.points.length);
    this.body.replaceChildren(...[
      h('div', { class: 'cdf-title' }, sweep?.name || this.sweepId, h('span', { class: 'cdf-sub cdf-mono' }, this.sweepId)),
      this.error ? h('div', { class: 'cdf-error' }, this.error) : null,
      sweep ? h('div', { class: 'cdf-toolbar' },
        h('span', { class: `cdf-status cdf-state-${sweep.state}`, dataset: { role: 'state' } }, sweep.state),
        h('span', {}, t.__('objective: %1 %2%3', o!.direction, o!.metric, o!.node_id ? ` (${o!.node_id})` : '')),
        h('span', { class: 'cdf-counts' }, Object.entries(sweep.counts ?? {}).filter(([, n]) => n).map(([k, n]) => `${k} ${n}`).join(' · ')),
        h('button', { class: 'cdf-danger cdf-stop-sweep', onclick: () => void this.stop() }, t.__('Stop sweep')),
        h('button', { class: 'cdf-csv', onclick: () => void this.csv() }, t.__('Download CSV'))) : null,
      sweep?.failure ? h('div', { class: 'cdf-error' }, sweep.failure) : null,
      sweep?.error ? h('div', { class: 'cdf-error' }, sweep.error) : null,
      sweep?.objective_warning ? h('div', { class: 'cdf-note' }, sweep.objective_warning) : null,
      sweep ? h('div', { class: 'cdf-scroll' }, this.table(sweep)) : h('div', { class: 'cdf-empty' }, t.__('loading…')),
      series.length ? h('div', { class: 'cdf-subtitle' }, t.__('Objective curves')) : null,
      series.length ? h('div', { class: 'cdf-curves' }, lineChart(series, t.__('step'))) : null
    ].filter((n): n is HTMLElement => n !== null));
  }

  dispose(): void {
    this.follow.dispose();
    super.dispose();
  }
}
