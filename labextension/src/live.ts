// One connection to `{base_url}codefy/ws/execution` that follows runs and hands each `events`
// frame (batches unpacked, in order) to the listener. It reconnects with a growing pause and
// subscribes again, so a restarted server picks up where it left off.

import type { EventsFrame, ServerFrame } from './types';

export type Subscription =
  | { type: 'subscribe'; all: true; batch: true }
  | { type: 'subscribe'; run_id: string; cursor: number };

export interface LiveOptions {
  url: () => string;
  subscription: () => Subscription;
  onEvents: (frame: EventsFrame) => void;
  onError?: (message: string) => void;
  /** called after every (re)connect, before frames arrive: re-read what may have been missed */
  onOpen?: () => void;
}

/** Unpack one server message into its events frames (a `batch` carries several, in order). */
export function eventsFrames(frame: ServerFrame): EventsFrame[] {
  if (frame.type === 'events') {
    return [frame as EventsFrame];
  }
  if (frame.type === 'batch') {
    return ((frame as { frames?: EventsFrame[] }).frames || []).filter(f => f && f.type === 'events');
  }
  return [];
}

export class LiveSocket {
  private socket: WebSocket | null = null;
  private closed = false;
  private pause = 500;
  private timer: ReturnType<typeof setTimeout> | null = null;

  constructor(private readonly options: LiveOptions) {
    this.open();
  }

  private open(): void {
    if (this.closed) {
      return;
    }
    const socket = new WebSocket(this.options.url());
    this.socket = socket;
    socket.onopen = () => {
      this.pause = 500;
      this.options.onOpen?.();
      socket.send(JSON.stringify(this.options.subscription()));
    };
    socket.onmessage = message => {
      let frame: ServerFrame;
      try {
        frame = JSON.parse(String(message.data)) as ServerFrame;
      } catch {
        return;
      }
      if (frame.type === 'error') {
        const error = (frame as { error?: { message?: string } }).error;
        this.options.onError?.(error?.message || 'error');
        return;
      }
      for (const events of eventsFrames(frame)) {
        this.options.onEvents(events);
      }
    };
    socket.onclose = () => {
      this.socket = null;
      if (!this.closed) {
        this.timer = setTimeout(() => this.open(), this.pause);
        this.pause = Math.min(this.pause * 2, 15000);
      }
    };
  }

  get connected(): boolean {
    return this.socket?.readyState === WebSocket.OPEN;
  }

  dispose(): void {
    this.closed = true;
    if (this.timer) {
      clearTimeout(this.timer);
    }
    this.socket?.close();
    this.socket = null;
  }
}
