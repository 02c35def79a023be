"""The package's shape (DESIGN.md): no module takes another module's private names, and no module
below the package root imports the root, which imports them all."""
import ast
import importlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "clnet"


def imports():
    """(file, line, module imported from, name) for every `from ... import name` in the package,
    the module resolved to its dotted path."""
    for path in sorted(PACKAGE.rglob("*.py")):
        here = ["clnet", *path.relative_to(PACKAGE).with_suffix("").parts]
        package = here[:-1]  # a module's package; an __init__'s is its own
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                module = ".".join(base + (node.module.split(".") if node.module else []))
                for alias in node.names:
                    yield path.relative_to(PACKAGE.parent), node.lineno, module, alias.name


def test_no_module_imports_another_modules_private_names():
    taken = [f"{path}:{line}: from {module} import {name}" for path, line, module, name in imports()
             if name.startswith("_") and not name.startswith("__")]
    assert taken == []


def test_no_module_imports_from_the_package_root():
    """`from clnet import X` (or `from .. import X` reaching the root) inside the package runs
    clnet/__init__.py, which imports every module: a circle. Submodules of the root are fine."""
    roots = {path.stem for path in PACKAGE.glob("*.py")} | {path.name for path in PACKAGE.iterdir() if path.is_dir()}
    circular = [f"{path}:{line}: from {module} import {name}" for path, line, module, name in imports()
                if module == "clnet" and name not in roots and str(path) != "clnet/__init__.py"]
    assert circular == []


def reaches(module: str, name: str, package: str) -> bool:
    """Whether `from module import name` takes something from `package` (or the package itself)."""
    return module == package or module.startswith(package + ".") or f"{module}.{name}".startswith(package)


def test_the_runtime_imports_neither_layers_nor_products():
    """clnet.cl is the ladder's lowest rung: the products and the layers stand on it, never the
    other way round (the device probe is handed its measure by clnet.products)."""
    upward = [f"{path}:{line}: from {module} import {name}" for path, line, module, name in imports()
              if str(path).startswith("clnet/cl/")
              and (reaches(module, name, "clnet.layers") or reaches(module, name, "clnet.products"))]
    assert upward == []


def test_the_products_import_no_layer():
    upward = [f"{path}:{line}: from {module} import {name}" for path, line, module, name in imports()
              if str(path).startswith("clnet/products/") and reaches(module, name, "clnet.layers")]
    assert upward == []


def test_layers_take_from_each_other_only_what_those_layers_define():
    """A layer uses another as a layer (the convolution's Dense holds its weights) or its own
    helpers (spatial.py's window sizes), never the products' tiles, tuner or plans by way of
    another layer's module: those come from clnet.products. (layers/base.py is every layer's
    base, not a layer.)"""
    products = {name for path, _, _, name in imports() if str(path).startswith("clnet/products/")}
    products |= {path.stem for path in (PACKAGE / "products").glob("*.py")}
    products |= set(importlib.import_module("clnet.products").__all__)
    borrowed = []
    for path, line, module, name in imports():
        another_layer = module.startswith("clnet.layers.") and module != "clnet.layers.base"
        if str(path).startswith("clnet/layers/") and another_layer:
            taken = getattr(importlib.import_module(module), name)
            if getattr(taken, "__module__", None) not in (module, None) or not callable(taken) or name in products:
                borrowed.append(f"{path}:{line}: from {module} import {name} ({getattr(taken, '__module__', '?')})")
    assert borrowed == []
