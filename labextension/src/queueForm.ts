// The Queue on… dialog's rules, pure: which targets and devices it offers (GET workers: this
// server's devices as `local`, each listed worker's), and the form turned into POST runs' body.
// A device set is of one kind (cuda:0 + cuda:1, never cuda:0 + cpu): picking a device of another
// kind starts a new set. Any available offers device kinds, since the server picks the card.

import type { Trans } from './format';
import type { Graph, SubmitOptions, SubmitRequest, WorkerDevice, WorkerList } from './types';

export const LOCAL = 'local';
export const ANY = 'any';
export const SEED_MAX = 4294967295;

export interface TargetChoice {
  /** local, any, or the worker's name (what options.target.worker takes) */
  value: string;
  label: string;
  /** the devices to pick from (any: device kinds) */
  devices: string[];
  /** why it cannot take runs now (offline, draining): still listed, the run waits */
  note?: string;
}

export interface QueueForm {
  target: string;
  devices: string[];
  name: string;
  seed: string;
  deterministic: boolean;
  recordOutputs: boolean;
  /** keep the sha256 of every dataset and checkpoint file the run reads (options.provenance) */
  provenance?: boolean;
  /** the memory budget per card in GiB, for a worker's card shared by memory; blank: none */
  memoryGib?: string;
  /** the estimate the dialog offered (GiB), when the budget field holds it unchanged */
  estimateGib?: number | null;
}

export const MEMORY_GIB_MAX = 4096;

export interface FormError {
  field: string;
  message: string;
}

export function emptyForm(name = ''): QueueForm {
  return {
    target: LOCAL, devices: [], name, seed: '', deterministic: false, recordOutputs: false, provenance: false,
    memoryGib: '',
    estimateGib: null
  };
}

/** The kind of a device name: cuda:1 -> cuda, cpu -> cpu. */
export function deviceKind(device: string): string {
  return device.split(':')[0];
}

function names(devices: WorkerDevice[] | undefined): string[] {
  const out: string[] = [];
  for (const d of devices ?? []) {
    const name = String(d.device ?? d.name ?? '');
    if (name && !out.includes(name)) {
      out.push(name);
    }
  }
  return out;
}

/** This server, each worker the server lists, Any available (device kinds over all of them). */
export function targetChoices(list: WorkerList | null, t: Trans): TargetChoice[] {
  const local = names(list?.local);
  const choices: TargetChoice[] = [{ value: LOCAL, label: t.__('This server'), devices: local.length ? local : ['cpu'] }];
  const kinds = new Set(local.map(deviceKind));
  for (const worker of list?.workers ?? []) {
    const devices = names(worker.devices);
    devices.forEach(d => kinds.add(deviceKind(d)));
    const note = worker.state === 'draining' || worker.draining ? t.__('draining')
      : worker.state === 'connected' ? undefined : t.__('offline');
    choices.push({ value: worker.name, label: worker.name, devices, note });
  }
  if (!kinds.size) {
    kinds.add('cpu');
  }
  choices.push({ value: ANY, label: t.__('Any available'), devices: Array.from(kinds).sort() });
  return choices;
}

/** Toggle `device` in the set: a device of another kind (or on Any, any other kind) starts over. */
export function toggleDevice(form: QueueForm, device: string): string[] {
  if (form.target === ANY) {
    return form.devices.includes(device) ? [] : [device];
  }
  if (form.devices.includes(device)) {
    return form.devices.filter(d => d !== device);
  }
  const same = form.devices.filter(d => deviceKind(d) === deviceKind(device));
  return [...same, device];
}

/** The seed a run of `graph` gets when the Seed box is left blank: its settings' seed, or null. */
export function graphSeed(graph: Graph): number | null {
  const seed = graph.settings?.seed;
  return typeof seed === 'number' && Number.isInteger(seed) && seed >= 0 && seed <= SEED_MAX ? seed : null;
}

/** The Seed box's placeholder and hint: the seed the run will have if nothing is typed (the graph's,
 * or none), and that a typed one overrides it (the server takes options.seed over the graph's). */
export function seedHint(graph: Graph, t: Trans): { placeholder: string; hint: string } {
  const seed = graphSeed(graph);
  if (seed === null) {
    return {
      placeholder: t.__('unseeded'),
      hint: t.__('the graph sets no seed; a seed typed here makes the run seeded (a seeded run executes alone)')
    };
  }
  return {
    placeholder: t.__('%1 (the graph\'s)', seed),
    hint: t.__('blank: the graph\'s seed %1; a seed typed here overrides it', seed)
  };
}

