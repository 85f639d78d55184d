"""The hand-written stubs of the extension (vort/_vort.pyi) against the compiled module: the
same public names, the same classes with the same members, and for every function and
method the same parameter names in the same order, with the same defaults where the module
states them (pyo3 exposes each signature as ``__text_signature__``)."""

import ast
import inspect
from pathlib import Path

import vort
from vort import _vort

STUB = Path(vort.__file__).with_name("_vort.pyi")


def stub_tree():
    return ast.parse(STUB.read_text())


def stub_params(fn: ast.FunctionDef, method: bool):
    """(name, default source or None) of the stub's parameters, self left out."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + [ast.unparse(d) for d in a.defaults]
    out = list(zip([p.arg for p in positional], defaults))
    out += [(p.arg, None if d is None else ast.unparse(d)) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    return out[1:] if method else out


def module_params(obj, method: bool):
    sig = inspect.signature(obj)
    out = [
        (name, None if p.default is inspect.Parameter.empty else repr(p.default)) for name, p in sig.parameters.items()
    ]
    return out[1:] if method and out and out[0][0] in ("self", "$self") else out


def same(stub, real, where):
    assert [n for n, _ in stub] == [n for n, _ in real], where
    for (n, d_stub), (_, d_real) in zip(stub, real):
        if d_real is not None:
            assert d_stub is not None and ast.literal_eval(d_stub) == ast.literal_eval(d_real), (where, n)


def test_stubs_name_every_function_and_class_of_the_module():
    tree = stub_tree()
    stubbed = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    real = {n for n in dir(_vort) if not n.startswith("__") and callable(getattr(_vort, n))}
    assert stubbed == real, (sorted(stubbed - real), sorted(real - stubbed))


def test_stub_signatures_are_the_modules():
    checked = 0
    for node in stub_tree().body:
        if isinstance(node, ast.FunctionDef):
            same(stub_params(node, False), module_params(getattr(_vort, node.name), False), node.name)
            checked += 1
        elif isinstance(node, ast.ClassDef):
            cls = getattr(_vort, node.name)
            members = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
            real = {n for n in dir(cls) if not n.startswith("__")}
            assert set(members) == real, (node.name, sorted(set(members) ^ real))
            for name, m in members.items():
                attr = inspect.getattr_static(cls, name)
                if any(isinstance(d, ast.Name) and d.id == "property" for d in m.decorator_list):
                    assert inspect.isdatadescriptor(attr), (node.name, name, "a property")
                    continue
                same(stub_params(m, True), module_params(getattr(cls, name), True), f"{node.name}.{name}")
                checked += 1
    assert checked >= 20, checked
