import { readFileSync } from 'fs';
import { join } from 'path';
import { describe, expect, it } from 'vitest';

import { plainTrans, Trans } from '../src/format';
import { CATALOG, gib, render, renderError, renderNotice } from '../src/messages';

// The repository root, where the catalog and the vectors the Python tests read too live.
const ROOT = join(__dirname, '..', '..');
const read = (...parts: string[]) => JSON.parse(readFileSync(join(ROOT, ...parts), 'utf-8'));

type Vector = { code: string; params: Record<string, unknown>; text: string | null };

describe('the message catalog', () => {
  it('is the JSON catalog the server, the CLI and the widgets read', () => {
    expect(CATALOG).toEqual(read('codefy_jupyter', 'wire', 'messages.json').messages);
  });

  it('renders every shared vector word for word as Python does', () => {
    const vectors: Vector[] = read('tests', 'shared', 'message_vectors.json').vectors;
    expect(vectors.length).toBeGreaterThan(40);
    for (const v of vectors) {
      expect(render(v.code, v.params, plainTrans), `${v.code} ${JSON.stringify(v.params)}`).toBe(v.text);
    }
  });

  it('names who is ahead and why, instead of a raw id', () => {
    const reason = {
      code: 'behind_waiting_run', message: 'behind run c2424d56f8b9bbb4, which waits for more than its turn',
      params: {
        run_id: 'c2424d56f8b9bbb4', name: 'baseline', queue: 'box/cuda:0', code: 'memory_wait',
        ahead: { code: 'memory_wait', message: 'x', params: { device: 'box/cuda:0', need_mib: 8192, free_mib: 6144 } }
      }
    };
    expect(renderNotice(reason, plainTrans)).toBe(
      "behind run 'baseline' in the box/cuda:0 queue, which is held up: waiting for memory on box/cuda:0: "
      + '6.0 GiB free of 8.0 GiB needed (budget and CUDA context)');
  });

  it('goes through the translator, so a language pack can translate it', () => {
    const seen: string[] = [];
    const upper: Trans = {
      __: (msgid: string, ...args: unknown[]) => {
        seen.push(msgid);
        return plainTrans.__(msgid.toUpperCase(), ...args);
      }
    };
    expect(renderNotice({ code: 'worker_draining', message: 'x', params: { worker: 'b' } }, upper)).toBe('WORKER b IS DRAINING');
    expect(seen).toEqual(['worker %1 is draining']);
    // A nested reason is translated too, as its own msgid.
    seen.length = 0;
    renderNotice({ code: 'behind_waiting_run', message: 'x', params: {
      run_id: 'r', name: null, queue: 'cpu', code: 'worker_draining',
      ahead: { code: 'worker_draining', message: 'x', params: { worker: 'b' } } } }, upper);
    expect(seen).toEqual(['worker %1 is draining', 'behind run %1 in the %2 queue, which is held up: %3']);
  });

  it('falls back to the server\'s message for an unknown code or missing params', () => {
    expect(renderNotice({ code: 'new_code', message: 'as the server says' }, plainTrans)).toBe('as the server says');
    expect(renderNotice({ code: 'worker_draining', message: 'fallback', params: {} }, plainTrans)).toBe('fallback');
    expect(renderNotice({ code: 'new_code', message: '' }, plainTrans)).toBe('new_code');
    expect(renderNotice('plain text', plainTrans)).toBe('plain text');
    expect(renderNotice(null, plainTrans)).toBe('');
  });

  it('rounds GiB half up in integers, as Python does', () => {
    expect([0, 51, 52, 256, 1024, 8704].map(gib)).toEqual(['0.0 GiB', '0.0 GiB', '0.1 GiB', '0.3 GiB', '1.0 GiB', '8.5 GiB']);
  });

  it('speaks to the submitter when their queued quota refuses a submit', () => {
    const one = { error: { code: 'owner_queue_full', message: 'server text',
      params: { setting: 'run_quota_max_queued', owner: 'bob', limit: 2, queued: 2, adding: 1 } } };
    expect(renderError(one, plainTrans, 'HTTP 429'))
      .toBe('runs you have waiting: 2, at most 2 per user; submit again once one has started');
    const sweep = { error: { ...one.error, params: { ...one.error.params, queued: 1, adding: 4 } } };
    expect(renderError(sweep, plainTrans, 'HTTP 429')).toBe('runs you have waiting: 1, at most 2 per user; 4 more would exceed it');
  });

  it('renders a refusal with its field', () => {
    const body = { error: { code: 'bad', message: 'expected an integer', params: { field: 'options.seed' } } };
    expect(renderError(body, plainTrans, 'HTTP 422')).toBe('expected an integer (field: options.seed)');
    const worker = { error: { code: 'worker_unknown', message: 'server text', params: { field: 'options.target.worker', worker: 'box' } } };
    expect(renderError(worker, plainTrans, 'HTTP 400')).toBe(
      'worker box is not enrolled and has not connected to this server since it started (field: options.target.worker)');
    expect(renderError(null, plainTrans, 'HTTP 500')).toBe('HTTP 500');
  });
});
