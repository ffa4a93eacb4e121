import { describe, expect, it } from 'vitest';

import { placeRun, RunList } from '../src/runList';
import type { Run, RunPage } from '../src/types';

const run = (id: string, submitted: number, status = 'succeeded'): Run => ({ id, status, submitted_at: submitted });
const page = (runs: Run[], total = runs.length): RunPage => ({ runs, total });
const ids = (p: RunPage | null) => p?.runs.map(r => r.id);

describe('placeRun', () => {
  it('puts a new run in submit order, newest first, and counts it', () => {
    const placed = placeRun(page([run('c', 30), run('a', 10)], 7), run('b', 20), 'all');
    expect(ids(placed)).toEqual(['c', 'b', 'a']);
    expect(placed!.total).toBe(8);
    expect(ids(placeRun(page([run('a', 10)]), run('n', 99), 'all'))).toEqual(['n', 'a']);
  });
  it('replaces a listed run where it is, without counting it again', () => {
    const placed = placeRun(page([run('b', 20, 'running'), run('a', 10)], 2), run('b', 20, 'succeeded'), 'all');
    expect(placed!.runs.map(r => r.status)).toEqual(['succeeded', 'succeeded']);
    expect(placed!.total).toBe(2);
  });
  it('cuts a full page at the limit and leaves out a run older than its last row', () => {
    const full = page([run('c', 30), run('b', 20)], 40);
    expect(ids(placeRun(full, run('d', 40), 'all', 2))).toEqual(['d', 'c']);
    expect(placeRun(full, run('a', 10), 'all', 2)).toBeNull();
    expect(ids(placeRun(full, run('a', 10), 'all', 3))).toEqual(['c', 'b', 'a']);
  });
  it('leaves out a run the chip does not list', () => {
    expect(placeRun(page([]), run('a', 1, 'failed'), 'succeeded')).toBeNull();
    expect(ids(placeRun(page([]), run('a', 1, 'disconnected'), 'running'))).toEqual(['a']);
  });
});

