// The Studies panel (the Runs panel's Studies button): every study, newest first, and a study's
// view: status, objective, counts, the variants ranked with ties (=1), mean ± std, average rank,
// the paired difference against the best with its 95% interval and p-value (as GET studies/{id}
// computes them), each repetition's value with Open run, Stop and Download CSV, and the values per
// repetition as curves. A study still in flight is followed by long-poll: read again as it changes
// (twice a second at most while it is busy), not on a timer.

import { Widget } from '@lumino/widgets';

import { ApiError, CodefyApi } from './api';
import { lineChart } from './chart';
import { download, h } from './dom';
import { Follow } from './follow';
import {
  canResumeStudy, comparisonLabel, meanLabel, pFloorNote, rankLabel, sortRows, SortDirection, StudyColumn, studyKey
} from './experiments';
import { formatAverageRank, formatLoss, formatTime, Trans } from './format';
import { renderError } from './messages';
import type { Study, StudySummary, StudyVariant } from './types';

const WAIT_S = 25; // a follow's long-poll
const RETRY_MS = 2000; // after a read that failed
const IN_FLIGHT = new Set(['queued', 'running', 'cancel_requested']);

function errorText(err: unknown, t: Trans): string {
  return err instanceof ApiError ? renderError(err.body, t, err.message) : String(err);
}

export class StudiesPanel extends Widget {
  private studies: StudySummary[] | null = null;
  private error = '';
  private readonly body: HTMLElement;

  constructor(private readonly api: CodefyApi, private readonly trans: Trans, private readonly openStudy: (id: string) => void) {
    super();
    this.id = 'codefy-studies';
    this.addClass('cdf-panel');
    this.addClass('cdf-studies-panel');
    this.title.label = trans.__('Studies');
    this.title.closable = true;
    this.body = h('div', { class: 'cdf-panel-body' });
    this.node.append(this.body);
    void this.refresh();
  }

  async refresh(): Promise<void> {
    try {
      this.studies = await this.api.listStudies();
      this.error = '';
    } catch (err) {
      this.error = errorText(err, this.trans);
    }
    this.draw();
  }

  private draw(): void {
    const t = this.trans;
    const list = this.studies;
    this.body.replaceChildren(...[
      h('div', { class: 'cdf-title' }, t.__('Studies')),
      h('div', { class: 'cdf-toolbar' }, h('button', { class: 'cdf-refresh', onclick: () => void this.refresh() }, t.__('Refresh'))),
      this.error ? h('div', { class: 'cdf-error' }, this.error) : null,
      !list ? h('div', { class: 'cdf-empty' }, t.__('loading…'))
        : !list.length ? h('div', { class: 'cdf-empty' }, t.__('no studies'))
          : h('table', { class: 'cdf-table' },
            h('thead', {}, h('tr', {}, [t.__('Study'), t.__('Status'), t.__('Objective'), t.__('Repetitions'),
              t.__('Created')].map(label => h('th', {}, label)))),
            h('tbody', {}, list.map(s => h('tr', { class: 'cdf-row', dataset: { studyId: s.id, status: s.status } },
              h('td', {}, h('a', { class: 'cdf-run-link cdf-study-link', href: '#', onclick: (e: Event) => {
                e.preventDefault();
                this.openStudy(s.id);
              } }, s.name || s.id.slice(0, 12)), h('span', { class: 'cdf-sub cdf-mono' }, s.id.slice(0, 12))),
              h('td', {}, h('span', { class: `cdf-status cdf-${s.status}` }, s.status)),
              h('td', {}, s.objective ? `${s.objective.direction ?? ''} ${s.objective.node_id ?? ''}.${s.objective.metric ?? ''}` : '-'),
              h('td', {}, String(s.repetitions ?? '-')),
              h('td', {}, formatTime(s.created_at ?? null))))))
    ].filter((n): n is HTMLElement => n !== null));
  }
}

