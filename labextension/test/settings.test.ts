import { readFileSync } from 'fs';
import { describe, expect, it } from 'vitest';

import { DEFAULT_PREFERENCES, initialTarget, readPreferences } from '../src/settings';

describe('the Settings Editor\'s preferences', () => {
  it('reads what the schema declares, with its defaults', () => {
    const schema = JSON.parse(readFileSync(new URL('../schema/panels.json', import.meta.url), 'utf8'));
    const defaults = Object.fromEntries(Object.entries(schema.properties).map(([k, v]) => [k, (v as { default: unknown }).default]));
    expect(readPreferences(defaults)).toEqual(DEFAULT_PREFERENCES);
    expect(Object.keys(schema.properties).sort()).toEqual(Object.keys(DEFAULT_PREFERENCES).sort());
  });
  it('falls back on a value of the wrong type, and clamps the refresh', () => {
    expect(readPreferences({ defaultTarget: 3, refreshSeconds: 'soon' })).toEqual(DEFAULT_PREFERENCES);
    expect(readPreferences({ defaultTarget: ' gpu-box ', refreshSeconds: 0 })).toEqual({ defaultTarget: 'gpu-box', refreshSeconds: 2 });
    expect(readPreferences(null)).toEqual(DEFAULT_PREFERENCES);
  });
  it('starts Queue on… on the preferred target only when the server offers it', () => {
    expect(initialTarget('any', ['local', 'gpu-box', 'any'])).toBe('any');
    expect(initialTarget('gone-box', ['local', 'any'])).toBe('local');
  });
});