describe('RunList', () => {
  const listed = (list: RunList, runs: Run[], total = runs.length) => list.listed(list.beginRead(), page(runs, total));

  it('looks a new run up once, however many frames it streams, and draws it without a re-read', () => {
    const list = new RunList();
    listed(list, [run('a', 10)], 1);
    expect(list.onFrame('n', 'queued')).toEqual({ fetch: true, status: false, refresh: false, readNow: false });
    for (let i = 0; i < 100; i++) {
      expect(list.onFrame('n', 'running')).toEqual({ fetch: false, status: false, refresh: false, readNow: false });
    }
    expect(list.fetched(run('n', 20, 'running'))).toEqual({ changed: true, refresh: false });
    expect(ids(list.page)).toEqual(['n', 'a']);
    expect(list.page!.total).toBe(2);
    expect(list.onFrame('n', 'running')).toEqual({ fetch: false, status: false, refresh: false, readNow: false });
  });
  it('shows a run that ended before it was listed as ended, from the lookup alone', () => {
    const list = new RunList();
    listed(list, [run('a', 10)]);
    expect(list.onFrame('short', 'succeeded').fetch).toBe(true);
    expect(list.fetched(run('short', 20, 'succeeded'))).toEqual({ changed: true, refresh: false });
    expect(list.statusOf('short')).toBe('succeeded');
  });
  it('keeps the later status when a frame outruns the lookup, and asks for a re-read', () => {
    const list = new RunList();
    listed(list, []);
    list.onFrame('n', 'queued');
    list.onFrame('n', 'succeeded');
    expect(list.fetched(run('n', 20, 'running'))).toEqual({ changed: true, refresh: true });
    expect(list.statusOf('n')).toBe('succeeded');
  });
  it('never moves a listed run back to an earlier status from a late lookup', () => {
    const list = new RunList();
    listed(list, []);
    list.onFrame('n', 'running');
    listed(list, [run('n', 20, 'succeeded')]);  // a re-read answered first
    expect(list.fetched(run('n', 20, 'running')).refresh).toBe(true);
    expect(list.statusOf('n')).toBe('succeeded');
    expect(list.page!.total).toBe(1);
  });
  it('writes a listed run\'s status change and asks for the coalesced re-read', () => {
    const list = new RunList();
    listed(list, [run('a', 10, 'running')]);
    expect(list.onFrame('a', 'running')).toEqual({ fetch: false, status: false, refresh: false, readNow: false });
    expect(list.onFrame('a', 'succeeded')).toEqual({ fetch: false, status: true, refresh: true, readNow: false });
    expect(list.runs[0].status).toBe('succeeded');
  });
  it('ignores a new run the chip would not list', () => {
    const list = new RunList('succeeded');
    listed(list, []);
    expect(list.onFrame('n', 'running').fetch).toBe(false);
    expect(list.onFrame('n', 'succeeded').fetch).toBe(true);
    expect(list.fetched(run('n', 20, 'failed')).changed).toBe(false);
    expect(list.page!.runs).toEqual([]);
  });
  it('keeps a run placed while a re-read was out that the re-read began too early to see', () => {
    const list = new RunList();
    listed(list, [run('a', 10)], 1);
    const read = list.beginRead();
    list.onFrame('n', 'succeeded');
    list.fetched(run('n', 20));
    list.listed(read, page([run('a', 10)], 1));
    expect(ids(list.page)).toEqual(['n', 'a']);
    expect(list.page!.total).toBe(2);
    // a read begun after the placement is the whole truth: it drops a run it does not list (deleted)
    listed(list, [run('a', 10)], 1);
    expect(ids(list.page)).toEqual(['a']);
  });
  it('takes in a run looked up before the first list arrived', () => {
    const list = new RunList();
    const read = list.beginRead();
    expect(list.onFrame('n', 'succeeded').fetch).toBe(true);
    expect(list.fetched(run('n', 20)).changed).toBe(false);
    list.listed(read, page([run('a', 10)], 1));
    expect(ids(list.page)).toEqual(['n', 'a']);
  });
  it('leaves a burst of new runs beyond the few lookups to one list read at once', () => {
    const list = new RunList('all', 2);
    listed(list, [run('a', 10)], 1);
    expect(list.onFrame('n1', 'running').fetch).toBe(true);
    expect(list.onFrame('n2', 'running').fetch).toBe(true);
    const third = list.onFrame('n3', 'running');
    expect(third.fetch).toBe(false);
    expect(third.readNow).toBe(true);
    expect(list.onFrame('n3', 'succeeded').readNow).toBe(false);  // once per run
    // the read that brings them all; then the lookups' answers change nothing but the rows
    listed(list, [run('n3', 23, 'succeeded'), run('n2', 22, 'running'), run('n1', 21, 'running'), run('a', 10)], 4);
    expect(list.statusOf('n3')).toBe('succeeded');
    expect(list.fetched(run('n1', 21, 'running'))).toEqual({ changed: true, refresh: false });
    expect(list.page!.total).toBe(4);
    // a lookup answered frees its place: the next new run is read alone again
    list.fetched(run('n2', 22, 'running'));
    expect(list.onFrame('n4', 'running').fetch).toBe(true);
  });
  it('asks again for a run left to a list read that did not list it', () => {
    const list = new RunList('all', 0);
    listed(list, []);
    const before = list.beginRead();  // a read already out when the frame came
    expect(list.onFrame('n', 'running').readNow).toBe(true);
    list.listed(before, page([]));
    expect(list.onFrame('n', 'running').readNow).toBe(false);  // still left to the next read
    listed(list, []);  // the read begun after it does not list it (deleted meanwhile)
    expect(list.onFrame('n', 'running').readNow).toBe(true);
  });
  it('asks again after a failed lookup', () => {
    const list = new RunList();
    listed(list, []);
    expect(list.onFrame('n', 'running').fetch).toBe(true);
    list.lookupFailed('n');
    expect(list.onFrame('n', 'running').fetch).toBe(true);
  });
  it('forgets placed runs and lookups when the chip changes', () => {
    const list = new RunList();
    listed(list, []);
    list.onFrame('n', 'running');
    list.reset('failed');
    expect(list.chip).toBe('failed');
    expect(list.onFrame('n', 'failed').fetch).toBe(true);
  });
});
