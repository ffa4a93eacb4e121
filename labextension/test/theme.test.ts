import { readFileSync } from 'fs';
import { describe, expect, it } from 'vitest';

// A fixed colour in the stylesheet is one a theme cannot change: in Lab's dark theme a light fill
// under the theme's light text is unreadable. Every colour goes through a --jp-* variable.
const css = readFileSync(new URL('../style/index.css', import.meta.url), 'utf8').replace(/\/\*[\s\S]*?\*\//g, '');

describe('the stylesheet follows the theme', () => {
  it('has no fixed colour', () => {
    const fixed = css.match(/#[0-9a-fA-F]{3,8}\b|\brgba?\(|\bhsla?\(|:\s*(white|black)\b/g) ?? [];
    expect(fixed).toEqual([]);
  });
  it('mixes every tone from the theme\'s variables', () => {
    const tones = css.match(/--cdf-[a-z-]+:\s*[^;]+;/g) ?? [];
    expect(tones.length).toBeGreaterThan(10);
    for (const tone of tones) {
      expect(tone).toMatch(/var\(--(jp|cdf)-/);
    }
  });
});
