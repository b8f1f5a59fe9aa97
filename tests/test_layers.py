"""The import graph runs one way: each layer may import its own and the layers below it, never
one above (the application layer imports the library, the library never the application). Every
import counts, also one inside a function."""
import ast
import os

import pytest

pytestmark = pytest.mark.unit

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: bottom to top: (layer, the module prefixes in it)
LAYERS = [
    ("foundation", ("core.errors", "core.types", "core.registry", "core.argtypes", "core.atomic", "core.faults",
                    "core.seeding", "core.process_tree", "core.plugins", "core.config",
                    "core.spaces", "core.space_codec")),
    ("distribution", ("core.distributed",)),
    ("run records", ("core.run",)),
    ("sampling and learning", ("core.sampling", "core.learning")),
    ("training loops", ("core.algos",)),
    ("command line", ("options",)),
    ("application", ("ddrl",)),
    ("entry point", ("main",)),
]
#: plugin packages: used by the library through their registries, built on the library; they
#: may import anything below the command line
PLUGINS = ("envs", "models", "agents")


def layer_of(module):
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def imports(path):
    tree = ast.parse(open(path).read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            for alias in node.names:  # `from core import seeding` imports core.seeding
                yield node.lineno, f"{node.module}.{alias.name}"


def modules():
    for top in ("core", "options", "envs", "models", "agents"):
        for folder, _, files in os.walk(os.path.join(REPO_ROOT, top)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    rel = os.path.relpath(path, REPO_ROOT)[:-3].replace(os.sep, ".")
                    yield rel.removesuffix(".__init__"), path
    yield "main", os.path.join(REPO_ROOT, "main.py")


def test_every_core_module_has_a_layer():
    unplaced = [m for m, _ in modules() if m.startswith("core") and m != "core"
                and layer_of(m) is None]
    assert not unplaced, f"modules in no layer of tests/test_layers.py: {unplaced}"


def test_no_import_runs_upward():
    upward = []
    command_line = layer_of("options")
    for module, path in modules():
        plugin = module.split(".")[0] in PLUGINS
        own = command_line - 1 if plugin else layer_of(module)
        if own is None:
            continue
        for line, target in imports(path):
            rank = layer_of(target)
            if rank is not None and rank > own:
                upward.append(f"{os.path.relpath(path, REPO_ROOT)}:{line} ({LAYERS[own][0]}) "
                              f"imports {target} ({LAYERS[rank][0]})")
    assert not upward, "imports that run upward:\n" + "\n".join(upward)
