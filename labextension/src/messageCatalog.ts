// Generated from codefy_jupyter/wire/messages.json by `python -m codefy_jupyter.wire.messages`;
// do not edit: test/messages.test.ts and tests/unit/test_message_catalog.py check it equals the JSON.

export type Variant = string | { when?: Record<string, unknown>; text: string };

export const MESSAGES: Record<string, Variant[]> = {
  "worker_disconnected": [
    "waiting for worker {worker} to reconnect"
  ],
  "worker_draining": [
    "worker {worker} is draining"
  ],
  "waiting_for_offer": [
    {
      "when": {
        "worker": {
          "not": "any"
        }
      },
      "text": "waiting for worker {worker} to offer {devices|list}"
    },
    {
      "when": {
        "draining": {
          "len": 1
        }
      },
      "text": "waiting for a worker that offers {devices|list}: {draining|list} is draining"
    },
    {
      "when": {
        "draining": {
          "min_len": 2
        }
      },
      "text": "waiting for a worker that offers {devices|list}: {draining|list} are draining"
    },
    "waiting for a worker that offers {devices|list}"
  ],
  "one_shot_pool": [
    "waiting for a one-shot worker that offers {devices|list}"
  ],
  "one_shot_start": [
    "waiting for one-shot worker {worker} to start"
  ],
  "one_shot_taken": [
    "one-shot worker {worker} has already taken its run"
  ],
  "one_shot_run_id": [
    "one-shot worker {worker} was started for run {run_id|who}"
  ],
  "seeded_run_executing": [
    "waiting for seeded run {run_id|who} to finish: a seeded run executes alone on this server, one at a time"
  ],
  "waiting_for_seeded_run": [
    "waiting for seeded run {run_id|who} to start first: a seeded run executes alone on this server, so nothing starts before it"
  ],
  "waiting_to_run_alone": [
    {
      "when": {
        "running": 1
      },
      "text": "a seeded run executes alone on this server: waiting for 1 run to finish"
    },
    "a seeded run executes alone on this server: waiting for {running} runs to finish"
  ],
  "device_reserved": [
    "{device} is reserved for run {run_id|who}, which waits ahead of this run"
  ],
  "waiting_for_set_devices": [
    "waiting for {devices|list}: a device-set run starts when every device is free"
  ],
  "behind_waiting_run": [
    "behind run {run_id|who} in the {queue} queue, which is held up: {ahead|reason}"
  ],
  "waiting_for_storage": [
    {
      "when": {
        "worker": "any",
        "need": "transfer"
      },
      "text": "waiting for a worker with the mount label {label}, or the transfer backend: {detail}"
    },
    {
      "when": {
        "worker": "any",
        "need": "transfer"
      },
      "text": "waiting for a worker with the mount label {label}, or the transfer backend"
    },
    {
      "when": {
        "worker": {
          "not": "any"
        },
        "need": "transfer"
      },
      "text": "worker {worker} lacks the mount label {label}, or the transfer backend: {detail}"
    },
    {
      "when": {
        "worker": {
          "not": "any"
        },
        "need": "transfer"
      },
      "text": "worker {worker} lacks the mount label {label}, or the transfer backend"
    },
    {
      "when": {
        "worker": "any",
        "need": "mount"
      },
      "text": "waiting for a worker with the mount label {label} (the data folder, mounted): {detail}"
    },
    {
      "when": {
        "worker": "any",
        "need": "mount"
      },
      "text": "waiting for a worker with the mount label {label} (the data folder, mounted)"
    },
    {
      "when": {
        "worker": {
          "not": "any"
        },
        "need": "mount"
      },
      "text": "worker {worker} lacks the mount label {label} (the data folder, mounted): {detail}"
    },
    {
      "when": {
        "worker": {
          "not": "any"
        },
        "need": "mount"
      },
      "text": "worker {worker} lacks the mount label {label} (the data folder, mounted)"
    },
    {
      "when": {
        "worker": "any",
        "need": "same_machine"
      },
      "text": "waiting for a worker with this server's machine (it reads a file outside the data folder): {detail}"
    },
    {
      "when": {
        "worker": "any",
        "need": "same_machine"
      },
      "text": "waiting for a worker with this server's machine (it reads a file outside the data folder)"
    },
    {
      "when": {
        "worker": {
          "not": "any"
        },
        "need": "same_machine"
      },
      "text": "worker {worker} lacks this server's machine (it reads a file outside the data folder): {detail}"
    },
    {
      "when": {
        "worker": {
          "not": "any"
        },
        "need": "same_machine"
      },
      "text": "worker {worker} lacks this server's machine (it reads a file outside the data folder)"
    }
  ],
  "waiting_for_turn": [
    "runs ahead of it hold the device"
  ],
  "owner_quota": [
    {
      "when": {
        "owner": null
      },
      "text": "waiting for the shared run quota ({running} running of {limit})"
    },
    "waiting for {owner}'s run quota ({running} running of {limit})"
  ],
  "owner_queue_full": [
    {
      "when": {
        "adding": 1
      },
      "text": "runs you have waiting: {queued}, at most {limit} per user; submit again once one has started"
    },
    "runs you have waiting: {queued}, at most {limit} per user; {adding} more would exceed it"
  ],
  "memory_wait": [
    "waiting for memory on {device}: {free_mib|gib} free of {need_mib|gib} needed (budget and CUDA context)",
    "waiting for {device} to report its free memory (needs {need_mib|gib})"
  ],
  "memory_no_budget": [
    {
      "when": {
        "whole": false
      },
      "text": "waiting for {device}: a run without a memory budget has the card whole"
    },
    "waiting for {device} to empty: it is shared by memory and this run has no budget (options.target.memory_gib), so it takes the card whole"
  ],
  "budget_raised": [
    "the estimated budget was raised from {estimate_gib} to {memory_gib} GiB; waiting for it on {device}"
  ],
  "memory_budget_local": [
    "a memory budget applies to a worker's card shared by memory; this server's runs are admitted by slot count (name a worker, or any)"
  ],
  "memory_over_card": [
    "{device} has {total_mib} MiB in all; this run needs {need_mib} MiB (budget and CUDA context)"
  ],
  "not_worker_owner": [
    {
      "when": {
        "enrolled_by": null
      },
      "text": "only an admin may {action} worker {worker}"
    },
    "only an admin or {enrolled_by} may {action} worker {worker}"
  ],
  "unauthenticated": [
    "not signed in: reload the page and sign in again"
  ],
  "forbidden": [
    "you are not allowed to do that on this server"
  ],
  "worker_not_found": [
    "no worker {worker}"
  ],
  "worker_removed": [
    "worker {worker} was removed"
  ],
  "worker_unreachable": [
    "the cancel could not reach worker {worker}, which is not connected; if it comes back with this run, it is told to stop it"
  ],
  "worker_gone": [
    {
      "when": {
        "reason.code": "not_alive"
      },
      "text": "worker {worker} reconnected without this run"
    },
    "worker {worker} did not reconnect within {reason.params.seconds} s"
  ],
  "worker_lost_after_restart": [
    "worker {worker} did not reconnect within {reason.params.seconds} s after the control plane restarted"
  ],
  "worker_adopted": [
    "the control plane restarted; this run continues once worker {worker} reconnects (within {seconds} s)"
  ],
  "worker_reconnected": [
    "worker {worker} reconnected; the run goes on"
  ],
  "worker_frames_lost": [
    "frames {first} to {last} of this run never arrived from worker {worker}"
  ],
  "worker_frame_unreadable": [
    "a {type} frame (seq {seq}) from worker {worker} could not be recorded: {error}"
  ],
  "worker_frame_too_large": [
    "a {frame_type} frame of this run was too large to send and was dropped: {error}"
  ],
  "worker_bad_frame": [
    "worker {worker} sent a frame that could not be read: {error}"
  ],
  "worker_not_connected": [
    "the outputs of run {run_id|who} are on worker {worker}, which is not connected"
  ],
  "worker_bad_answer": [
    "worker {worker} sent an unreadable answer: {error}"
  ],
  "worker_connection_closed": [
    "the connection to worker {worker} closed while reading its outputs"
  ],
  "worker_output_timeout": [
    "worker {worker} did not read the outputs of run {run_id|who} within {seconds} s"
  ],
  "worker_output_failed": [
    "worker {worker} failed to read the outputs: {error}"
  ],
  "worker_name_taken": [
    "worker name '{name}' is enrolled already; only a token re-issued for that worker may enroll it again"
  ],
  "worker_missing_node_types": [
    "worker {worker} lacks node types this graph uses: {missing_types|list}"
  ],
  "worker_unknown": [
    "worker {worker} is not enrolled and has not connected to this server since it started"
  ],
  "worker_interactive": [
    {
      "when": {
        "pool": {
          "not": null
        }
      },
      "text": "a run on pool {pool} cannot use the interactive lane; interactive runs execute on this server"
    },
    "a run on worker {worker} cannot use the interactive lane; interactive runs execute on this server"
  ],
  "worker_storage_unavailable": [
    {
      "when": {
        "need": "transfer"
      },
      "text": "this run uses files only the mount label {label}, or the transfer backend has; worker {worker} is on another machine"
    },
    {
      "when": {
        "need": "mount"
      },
      "text": "this run uses files only the mount label {label} (the data folder, mounted) has; worker {worker} is on another machine"
    },
    "this run uses files only this server's machine (it reads a file outside the data folder) has; worker {worker} is on another machine"
  ],
  "worker_storage_fallback": [
    "S3 is on, but worker {worker}'s agent does not list s3 (no boto3 there): this run's files go through the transfer backend"
  ],
  "worker_token_required": [
    "a worker token is required (Authorization: token ...)"
  ],
  "worker_transfer_failed": [
    "the files of this run did not move between this server and its worker: {error}"
  ],
  "worker_upload_stopped": [
    "the run was cancelled while its files uploaded; the rest stay on the worker"
  ]
};
