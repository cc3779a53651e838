"""A static reading of a package's imports, and the house rules checked on it.

Every ``import`` and ``from ... import`` of a module counts, wherever it stands (top level, inside a
function, under ``if TYPE_CHECKING``): a lazy import is still a dependency. The rules:

- layers: a module of top-level package A may import package B only where ``LAYERS[A]`` names B;
- cycles: no two modules import each other, directly or through others;
- private names: a name with one leading underscore is used only in the module that defines it,
  and a private module (``pkg/_x.py``, the extension ``common/_core``) only inside its package;
- aliases: Horovod's import paths only re-export: docstring, imports, ``__all__``, a second name for
  an imported object, at most the lazy ``__getattr__`` that resolves a table (``_EXPORTS`` or
  ``_NAMES``) of canonical names, and for ``python -m`` the ``if __name__ == "__main__"`` call of
  the canonical entry point.
"""
import ast
import os
from dataclasses import dataclass, field
from typing import Dict, List, Set, Tuple

# What each top-level part of horovod_spark may import (besides itself and the package root, whose
# __init__ resolves its public names lazily and imports nothing at import time).
LAYERS: Dict[str, Set[str]] = {
    "exceptions": set(),
    "common": {"exceptions"},
    "session": {"exceptions", "common"},
    "store": {"exceptions", "common"},
    "launcher": {"exceptions", "common"},
    "torch": {"exceptions", "common"},
    "tensorflow": {"exceptions", "common"},
    "keras": {"exceptions", "common", "tensorflow"},
    "lightning": {"exceptions", "common", "torch"},
    "spark": {"exceptions", "common", "launcher", "session"},
    "data": {"exceptions", "common", "store", "session"},
    "estimator": {"exceptions", "common", "session", "store", "launcher", "torch", "tensorflow", "keras",
                  "lightning", "spark", "data"},
}

# Horovod's import paths (and older names of ours): modules or packages that only re-export.
ALIASES = ("horovod_spark.runner", "horovod_spark.spark.common", "horovod_spark.spark.torch",
           "horovod_spark.spark.keras", "horovod_spark.spark.lightning", "horovod_spark.common.exceptions",
           "horovod_spark.tensorflow.keras")


@dataclass
class Module:
    name: str
    path: str
    is_package: bool
    tree: ast.Module


@dataclass
class Report:
    layer_violations: List[Tuple[str, str]] = field(default_factory=list)
    cycles: List[List[str]] = field(default_factory=list)
    private_crossings: List[Tuple[str, str, str]] = field(default_factory=list)
    impure_aliases: List[Tuple[str, int, str]] = field(default_factory=list)
    unknown_parts: List[str] = field(default_factory=list)

    def problems(self) -> List[str]:
        out = ["%s imports %s, a layer it may not import" % pair for pair in self.layer_violations]
        out += ["import cycle: %s" % " -> ".join(cycle + cycle[:1]) for cycle in self.cycles]
        out += ["%s uses %s.%s, a private name of another module" % triple for triple in self.private_crossings]
        out += ["alias %s line %d is not a re-export: %s" % triple for triple in self.impure_aliases]
        out += ["%s is in no layer of LAYERS" % part for part in self.unknown_parts]
        return out


def load_modules(package_dir: str) -> Dict[str, Module]:
    """Every .py module under ``package_dir`` (a package directory), by dotted name."""
    base = os.path.dirname(os.path.abspath(package_dir))
    modules = {}
    for directory, subdirs, files in os.walk(package_dir):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for filename in sorted(files):
            if not filename.endswith(".py"):
                continue
            path = os.path.join(directory, filename)
            dotted = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
            is_package = filename == "__init__.py"
            if is_package:
                dotted = dotted[: -len(".__init__")]
            with open(path, encoding="utf-8") as f:
                modules[dotted] = Module(dotted, path, is_package, ast.parse(f.read(), path))
    return modules


def _absolute(module: Module, level: int, target) -> str:
    if level == 0:
        return target
    parts = module.name.split(".")
    if not module.is_package:
        parts = parts[:-1]
    parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([target] if target else []))


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _package_of(dotted: str) -> str:
    return dotted.rsplit(".", 1)[0]


