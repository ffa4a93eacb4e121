"""What the control plane, the agent and the kernel side share, and nothing else: the worker protocol
and its names, run event payloads, compact JSON, fingerprints, machine identity, device names and
inventory parsing, where a local server records itself, the range of a run's options
(run_options), and the message catalog that words every coded notice (messages, messages.json). Pure and standard-library only, so an agent's main process and a notebook kernel can
import it without the control plane (or torch)."""
