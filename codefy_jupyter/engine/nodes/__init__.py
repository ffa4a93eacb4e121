"""Built-in node packs. Each module is registered through the `codefy_jupyter.nodes` entry-point
group in pyproject.toml, exactly as a third-party pack would be."""
