"""The import graph: every module of az_jax and envs imports, and no two import each other.

The graph is read from the source files with `ast`. Module level: every import at the top
of a module (and inside top-level `if`/`try` blocks). All levels: imports inside
functions too, the lazy imports that keep `--help` fast; a lazy import must not close a
circle either (it would only hide one). Importing a module's own package (`from az_jax.web
import geometry` inside az_jax/web/server.py) is not an edge: the package is already
being imported.
"""

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("az_jax", "envs")


def modules() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of PACKAGES."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _top_level(body):
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.Try):
            for block in (node.body, node.orelse, getattr(node, "finalbody", []),
                          *[h.body for h in getattr(node, "handlers", [])]):
                yield from _top_level(block)


def imported_names(source: str, name: str, is_package: bool, lazy: bool) -> set[str]:
    """Every dotted name `source` imports (`from a import b` gives a and a.b)."""
    tree = ast.parse(source)
    nodes = ast.walk(tree) if lazy else _top_level(tree.body)
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                pkg = name.split(".") if is_package else name.split(".")[:-1]
                pkg = pkg[:len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def import_graph(lazy: bool) -> dict[str, set[str]]:
    """Module -> the modules of PACKAGES it imports (with their parent packages)."""
    mods = modules()
    graph = {}
    for name, path in mods.items():
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        deps = set()
        for imported in imported_names(path.read_text(), name, path.name == "__init__.py",
                                       lazy):
            parts = imported.split(".")
            for i in range(1, len(parts) + 1):
                candidate = ".".join(parts[:i])
                if candidate in mods and candidate != name and candidate not in own:
                    deps.add(candidate)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []
    graph = {"az_jax.x": set()}
    src = "import os\nfrom az_jax import x\n\ndef f():\n    from az_jax.eval import y\n"
    assert imported_names(src, "az_jax.z", False, lazy=False) == {"os", "az_jax", "az_jax.x"}
    assert "az_jax.eval.y" in imported_names(src, "az_jax.z", False, lazy=True)
    assert cycles(graph) == []


def test_no_import_cycle_at_module_level():
    graph = import_graph(lazy=False)
    assert "az_jax.eval.match" in graph and "envs.core" in graph
    assert cycles(graph) == []


def test_no_lazy_import_closes_a_cycle():
    assert cycles(import_graph(lazy=True)) == []


def test_envs_never_import_az_jax():
    graph = import_graph(lazy=True)
    bad = {m: sorted(d) for m, d in graph.items()
           if m.startswith("envs") and any(x.startswith("az_jax") for x in d)}
    assert bad == {}


# docs/architecture.md's layers, lowest first; a module imports only its own layer and lower.
LAYERS = (
    ("game rules", ("envs",)),
    ("core", ("az_jax.argtypes", "az_jax.files", "az_jax.network", "az_jax.search",
              "az_jax.mctx_backward", "az_jax.selfplay", "az_jax.replay", "az_jax.learner",
              "az_jax.parallel", "az_jax.parallel_setup")),
    ("checkpoints", ("az_jax.checkpoint",)),  # the driver's file that evaluation restores with
    ("evaluation", ("az_jax.eval",)),
    ("driver", ("az_jax.config", "az_jax.trainer", "az_jax.workdir", "az_jax.plots")),
    ("front ends", ("az_jax.play", "az_jax.web", "az_jax.gomocup", "az_jax.gomocup_worker",
                    "az_jax.evaluate", "az_jax.agent", "az_jax.cli", "az_jax.bench")),
)


def layer_of(module: str) -> int | None:
    """Index in LAYERS of the entry naming `module` or a package above it; None for none."""
    for i, (_, names) in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names):
            return i
    return None


def test_layer_of_reads_packages_not_prefixes():
    assert layer_of("az_jax.eval.match") == layer_of("az_jax.eval") == 3
    assert layer_of("az_jax.evaluate") == 5  # not the package az_jax.eval
    assert layer_of("az_jax.web.server") == 5 and layer_of("envs.connect4") == 0
    assert layer_of("az_jax.nonexistent") is None


def test_each_layer_imports_only_the_layers_below_it():
    """docs/architecture.md, "Layers", lazy imports included; every module has a layer."""
    graph = import_graph(lazy=True)
    unplaced = sorted(m for m in graph if layer_of(m) is None and m not in ("az_jax", "envs"))
    assert unplaced == []
    upward = sorted(f"{m} ({LAYERS[layer_of(m)][0]}) imports {d} ({LAYERS[layer_of(d)][0]})"
                    for m, deps in graph.items() if layer_of(m) is not None
                    for d in deps if layer_of(d) is not None and layer_of(d) > layer_of(m))
    assert upward == []


@pytest.mark.parametrize("name", sorted(n for n in modules() if not n.endswith("__main__")))
def test_every_module_imports(name):
    importlib.import_module(name)
