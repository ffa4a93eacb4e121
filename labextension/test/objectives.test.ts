import { describe, expect, it } from 'vitest';

import { plainTrans as t } from '../src/format';
import { nodeChoices, producersOf, producerWarning, recordedObjectives, runsToRead } from '../src/objectives';
import type { MetricRow } from '../src/runRecords';
import type { GraphNode, Run } from '../src/types';

const row = (name: string, node_id: string | null, step = 0, value = 1): MetricRow => ({ name, node_id, step, value });

// Three listed runs: two of the MLP (train logs train_loss and val_loss), one of a two-branch
// graph where train and eval both log val_loss; system metrics in every one.
const perRun: MetricRow[][] = [
  [row('train_loss', 'train'), row('train_loss', 'train', 1), row('val_loss', 'train'), row('system/cpu_percent', null)],
  [row('train_loss', 'train'), row('val_loss', 'train'), row('system/rss_bytes', null)],
  [row('val_loss', 'train'), row('val_loss', 'eval'), row('accuracy', 'eval'), row('wall_s', null)]
];
const nodes: GraphNode[] = [
  { id: 'data', type: 'SyntheticData', params: {} },
  { id: 'train', type: 'TrainingLoop', label: 'Train', params: {} },
  { id: 'eval', type: 'Evaluate', params: {} }
];

describe('the objective suggestions from the listed runs', () => {
  it('reads the listed runs that may have recorded something, newest first, at most the cap', () => {
    const runs = [{ id: 'q', status: 'queued' }, { id: 'r', status: 'running' }, { id: 's', status: 'succeeded' },
      { id: 'f', status: 'failed' }] as Run[];
    expect(runsToRead(runs)).toEqual(['r', 's', 'f']);
    expect(runsToRead(runs, 2)).toEqual(['r', 's']);
    expect(runsToRead([])).toEqual([]);
  });

  it('suggests the names the runs recorded, the most runs first, then the defaults they lack', () => {
    const recorded = recordedObjectives(perRun, ['train_loss', 'mse']);
    expect(recorded.metrics).toEqual(['val_loss', 'train_loss', 'accuracy', 'wall_s', 'mse']);
    expect(recorded.metrics.some(m => m.startsWith('system/'))).toBe(false);
  });

  it('knows the nodes that logged each name, and none for a run-level series', () => {
    const recorded = recordedObjectives(perRun);
    expect(producersOf(recorded, 'val_loss')).toEqual(['eval', 'train']);
    expect(producersOf(recorded, ' train_loss ')).toEqual(['train']);
    expect(producersOf(recorded, 'wall_s')).toEqual([]);
    expect(producersOf(recorded, 'never_logged')).toEqual([]);
  });

  it('offers Any node, then the producers of the name, then the graph\'s other nodes', () => {
    const recorded = recordedObjectives(perRun);
    expect(nodeChoices(recorded, 'train_loss', nodes, t)).toEqual([
      ['', 'Any node'], ['train', 'Train (train) · logs train_loss'], ['data', 'SyntheticData (data)'],
      ['eval', 'Evaluate (eval)']]);
    // A producer the top-level graph does not hold (a block's inner node) is offered by its id.
    const inner = recordedObjectives([[row('r2', 'cv/metrics')]]);
    expect(nodeChoices(inner, 'r2', nodes, t).map(([value]) => value)).toEqual(['', 'cv/metrics', 'data', 'train', 'eval']);
    expect(nodeChoices(recordedObjectives([]), 'loss', [], t)).toEqual([['', 'Any node']]);
  });

  it('warns when Any node meets more than one producer, and not once a node is chosen', () => {
    const recorded = recordedObjectives(perRun);
    expect(producerWarning(recorded, 'val_loss', '', t)).toBe(
      'The listed runs show 2 nodes logging val_loss (eval, train): with Any node, a variant where more than one logs ' +
      'it gets no rank. Choose one under Objective node.');
    expect(producerWarning(recorded, 'val_loss', 'train', t)).toBe('');
    expect(producerWarning(recorded, 'train_loss', '', t)).toBe('');
    expect(producerWarning(recorded, 'unknown', '', t)).toBe('');
  });
});
