// The Queue on… dialog: target (This server, each worker the server lists, Any available), the
// devices or a device set of one kind, name, seed, deterministic, record outputs, and a memory
// budget for a worker's card shared by memory, with the server's static estimate offered (est.). Queue submits
// POST runs; a refusal re-opens the dialog as it was, with the server's text inline and the field
// it names highlighted. The rules (choices, body) are queueForm.ts's.

import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { ApiError, CodefyApi } from './api';
import { h } from './dom';
import { estimateLabel, Trans } from './format';
import { renderError } from './messages';
import {
  acceptEstimate, emptyForm, fieldOfRefusal, isFormError, LOCAL, QueueForm, seedHint, submitBody, TargetChoice,
  targetChoices, toggleDevice
} from './queueForm';
import { initialTarget } from './settings';
import type { Graph, MemoryEstimate, Run, WorkerList } from './types';

export interface Refusal {
  message: string;
  field: string | null;
}

/** Target and Devices: shared by Queue on… and the sweep dialog. */
export class TargetPicker {
  readonly node: HTMLElement;

  constructor(private readonly choices: TargetChoice[], private form: Pick<QueueForm, 'target' | 'devices'>,
    private readonly trans: Trans, private readonly highlight: string | null) {
    this.node = h('div', { class: 'cdf-target-picker' });
    this.draw();
  }

  get value(): Pick<QueueForm, 'target' | 'devices'> {
    return this.form;
  }

  private draw(): void {
    const t = this.trans;
    const choice = this.choices.find(c => c.value === this.form.target) ?? this.choices[0];
    const select = h('select', {
      name: 'target', class: this.highlight === 'target' ? 'cdf-field-error' : '',
      onchange: (e: Event) => {
        this.form = { target: (e.target as HTMLSelectElement).value, devices: [] };
        this.draw();
      }
    }, this.choices.map(c => h('option', { value: c.value, selected: c.value === choice.value },
      c.note ? `${c.label} (${c.note})` : c.label))) as HTMLSelectElement;
    const devices = h('div', { class: 'cdf-devices' + (this.highlight === 'devices' ? ' cdf-field-error' : '') },
      choice.devices.map(d => h('label', { class: 'cdf-device' },
        h('input', {
          type: 'checkbox', name: 'device', value: d, checked: this.form.devices.includes(d),
          onchange: () => {
            this.form = { ...this.form, devices: toggleDevice({ ...emptyForm(), ...this.form }, d) };
            this.draw();
          }
        }), d)));
    this.node.replaceChildren(
      h('label', { class: 'cdf-field' }, h('span', {}, t.__('Target')), select),
      h('div', { class: 'cdf-field' }, h('span', {}, t.__('Devices')), devices,
        h('span', { class: 'cdf-hint' }, this.form.target === 'any'
          ? t.__('a device kind; the first free card of it anywhere')
          : t.__('none: the graph\'s device; several: a device set of one kind'))));
  }
}

class QueueBody extends Widget implements Dialog.IBodyWidget<QueueForm> {
  private readonly picker: TargetPicker;
  private readonly inputs: Record<string, HTMLInputElement> = {};

  private estimateGib: number | null;

