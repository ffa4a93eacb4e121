// The REST client of the panels: `{base_url}codefy/api/...` through Lab's ServerConnection (its
// auth, XSRF and base URL). A refusal becomes an ApiError carrying the server's error body.

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type { Chip } from './format';
import { runsQuery } from './format';
import type { Artifact, MetricRow } from './runRecords';
import type {
  Enrollment, Graph, MemoryEstimate, NodeDefinition, Notice, Run, RunEvent, RunPage, Study, StudySummary, SubmitRequest,
  Sweep, WorkerList
} from './types';

export class ApiError extends Error {
  constructor(readonly status: number, readonly body: unknown, message: string) {
    super(message);
  }

  get notice(): Notice | null {
    const error = (this.body as { error?: Notice } | null)?.error;
    return error && typeof error === 'object' ? error : null;
  }
}

export class CodefyApi {
  readonly settings: ServerConnection.ISettings;

  constructor(settings?: ServerConnection.ISettings) {
    this.settings = settings ?? ServerConnection.makeSettings();
  }

  url(...parts: string[]): string {
    return URLExt.join(this.settings.baseUrl, 'codefy', 'api', ...parts);
  }

  /** `{base_url}codefy/ws/execution`, with the token when the page has one. */
  socketUrl(): string {
    const url = URLExt.join(this.settings.wsUrl, 'codefy', 'ws', 'execution');
    return this.settings.token ? `${url}?token=${encodeURIComponent(this.settings.token)}` : url;
  }

  async request(path: string, init: RequestInit = {}): Promise<Response> {
    const response = await ServerConnection.makeRequest(path, init, this.settings);
    if (!response.ok) {
      let body: unknown = null;
      try {
        body = await response.json();
      } catch {
        body = null;
      }
      const message = (body as { error?: Notice } | null)?.error?.message || `HTTP ${response.status}`;
      throw new ApiError(response.status, body, message);
    }
    return response;
  }

  async json<T>(path: string, init: RequestInit = {}): Promise<T> {
    return (await (await this.request(path, init)).json()) as T;
  }

  listRuns(chip: Chip): Promise<RunPage> {
    return this.json<RunPage>(`${this.url('runs')}?${runsQuery(chip)}`);
  }

  getRun(id: string): Promise<Run> {
    return this.json<Run>(this.url('runs', id));
  }

  cancelRun(id: string): Promise<Run> {
    return this.json<Run>(this.url('runs', id, 'cancel'), { method: 'POST' });
  }

  async deleteRun(id: string): Promise<void> {
    await this.request(this.url('runs', id), { method: 'DELETE' });
  }

  async metricsCsv(id: string): Promise<string> {
    return (await this.request(`${this.url('runs', id, 'metrics')}?format=csv`)).text();
  }

  events(id: string, cursor: number): Promise<{ events: RunEvent[]; cursor: number; more: boolean; status: string }> {
    return this.json(`${this.url('runs', id, 'events')}?cursor=${cursor}`);
  }

  listWorkers(): Promise<WorkerList> {
    return this.json<WorkerList>(this.url('workers'));
  }

  drain(id: string, on: boolean): Promise<unknown> {
    return this.json(this.url('workers', encodeURIComponent(id), on ? 'drain' : 'undrain'), { method: 'POST' });
  }

  async removeWorker(id: string): Promise<void> {
    await this.request(this.url('workers', encodeURIComponent(id)), { method: 'DELETE' });
  }

  enroll(): Promise<Enrollment> {
    return this.json<Enrollment>(this.url('workers', 'enrollments'), { method: 'POST', body: '{}' });
  }

  submitRun(body: SubmitRequest): Promise<Run> {
    return this.json<Run>(this.url('runs'), { method: 'POST', body: JSON.stringify(body) });
  }

  memoryEstimate(graph: Graph, devices: string[] = []): Promise<MemoryEstimate> {
    return this.json<MemoryEstimate>(this.url('memory-estimate'), { method: 'POST', body: JSON.stringify({ graph, devices }) });
  }

  async nodeDefinitions(): Promise<NodeDefinition[]> {
    return (await this.json<{ nodes: NodeDefinition[] }>(this.url('nodes'))).nodes;
  }

  metrics(id: string): Promise<{ metrics: MetricRow[] }> {
    return this.json(this.url('runs', id, 'metrics'));
  }

  async artifacts(id: string): Promise<Artifact[]> {
    return (await this.json<{ artifacts: Artifact[] }>(this.url('runs', id, 'artifacts'))).artifacts;
  }

  createSweep(body: unknown): Promise<{ sweep_id: string }> {
    return this.json(this.url('sweeps'), { method: 'POST', body: JSON.stringify(body) });
  }

  // With `follow` (the `changes` on screen), a long-poll: answered once a child starts or ends, or
  // after `wait` seconds.
  getSweep(id: string, follow?: { changes: number; wait: number; signal?: AbortSignal }): Promise<Sweep> {
    const path = this.url('sweeps', encodeURIComponent(id));
    if (!follow) {
      return this.json<Sweep>(path);
    }
    return this.json<Sweep>(`${path}?changes=${follow.changes}&wait=${follow.wait}`,
      follow.signal ? { signal: follow.signal } : {});
  }

  cancelSweep(id: string): Promise<unknown> {
    return this.json(this.url('sweeps', encodeURIComponent(id), 'cancel'), { method: 'POST' });
  }

  async sweepCsv(id: string): Promise<string> {
    return (await this.request(`${this.url('sweeps', encodeURIComponent(id))}?format=csv`)).text();
  }

  async listStudies(): Promise<StudySummary[]> {
    return (await this.json<{ studies: StudySummary[] }>(`${this.url('studies')}?limit=100`)).studies;
  }

  // The study view follows a running study: the summary form (no per-attempt lists) is what it draws.
  // With `follow` (the revision on screen), a long-poll: answered once the study is past that revision
  // (500 ms later, with the changes of those 500 ms) or has stopped, or after `wait` seconds.
  getStudy(id: string, follow?: { revision: number; wait: number; signal?: AbortSignal }): Promise<Study> {
    const path = `${this.url('studies', encodeURIComponent(id))}?view=summary`;
    if (!follow) {
      return this.json<Study>(path);
    }
    return this.json<Study>(`${path}&revision=${follow.revision}&wait=${follow.wait}`,
      follow.signal ? { signal: follow.signal } : {});
  }

  cancelStudy(id: string): Promise<Study> {
    return this.json<Study>(this.url('studies', encodeURIComponent(id), 'cancel'), { method: 'POST', body: '{}' });
  }

  /** Resume an interrupted, cancelled, failed or halted study; 409 revision_moved when it changed
   * after `expectedRevision` (what the view last showed). */
  resumeStudy(id: string, expectedRevision?: number): Promise<Study> {
    const body = expectedRevision === undefined ? {} : { expected_revision: expectedRevision };
    return this.json<Study>(this.url('studies', encodeURIComponent(id), 'resume'), { method: 'POST', body: JSON.stringify(body) });
  }

  async studyCsv(id: string): Promise<string> {
    return (await this.request(`${this.url('studies', encodeURIComponent(id))}?format=csv`)).text();
  }
}
