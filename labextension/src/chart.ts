// A small SVG line chart (the sweep's objective curves, a study's values per repetition): one
// polyline and its dots per series, axes labelled with the bounds. Scaling lives in experiments.ts.

import { bounds, logSeries, Series } from './experiments';
import { formatNumber } from './format';

const NS = 'http://www.w3.org/2000/svg';
const COLOURS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];

export function svg(tag: string, attrs: Record<string, string | number> = {}, text?: string): SVGElement {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) {
    node.setAttribute(k, String(v));
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

export interface ChartOptions {
  /** a log10 y axis (the ticks still read in the metric's units) */
  log?: boolean;
  width?: number;
  height?: number;
}

export function lineChart(given: Series[], xLabel: string, options: ChartOptions = {}): SVGElement {
  const { log = false, width = 640, height = 220 } = options;
  const root = svg('svg', { class: 'cdf-chart' + (log ? ' cdf-chart-log' : ''), width, height, viewBox: `0 0 ${width} ${height}` });
  const series = log ? logSeries(given) : given;
  const tick = (y: number): string => formatNumber(log ? 10 ** y : y);
  const b = bounds(series);
  if (!b) {
    return root;
  }
  const left = 56;
  const bottom = 22;
  const legend = 150;
  const w = width - left - legend - 8;
  const h = height - bottom - 8;
  const sx = (x: number): number => left + ((x - b.x0) / (b.x1 - b.x0)) * w;
  const sy = (y: number): number => 8 + (1 - (y - b.y0) / (b.y1 - b.y0)) * h;
  root.append(
    svg('line', { x1: left, y1: 8 + h, x2: left + w, y2: 8 + h, class: 'cdf-axis' }),
    svg('line', { x1: left, y1: 8, x2: left, y2: 8 + h, class: 'cdf-axis' }),
    svg('text', { x: left - 4, y: 16, 'text-anchor': 'end', class: 'cdf-tick' }, tick(b.y1)),
    svg('text', { x: left - 4, y: 8 + h, 'text-anchor': 'end', class: 'cdf-tick' }, tick(b.y0)),
    svg('text', { x: left - 4, y: 12 + h / 2, 'text-anchor': 'end', class: 'cdf-tick' }, tick((b.y0 + b.y1) / 2)),
    svg('text', { x: left, y: height - 6, class: 'cdf-tick' }, formatNumber(b.x0)),
    svg('text', { x: left + w, y: height - 6, 'text-anchor': 'end', class: 'cdf-tick' }, `${xLabel} ${formatNumber(b.x1)}`)
  );
  series.forEach((s, i) => {
    const colour = COLOURS[i % COLOURS.length];
    const pts = s.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
    const g = svg('g', { class: 'cdf-series', 'data-label': s.label });
    g.append(svg('polyline', { points: pts.map(([x, y]) => `${sx(x)},${sy(y)}`).join(' '), fill: 'none',
      stroke: colour, 'stroke-width': 1.5 }));
    for (const [x, y] of pts.length <= 60 ? pts : []) {
      g.append(svg('circle', { cx: sx(x), cy: sy(y), r: 2.5, fill: colour }));
    }
    root.append(g);
    root.append(svg('text', { x: left + w + 12, y: 16 + i * 14, fill: colour, class: 'cdf-legend-text' }, s.label.slice(0, 22)));
  });
  return root;
}
