import { describe, expect, it } from 'vitest';

import { plainTrans, Trans } from '../src/format';
import { CATALOG, renderError, renderNotice } from '../src/messages';

describe('the message catalog', () => {
  it('renders the server\'s waiting reasons word for word in English', () => {
    // The server's own English texts (core/scheduling/placement.py, offer_pass.py).
    const cases: [string, Record<string, unknown>, string][] = [
      ['worker_disconnected', { worker: 'gpu-box' }, 'waiting for worker gpu-box to reconnect'],
      ['worker_draining', { worker: 'gpu-box' }, 'worker gpu-box is draining'],
      ['waiting_for_offer', { devices: ['cuda'], worker: 'any', draining: ['gpu-box'] },
        'waiting for a worker that offers cuda: gpu-box is draining'],
      ['waiting_for_offer', { devices: ['cuda:0', 'cuda:1'], worker: 'any' },
        'waiting for a worker that offers cuda:0, cuda:1'],
      ['waiting_for_offer', { devices: ['cuda:0'], worker: 'box' }, 'waiting for worker box to offer cuda:0'],
      ['seeded_run_executing', { run_id: 'r1' }, 'waiting for seeded run r1 to finish: a seeded run executes alone'],
      ['waiting_to_run_alone', { running: 2 }, 'a seeded run executes alone: waiting for 2 runs to finish'],
      ['waiting_to_run_alone', { running: 1 }, 'a seeded run executes alone: waiting for 1 run to finish'],
      ['owner_quota', { owner: 'alice', running: 2, limit: 2 }, "waiting for alice's run quota (2 running of 2)"],
      ['owner_quota', { owner: null, running: 1, limit: 1 }, 'waiting for the shared run quota (1 running of 1)'],
      // core/scheduling/memory_ledger.py
      ['memory_wait', { device: 'w/cuda:0', need_mib: 4596, free_mib: 1000 },
        'waiting for memory on w/cuda:0: needs 4596 MiB (budget and CUDA context), 1000 MiB free'],
      ['memory_wait', { device: 'w/cuda:0', need_mib: 4596, free_mib: null },
        'waiting for w/cuda:0 to report its free memory (needs 4596 MiB)'],
      ['memory_no_budget', { device: 'w/cuda:0', whole: true, running: 1 },
        'waiting for w/cuda:0 to empty: it is shared by memory and this run has no budget (options.target.memory_gib), so it takes the card whole'],
      ['memory_no_budget', { device: 'w/cuda:0', whole: false, running: 1 },
        'waiting for w/cuda:0: a run without a memory budget has the card whole'],
      ['budget_raised', { device: 'w/cuda:0', estimate_gib: 4, memory_gib: 6.5, need_mib: 7156, free_mib: 100 },
        'the estimated budget was raised from 4 to 6.5 GiB; waiting for it on w/cuda:0']
    ];
    for (const [code, params, text] of cases) {
      expect(renderNotice({ code, message: 'server text', params }, plainTrans)).toBe(text);
    }
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
  });

  it('falls back to the server\'s message for an unknown code or missing params', () => {
    expect(renderNotice({ code: 'new_code', message: 'as the server says' }, plainTrans)).toBe('as the server says');
    expect(renderNotice({ code: 'worker_draining', message: 'fallback', params: {} }, plainTrans)).toBe('fallback');
    expect(renderNotice('plain text', plainTrans)).toBe('plain text');
    expect(renderNotice(null, plainTrans)).toBe('');
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
    expect(renderError(null, plainTrans, 'HTTP 500')).toBe('HTTP 500');
  });

  it('every entry renders something with complete params', () => {
    for (const [code, render] of Object.entries(CATALOG)) {
      const params = {
        worker: 'w', devices: ['cpu'], run_id: 'r', device: 'cpu', running: 3, action: 'drain', need_mib: 1,
        free_mib: 0, total_mib: 2, estimate_gib: 1, memory_gib: 2, whole: true, limit: 2, queued: 2, adding: 1
      };
      expect(render(plainTrans, params), code).toBeTruthy();
    }
  });
});
