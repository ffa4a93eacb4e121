// The one message catalog: everything the server says with a code ({code, message, params}: a
// queue_reason, a refusal, a worker's error or warning) is rendered from the catalog the server, the
// CLI and the notebook widgets read too (codefy_jupyter/wire/messages.json, copied into
// messageCatalog.ts), through Lab's translator so a language pack can translate it: its msgids are
// the catalog's English texts with the placeholders as %1, %2, ... A code the catalog has no words
// for (or params it cannot fill) shows the server's own English message.
// The rules of the catalog (variants, `when`, filters) are described in messages.json's "about";
// tests/shared/message_vectors.json holds this renderer and Python's to the same words.

import type { Notice } from './types';
import type { Trans } from './format';
import { MESSAGES, Variant } from './messageCatalog';

type Params = Record<string, unknown>;

const PLACEHOLDER = /\{([A-Za-z0-9_.]+)(?:\|([a-z]+))?\}/g;
/** The characters of a run id every surface shows. */
export const SHORT_ID = 12;

export { MESSAGES as CATALOG };

function get(params: Params, key: string): unknown {
  let value: unknown = params;
  for (const part of key.split('.')) {
    value = value && typeof value === 'object' && !Array.isArray(value) ? (value as Params)[part] : undefined;
  }
  return value;
}

function isNone(value: unknown): boolean {
  return value === undefined || value === null;
}

function holds(cond: unknown, value: unknown): boolean {
  const v = isNone(value) ? null : value;
  if (cond !== null && typeof cond === 'object') {
    const c = cond as { not?: unknown; len?: number; min_len?: number };
    if ('not' in c) {
      return v !== c.not;
    }
    const size = Array.isArray(v) ? v.length : null;
    if ('len' in c) {
      return size === c.len;
    }
    return size !== null && size >= (c.min_len ?? 0);
  }
  return v === cond;
}

function plain(value: unknown): string {
  if (Array.isArray(value)) {
    return value.map(plain).join(', ');
  }
  return String(value);
}

/** MiB as GiB to one decimal, rounded half up in integers (as wire/messages.py does). */
export function gib(mib: number): string {
  const tenths = Math.floor((Math.round(mib) * 10 + 512) / 1024);
  return `${Math.floor(tenths / 10)}.${tenths % 10} GiB`;
}

function filtered(value: unknown, name: string | undefined, params: Params, t: Trans): string | null {
  if (name === undefined || name === 'list') {
    return plain(value);
  }
  if (name === 'gib') {
    return typeof value === 'number' ? gib(value) : null;
  }
  if (name === 'who') {
    const named = params.name;
    return typeof named === 'string' && named ? `'${named}'` : String(value).slice(0, SHORT_ID);
  }
  if (name === 'reason') {
    return value && typeof value === 'object' ? renderNotice(value as Notice, t) : null;
  }
  return null;
}

function variantOf(variant: Variant): [Record<string, unknown>, string] {
  return typeof variant === 'string' ? [{}, variant] : [variant.when ?? {}, variant.text];
}

/** One variant's text through the translator, or null when a placeholder has no value. */
function fill(text: string, params: Params, t: Trans): string | null {
  const values: string[] = [];
  let missing = false;
  const msgid = text.replace(PLACEHOLDER, (_all, key: string, name: string | undefined) => {
    const value = get(params, key);
    const out = isNone(value) ? null : filtered(value, name, params, t);
    if (out === null) {
      missing = true;
    }
    values.push(out ?? '');
    return `%${values.length}`;
  });
  return missing ? null : t.__(msgid, ...values);
}

/** The catalog's words for `code` with `params`, or null when it has none for them. */
export function render(code: string, params: Params | null | undefined, t: Trans): string | null {
  const p = params || {};
  for (const variant of MESSAGES[code] ?? []) {
    const [when, text] = variantOf(variant);
    if (Object.entries(when).every(([key, cond]) => holds(cond, get(p, key)))) {
      const filled = fill(text, p, t);
      if (filled !== null) {
        return filled;
      }
    }
  }
  return null;
}

/** A notice in the panel's language: the catalog's words, else the server's message, else its code. */
export function renderNotice(notice: Notice | string | null | undefined, t: Trans): string {
  if (!notice) {
    return '';
  }
  if (typeof notice === 'string') {
    return notice;
  }
  return render(notice.code, notice.params, t) ?? (notice.message || notice.code);
}

/** The error of a refused request (`{"error": {...}}`), with the failing field when it has one. */
export function renderError(body: unknown, t: Trans, fallback: string): string {
  const error = (body as { error?: Notice } | null)?.error;
  if (!error || typeof error !== 'object') {
    return fallback;
  }
  const text = renderNotice(error, t);
  const field = error.params?.field;
  return field ? t.__('%1 (field: %2)', text, field) : text;
}
