// The New sweep dialog's rules, pure: which parameters of the open graph can be swept (int,
// float, bool and select params of its top-level registered nodes, each named by node label and
// id), a parameter's values or range read from the form, how many variants that makes, the
// warnings past the server's default caps (it may be configured higher, so the sweep is still
// sent), and POST sweeps' body.

import type { Trans } from './format';
import type { Graph, NodeDefinition, SubmitOptions } from './types';

export const SWEEPABLE = new Set(['int', 'float', 'bool', 'select']);
/** The server's defaults (README Settings): past them the dialog warns, naming the setting. */
export const DEFAULT_CAPS = { runs: 32, params: 4, domain: 32 };
export const NAME_CUT = 64;

export interface SweepableParam {
  nodeId: string;
  param: string;
  type: string;
  /** "Optimizer (opt) · lr" */
  label: string;
  options?: unknown[];
  current: unknown;
}

export type EntryMode = 'values' | 'range';

export interface SweepEntryForm {
  key: string;
  mode: EntryMode;
  values: string;
  min: string;
  max: string;
  count: string;
  scale: 'linear' | 'log';
}

export interface SweepForm {
  name: string;
  method: 'grid' | 'random';
  samples: string;
  seed: string;
  seedVariants: boolean;
  metric: string;
  direction: 'minimize' | 'maximize';
  nodeId: string;
  entries: SweepEntryForm[];
}

export type SweepEntry =
  | { node_id: string; param: string; values: (string | number | boolean)[] }
  | { node_id: string; param: string; range: { min: number; max: number; count: number; scale: 'linear' | 'log'; type?: 'int' | 'float' } };

export interface SweepRequestBody {
  base_graph: Graph;
  name?: string;
  seed_variants?: boolean;
  options?: SubmitOptions;
  sweep_spec: { method: 'grid' | 'random'; samples?: number; seed?: number; params: SweepEntry[] };
  objective: { metric: string; direction: 'minimize' | 'maximize'; node_id?: string };
}

export function paramKey(nodeId: string, param: string): string {
  return `${nodeId}\u0000${param}`;
}

export function sweepableParams(graph: Graph, definitions: NodeDefinition[]): SweepableParam[] {
  const byType = new Map(definitions.map(d => [d.type, d]));
  const counts = new Map<string, number>();
  graph.nodes.forEach(n => counts.set(n.id, (counts.get(n.id) ?? 0) + 1));
  const out: SweepableParam[] = [];
  for (const node of graph.nodes) {
    const definition = byType.get(node.type);
    // A node id used twice cannot be addressed (the server refuses it), nor can a preset's insides.
    if (!definition || counts.get(node.id)! > 1) {
      continue;
    }
    const title = `${node.label || node.type} (${node.id})`;
    for (const [param, spec] of Object.entries(definition.params || {})) {
      if (!SWEEPABLE.has(spec.type)) {
        continue;
      }
      out.push({
        nodeId: node.id, param, type: spec.type, label: `${title} · ${param}`, options: spec.options,
        current: node.params?.[param] ?? spec.default
      });
    }
  }
  return out;
}

export function emptyEntry(p: SweepableParam): SweepEntryForm {
  const values = p.type === 'bool' ? 'true, false' : p.type === 'select' && p.options ? p.options.join(', ') : '';
  return { key: paramKey(p.nodeId, p.param), mode: 'values', values, min: '', max: '', count: '4', scale: 'linear' };
}

function parseValue(text: string, type: string): string | number | boolean | undefined {
  const s = text.trim();
  if (type === 'bool') {
    return s === 'true' ? true : s === 'false' ? false : undefined;
  }
  if (type === 'int') {
    return /^-?\d+$/.test(s) ? Number(s) : undefined;
  }
  if (type === 'float') {
    const n = Number(s);
    return s !== '' && Number.isFinite(n) ? n : undefined;
  }
  return s || undefined;
}

/** One form entry as a sweep_spec params entry, or why it cannot be one. */
export function entryOf(p: SweepableParam, form: SweepEntryForm, t: Trans): SweepEntry | string {
  if (form.mode === 'range' && (p.type === 'int' || p.type === 'float')) {
    const min = Number(form.min);
    const max = Number(form.max);
    const count = Number(form.count);
    if (form.min.trim() === '' || form.max.trim() === '' || !Number.isFinite(min) || !Number.isFinite(max)) {
      return t.__('%1: a range needs a number for min and max', p.label);
    }
    if (!Number.isInteger(count) || count < 1) {
      return t.__('%1: count is a whole number of at least 1', p.label);
    }
    if (form.scale === 'log' && min <= 0) {
      return t.__('%1: a log range needs a positive min', p.label);
    }
    return { node_id: p.nodeId, param: p.param, range: { min, max, count, scale: form.scale, type: p.type } };
  }
  const parts = form.values.split(',').map(s => s.trim()).filter(Boolean);
  if (!parts.length) {
    return t.__('%1: list at least one value', p.label);
  }
  const values: (string | number | boolean)[] = [];
  for (const part of parts) {
    const value = parseValue(part, p.type);
    if (value === undefined) {
      return t.__('%1: %2 is not a %3', p.label, part, p.type);
    }
    if (values.includes(value)) {
      return t.__('%1: %2 is listed twice', p.label, part);
    }
    values.push(value);
  }
  return { node_id: p.nodeId, param: p.param, values };
}

