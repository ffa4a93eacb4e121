// New sweep: the open graph's sweepable parameters (sweepForm.ts), each with a list of values or,
// for a number, a range; the variant count and the default-cap warnings as they are typed; method,
// seed, Seed every variant, the objective (train_loss by default, suggesting the names the listed
// runs recorded; Objective node: Any node, the nodes those runs saw log the name, or one of the
// graph's nodes: objectives.ts), Target and Devices as Queue on… has them. Start sweep submits POST
// sweeps; a refusal re-opens the dialog as it was with the server's words.

import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { ApiError, CodefyApi } from './api';
import { h } from './dom';
import { formatValue, Trans } from './format';
import { renderError } from './messages';
import { nodeChoices, producerWarning, Recorded, recordedObjectives, runsToRead } from './objectives';
import { TargetPicker, workerList } from './queueDialog';
import { LOCAL, targetChoices, TargetChoice, targetOptions } from './queueForm';
import {
  capWarnings, emptyEntry, entryOf, paramKey, SweepableParam, SweepEntry, SweepEntryForm, SweepForm, sweepableParams,
  sweepBody, variantCount
} from './sweepForm';
import type { Graph, Run } from './types';

export const METRIC_SUGGESTIONS = ['train_loss', 'val_loss', 'val_accuracy', 'eval_accuracy', 'accuracy', 'mse', 'r2',
  'success_rate'];

interface DialogValue {
  form: SweepForm;
  target: { target: string; devices: string[] };
}

class SweepBody extends Widget implements Dialog.IBodyWidget<DialogValue> {
  private readonly picker: TargetPicker;
  private readonly count: HTMLElement;
  private readonly objectiveNode: HTMLElement;
  private readonly objectiveWarning: HTMLElement;
  private form: SweepForm;

  constructor(private readonly graph: Graph, private readonly params: SweepableParam[], form: SweepForm,
    choices: TargetChoice[], target: DialogValue['target'], private readonly trans: Trans, refusal: string,
    private readonly recorded: Recorded) {
    super();
    this.form = { ...form, entries: form.entries.map(e => ({ ...e })) };
    this.addClass('cdf-dialog');
    this.addClass('cdf-sweep-dialog');
    this.picker = new TargetPicker(choices, target, trans, null);
    this.count = h('div', { class: 'cdf-variant-count' });
    this.objectiveNode = h('span', { class: 'cdf-objective-node' });
    this.objectiveWarning = h('div', { class: 'cdf-objective-warning' });
    const t = trans;
    const f = this.form;
    const text = (key: keyof SweepForm, props: Record<string, unknown> = {}): HTMLElement => h('input', {
      type: 'text', name: key, value: String(f[key] ?? ''), ...props,
      oninput: (e: Event) => {
        (f as unknown as Record<string, unknown>)[key] = (e.target as HTMLInputElement).value;
        this.recount();
      }
    });
    const select = (key: keyof SweepForm, options: [string, string][]): HTMLElement => h('select', {
      name: key, onchange: (e: Event) => {
        (f as unknown as Record<string, unknown>)[key] = (e.target as HTMLSelectElement).value;
        this.recount();
      }
    }, options.map(([value, label]) => h('option', { value, selected: f[key] === value }, label)));
    this.node.append(
      refusal ? h('div', { class: 'cdf-error cdf-refusal' }, refusal) : '',
      h('div', { class: 'cdf-subtitle' }, t.__('Parameters')),
      params.length ? h('div', { class: 'cdf-sweep-params' }, params.map(p => this.paramRow(p)))
        : h('div', { class: 'cdf-note' }, t.__('This graph has no int, float, bool or select parameter of a registered node.')),
      this.count,
      h('label', { class: 'cdf-field' }, h('span', {}, t.__('Method')),
        select('method', [['grid', t.__('grid')], ['random', t.__('random')]]),
        h('span', {}, t.__('Samples')), text('samples', { size: 4 })),
      h('label', { class: 'cdf-field' }, h('span', {}, t.__('Seed')), text('seed', { size: 10 }),
        h('label', { class: 'cdf-check' }, h('input', { type: 'checkbox', name: 'seedVariants', checked: f.seedVariants,
          onchange: (e: Event) => { f.seedVariants = (e.target as HTMLInputElement).checked; } }), t.__('Seed every variant'))),
      h('label', { class: 'cdf-field' }, h('span', {}, t.__('Objective')),
        text('metric', { list: 'cdf-metric-suggestions' }),
        h('datalist', { id: 'cdf-metric-suggestions' }, recorded.metrics.map(m => h('option', { value: m }))),
        select('direction', [['minimize', t.__('minimize')], ['maximize', t.__('maximize')]])),
      h('label', { class: 'cdf-field' }, h('span', {}, t.__('Objective node')), this.objectiveNode),
      this.objectiveWarning,
      h('label', { class: 'cdf-field' }, h('span', {}, t.__('Name')), text('name', { placeholder: t.__('the tab\'s name') })),
      this.picker.node);
    this.recount();
  }

