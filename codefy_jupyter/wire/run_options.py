"""What a run's options may hold, as every client checks it before submitting: the CLI's flags, the
magics, the Queue on… form. The control plane checks the same range when it validates a request."""

SEED_MAX = 2**32 - 1  # a run's seed is an integer from 0 to this