/** The seed field: blank is the graph's seed (or none), else an integer 0..2^32-1. */
export function parseSeed(text: string): number | null | undefined {
  const trimmed = text.trim();
  if (!trimmed) {
    return null;
  }
  if (!/^\d+$/.test(trimmed)) {
    return undefined;
  }
  const value = Number(trimmed);
  return value <= SEED_MAX ? value : undefined;
}

/** The run options a form asks for (shared with the sweep dialog's Target and Devices). */
export function targetOptions(form: Pick<QueueForm, 'target' | 'devices'>): SubmitOptions {
  const options: SubmitOptions = {};
  const devices = form.devices;
  if (devices.length === 1) {
    options.device = devices[0];
  }
  if (form.target !== LOCAL) {
    options.target = { worker: form.target };
  }
  if (devices.length > 1) {
    options.target = { ...(options.target ?? { worker: LOCAL }), devices: [...devices] };
  }
  return options;
}

/** The budget field: blank is none, else a number of GiB above 0 and at most 4096. */
export function parseMemoryGib(text: string): number | null | undefined {
  const trimmed = text.trim();
  if (!trimmed) {
    return null;
  }
  if (!/^\d*\.?\d+$/.test(trimmed)) {
    return undefined;
  }
  const value = Number(trimmed);
  return value > 0 && value <= MEMORY_GIB_MAX ? value : undefined;
}

/** The form after "Use the estimate": the budget field holds it and the run will say so. */
export function acceptEstimate<F extends Pick<QueueForm, 'memoryGib' | 'estimateGib'>>(form: F, gib: number): F {
  return { ...form, memoryGib: String(gib), estimateGib: gib };
}

/** POST runs' body, or the field the form has wrong. */
export function submitBody(graph: Graph, form: QueueForm, t: Trans): SubmitRequest | FormError {
  const seed = parseSeed(form.seed);
  if (seed === undefined) {
    return { field: 'options.seed', message: t.__('a seed is a whole number from 0 to %1', SEED_MAX) };
  }
  const options: SubmitOptions = targetOptions(form);
  if (seed !== null) {
    options.seed = seed;
  }
  if (form.deterministic) {
    options.deterministic = true;
  }
  if (form.recordOutputs) {
    options.record_outputs = true;
  }
  if (form.provenance) {
    options.provenance = true;
  }
  const gib = parseMemoryGib(form.memoryGib ?? '');
  if (gib === undefined) {
    return { field: 'options.target.memory_gib', message: t.__('a memory budget is a number of GiB above 0 and at most %1', MEMORY_GIB_MAX) };
  }
  if (gib !== null) {
    // An estimate the user left as offered is marked as one (est. in the Runs panel); an edited one is declared.
    const estimate = form.estimateGib != null && gib === form.estimateGib;
    options.target = { ...(options.target ?? { worker: LOCAL }), memory_gib: gib, ...(estimate ? { memory_source: 'estimate' as const } : {}) };
  }
  const body: SubmitRequest = { graph, options };
  const name = form.name.trim();
  if (name) {
    body.name = name.slice(0, 200);
  }
  return body;
}

/** The Run button's body: the interactive lane on this server, this document as the session. */
export function interactiveBody(graph: Graph, session: string, name: string): SubmitRequest {
  const body: SubmitRequest = { graph, options: { lane: 'interactive', session } };
  if (name) {
    body.name = name.slice(0, 200);
  }
  return body;
}

export function isFormError(value: unknown): value is FormError {
  return typeof value === 'object' && value !== null && 'field' in value && 'message' in value && !('graph' in value);
}

/** Which form field a refusal's params.field names (options.target.devices -> devices). */
export function fieldOfRefusal(field: unknown): string | null {
  if (typeof field !== 'string') {
    return null;
  }
  if (field === 'name') {
    return 'name';
  }
  if (field.startsWith('options.seed')) {
    return 'seed';
  }
  if (field.startsWith('options.deterministic')) {
    return 'deterministic';
  }
  if (field.startsWith('options.record_outputs')) {
    return 'recordOutputs';
  }
  if (field.startsWith('options.provenance')) {
    return 'provenance';
  }
  if (field.startsWith('options.target.memory_gib') || field.startsWith('options.target.memory_source')
    || field.startsWith('options.target.wait')) {
    return 'memoryGib';
  }
  if (field.startsWith('options.target.devices') || field.startsWith('options.device')) {
    return 'devices';
  }
  if (field.startsWith('options.target')) {
    return 'target';
  }
  return null;
}
