// The graph viewer's view transform, pure (no DOM): how the laid-out graph (layout.ts, in its own
// units) is scaled and moved to show in the canvas. Fit centres the whole graph, never enlarged
// past MAX_FIT; zoom keeps the point under the cursor still and is clamped to [MIN_SCALE,
// MAX_SCALE]; `reveal` pans the least distance that brings one box (the running node) into view.

/** screen = graph * scale + (x, y) */
export interface View {
  scale: number;
  x: number;
  y: number;
}

export interface Size {
  width: number;
  height: number;
}

export interface Box {
  x: number;
  y: number;
  width: number;
  height: number;
}

export const MIN_SCALE = 0.05;
export const MAX_SCALE = 4;
/** Fit does not blow a small graph up past this. */
export const MAX_FIT = 1;
/** One + / − press, or one wheel notch. */
export const ZOOM_STEP = 1.25;

export function clampScale(scale: number, min = MIN_SCALE, max = MAX_SCALE): number {
  if (!Number.isFinite(scale)) {
    return 1;
  }
  return Math.min(max, Math.max(min, scale));
}

/** The view that shows all of `content` inside `canvas` less `pad` on each side, centred. An empty
 * or unmeasured canvas (0 wide: a hidden tab) gives the identity. */
export function fitView(content: Size, canvas: Size, pad = 16): View {
  const roomW = canvas.width - 2 * pad;
  const roomH = canvas.height - 2 * pad;
  if (roomW <= 0 || roomH <= 0 || content.width <= 0 || content.height <= 0) {
    return { scale: 1, x: pad, y: pad };
  }
  const scale = clampScale(Math.min(roomW / content.width, roomH / content.height, MAX_FIT));
  return {
    scale,
    x: (canvas.width - content.width * scale) / 2,
    y: (canvas.height - content.height * scale) / 2
  };
}

/** `view` zoomed by `factor` about the screen point (px, py), which stays where it is. */
export function zoomAt(view: View, factor: number, px: number, py: number): View {
  const scale = clampScale(view.scale * factor);
  const k = scale / view.scale;
  return { scale, x: px - (px - view.x) * k, y: py - (py - view.y) * k };
}

/** `view` panned the least that puts graph-space `box` inside the canvas with `margin` around it
 * (the box's top-left corner wins when it is larger than the canvas); the same view when it shows. */
export function reveal(view: View, box: Box, canvas: Size, margin = 12): View {
  const axis = (start: number, length: number, offset: number, room: number): number => {
    const a = start * view.scale + offset;
    const b = a + length * view.scale;
    if (a < margin) {
      return offset + (margin - a);
    }
    if (b > room - margin) {
      return offset - Math.min(b - (room - margin), a - margin);
    }
    return offset;
  };
  return { scale: view.scale, x: axis(box.x, box.width, view.x, canvas.width), y: axis(box.y, box.height, view.y, canvas.height) };
}

/** The SVG transform attribute of a view. */
export function transformOf(view: View): string {
  return `translate(${view.x.toFixed(2)},${view.y.toFixed(2)}) scale(${view.scale.toFixed(4)})`;
}
