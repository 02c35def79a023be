"""The package's shape (DESIGN.md): no module takes another module's private names, and no module
below the package root imports the root, which imports them all."""
import ast
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
