"""Horovod's public surface, derived from its source, compared with horovod_spark's.

    python scripts/horovod_surface.py derive /path/to/horovod.git [v0.28.1]   # rewrite the JSON list
    python scripts/horovod_surface.py check                                  # print what differs
    python scripts/horovod_surface.py doc                                    # rewrite migrating.md's table

``derive`` reads Horovod's modules at the tag (``git show``; no Horovod install needed) and writes
tests/support/horovod_surface.json: per module, every public name with its kind and, for functions
and classes, the parameter names; for classes, every public method and property (those of their
Horovod base classes included) with its parameter names. Public: what the module defines or imports from Horovod's own
modules, not starting with ``_``; names from ``horovod.common.util`` (helpers such as
``check_extension``) and from other packages (``os``, ``tf``) are not part of the API. The estimator
entries list each estimator's constructor keywords and its ``get*``/``set*`` methods.
``check`` and ``doc`` use tests/support/horovod_surface.py, which holds the reasons for each gap.
"""
import ast
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

MODULES = ["horovod.torch", "horovod.tensorflow", "horovod.tensorflow.keras", "horovod.tensorflow.keras.callbacks",
           "horovod.spark", "horovod.spark.keras", "horovod.spark.torch", "horovod.spark.lightning",
           "horovod.spark.common.backend",
           "horovod.spark.common.store"]
ESTIMATORS = {"horovod.spark.keras.KerasEstimator": ("horovod.spark.keras.estimator", "KerasEstimator"),
              "horovod.spark.torch.TorchEstimator": ("horovod.spark.torch.estimator", "TorchEstimator"),
              "horovod.spark.lightning.TorchEstimator": ("horovod.spark.lightning.estimator", "TorchEstimator")}
# Base classes whose get*/set* methods an estimator inherits (horovod.spark.common.params).
PARAM_BASES = {"EstimatorParams": "horovod.spark.common.params", "ModelParams": "horovod.spark.common.params"}
NOT_API = ("horovod.common.util", "horovod.spark.common.util")


class Source:
    """Horovod's files at ``tag`` in the git repository ``git_dir``."""

    def __init__(self, git_dir: str, tag: str):
        self.git_dir, self.tag = git_dir, tag
        self._cache = {}

    def module(self, name: str):
        """The parsed module ``name`` (package __init__ or .py file), or None."""
        if name not in self._cache:
            base = name.replace(".", "/")
            self._cache[name] = None
            for path in (base + "/__init__.py", base + ".py"):
                result = subprocess.run(["git", "-C", self.git_dir, "show", "%s:%s" % (self.tag, path)],
                                        capture_output=True, text=True)
                if result.returncode == 0:
                    self._cache[name] = (ast.parse(result.stdout), base + ".py" != path)
                    break
        return self._cache[name]


def _statements(body):
    """Top-level statements, looking inside if/try blocks (horovod.torch imports inside an if)."""
    for node in body:
        if isinstance(node, ast.If):
            yield from _statements(node.body)
            yield from _statements(node.orelse)
        elif isinstance(node, ast.Try):
            yield from _statements(node.body)
            for handler in node.handlers:
                yield from _statements(handler.body)
        else:
            yield node


def _function(node):
    """The function whose parameters a call of ``node`` takes: a class's __init__ (None: no __init__)."""
    if isinstance(node, ast.ClassDef):
        return next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    return node


def _params(node) -> list:
    """Parameter names (``*args``/``**kwargs`` marked), without a method's self."""
    function = _function(node)
    if function is None:
        return []
    args = function.args
    out = [a.arg for a in args.posonlyargs + args.args]
    if args.vararg:
        out.append("*" + args.vararg.arg)
    out += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        out.append("**" + args.kwarg.arg)
    return out[1:] if function is not node else out


def _positional(node) -> list:
    """The parameters a call may pass by position: none under pyspark's @keyword_only."""
    function = _function(node)
    if function is None or any(getattr(d, "id", getattr(d, "attr", None)) == "keyword_only"
                               for d in function.decorator_list):
        return []
    names = [a.arg for a in function.args.posonlyargs + function.args.args]
    return names[1:] if function is not node else names


def _resolve(source: Source, module: str, name: str, depth: int = 0):
    """(kind, params) of ``name`` as module ``module`` defines or re-exports it."""
    parsed = source.module(module)
    if parsed is None or depth > 4:
        return ("module" if source.module(module + "." + name) else "value"), None, None
    tree, _ = parsed
    for node in _statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return _describe(node)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("horovod"):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    if source.module(node.module + "." + alias.name):
                        return "module", None, None
                    return _resolve(source, node.module, alias.name, depth + 1)
    if source.module(module + "." + name):
        return "module", None, None
    return "value", None, None


