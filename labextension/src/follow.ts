// Following a document the server answers by long-poll (a study, a sweep): one read at a time, the
// next as soon as the last is in while the document is live (the server holds it until something
// moved), a pause after a failed read, and `now()` (after Stop or Resume) drops the read in flight
// and reads at once. No DOM: the view draws in `show`.

export interface FollowHooks<T> {
  /** One read; `held` is the last document read (null before the first); `signal` drops it. */
  read(held: T | null, signal: AbortSignal): Promise<T>;
  /** Whether the document may still change (then it is read again). */
  live(doc: T): boolean;
  /** After each read that was not dropped: the document held, and the error if the read failed. */
  show(doc: T | null, error: unknown): void;
}

export class Follow<T> {
  private timer: ReturnType<typeof setTimeout> | null = null;
  private inflight: AbortController | null = null;
  private held: T | null = null;
  private stopped = false;

  constructor(private readonly hooks: FollowHooks<T>, private readonly retryMs = 2000) {}

  /** The last document read, or the one a command answered with (see `hold`). */
  get doc(): T | null {
    return this.held;
  }

  /** Take `doc` (a command's answer, e.g. Resume's) as the one the next read follows from. */
  hold(doc: T): void {
    this.held = doc;
  }

  /** Read now, dropping the read in flight and the one waiting for its turn. */
  now(): void {
    if (this.stopped) {
      return;
    }
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    this.inflight?.abort();
    const inflight = new AbortController();
    this.inflight = inflight;
    void this.readOnce(inflight);
  }

  dispose(): void {
    this.stopped = true;
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    this.inflight?.abort();
  }

  private async readOnce(inflight: AbortController): Promise<void> {
    let error: unknown = null;
    try {
      this.held = await this.hooks.read(this.held, inflight.signal);
    } catch (err) {
      if (inflight.signal.aborted) {
        return; // another read took its place, or the view closed
      }
      error = err;
    }
    if (inflight.signal.aborted) {
      return;
    }
    this.inflight = null;
    this.hooks.show(this.held, error);
    if (!this.stopped && (this.held === null || this.hooks.live(this.held))) {
      this.timer = setTimeout(() => this.now(), error === null ? 0 : this.retryMs);
    }
  }
}
