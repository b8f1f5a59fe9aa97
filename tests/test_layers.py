"""The house reads top-down: main.py and the ddrl command -> the application (ddrl/) -> the
command line (options/) -> the plugins (loggers/, agents/, models/, envs/) -> the library
(core/, itself in layers). Every module of every package has a rank; a module may import its
own rank and those below, never one above (the library never names the plugins above it: it
loads them by the names a spec carries). Every import counts, also one inside a function. And
no module imports itself back through others: the import graph has no cycle."""
import ast
import os

import pytest

pytestmark = pytest.mark.unit

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: bottom to top: (layer, the module prefixes in it)
LAYERS = [
    ("foundation", ("core", "core.errors", "core.types", "core.registry", "core.argtypes", "core.atomic",
                    "core.faults", "core.seeding", "core.process_tree", "core.plugins",
                    "core.config", "core.spaces", "core.space_codec", "core.batched_env")),
    ("distribution", ("core.distributed",)),
    ("run records", ("core.run",)),
    ("sampling and learning", ("core.sampling", "core.learning", "core.data")),
    ("training loops", ("core.algos",)),
    ("env plugins", ("envs",)),
    ("model plugins", ("models",)),
    ("agent plugins", ("agents",)),
    ("tracker plugins", ("loggers",)),
    ("command line", ("options",)),
    ("application", ("ddrl",)),
    ("entry point", ("main",)),
]
PACKAGES = ("core", "envs", "models", "agents", "loggers", "options", "ddrl")


def layer_of(module):
    """The rank of the layer whose longest prefix names ``module`` (core.run.x is "core.run"'s,
    not "core"'s), or None outside the house."""
    found = [(len(p), rank) for rank, (_, prefixes) in enumerate(LAYERS) for p in prefixes
             if module == p or module.startswith(p + ".")]
    return max(found)[1] if found else None


def imports(path):
    """(line, imported module) of every import in the file, a function's included."""
    tree = ast.parse(open(path).read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            for alias in node.names:  # `from core import seeding` imports core.seeding
                yield node.lineno, f"{node.module}.{alias.name}"


def modules(root=REPO_ROOT):
    """(module name, path) of every module of the house's packages, and main."""
    for top in PACKAGES:
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                    yield rel.removesuffix(".__init__"), path
    yield "main", os.path.join(root, "main.py")


def upward_imports(root=REPO_ROOT):
    found = []
    for module, path in modules(root):
        own = layer_of(module)
        for line, target in imports(path):
            rank = layer_of(target)
            if rank is not None and own is not None and rank > own:
                found.append(f"{os.path.relpath(path, root)}:{line} ({LAYERS[own][0]}) imports "
                             f"{target} ({LAYERS[rank][0]})")
    return found


def import_graph(root=REPO_ROOT):
    """{module: the house's modules it imports} (a name imported from a module counts as the
    module when it is not a module itself)."""
    known = dict(modules(root))
    graph = {}
    for module, path in known.items():
        targets = set()
        for _, target in imports(path):
            while target and target not in known:  # `from core.x import name`: core.x
                target = target.rpartition(".")[0]
            if target and target != module:
                targets.add(target)
        graph[module] = targets
    return graph


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_of_every_package_has_a_layer():
    unplaced = [m for m, _ in modules() if layer_of(m) is None]
    assert not unplaced, f"modules in no layer of tests/test_layers.py: {unplaced}"


def test_no_import_runs_upward():
    upward = upward_imports()
    assert not upward, "imports that run upward:\n" + "\n".join(upward)


def test_no_import_cycle():
    loops = cycles(import_graph())
    assert not loops, "modules that import each other in a loop:\n" + "\n".join(
        " -> ".join(c) for c in loops)


def test_a_planted_upward_import_or_cycle_is_caught(tmp_path):
    """The checks catch what they are for: core importing a plugin package, a plugin importing
    the command line, envs importing models, and two modules importing each other."""
    def write(rel, text):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in PACKAGES:
        write(f"{package}/__init__.py", "")
    write("main.py", "")
    write("core/plugins.py", "def load():\n    from envs import ENV_REGISTRY\n")
    write("models/net.py", "import options.options\n")
    write("envs/game.py", "from models.selfplay import LATEST\n")
    write("models/selfplay.py", "LATEST = -2\n")
    write("ddrl/a.py", "from ddrl import b\n")
    write("ddrl/b.py", "import ddrl.a\n")
    upward = upward_imports(str(tmp_path))
    assert any(u.startswith("core/plugins.py:2 (foundation) imports envs") for u in upward)
    assert any(u.startswith("models/net.py:1 (model plugins) imports options") for u in upward)
    assert any(u.startswith("envs/game.py:1 (env plugins) imports models") for u in upward)
    assert cycles(import_graph(str(tmp_path))) == [["ddrl.a", "ddrl.b"]]