export class StudyView extends Widget {
  private error = '';
  private sort: { column: StudyColumn; direction: SortDirection } = { column: 'rank', direction: 'asc' };
  private readonly follow: Follow<Study>;
  private readonly body: HTMLElement;

  constructor(private readonly api: CodefyApi, private readonly trans: Trans, readonly studyId: string,
    private readonly openRun: (id: string) => void) {
    super();
    this.id = `codefy-study-${studyId}`;
    this.addClass('cdf-panel');
    this.addClass('cdf-study-view');
    this.title.label = trans.__('Study %1', studyId.slice(0, 12));
    this.title.closable = true;
    this.body = h('div', { class: 'cdf-panel-body' });
    this.node.append(this.body);
    this.follow = new Follow<Study>({
      read: (held, signal) => this.api.getStudy(this.studyId, held?.revision !== undefined && IN_FLIGHT.has(held.status)
        ? { revision: held.revision, wait: WAIT_S, signal } : undefined),
      live: study => IN_FLIGHT.has(study.status),
      show: (study, err) => {
        if (study) {
          this.title.label = study.name || this.trans.__('Study %1', this.studyId.slice(0, 12));
        }
        this.error = err === null ? '' : errorText(err, this.trans);
        this.draw();
      }
    }, RETRY_MS);
    this.follow.now();
  }

  private get study(): Study | null {
    return this.follow.doc;
  }

  private async stop(): Promise<void> {
    try {
      await this.api.cancelStudy(this.studyId);
    } catch (err) {
      this.error = errorText(err, this.trans);
    }
    this.draw(); // now: the next read may be a long-poll that waits for the study to move
    this.follow.now();
  }

  /** Resume at the revision on screen: a study that moved since is refused (revision_moved), shown. */
  private async resume(): Promise<void> {
    try {
      this.follow.hold(await this.api.resumeStudy(this.studyId, this.study?.revision));
      this.error = '';
    } catch (err) {
      this.error = errorText(err, this.trans);
    }
    this.draw(); // now: the next read may be a long-poll that waits for the study to move
    this.follow.now();
  }

  private async csv(): Promise<void> {
    try {
      download(`study-${this.studyId}.csv`, await this.api.studyCsv(this.studyId));
    } catch (err) {
      this.error = errorText(err, this.trans);
      this.draw();
    }
  }

  private header(column: StudyColumn, label: string): HTMLElement {
    const active = this.sort.column === column;
    return h('th', {
      class: 'cdf-sortable' + (active ? ' cdf-sorted' : ''), dataset: { sort: column },
      onclick: () => {
        this.sort = { column, direction: active && this.sort.direction === 'asc' ? 'desc' : 'asc' };
        this.draw();
      }
    }, label, active ? (this.sort.direction === 'asc' ? ' ▲' : ' ▼') : '');
  }

