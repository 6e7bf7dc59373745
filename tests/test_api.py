"""The public API: every name in ``neuralde_seq.__all__`` exists, is documented, and the documentation of each
callable names its arguments (torchcde-style: every argument with its shape)."""
import inspect

import neuralde_seq


def test_every_public_name_exists_and_is_documented():
    for name in neuralde_seq.__all__:
        assert hasattr(neuralde_seq, name), name
        obj = getattr(neuralde_seq, name)
        if name == "MODEL_NAMES":
            assert isinstance(obj, tuple) and obj
            continue
        assert (inspect.getdoc(obj) or "").strip(), f"{name} has no docstring"


def test_public_functions_document_their_arguments():
    undocumented = {}
    for name in neuralde_seq.__all__:
        obj = getattr(neuralde_seq, name)
        if not inspect.isfunction(obj):
            continue
        doc = inspect.getdoc(obj) or ""
        missing = [p for p in inspect.signature(obj).parameters
                   if p not in ("self", "args", "kwargs", "overrides", "options") and p not in doc]
        if missing:
            undocumented[name] = missing
    assert not undocumented, undocumented
