# codefy-jupyter: load the %codefy magics in every IPython shell and kernel of this profile,
# wherever codefy-jupyter is installed (an environment without it starts as usual).
# `codefy kernel-setup` copies this file into the profile's startup folder.
def _codefy_load() -> None:
    try:
        import codefy_jupyter  # noqa: F401
    except ImportError:
        return
    get_ipython().extension_manager.load_extension("codefy_jupyter")  # noqa: F821 - IPython's global


_codefy_load()
del _codefy_load