def _describe(node):
    return ("class" if isinstance(node, ast.ClassDef) else "function"), _params(node), _positional(node)


def _decorators(function) -> set:
    return {getattr(d, "id", getattr(d, "attr", None)) for d in function.decorator_list}


def _method(function) -> dict:
    """A method's entry: a property, or its parameters without self/cls (a staticmethod keeps all)."""
    decorators = _decorators(function)
    if "property" in decorators:
        return {"kind": "property", "params": None, "positional": None}
    args = function.args
    names = [a.arg for a in args.posonlyargs + args.args]
    params = list(names)
    if args.vararg:
        params.append("*" + args.vararg.arg)
    params += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        params.append("**" + args.kwarg.arg)
    drop = 0 if "staticmethod" in decorators else 1
    return {"kind": "method", "params": params[drop:], "positional": names[drop:]}


def _class_node(source: Source, module: str, name: str, depth: int = 0):
    """(module, ClassDef) of class ``name`` as ``module`` defines or imports it from Horovod, or None."""
    parsed = source.module(module)
    if parsed is None or depth > 4:
        return None
    for node in _statements(parsed[0].body):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return module, node
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("horovod"):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _class_node(source, node.module, alias.name, depth + 1)
    return None


def class_methods(source: Source, module: str, name: str) -> dict:
    """The public methods (and properties) of class ``name``, its Horovod base classes' included:
    {method: {kind, params, positional}}, the most derived definition winning."""
    found = _class_node(source, module, name)
    if found is None:
        return {}
    where, node = found
    methods = {}
    for base in node.bases:
        if isinstance(base, ast.Name):  # bases from other packages (keras.callbacks.Callback) are not Horovod's API
            methods.update(class_methods(source, where, base.id))
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
            methods[item.name] = _method(item)
    return methods


def public_names(source: Source, module: str) -> dict:
    tree, is_package = source.module(module)
    names = {}
    for node in _statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names[node.name] = _describe(node)
        elif isinstance(node, ast.ImportFrom):
            origin = node.module or ""
            if node.level:  # relative: from .runner import run
                parts = module.split(".") if is_package else module.split(".")[:-1]
                origin = ".".join(parts[:len(parts) - node.level + 1] + ([origin] if origin else []))
            if not origin.startswith("horovod") or origin.startswith(NOT_API):
                continue
            for alias in node.names:
                names[alias.asname or alias.name] = _resolve(source, origin, alias.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = ("value", None, None)
    return {name: {"kind": kind, "params": params, "positional": positional}
            for name, (kind, params, positional) in sorted(names.items()) if not name.startswith("_")}


def _class(source: Source, module: str, name: str):
    tree, _ = source.module(module)
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def estimator_surface(source: Source, module: str, name: str) -> dict:
    cls = _class(source, module, name)
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    for base, base_module in PARAM_BASES.items():
        if base == "EstimatorParams":
            methods |= {n.name for n in _class(source, base_module, base).body if isinstance(n, ast.FunctionDef)}
    return {"params": [p for p in _params(cls) if not p.startswith("*")],
            "methods": sorted(m for m in methods if m.startswith(("get", "set")) and m != "setParams")}


def derive(git_dir: str, tag: str) -> dict:
    source = Source(git_dir, tag)
    out = {"horovod_version": tag.lstrip("v"), "modules": {}, "estimators": {}}
    for module in MODULES:
        out["modules"][module] = public_names(source, module)
        for name, info in out["modules"][module].items():
            if info["kind"] == "class":
                info["methods"] = class_methods(source, module, name)
    for key, (module, name) in ESTIMATORS.items():
        out["estimators"][key] = estimator_surface(source, module, name)
    return out


def main(argv):
    from support import horovod_surface
    if argv[:1] == ["derive"] and len(argv) in (2, 3):
        data = derive(argv[1], argv[2] if len(argv) == 3 else "v0.28.1")
        with open(horovod_surface.DATA_PATH, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.write("\n")
        print("wrote %s" % horovod_surface.DATA_PATH)
    elif argv == ["check"]:
        problems = horovod_surface.problems()
        print("\n".join(problems) or "horovod_spark offers Horovod's surface except the documented gaps")
        return 1 if problems else 0
    elif argv == ["doc"]:
        horovod_surface.write_doc()
        print("rewrote the generated section of %s" % horovod_surface.DOC_PATH)
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
