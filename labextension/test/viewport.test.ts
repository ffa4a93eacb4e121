import { describe, expect, it } from 'vitest';

import { clampScale, fitView, MAX_SCALE, MIN_SCALE, reveal, transformOf, zoomAt } from '../src/viewport';

describe('fitView', () => {
  it('shrinks a wide graph to the canvas width and centres it vertically', () => {
    const v = fitView({ width: 1600, height: 200 }, { width: 832, height: 600 }, 16);
    expect(v.scale).toBeCloseTo(0.5);
    expect(v.x).toBeCloseTo(16);
    expect(v.y).toBeCloseTo((600 - 100) / 2);
    // every corner of the graph lands inside the canvas
    expect(1600 * v.scale + v.x).toBeLessThanOrEqual(832 - 16 + 1e-9);
  });

  it('does not enlarge a small graph past 1 and centres it', () => {
    const v = fitView({ width: 100, height: 50 }, { width: 1000, height: 500 });
    expect(v).toEqual({ scale: 1, x: 450, y: 225 });
  });

  it('gives the identity for a hidden canvas or an empty graph', () => {
    expect(fitView({ width: 100, height: 50 }, { width: 0, height: 0 }, 16)).toEqual({ scale: 1, x: 16, y: 16 });
    expect(fitView({ width: 0, height: 0 }, { width: 800, height: 600 }, 16)).toEqual({ scale: 1, x: 16, y: 16 });
  });
});

describe('zoom', () => {
  it('clamps the scale', () => {
    expect(clampScale(100)).toBe(MAX_SCALE);
    expect(clampScale(0)).toBe(MIN_SCALE);
    expect(clampScale(Number.NaN)).toBe(1);
    expect(clampScale(2)).toBe(2);
  });

  it('keeps the point under the cursor still', () => {
    const before = { scale: 0.5, x: 10, y: 20 };
    const after = zoomAt(before, 2, 110, 70);
    expect(after.scale).toBe(1);
    // the graph point under (110, 70) before is still under it after
    const gx = (110 - before.x) / before.scale;
    const gy = (70 - before.y) / before.scale;
    expect(gx * after.scale + after.x).toBeCloseTo(110);
    expect(gy * after.scale + after.y).toBeCloseTo(70);
  });

  it('stops at the clamp without moving the view', () => {
    const v = { scale: MAX_SCALE, x: 5, y: 5 };
    expect(zoomAt(v, 2, 100, 100)).toEqual({ scale: MAX_SCALE, x: 5, y: 5 });
  });
});

describe('reveal', () => {
  const canvas = { width: 400, height: 300 };
  it('keeps a view that already shows the box', () => {
    const v = { scale: 1, x: 0, y: 0 };
    expect(reveal(v, { x: 50, y: 50, width: 100, height: 40 }, canvas)).toEqual(v);
  });

  it('pans a box off to the right back in, by the least amount', () => {
    const v = reveal({ scale: 1, x: 0, y: 0 }, { x: 500, y: 50, width: 100, height: 40 }, canvas, 12);
    expect(v.x).toBe(-(600 - 388));
    expect(v.y).toBe(0);
  });

  it('pans a box off to the top-left back in, at the scale', () => {
    const v = reveal({ scale: 2, x: 0, y: 0 }, { x: -20, y: -10, width: 10, height: 10 }, canvas, 12);
    expect(v).toEqual({ scale: 2, x: 52, y: 32 });
  });
});

it('writes the SVG transform', () => {
  expect(transformOf({ scale: 0.5, x: 1, y: 2 })).toBe('translate(1.00,2.00) scale(0.5000)');
});