def _is_alias(dotted: str) -> bool:
    return any(dotted == a or dotted.startswith(a + ".") for a in ALIASES)


def _part(dotted: str) -> str:
    """The top-level part of horovod_spark a module belongs to ("" for the package root)."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else ""


class _Imports:
    """A module's imports: edges to other modules, and the names it uses from other modules."""

    def __init__(self, module: Module, known: Set[str], root: str):
        self.edges: Set[str] = set()
        self.uses: List[Tuple[str, str]] = []  # (the module a name comes from, the name)
        local_modules = {}  # a local name bound to one of our modules -> that module
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ImportFrom):
                source = _absolute(module, node.level, node.module)
                if not source or not (source == root or source.startswith(root + ".")):
                    continue
                for alias in node.names:
                    full = source + "." + alias.name
                    self.edges.add(full if full in known else source)
                    self.uses.append((source, alias.name))
                    if full in known:
                        local_modules[alias.asname or alias.name] = full
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == root or alias.name.startswith(root + "."):
                        self.edges.add(alias.name)
                        if alias.asname:
                            local_modules[alias.asname] = alias.name
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in local_modules and _is_private(node.attr):
                self.uses.append((local_modules[node.value.id], node.attr))


def extension_modules(package_dir: str) -> Set[str]:
    """Dotted names of the compiled modules under ``package_dir`` (``pkg.common._core``)."""
    base = os.path.dirname(os.path.abspath(package_dir))
    found = set()
    for directory, _, files in os.walk(package_dir):
        for filename in files:
            if filename.endswith((".so", ".pyd")):
                stem = filename.split(".", 1)[0]
                found.add(os.path.relpath(os.path.join(directory, stem), base).replace(os.sep, "."))
    return found


def _private_crossing(user: str, source: str, name: str, known: Set[str]) -> bool:
    """Whether ``user`` taking ``name`` from ``source`` breaks the private-name rule."""
    if _outside_private_module(user, source):
        return True
    if not _is_private(name):
        return False
    if source + "." + name in known:
        return _outside_private_module(user, source + "." + name)
    return user != source


def _outside_private_module(user: str, module: str) -> bool:
    """A private module (any private part of its dotted name) belongs to the package that holds
    it, and that package's subpackages; ``user`` outside it may not import it."""
    parts = module.split(".")
    for index, part in enumerate(parts):
        if _is_private(part):
            owner = ".".join(parts[:index])
            return not (user == owner or user.startswith(owner + "."))
    return False


def _alias_problems(module: Module) -> List[Tuple[str, int, str]]:
    problems = []
    for index, node in enumerate(module.tree.body):
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and (node.targets[0].id in ("__all__", "_EXPORTS", "_NAMES") or isinstance(node.value, ast.Name)):
            continue  # the export table, or a second name for an imported object (Horovod's spelling)
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            continue
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("__name__ == '__main__'",):
            continue  # ``python -m <alias>`` runs the canonical entry point
        problems.append((module.name, node.lineno, type(node).__name__))
    return problems


def _cycles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in edges:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def check(package_dir: str) -> Report:
    """Read every module under ``package_dir`` and report every broken rule."""
    modules = load_modules(package_dir)
    known = set(modules) | extension_modules(package_dir)
    root = os.path.basename(os.path.abspath(package_dir))
    report = Report()
    edges: Dict[str, Set[str]] = {}
    for name, module in modules.items():
        imports = _Imports(module, known, root)
        # An import of a package's name counts as an edge to its __init__.
        edges[name] = {target for target in imports.edges if target in modules and target != name}
        part = _part(name)
        if part and part not in LAYERS and not _is_alias(name) and part not in report.unknown_parts:
            report.unknown_parts.append(part)
        for target in sorted(imports.edges):
            target_part = _part(target)
            if _is_alias(name) or not part or not target_part or target_part == part:
                continue
            if target_part not in LAYERS.get(part, set()):
                report.layer_violations.append((name, target))
        for source, used in imports.uses:
            if _private_crossing(name, source, used, known):
                report.private_crossings.append((name, source, used))
        if _is_alias(name):
            report.impure_aliases += _alias_problems(module)
    report.cycles = _cycles(edges)
    report.private_crossings = sorted(set(report.private_crossings))
    return report