  private table(study: Study): HTMLElement {
    const t = this.trans;
    const reps = study.repetitions ?? Math.max(0, ...study.variants.map(v => v.repetitions.length));
    const row = (v: StudyVariant): HTMLElement => h('tr', { class: 'cdf-row', dataset: { label: v.label,
      rank: v.rank === null ? '' : String(v.rank) } },
      h('td', { class: 'cdf-col-rank', title: v.tied_with?.length ? t.__('tied with %1', v.tied_with.join(', ')) : '' },
        rankLabel(v.rank, v.tie)),
      h('td', {}, v.label),
      h('td', { class: 'cdf-col-mean' }, meanLabel(v)),
      h('td', {}, formatAverageRank(v.average_rank)),
      h('td', { class: 'cdf-col-comparison', title: v.comparison?.method ? t.__('p-value: %1 sign-flip test', v.comparison.method) : '' },
        comparisonLabel(v.comparison, study.best === v.label, t)),
      h('td', {}, v.eligible ? t.__('yes') : h('span', { title: JSON.stringify(v.ineligible_reasons ?? []) }, t.__('no'))),
      Array.from({ length: reps }, (_, r) => {
        const current = v.repetitions[r]?.current;
        return h('td', { class: 'cdf-rep', title: current ? `${current.status} · seed ${current.seed ?? '-'}` : '' },
          current ? h('span', { class: `cdf-status cdf-${current.status}` }, formatLoss(current.objective_value ?? null)) : '-',
          current?.run_id && current.run_exists !== false
            ? h('button', { class: 'cdf-open-run', title: current.run_id, onclick: () => this.openRun(current.run_id) }, '↗')
            : '');
      }));
    return h('table', { class: 'cdf-table cdf-study-table' },
      h('thead', {}, h('tr', {},
        this.header('rank', t.__('Rank')), this.header('label', t.__('Variant')), this.header('mean', t.__('Mean ± std')),
        this.header('average_rank', t.__('Avg rank')),
        h('th', { title: t.__('variant − best per repetition: mean, 95% CI, p-value') }, t.__('Paired Δ vs best')),
        h('th', {}, t.__('Eligible')),
        Array.from({ length: reps }, (_, r) => h('th', {}, `r${r}`)))),
      h('tbody', {}, sortRows(study.variants, studyKey(this.sort.column), this.sort.direction).map(row)));
  }

  private draw(): void {
    const t = this.trans;
    const s = this.study;
    const series = (s?.variants ?? []).map(v => ({
      label: v.label,
      points: v.aggregate.values.map((y, r) => [r, y] as [number, number | null])
        .filter((p): p is [number, number] => p[1] !== null)
    })).filter(x => x.points.length);
    this.body.replaceChildren(...[
      h('div', { class: 'cdf-title' }, s?.name || this.studyId, h('span', { class: 'cdf-sub cdf-mono' }, this.studyId)),
      this.error ? h('div', { class: 'cdf-error' }, this.error) : null,
      s ? h('div', { class: 'cdf-toolbar' },
        h('span', { class: `cdf-status cdf-${s.status}`, dataset: { role: 'state' } }, s.status),
        h('span', {}, t.__('objective: %1 %2.%3', s.objective.direction ?? '', s.objective.node_id ?? '', s.objective.metric ?? '')),
        h('span', { class: 'cdf-counts' }, Object.entries(s.counts ?? {}).filter(([, n]) => n).map(([k, n]) => `${k} ${n}`).join(' · ')),
        IN_FLIGHT.has(s.status) ? h('button', { class: 'cdf-danger cdf-stop-study', onclick: () => void this.stop() }, t.__('Stop')) : null,
        canResumeStudy(s.status) ? h('button', { class: 'cdf-resume-study', onclick: () => void this.resume() }, t.__('Resume')) : null,
        h('button', { class: 'cdf-csv', onclick: () => void this.csv() }, t.__('Download CSV'))) : null,
      s?.halt ? h('div', { class: 'cdf-note' }, t.__('halted: %1', JSON.stringify(s.halt))) : null,
      s ? h('div', { class: 'cdf-scroll' }, this.table(s)) : h('div', { class: 'cdf-empty' }, t.__('loading…')),
      s ? this.pFloor(s.repetitions ?? 0) : null,
      series.length ? h('div', { class: 'cdf-subtitle' }, t.__('Objective per repetition')) : null,
      series.length ? h('div', { class: 'cdf-curves' }, lineChart(series, t.__('repetition'))) : null
    ].filter((n): n is HTMLElement => n !== null));
  }

  private pFloor(repetitions: number): HTMLElement | null {
    const note = pFloorNote(repetitions, this.trans);
    return note ? h('div', { class: note.warn ? 'cdf-warn cdf-p-floor' : 'cdf-note cdf-p-floor' }, note.text) : null;
  }

  dispose(): void {
    this.follow.dispose();
    super.dispose();
  }
}
