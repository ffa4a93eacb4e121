// The extension's preferences as the Settings Editor holds them (schema/panels.json), pure: read
// from the composite settings with a fallback for each field, so a hand-edited value of the wrong
// type cannot break a panel. index.ts loads them through ISettingRegistry and keeps them current.

import { LOCAL } from './queueForm';

export interface Preferences {
  /** local, any, or a worker's name */
  defaultTarget: string;
  /** the Workers panel's re-read interval while visible */
  refreshSeconds: number;
}

export const DEFAULT_PREFERENCES: Preferences = { defaultTarget: LOCAL, refreshSeconds: 10 };
export const REFRESH_MIN_S = 2;
export const REFRESH_MAX_S = 3600;

export function readPreferences(composite: Record<string, unknown> | null | undefined): Preferences {
  const target = composite?.defaultTarget;
  const seconds = composite?.refreshSeconds;
  return {
    defaultTarget: typeof target === 'string' && target.trim() ? target.trim() : DEFAULT_PREFERENCES.defaultTarget,
    refreshSeconds: typeof seconds === 'number' && Number.isFinite(seconds)
      ? Math.min(REFRESH_MAX_S, Math.max(REFRESH_MIN_S, Math.round(seconds)))
      : DEFAULT_PREFERENCES.refreshSeconds
  };
}

/** The target Queue on… starts with: the preferred one when the server offers it, else local. */
export function initialTarget(preferred: string, offered: string[]): string {
  return offered.includes(preferred) ? preferred : LOCAL;
}
