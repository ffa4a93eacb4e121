"""Kernel side: the `%codefy` magics and the notebook widgets, on top of the Python client
(`codefy_jupyter.client`)."""
