import { readFileSync } from 'fs';
import { join } from 'path';
import { describe, expect, it } from 'vitest';

import { formatAverageRank, formatLoss, formatP, plainTrans as t } from '../src/format';
import { meanLabel, rankLabel } from '../src/experiments';
import { runRow } from '../src/runList';
import type { Run, StudyVariant } from '../src/types';

// The vectors tests/unit/test_shared_view_vectors.py holds the notebook widgets' rules to: a change
// on one side only fails there or here.
const ROOT = join(__dirname, '..', '..');
const read = (name: string) => JSON.parse(readFileSync(join(ROOT, 'tests', 'shared', name), 'utf-8'));

describe('the shared view vectors', () => {
  it('writes every run row as the notebook table does', () => {
    const vectors = read('run_row_vectors.json');
    expect(vectors.rows.length).toBeGreaterThan(6);
    for (const c of vectors.rows as { run: Run; row: Record<string, unknown> }[]) {
      const row = runRow(c.run, vectors.now, t) as unknown as Record<string, unknown>;
      const picked = Object.fromEntries(Object.keys(c.row).map(k => [k, row[k]]));
      expect(picked, c.run.id).toEqual(c.row);
    }
  });

  it('writes every number as Python does', () => {
    for (const [value, text] of read('run_row_vectors.json').numbers as [number | null, string][]) {
      expect(formatLoss(value), String(value)).toBe(text);
    }
  });

  it('writes every study cell as the notebook study view does', () => {
    const vectors = read('study_row_vectors.json');
    for (const c of vectors.variants as { variant: StudyVariant; cells: Record<string, unknown> }[]) {
      const v = c.variant;
      expect({
        rank: rankLabel(v.rank, v.tie),
        mean: meanLabel(v),
        p: formatP(v.comparison?.p_value),
        average_rank: formatAverageRank(v.average_rank),
        values: v.aggregate.values.map(x => formatLoss(x))
      }, v.label).toEqual(c.cells);
    }
  });
});