  constructor(choices: TargetChoice[], form: QueueForm, trans: Trans, refusal: Refusal | null,
    estimate: MemoryEstimate | null, seed: { placeholder: string; hint: string }) {
    super();
    this.estimateGib = form.estimateGib ?? null;
    this.addClass('cdf-dialog');
    this.addClass('cdf-queue-dialog');
    const t = trans;
    const field = refusal?.field ?? null;
    this.picker = new TargetPicker(choices, form, trans, field);
    const input = (key: string, props: Record<string, unknown>): HTMLInputElement => {
      const el = h('input', { name: key, class: field === key ? 'cdf-field-error' : '', ...props }) as HTMLInputElement;
      this.inputs[key] = el;
      return el;
    };
    this.node.append(
      refusal ? h('div', { class: 'cdf-error cdf-refusal' }, refusal.message) : '',
      this.picker.node,
      h('label', { class: 'cdf-field' }, h('span', {}, t.__('Name')), input('name', { type: 'text', value: form.name })),
      h('label', { class: 'cdf-field' }, h('span', {}, t.__('Seed')),
        input('seed', { type: 'text', value: form.seed, placeholder: seed.placeholder, title: seed.hint }),
        h('span', { class: 'cdf-hint cdf-seed-hint' }, seed.hint)),
      h('label', { class: 'cdf-check' }, input('deterministic', { type: 'checkbox', checked: form.deterministic }),
        t.__('Deterministic')),
      h('label', { class: 'cdf-check' }, input('recordOutputs', { type: 'checkbox', checked: form.recordOutputs }),
        t.__('Record outputs')),
      h('label', { class: 'cdf-check', title: t.__('Keep the sha256 of every dataset and checkpoint file the run reads') },
        input('provenance', { type: 'checkbox', checked: form.provenance ?? false }), t.__('Record data and model identities')),
      h('div', { class: 'cdf-field' }, h('span', {}, t.__('Memory budget (GiB)')),
        input('memoryGib', { type: 'text', value: form.memoryGib ?? '', placeholder: t.__('none') }),
        estimate ? h('button', {
          type: 'button', class: 'cdf-use-estimate jp-mod-styled',
          onclick: () => {
            const next = acceptEstimate({ memoryGib: '', estimateGib: null }, estimate.memory_gib);
            this.inputs.memoryGib.value = next.memoryGib;
            this.estimateGib = next.estimateGib;
          }
        }, t.__('Use %1', estimateLabel(estimate, t))) : '',
        h('span', { class: 'cdf-hint' }, t.__('per card, for a worker\'s card shared by memory'))));
  }

  getValue(): QueueForm {
    return {
      ...this.picker.value,
      name: this.inputs.name.value,
      seed: this.inputs.seed.value,
      deterministic: this.inputs.deterministic.checked,
      recordOutputs: this.inputs.recordOutputs.checked,
      provenance: this.inputs.provenance.checked,
      memoryGib: this.inputs.memoryGib.value,
      estimateGib: this.estimateGib
    };
  }
}

export async function workerList(api: CodefyApi): Promise<WorkerList | null> {
  try {
    return await api.listWorkers();
  } catch {
    return null;
  }
}

/** Ask, submit, and on a refusal ask again with the server's words; the run, or null if cancelled.
 * `onRefused` gets each refusal's body (the graph viewer marks the nodes it names). */
export async function queueOn(api: CodefyApi, trans: Trans, graph: Graph, name: string,
  onRefused?: (body: unknown) => void, preferredTarget = LOCAL): Promise<Run | null> {
  const t = trans;
  const choices = targetChoices(await workerList(api), t);
  const estimate = await api.memoryEstimate(graph).catch(() => null);
  let form = { ...emptyForm(name), target: initialTarget(preferredTarget, choices.map(c => c.value)) };
  let refusal: Refusal | null = null;
  for (;;) {
    const answer = await showDialog({
      title: t.__('Queue on…'),
      body: new QueueBody(choices, form, t, refusal, estimate, seedHint(graph, t)),
      buttons: [Dialog.cancelButton({ label: t.__('Cancel') }), Dialog.okButton({ label: t.__('Queue') })]
    });
    if (!answer.button.accept || !answer.value) {
      return null;
    }
    form = answer.value;
    const body = submitBody(graph, form, t);
    if (isFormError(body)) {
      refusal = { message: body.message, field: fieldOfRefusal(body.field) };
      continue;
    }
    try {
      return await api.submitRun(body);
    } catch (err) {
      if (err instanceof ApiError) {
        onRefused?.(err.body);
      }
      refusal = err instanceof ApiError
        ? { message: renderError(err.body, t, err.message), field: fieldOfRefusal(err.notice?.params?.field) }
        : { message: String(err), field: null };
    }
  }
}
