"""The API reference (docs/api/*.md, mkdocstrings) is made of docstrings: every public class and
function of the documented modules has one of its own, and a class's names each argument its
constructor takes, so that a signature that grows an argument without the docstring saying what it
does fails here."""
import importlib
import inspect
import re

import pytest

# The modules docs/api/ renders.
MODULES = ["clnet", "clnet.models", "clnet.layers", "clnet.ops", "clnet.activations", "clnet.initializers",
           "clnet.losses", "clnet.metrics", "clnet.optimizers", "clnet.callbacks", "clnet.utils",
           "clnet.datasets", "clnet.distribute", "clnet.onnx", "clnet.products", "clnet.mixed_precision"]
SHORTEST = 40  # characters: a docstring shorter than this says too little to be a reference
# Arguments a class docstring need not name: every layer takes these, and Layer's docstring says so.
COMMON_ARGUMENTS = {"self", "name", "input_shape"}
# (module, name, argument) a class docstring may leave out, each with the reason. Keep it short.
EXEMPT_ARGUMENTS: set[tuple[str, str, str]] = set()


def public_objects():
    """(module, name, object) for each public class and function of MODULES, each object once
    (an alias such as Adagrad = AdaGrad shares its class's docstring)."""
    seen = set()
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
        for name in names:
            obj = getattr(module, name)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and id(obj) not in seen:
                seen.add(id(obj))
                yield module_name, name, obj


OBJECTS = list(public_objects())
CLASSES = [(m, n, o) for m, n, o in OBJECTS if inspect.isclass(o)]


def own_docstring(obj) -> str:
    """A function's docstring, or a class's own (not one it inherits)."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    return inspect.cleandoc(doc) if isinstance(doc, str) else ""


def constructor_arguments(cls) -> list[str]:
    """The named arguments of the class's constructor (its own __init__ or the one it inherits),
    without self, name, input_shape, *args and **kwargs."""
    try:
        parameters = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):  # a builtin's __init__ without a signature
        return []
    return [p.name for p in parameters
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in COMMON_ARGUMENTS]


def test_the_modules_have_public_objects():
    assert len(OBJECTS) > 200 and len(CLASSES) > 80


@pytest.mark.parametrize("module, name, obj", OBJECTS, ids=[f"{m}.{n}" for m, n, _ in OBJECTS])
def test_has_a_docstring_of_its_own(module, name, obj):
    doc = own_docstring(obj)
    found = f"a docstring of {len(doc)} characters" if doc else "no docstring"
    assert len(doc) >= SHORTEST, f"{module}.{name} has {found}"


@pytest.mark.parametrize("module, name, cls", CLASSES, ids=[f"{m}.{n}" for m, n, _ in CLASSES])
def test_class_docstring_names_its_arguments(module, name, cls):
    doc = own_docstring(cls)
    missing = [argument for argument in constructor_arguments(cls)
               if (module, name, argument) not in EXEMPT_ARGUMENTS and not re.search(rf"\b{argument}\b", doc)]
    assert missing == [], f"{module}.{name}'s docstring does not name its arguments {missing}"


# Measurements on the API pages: a device's name, or a number with a unit of size, time or speed.
MEASURED = re.compile(r"\b(H100|H200|A100|EPYC|Xeon|Zen ?\d)"
                      r"|\b\d+(\.\d+)? ?(KB|MB|GB|ms|us|µs|GFLOP/s|GB/s)\b")


def documented_members(obj):
    """(name, docstring) of a public object and, for a class, of its own public methods and
    properties: what mkdocstrings renders for it."""
    yield "", obj.__doc__ or ""
    if inspect.isclass(obj):
        for name, member in vars(obj).items():
            if name.startswith("_"):
                continue
            if isinstance(member, property):
                yield f".{name}", member.fget.__doc__ or ""
            elif inspect.isfunction(member):
                yield f".{name}", member.__doc__ or ""


@pytest.mark.parametrize("module, name, obj", OBJECTS, ids=[f"{m}.{n}" for m, n, _ in OBJECTS])
def test_says_what_and_why_without_measurements(module, name, obj):
    """A docstring says what and why; what was measured, on which device, belongs in
    benchmarks/RESULTS.md, where it is dated and can be run again."""
    found = [(f"{name}{member}", hit.group(0)) for member, doc in documented_members(obj)
             for hit in MEASURED.finditer(doc)]
    assert found == [], f"{module}: measured numbers in docstrings {found}"
