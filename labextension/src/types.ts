// The REST payloads and /ws/execution frames this extension reads, mirrored from
// codefy_jupyter/server/openapi.yaml (Run, RunPage, Worker, WorkerSlot, Error) and
// server/execution_socket.py (events / batch / error frames). Fields a newer server adds are
// ignored; missing optional ones read as "-".

export type RunStatus =
  | 'queued'
  | 'running'
  | 'disconnected'
  | 'succeeded'
  | 'failed'
  | 'cancelled'
  | 'interrupted';

/** `{code, message, params}`: every refusal, a queue_reason, a run warning. */
export interface Notice {
  code: string;
  message: string;
  params?: Record<string, unknown>;
}

export interface RunTarget {
  worker?: string | null;
  devices?: string[] | null;
  pool?: string | null;
  memory_gib?: number | null;
  memory_source?: string | null;
}

export interface Run {
  id: string;
  name?: string | null;
  status: RunStatus | string;
  owner?: string | null;
  device?: string;
  devices?: string[];
  queue_key?: string;
  lane?: string;
  seed?: number | null;
  deterministic?: boolean;
  options?: { requested_device?: string; target?: RunTarget | null; [key: string]: unknown };
  execution_facts?: Record<string, unknown> | null;
  fingerprint_digest?: string | null;
  worker_id?: string | null;
  submitted_at?: number;
  started_at?: number | null;
  finished_at?: number | null;
  error?: Record<string, unknown> | null;
  last_seq?: number;
  queue_position?: number | null;
  queue_reason?: Notice | string | null;
  final_loss?: { name: string; value: number } | null;
}

export interface RunPage {
  runs: Run[];
  total: number;
  offset: number;
  limit: number;
}

export interface SlotCount {
  limit?: number;
  taken?: number;
  limited_by?: string;
}

export interface WorkerDevice {
  device?: string;
  name?: string;
  uuid?: string | null;
  slots?: SlotCount;
  same_card?: string[];
  shared_with?: string;
  [key: string]: unknown;
}

export interface Worker {
  id: string;
  name: string;
  state: string;
  status?: string | null;
  enrolled?: boolean;
  draining?: boolean;
  same_host?: boolean;
  missing_types?: string[];
  extra_types?: string[];
  devices?: WorkerDevice[];
  runs?: string[];
  version?: string | null;
  platform?: string | null;
  connected_at?: number | null;
  last_seen_at?: number | null;
  disconnect_reason?: string | null;
}

export interface WorkerList {
  workers: Worker[];
  local?: WorkerDevice[];
}

export interface Enrollment {
  token: string;
  expires_at: number;
  worker: string | null;
  command: string;
}

export interface RunEvent {
  seq: number;
  type: string;
  payload: Record<string, unknown>;
  created_at: number;
}

export interface EventsFrame {
  type: 'events';
  run_id: string;
  events: RunEvent[];
  cursor: number;
  status: string;
}

export interface BatchFrame {
  type: 'batch';
  frames: EventsFrame[];
}

export interface ErrorFrame {
  type: 'error';
  run_id?: string | null;
  request_id?: unknown;
  error: Notice;
}

export type ServerFrame = EventsFrame | BatchFrame | ErrorFrame | { type: string };
