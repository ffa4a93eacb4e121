import { describe, expect, it } from 'vitest';

import { plainTrans as t } from '../src/format';
import {
  acceptEstimate, ANY, emptyForm, fieldOfRefusal, interactiveBody, isFormError, LOCAL, parseMemoryGib, parseSeed,
  seedHint, submitBody, targetChoices, toggleDevice
} from '../src/queueForm';
import type { Graph, WorkerList } from '../src/types';

const graph: Graph = { nodes: [{ id: 'k', type: 'Float', params: { value: 1 } }], edges: [] };
const workers: WorkerList = {
  local: [{ device: 'cpu' }],
  workers: [
    { id: 'w1', name: 'gpu-box', state: 'connected', devices: [{ device: 'cuda:0' }, { device: 'cuda:1' }, { device: 'cpu' }] },
    { id: 'w2', name: 'away', state: 'offline', devices: [{ device: 'mps' }] }
  ]
};

describe('targets', () => {
  it('offers This server, each worker the server lists, and Any available with device kinds', () => {
    const choices = targetChoices(workers, t);
    expect(choices.map(c => c.value)).toEqual([LOCAL, 'gpu-box', 'away', ANY]);
    expect(choices[0]).toMatchObject({ label: 'This server', devices: ['cpu'] });
    expect(choices[1].devices).toEqual(['cuda:0', 'cuda:1', 'cpu']);
    expect(choices[2].note).toBe('offline');
    expect(choices[3]).toMatchObject({ label: 'Any available', devices: ['cpu', 'cuda', 'mps'] });
  });

  it('with no worker list still offers this server\'s cpu', () => {
    expect(targetChoices(null, t).map(c => [c.value, c.devices])).toEqual([[LOCAL, ['cpu']], [ANY, ['cpu']]]);
  });

  it('keeps a device set of one kind', () => {
    const form = { ...emptyForm(), target: 'gpu-box', devices: ['cuda:0'] };
    expect(toggleDevice(form, 'cuda:1')).toEqual(['cuda:0', 'cuda:1']);
    expect(toggleDevice(form, 'cpu')).toEqual(['cpu']);
    expect(toggleDevice(form, 'cuda:0')).toEqual([]);
    expect(toggleDevice({ ...form, target: ANY, devices: ['cuda'] }, 'cpu')).toEqual(['cpu']);
  });
});

describe('the request body', () => {
  it('the provenance checkbox sends options.provenance, and a refusal of it goes back to the checkbox', () => {
    expect(submitBody(graph, { ...emptyForm(), provenance: true }, t)).toEqual({ graph, options: { provenance: true } });
    expect(submitBody(graph, { ...emptyForm(), provenance: false }, t)).toEqual({ graph, options: {} });
    expect(fieldOfRefusal('options.provenance')).toBe('provenance');
  });

  it('This server with nothing picked sends the graph and empty options', () => {
    expect(submitBody(graph, emptyForm(), t)).toEqual({ graph, options: {} });
  });

  it('a worker with a device set, seed, deterministic, record outputs and a name', () => {
    const form = { target: 'gpu-box', devices: ['cuda:0', 'cuda:1'], name: ' mlp ', seed: '7', deterministic: true,
      recordOutputs: true };
    expect(submitBody(graph, form, t)).toEqual({
      graph, name: 'mlp',
      options: { target: { worker: 'gpu-box', devices: ['cuda:0', 'cuda:1'] }, seed: 7, deterministic: true,
        record_outputs: true }
    });
  });

  it('one device is options.device; Any available is the worker any with the device kind', () => {
    expect(submitBody(graph, { ...emptyForm(), devices: ['cpu'] }, t)).toEqual({ graph, options: { device: 'cpu' } });
    expect(submitBody(graph, { ...emptyForm(), target: ANY, devices: ['cuda'] }, t))
      .toEqual({ graph, options: { device: 'cuda', target: { worker: 'any' } } });
    expect(submitBody(graph, { ...emptyForm(), devices: ['cuda:0', 'cuda:1'] }, t))
      .toEqual({ graph, options: { target: { worker: 'local', devices: ['cuda:0', 'cuda:1'] } } });
  });

  it('refuses a seed that is not a whole number in range, naming the field', () => {
    expect(parseSeed('')).toBeNull();
    expect(parseSeed('4294967295')).toBe(4294967295);
    expect(parseSeed('4294967296')).toBeUndefined();
    expect(parseSeed('1.5')).toBeUndefined();
    const refused = submitBody(graph, { ...emptyForm(), seed: '-1' }, t);
    expect(isFormError(refused)).toBe(true);
    expect(refused).toMatchObject({ field: 'options.seed' });
  });

  it('Run sends the interactive lane with this document as the session', () => {
    expect(interactiveBody(graph, 'doc-1', 'g.codefy.json'))
      .toEqual({ graph, name: 'g.codefy.json', options: { lane: 'interactive', session: 'doc-1' } });
  });

  it('maps a refusal\'s params.field to the form field it highlights', () => {
    expect(fieldOfRefusal('options.target.devices')).toBe('devices');
    expect(fieldOfRefusal('options.device')).toBe('devices');
    expect(fieldOfRefusal('options.target.worker')).toBe('target');
    expect(fieldOfRefusal('options.seed')).toBe('seed');
    expect(fieldOfRefusal('graph.nodes[0]')).toBeNull();
    expect(fieldOfRefusal(undefined)).toBeNull();
    expect(fieldOfRefusal('options.target.memory_gib')).toBe('memoryGib');
    expect(fieldOfRefusal('options.target.wait')).toBe('memoryGib');
  });
});

