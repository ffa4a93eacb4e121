import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

import { Follow } from '../src/follow';

type Doc = { rev: number; live: boolean };

// A server whose answers the test hands out one by one; each read waits for its answer or its abort.
function server() {
  const pending: { held: Doc | null; signal: AbortSignal; answer: (d: Doc) => void; fail: (e: unknown) => void }[] = [];
  const read = (held: Doc | null, signal: AbortSignal) => new Promise<Doc>((answer, fail) => {
    signal.addEventListener('abort', () => fail(new Error('aborted')));
    pending.push({ held, signal, answer, fail });
  });
  return { pending, read };
}

const settle = async () => {
  await vi.advanceTimersByTimeAsync(0);
};

describe('Follow', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('reads again from the held document while it is live, and stops once it is not', async () => {
    const s = server();
    const shown: (number | null)[] = [];
    const f = new Follow<Doc>({ read: s.read, live: d => d.live, show: d => shown.push(d?.rev ?? null) });
    f.now();
    expect(s.pending[0].held).toBeNull();
    s.pending[0].answer({ rev: 1, live: true });
    await settle();
    expect(s.pending[1].held).toEqual({ rev: 1, live: true }); // the next read follows from it
    s.pending[1].answer({ rev: 2, live: false });
    await settle();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(shown).toEqual([1, 2]);
    expect(s.pending).toHaveLength(2); // settled: no more reads
    expect(f.doc).toEqual({ rev: 2, live: false });
  });

  it('shows a failed read with the document it held, and tries again after the pause', async () => {
    const s = server();
    const shown: [number | null, unknown][] = [];
    const f = new Follow<Doc>({ read: s.read, live: d => d.live, show: (d, e) => shown.push([d?.rev ?? null, e]) }, 2000);
    f.now();
    s.pending[0].answer({ rev: 1, live: true });
    await settle();
    const boom = new Error('boom');
    s.pending[1].fail(boom);
    await settle();
    expect(shown[1]).toEqual([1, boom]);
    await vi.advanceTimersByTimeAsync(1999);
    expect(s.pending).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(1);
    expect(s.pending).toHaveLength(3);
  });

  it('now() drops the read in flight, which then shows nothing; a held answer is followed from', async () => {
    const s = server();
    const shown: (number | null)[] = [];
    const f = new Follow<Doc>({ read: s.read, live: d => d.live, show: d => shown.push(d?.rev ?? null) });
    f.now();
    s.pending[0].answer({ rev: 1, live: true });
    await settle();
    f.hold({ rev: 5, live: true }); // e.g. Resume's answer
    f.now();
    expect(s.pending[1].signal.aborted).toBe(true);
    expect(s.pending[2].held).toEqual({ rev: 5, live: true });
    await settle();
    expect(shown).toEqual([1]); // the dropped read showed nothing
    expect(s.pending).toHaveLength(3);
  });

  it('dispose() drops the read in flight and reads no more', async () => {
    const s = server();
    const shown: (number | null)[] = [];
    const f = new Follow<Doc>({ read: s.read, live: () => true, show: d => shown.push(d?.rev ?? null) });
    f.now();
    f.dispose();
    expect(s.pending[0].signal.aborted).toBe(true);
    f.now();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(s.pending).toHaveLength(1);
    expect(shown).toEqual([]);
  });
});
