// h(tag, props, ...children): a DOM element, as the notebook widgets' dom.js. Props that are
// undefined, null or false are left off; on<event> adds a listener; dataset fills data-*.

export type Child = Node | string | number | null | undefined | false | Child[];
export type Props = Record<string, unknown> & { dataset?: Record<string, string> };

export function h(tag: string, props: Props = {}, ...children: Child[]): HTMLElement {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) {
      continue;
    }
    if (key === 'class') {
      node.className = String(value);
    } else if (key === 'dataset') {
      Object.assign(node.dataset, value);
    } else if (key.startsWith('on') && typeof value === 'function') {
      node.addEventListener(key.slice(2), value as EventListener);
    } else {
      node.setAttribute(key, value === true ? '' : String(value));
    }
  }
  const add = (child: Child): void => {
    if (Array.isArray(child)) {
      child.forEach(add);
    } else if (child !== undefined && child !== null && child !== false) {
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  };
  children.forEach(add);
  return node;
}

/** Save `text` as a file named `filename` (the CSV download). */
export function download(filename: string, text: string, type = 'text/csv'): void {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = h('a', { href: url, download: filename });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/** Put `text` on the clipboard: the async API where the page may use it, else a selection copy. */
export async function copyText(text: string): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const area = h('textarea', { style: 'position:fixed;opacity:0' }) as HTMLTextAreaElement;
    area.value = text;
    document.body.append(area);
    area.select();
    const ok = document.execCommand('copy');
    area.remove();
    return ok;
  }
}