/** The distinct values an entry expands to (an int range collapses onto fewer). */
export function domainSize(entry: SweepEntry): number {
  if ('values' in entry) {
    return entry.values.length;
  }
  const { min, max, count, scale, type } = entry.range;
  if (type !== 'int' || count === 1) {
    return min === max ? 1 : count;
  }
  const seen = new Set<number>();
  for (let i = 0; i < count; i++) {
    const f = i / (count - 1);
    const v = scale === 'log' ? Math.pow(10, Math.log10(min) + f * (Math.log10(max) - Math.log10(min))) : min + f * (max - min);
    seen.add(Math.round(v));
  }
  return seen.size;
}

/** Variants the sweep makes: the grid's product, or random's samples (0 while incomplete). */
export function variantCount(method: 'grid' | 'random', entries: SweepEntry[], samples: string): number {
  if (method === 'random') {
    const n = Number(samples);
    return Number.isInteger(n) && n > 0 ? n : 0;
  }
  return entries.length ? entries.reduce((product, e) => product * domainSize(e), 1) : 0;
}

/** Past a default cap: a warning naming the setting (the sweep is still sent). */
export function capWarnings(entries: SweepEntry[], variants: number, t: Trans): string[] {
  const out: string[] = [];
  if (variants > DEFAULT_CAPS.runs) {
    out.push(t.__('%1 variants: more than CODEFY_MAX_SWEEP_RUNS allows by default (%2)', variants, DEFAULT_CAPS.runs));
  }
  if (entries.length > DEFAULT_CAPS.params) {
    out.push(t.__('%1 parameters: more than CODEFY_MAX_SWEEP_PARAMS allows by default (%2)', entries.length,
      DEFAULT_CAPS.params));
  }
  for (const e of entries) {
    const size = domainSize(e);
    if (size > DEFAULT_CAPS.domain) {
      out.push(t.__('%1 · %2 has %3 values: more than CODEFY_MAX_SWEEP_DOMAIN allows by default (%4)', e.node_id,
        e.param, size, DEFAULT_CAPS.domain));
    }
  }
  return out;
}

/** POST sweeps' body, or the message of what is missing. */
export function sweepBody(graph: Graph, params: SweepableParam[], form: SweepForm, options: SubmitOptions,
  fallbackName: string, t: Trans): SweepRequestBody | string {
  const byKey = new Map(params.map(p => [paramKey(p.nodeId, p.param), p]));
  const entries: SweepEntry[] = [];
  for (const entry of form.entries) {
    const p = byKey.get(entry.key);
    if (!p) {
      continue;
    }
    const made = entryOf(p, entry, t);
    if (typeof made === 'string') {
      return made;
    }
    entries.push(made);
  }
  if (!entries.length) {
    return t.__('pick at least one parameter to sweep');
  }
  if (!form.metric.trim()) {
    return t.__('name the objective metric');
  }
  const spec: SweepRequestBody['sweep_spec'] = { method: form.method, params: entries };
  const seedText = form.seed.trim();
  if (seedText) {
    if (!/^\d+$/.test(seedText) || Number(seedText) > 4294967295) {
      return t.__('a seed is a whole number from 0 to %1', 4294967295);
    }
    spec.seed = Number(seedText);
  }
  if (form.method === 'random') {
    const samples = Number(form.samples);
    if (!Number.isInteger(samples) || samples < 1) {
      return t.__('a random sweep needs a number of samples');
    }
    if (spec.seed === undefined) {
      return t.__('a random sweep needs a seed');
    }
    spec.samples = samples;
  }
  if (form.seedVariants && spec.seed === undefined) {
    return t.__('Seed every variant needs a seed');
  }
  const body: SweepRequestBody = {
    base_graph: graph,
    sweep_spec: spec,
    objective: { metric: form.metric.trim(), direction: form.direction }
  };
  if (form.nodeId) {
    body.objective.node_id = form.nodeId;
  }
  const name = (form.name.trim() || fallbackName).slice(0, NAME_CUT);
  if (name) {
    body.name = name;
  }
  if (form.seedVariants) {
    body.seed_variants = true;
  }
  if (Object.keys(options).length) {
    body.options = options;
  }
  return body;
}