describe('the memory budget', () => {
  const onBox = { ...emptyForm(), target: 'gpu-box', devices: ['cuda:0'] };

  it('an accepted estimate is sent as one (est. in the Runs panel)', () => {
    const body = submitBody(graph, acceptEstimate(onBox, 1.25), t);
    expect(body).toEqual({
      graph, options: { device: 'cuda:0', target: { worker: 'gpu-box', memory_gib: 1.25, memory_source: 'estimate' } }
    });
  });

  it('an edited estimate is a declared budget; blank sends none', () => {
    const edited = { ...acceptEstimate(onBox, 1.25), memoryGib: '2' };
    expect(submitBody(graph, edited, t)).toMatchObject({ options: { target: { worker: 'gpu-box', memory_gib: 2 } } });
    expect((submitBody(graph, edited, t) as { options: { target: Record<string, unknown> } }).options.target)
      .not.toHaveProperty('memory_source');
    expect(submitBody(graph, onBox, t)).toEqual({ graph, options: { device: 'cuda:0', target: { worker: 'gpu-box' } } });
  });

  it('refuses a budget that is not a number of GiB above 0 and at most 4096, naming the field', () => {
    expect(parseMemoryGib(' 12 ')).toBe(12);
    expect(parseMemoryGib('0.5')).toBe(0.5);
    expect(parseMemoryGib('')).toBeNull();
    for (const bad of ['0', '-1', 'x', '4097', '1e3']) {
      expect(parseMemoryGib(bad), bad).toBeUndefined();
    }
    expect(submitBody(graph, { ...onBox, memoryGib: '0' }, t)).toMatchObject({ field: 'options.target.memory_gib' });
  });
});

describe('the Seed box', () => {
  it('shows the graph\'s seed the run will get, and that a typed one overrides it', () => {
    const seeded: Graph = { ...graph, settings: { seed: 42 } };
    expect(seedHint(seeded, t)).toEqual({
      placeholder: '42 (the graph\'s)', hint: 'blank: the graph\'s seed 42; a seed typed here overrides it'
    });
    // Left blank, the body sends no seed, so the server gives the run the graph's 42 ...
    const blank = submitBody(seeded, emptyForm(), t);
    expect(isFormError(blank) ? null : 'seed' in blank.options).toBe(false);
    // ... and a typed one goes as options.seed, which the server takes over the graph's.
    const typed = submitBody(seeded, { ...emptyForm(), seed: '7' }, t);
    expect(isFormError(typed) ? null : typed.options.seed).toBe(7);
  });

  it('says unseeded only when the graph sets no seed', () => {
    for (const g of [graph, { ...graph, settings: { seed: null } }, { ...graph, settings: { device: 'cpu' } }]) {
      expect(seedHint(g, t)).toEqual({
        placeholder: 'unseeded',
        hint: 'the graph sets no seed; a seed typed here makes the run seeded (a seeded run executes alone)'
      });
    }
    expect(seedHint({ ...graph, settings: { seed: 0 } }, t).placeholder).toBe('0 (the graph\'s)');
  });
});
