"""Methods, one module each, registered by name (the config section ``methods.<name>``).

A method module declares what it produces as data and provides the steps that produce it:

- ``declare(cfg, name) -> list[harness.plan.Job]``: its models (stage ``train``), indexes
  (``index``), runs (``search``: one job per model and dataset writes every system of that model)
  and efficiency figures (``measure``), each with its inputs and the config keys it reads;
- one function per step a job names, ``step(ctx, job, inputs, out) -> dict`` (info for meta.json);
- ``SCHEMA``: the file of its config section's JSON schema (a fragment, additionalProperties:
  false), so that a key is legal only under the method that reads it.

The workflow's generic rules read the plan; adding a method touches no file in workflow/
(docs/adding-a-method.md).
"""
from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from harness.settings import read_schema_file
from harness.registry import Registry

#: method name -> module. SVDR and VDR share one module (VDR = SVDR without L_sp).
METHODS: Registry[str] = Registry("method")
METHODS.add("bm25", "harness.methods.bm25")
METHODS.add("dpr", "harness.methods.dpr")
METHODS.add("svdr", "harness.methods.vdr")
METHODS.add("vdr", "harness.methods.vdr")
METHODS.add("bpr", "harness.methods.bpr")
METHODS.add("qcr", "harness.methods.qcr")
METHODS.add("lightretriever", "harness.methods.lightretriever")
METHODS.add("densephrases", "harness.methods.densephrases")

#: steps that are not retrieval methods but declare jobs too: top-level config section -> module
#: (the extractive reader reads any system's run and measures EM).
STEPS: Registry[str] = Registry("step")
STEPS.add("reader", "harness.methods.reader")


#: where plugins come from: installed packages' entry points in this group, and the modules named
#: in the environment variable HARNESS_PLUGINS (os.pathsep-separated, importable from sys.path).
ENTRY_POINTS = "ir_repro_harness.methods"


def load_plugins() -> None:
    """Import plugin modules; each registers its methods with :func:`register` when imported."""
    import os
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINTS):
        ep.load()
    for name in filter(None, os.environ.get("HARNESS_PLUGINS", "").split(os.pathsep)):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            from harness.errors import ConfigError

            raise ConfigError(f"plugin module {name!r} (env HARNESS_PLUGINS) cannot be imported: {exc}",
                              fix="put its folder on PYTHONPATH, or unset HARNESS_PLUGINS") from None


def method_module(name: str) -> ModuleType:
    return importlib.import_module(METHODS.get(name))


def register(name: str, module: str) -> None:
    """Register a method from outside the package (a plugin, or the toy method of the tests)."""
    if name in METHODS and METHODS.get(name) == module:
        return  # the plugin module imported twice (e.g. as __main__ and by name)
    METHODS.add(name, module)  # harness.config.load_schema caches per registry content: no clearing needed


def schema_fragment(name: str) -> dict:
    """The JSON schema of ``methods.<name>`` (the module's ``SCHEMA`` YAML file)."""
    module = method_module(name)
    return read_schema_file(Path(module.__file__).parent / module.SCHEMA)


def step_schema(name: str) -> dict:
    """The JSON schema of a step's top-level section (e.g. ``reader``)."""
    module = importlib.import_module(STEPS.get(name))
    return read_schema_file(Path(module.__file__).parent / module.SCHEMA)


load_plugins()
