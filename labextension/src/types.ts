// The REST payloads and /ws/execution frames this extension reads, mirrored from
// codefy_jupyter/server/openapi.yaml (tests/unit/test_labextension_types.py holds each interface to
// its schema) and server/execution_socket.py (events / batch / error frames). Fields a newer server adds are
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
  worker?: string;
  devices?: string[];
  pool?: string;
  memory_gib?: number;
  memory_source?: string;
  /** the accepted estimate the server raised memory_gib from (queue reason budget_raised) */
  estimate_raised_from?: number;
  wait?: boolean;
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
  queue_reason?: Notice | null;
  final_loss?: { name: string; value: number } | null;
  sweep_id?: string | null;
  sweep_variant?: number | null;
  study_id?: string | null;
  inputs?: import('./runRecords').InputRecord[];
  /** a placed run on cards: each card by name (Devices on hover) */
  cards?: RunCard[];
}

/** One card of a run: its device on its machine, the card's name there, and the run's own name for it. */
export interface RunCard {
  device: string;
  name: string | null;
  in_run: string | null;
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
  disconnect_reason?: Notice | null;
}

/** An agent's last refusal, kept by its name until it connects (GET workers' `refused`). */
export interface WorkerRefusal extends Notice {
  name: string;
  at: number;
}

export interface WorkerList {
  workers: Worker[];
  local?: WorkerDevice[];
  refused?: WorkerRefusal[];
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

// -- graphs (openapi Graph), node definitions (GET nodes) --------------------------------------

export interface GraphNode {
  id: string;
  type: string;
  label?: string;
  params?: Record<string, unknown> | null;
  [key: string]: unknown;
}

export interface GraphEdge {
  source: string;
  source_port: string;
  target: string;
  target_port: string;
}

export interface Graph {
  nodes: GraphNode[];
  edges?: GraphEdge[];
  settings?: { device?: string | null; seed?: number | null } | null;
  [key: string]: unknown;
}

export interface ParamDefinition {
  type: string;
  default?: unknown;
  min?: number;
  max?: number;
  options?: unknown[];
  description?: string;
}

export interface NodeDefinition {
  type: string;
  category?: string;
  params: Record<string, ParamDefinition>;
}

export interface SubmitOptions {
  device?: string;
  seed?: number;
  deterministic?: boolean;
  record_outputs?: boolean;
  provenance?: boolean;
  lane?: 'queued' | 'interactive';
  session?: string;
  target?: { worker?: string; devices?: string[]; memory_gib?: number; memory_source?: 'estimate' };
}

/** POST memory-estimate: one card's memory for a graph, and the budget suggested for it. */
export interface MemoryEstimate {
  memory_gib: number;
  bytes: number;
  parameters: number;
  parts: Record<string, number>;
  unknown: { node_id: string; why: string }[];
  world?: number;
}

export interface SubmitRequest {
  graph: Graph;
  name?: string;
  options: SubmitOptions;
}

// -- sweeps (openapi Sweep, SweepVariant) ------------------------------------------------------

export interface SweepParamValue {
  node_id: string;
  param: string;
  value: string | number | boolean;
}

export interface SweepVariant {
  index: number;
  run_id: string | null;
  status: string;
  params: SweepParamValue[];
  seed?: number | null;
  objective?: number | null;
  objective_node_id?: string | null;
  rank?: number | null;
  tied_with?: number[];
  run_exists?: boolean;
  final_metrics?: Record<string, number | null>;
  final_metrics_node_id?: string | null;
  worker_id?: string | null;
  devices?: string[] | null;
  queue_key?: string | null;
}

export interface Sweep {
  sweep_id: string;
  name?: string | null;
  state: string;
  method?: string;
  objective: { metric: string; direction: string; node_id?: string | null };
  params: { node_id: string; param: string; domain: unknown[] }[];
  total_combinations?: number;
  counts?: Record<string, number>;
  variants: SweepVariant[];
  error?: string | null;
  failure?: string | null;
  objective_warning?: string | null;
  best?: { index: number; run_id: string | null; objective: number } | null;
  changes?: number;
}

// -- studies (openapi Study, StudyVariant, StudyAttempt, StudyRank) ----------------------------

export interface StudyAttempt {
  id: string;
  attempt: number;
  repetition: number;
  seed?: number;
  run_id: string;
  status: string;
  objective_value?: number | null;
  run_exists?: boolean;
  worker_id?: string | null;
  devices?: string[] | null;
}

export interface StudyComparison {
  against?: string;
  n: number;
  repetitions?: number[];
  differences?: number[];
  mean_difference: number | null;
  ci95: [number, number] | null;
  p_value: number | null;
  method?: string | null;
}

export interface StudyVariant {
  index: number;
  label: string;
  repetitions: { repetition: number; seed: number | null; current: StudyAttempt | null }[];
  attempts?: StudyAttempt[];
  aggregate: { count: number; mean: number | null; std: number | null; values: (number | null)[] };
  eligible: boolean;
  ineligible_reasons?: Record<string, unknown>[];
  rank: number | null;
  tie: boolean;
  tied_with: string[];
  average_rank: number | null;
  comparison: StudyComparison | null;
}

export interface Study {
  id: string;
  name?: string | null;
  status: string;
  revision?: number;
  objective: { node_id?: string; metric?: string; direction?: string };
  seed?: number;
  repetitions?: number;
  counts?: Record<string, number>;
  budget_usage?: Record<string, unknown>;
  halt?: Record<string, unknown> | null;
  variants: StudyVariant[];
  rankings?: { label: string; variant: number; rank: number; tie: boolean; tied_with: string[]; mean: number | null }[];
  best?: string | null;
  created_at?: number;
  updated_at?: number;
}

export interface StudySummary {
  id: string;
  name?: string | null;
  status: string;
  repetitions?: number;
  objective?: { metric?: string; direction?: string; node_id?: string };
  counts?: Record<string, number>;
  best?: string | null;
  created_at?: number;
  [key: string]: unknown;
}