  private paramRow(p: SweepableParam): HTMLElement {
    const t = this.trans;
    const key = paramKey(p.nodeId, p.param);
    const entry = (): SweepEntryForm | undefined => this.form.entries.find(e => e.key === key);
    const numeric = p.type === 'int' || p.type === 'float';
    const row = h('div', { class: 'cdf-sweep-param', dataset: { node: p.nodeId, param: p.param } });
    const draw = (): void => {
      const e = entry();
      row.replaceChildren(
        h('label', { class: 'cdf-check' }, h('input', {
          type: 'checkbox', name: 'sweep', checked: !!e, onchange: (ev: Event) => {
            if ((ev.target as HTMLInputElement).checked) {
              this.form.entries.push(emptyEntry(p));
            } else {
              this.form.entries = this.form.entries.filter(x => x.key !== key);
            }
            draw();
            this.recount();
          }
        }), p.label, h('span', { class: 'cdf-sub-inline' }, ` ${p.type} = ${formatValue(p.current)}`)),
        e ? h('span', { class: 'cdf-entry' },
          numeric ? h('select', { name: 'mode', onchange: (ev: Event) => {
            e.mode = (ev.target as HTMLSelectElement).value as SweepEntryForm['mode'];
            draw();
            this.recount();
          } }, h('option', { value: 'values', selected: e.mode === 'values' }, t.__('values')),
          h('option', { value: 'range', selected: e.mode === 'range' }, t.__('range'))) : '',
          e.mode === 'range' && numeric
            ? (['min', 'max', 'count'] as const).map(k => h('input', { type: 'text', name: k, size: 6, placeholder: k,
              value: e[k], oninput: (ev: Event) => { e[k] = (ev.target as HTMLInputElement).value; this.recount(); } }))
              .concat([h('select', { name: 'scale', onchange: (ev: Event) => {
                e.scale = (ev.target as HTMLSelectElement).value as 'linear' | 'log';
                this.recount();
              } }, h('option', { value: 'linear', selected: e.scale === 'linear' }, 'linear'),
              h('option', { value: 'log', selected: e.scale === 'log' }, 'log'))])
            : h('input', { type: 'text', name: 'values', size: 28, placeholder: t.__('values, comma separated'),
              value: e.values, oninput: (ev: Event) => { e.values = (ev.target as HTMLInputElement).value; this.recount(); } }))
          : '');
    };
    draw();
    return row;
  }

  /** The Objective node choices and warning follow the metric typed (objectives.ts). */
  private drawObjectiveNode(): void {
    const f = this.form;
    const choices = nodeChoices(this.recorded, f.metric, this.graph.nodes, this.trans);
    if (!choices.some(([value]) => value === f.nodeId)) {
      f.nodeId = '';
    }
    const key = choices.map(([value]) => value).join('\u0000');
    const current = this.objectiveNode.firstElementChild as HTMLSelectElement | null;
    if (!current || current.dataset.choices !== key) {
      this.objectiveNode.replaceChildren(h('select', {
        name: 'nodeId', dataset: { choices: key }, onchange: (e: Event) => {
          f.nodeId = (e.target as HTMLSelectElement).value;
          this.recount();
        }
      }, choices.map(([value, label]) => h('option', { value, selected: f.nodeId === value }, label))));
    }
    const warning = producerWarning(this.recorded, f.metric, f.nodeId, this.trans);
    this.objectiveWarning.replaceChildren(...(warning ? [h('div', { class: 'cdf-warn' }, warning)] : []));
  }

  private recount(): void {
    const t = this.trans;
    this.drawObjectiveNode();
    const entries: SweepEntry[] = [];
    const problems: string[] = [];
    for (const e of this.form.entries) {
      const p = this.params.find(x => paramKey(x.nodeId, x.param) === e.key);
      const made = p ? entryOf(p, e, t) : null;
      if (typeof made === 'string') {
        problems.push(made);
      } else if (made) {
        entries.push(made);
      }
    }
    const n = variantCount(this.form.method, entries, this.form.samples);
    this.count.replaceChildren(
      h('div', { dataset: { variants: String(n) } }, n === 1 ? t.__('1 variant') : t.__('%1 variants', n)),
      ...problems.map(m => h('div', { class: 'cdf-note' }, m)),
      ...capWarnings(entries, n, t).map(w => h('div', { class: 'cdf-warn' }, w)));
  }

  getValue(): DialogValue {
    return { form: this.form, target: this.picker.value };
  }
}

/** Ask, start the sweep, and on a refusal ask again; the new sweep's id, or null if cancelled. */
export async function newSweep(api: CodefyApi, trans: Trans, graph: Graph, tabName: string,
  listed: Run[] = []): Promise<string | null> {
  const t = trans;
  // The listed runs' metrics only suggest: a run that cannot be read (deleted meanwhile) is left out.
  const [definitions, list, perRun] = await Promise.all([api.nodeDefinitions().catch(() => []), workerList(api),
    Promise.all(runsToRead(listed).map(id => api.metrics(id).then(r => r.metrics, () => [])))]);
  const recorded = recordedObjectives(perRun, METRIC_SUGGESTIONS);
  const params = sweepableParams(graph, definitions);
  const choices = targetChoices(list, t);
  let value: DialogValue = {
    form: { name: '', method: 'grid', samples: '', seed: '', seedVariants: false, metric: 'train_loss',
      direction: 'minimize', nodeId: '', entries: [] },
    target: { target: LOCAL, devices: [] }
  };
  let refusal = '';
  for (;;) {
    const answer = await showDialog({
      title: t.__('New sweep'),
      body: new SweepBody(graph, params, value.form, choices, value.target, t, refusal, recorded),
      buttons: [Dialog.cancelButton({ label: t.__('Cancel') }), Dialog.okButton({ label: t.__('Start sweep') })]
    });
    if (!answer.button.accept || !answer.value) {
      return null;
    }
    value = answer.value;
    const body = sweepBody(graph, params, value.form, targetOptions(value.target), tabName, t);
    if (typeof body === 'string') {
      refusal = body;
      continue;
    }
    try {
      return (await api.createSweep(body)).sweep_id;
    } catch (err) {
      refusal = err instanceof ApiError ? renderError(err.body, t, err.message) : String(err);
    }
  }
}
