import { describe, expect, it } from 'vitest';

import { canResumeStudy } from '../src/experiments';
import { artifactName, artifactPath, chartGroups, metricSeries, RECORD_EVENTS } from '../src/runRecords';

describe('chart groups', () => {
  it('keeps system metrics out of the training chart, percent apart from bytes', () => {
    const rows = [
      { node_id: 'train', name: 'train_loss', step: 0, value: 1.0 },
      { node_id: null, name: 'system/cpu_percent', step: 0, value: 97 },
      { node_id: null, name: 'system/rss_bytes', step: 0, value: 2 ** 30 },
      { node_id: null, name: 'system/gpu_util_percent/cuda:0', step: 0, value: 80 },
      { node_id: null, name: 'system/gpu_memory_bytes/cuda:0', step: 0, value: 2 ** 33 },
      { node_id: 'train', name: 'systemic_bytes', step: 0, value: 3 }
    ];
    const groups = chartGroups(rows);
    expect(groups.own.map(r => r.name)).toEqual(['train_loss', 'systemic_bytes']);
    expect(groups.percent.map(r => r.name)).toEqual(['system/cpu_percent', 'system/gpu_util_percent/cuda:0']);
    expect(groups.bytes.map(r => r.name)).toEqual(['system/rss_bytes', 'system/gpu_memory_bytes/cuda:0']);
  });
});

describe('metric series', () => {
  it('makes one series per node and name, x the step, in the order first logged', () => {
    const series = metricSeries([
      { node_id: 'train', name: 'train_loss', step: 0, value: 1.0 },
      { node_id: 'train', name: 'val_loss', step: 0, value: 1.2 },
      { node_id: 'train', name: 'train_loss', step: 1, value: 0.5 },
      { node_id: 'eval', name: 'accuracy', step: null, value: 0.9 }
    ]);
    expect(series).toEqual([
      { label: 'train_loss', points: [[0, 1.0], [1, 0.5]] },
      { label: 'val_loss', points: [[0, 1.2]] },
      { label: 'accuracy', points: [[0, 0.9]] }
    ]);
  });

  it('names the node when two nodes log the same name, and counts unstepped values in order', () => {
    const series = metricSeries([
      { node_id: 'a', name: 'mean', step: null, value: 1 },
      { node_id: 'b', name: 'mean', step: null, value: 2 },
      { node_id: 'a', name: 'mean', step: null, value: 3 }
    ]);
    expect(series).toEqual([
      { label: 'a.mean', points: [[0, 1], [1, 3]] },
      { label: 'b.mean', points: [[0, 2]] }
    ]);
  });

  it('leaves out missing and non-finite values, and series with nothing left', () => {
    expect(metricSeries([
      { node_id: 'n', name: 'loss', step: 0, value: null },
      { node_id: 'n', name: 'loss', step: 1, value: Number.NaN },
      { node_id: 'n', name: 'acc', step: 0, value: 0.5 }
    ])).toEqual([{ label: 'acc', points: [[0, 0.5]] }]);
    expect(metricSeries([])).toEqual([]);
  });
});

describe('artifacts', () => {
  it('copies the path on this server and labels the row by the file name', () => {
    const a = { kind: 'model', path: '/data/runs/r1/model.pt', backend: 'local' };
    expect(artifactPath(a)).toBe('/data/runs/r1/model.pt');
    expect(artifactName(a)).toBe('model.pt');
    expect(artifactName({ kind: 'x', path: 'C:\\runs\\w.pt' })).toBe('w.pt');
    expect(artifactName({ kind: 'x', path: 'plain' })).toBe('plain');
  });

  it('reads records again after metric, artifact and closing events only', () => {
    for (const type of ['metric', 'artifact', 'execution_complete', 'execution_error', 'execution_stopped']) {
      expect(RECORD_EVENTS.has(type)).toBe(true);
    }
    expect(RECORD_EVENTS.has('node_status')).toBe(false);
    expect(RECORD_EVENTS.has('progress')).toBe(false);
  });
});

describe('study resume', () => {
  it('offers Resume for the statuses the server resumes, and no other', () => {
    for (const status of ['interrupted', 'cancelled', 'failed', 'halted']) {
      expect(canResumeStudy(status)).toBe(true);
    }
    for (const status of ['queued', 'running', 'cancel_requested', 'succeeded', '']) {
      expect(canResumeStudy(status)).toBe(false);
    }
  });
});
