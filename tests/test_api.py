"""The public API: every name in ``neuralde_seq.__all__`` exists and is documented (that each public name's
docstring names every argument is checked for every public module in tests/test_docs.py)."""

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


def test_model_defaults_are_the_options_create_model_uses(capsys):
    """model_defaults(name) is the whole truth: passing it explicitly builds the very same model, and the
    estimators (which give no options) build that model too."""
    import pytest
    import torch

    from neuralde_seq.cli import main

    times = torch.linspace(0, 1, 12).repeat(2, 1)
    values = torch.randn(2, 12, 3)
    for name in neuralde_seq.MODEL_NAMES:
        defaults = neuralde_seq.model_defaults(name)
        inputs = neuralde_seq.model_inputs(name, times, values)
        torch.manual_seed(0)
        implicit = neuralde_seq.create_model(name, inputs, 2).state_dict()
        torch.manual_seed(0)
        explicit = neuralde_seq.create_model(name, inputs, 2, **defaults).state_dict()
        assert implicit.keys() == explicit.keys(), name
        for key in implicit:
            torch.testing.assert_close(
                explicit[key], implicit[key], rtol=0, atol=0, equal_nan=True, msg=f"{name}: {key}"
            )
        # a changed default changes the model: the listing is not vacuous
        size = next((k for k in ("d_model", "hidden", "latent") if k in defaults), None)
        if size is not None:
            torch.manual_seed(0)
            other = neuralde_seq.create_model(name, inputs, 2, **{**defaults, size: defaults[size] * 2}).state_dict()
            assert any(other[k].shape != implicit[k].shape for k in implicit if k in other), name
    assert main(["models"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert all(name in listed for name in neuralde_seq.MODEL_NAMES)
    assert main(["models", "delta-cde"]) == 0
    assert "d_model=64, n_heads=8" in capsys.readouterr().out
    assert main(["models", "delta-cde", "nosuchmodel"]) == 2
    with pytest.raises(ValueError, match="unknown model 'nosuchmodel'"):
        neuralde_seq.model_defaults("nosuchmodel")
