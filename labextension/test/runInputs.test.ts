import { describe, expect, it } from 'vitest';

import { inputRows } from '../src/runRecords';

describe('Data and models rows', () => {
  it('shortens the digest and says size, rows and revision when known', () => {
    const sha = 'ab'.repeat(32);
    expect(inputRows([
      { node_id: 'csv', kind: 'dataset', path: '/d/a.csv', sha256: sha, size: 120, revision: 'v3', rows: 10 },
      { node_id: 'load', kind: 'model', path: '/d/m.pt', sha256: sha, size: 5, revision: null, rows: null }
    ])).toEqual([
      { kind: 'dataset', path: '/d/a.csv', digest: 'abababababab', detail: '120 bytes, 10 rows, revision v3' },
      { kind: 'model', path: '/d/m.pt', digest: 'abababababab', detail: '5 bytes' }
    ]);
  });

  it('has no rows for a run without provenance', () => {
    expect(inputRows(undefined)).toEqual([]);
    expect(inputRows([])).toEqual([]);
  });
});
