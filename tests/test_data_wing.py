"""The data wing's rooms (issue 26 step 5): the loaders' one options type, the old module paths, the task registry
filled by the sources, and the order of the rooms (no room imports a higher one)."""

import dataclasses
import warnings

import pytest
import torch
from fixtures_uea import write_uea_archive
from test_imports import PACKAGE, ROOT, import_graph

from neuralde_seq.data import LoadOptions, load_eigenworms, load_uea
from neuralde_seq.data.base.datasets import DatasetSplits, IrregularDataset
from neuralde_seq.data.base.options import LOAD_OPTION_NAMES, accepts_load_options
from neuralde_seq.data.base.registry import TASKS, Task, register_task
from neuralde_seq.data.protocols import TASK_NAMES, load_task


# ------------------------------------------------------------------------------------ LoadOptions
def _same_splits(a: DatasetSplits, b: DatasetSplits) -> None:
    for part_a, part_b in zip(a, b):
        assert part_a.meta["indices"] == part_b.meta["indices"]
        assert part_a.values.dtype == part_b.values.dtype
        assert torch.equal(torch.nan_to_num(part_a.values, nan=-7.0), torch.nan_to_num(part_b.values, nan=-7.0))
        assert torch.equal(part_a.labels, part_b.labels) and torch.equal(part_a.lengths, part_b.lengths)


def test_options_object_loads_what_the_keywords_load(tmp_path):
    remotes, _ = write_uea_archive(tmp_path / "src", "Toy")
    keywords = dict(
        cache_dir=tmp_path / "cache",
        remotes=remotes,
        split_seed=3,
        drop_rate=0.4,
        drop_seed=5,
        dtype=torch.float64,
        progress=False,
    )
    by_keywords = load_uea("Toy", **keywords)
    by_options = load_uea("Toy", options=LoadOptions(**keywords))
    _same_splits(by_keywords, by_options)
    # the options matter (not ignored): another drop seed drops other points
    other = load_uea("Toy", options=dataclasses.replace(LoadOptions(**keywords), drop_seed=6))
    assert other.train.meta["indices"] == by_options.train.meta["indices"]  # the drop comes before the split
    assert not torch.equal(torch.isnan(other.train.values), torch.isnan(by_options.train.values))
    assert by_options.train.values.dtype == torch.float64 and by_options.train.meta["split_seed"] == 3


def test_options_and_keywords_together_name_both(tmp_path):
    with pytest.raises(TypeError, match=r"load_uea: options= and the keyword\(s\) drop_rate, progress"):
        load_uea("Toy", options=LoadOptions(), drop_rate=0.1, progress=False)
    with pytest.raises(TypeError, match="options must be a LoadOptions, got dict"):
        load_eigenworms(options={"drop_rate": 0.1})


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("drop_rate", 1.0, r"drop_rate must be a number in \[0, 1\), got 1.0"),
        ("split_seed", -1, "split_seed must be a non-negative integer, got -1"),
        ("drop_seed", True, "drop_seed must be a non-negative integer, got True"),
        ("dtype", torch.int64, "dtype must be a floating point torch.dtype"),
        ("offline", "yes", "offline must be True, False or None, got 'yes'"),
        ("progress", 1, "progress must be True or False, got 1"),
        ("cache_dir", 3, "cache_dir must be a path"),
        ("remotes", "file:///x.zip", "remotes must be a sequence of RemoteFile"),
    ],
)
def test_a_bad_option_is_named_in_either_spelling(field, value, message):
    with pytest.raises(ValueError, match=message):
        LoadOptions(**{field: value})
    with pytest.raises(ValueError, match=message):  # the keywords build the options: the same check
        load_eigenworms(**{field: value})


def test_a_loader_whose_defaults_disagree_with_load_options_is_refused():
    def loader(
        *,
        cache_dir=None,
        remotes=None,
        offline=None,
        split_seed=1,
        drop_rate=0.0,
        drop_seed=0,
        dtype=torch.float32,
        progress=True,
        options=None,
    ):
        return split_seed

    with pytest.raises(TypeError, match="the default of split_seed is 1, LoadOptions' 0"):
        accepts_load_options(loader)

    def without_options(
        *,
        cache_dir=None,
        remotes=None,
        offline=None,
        split_seed=0,
        drop_rate=0.0,
        drop_seed=0,
        dtype=torch.float32,
        progress=True,
    ):
        return None

    with pytest.raises(TypeError, match="must declare the keyword options"):  # the API reference would miss it
        accepts_load_options(without_options)

    def with_options(
        *,
        cache_dir=None,
        remotes=None,
        offline=None,
        split_seed=0,
        drop_rate=0.0,
        drop_seed=0,
        dtype=torch.float32,
        progress=True,
        options=None,
    ):
        return split_seed, progress

    fixed = accepts_load_options(with_options)
    assert fixed() == (0, True) and fixed(options=LoadOptions(split_seed=4, progress=False)) == (4, False)


def test_load_task_options_are_the_keywords_not_the_options_object():
    names = TASKS["uea"].option_names()
    assert set(LOAD_OPTION_NAMES) - {"dtype"} <= set(names) and "options" not in names


# ------------------------------------------------------------------------------------ rooms
def test_rooms_that_kept_their_old_name_export_the_old_names_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        from neuralde_seq.data.synthetic import ADDING_MARKERS, WARPED_ADDING_CLASSES, warped_adding  # noqa: F401
        from neuralde_seq.data.transforms import check_augmentation, drop_observations, standardise  # noqa: F401


# ------------------------------------------------------------------------------------ the registry
def test_every_task_is_registered_by_its_source_in_order():
    assert TASK_NAMES == (
        "japanese-vowels",
        "speech-commands",
        "physionet-sepsis",
        "eigenworms",
        "character-trajectories",
        "uea",
        "uea-seeded-split",
        "files",
        "warped-adding",
        "icu-records",
    )
    owners = {name: task.loader.__module__.rpartition(".")[0] for name, task in TASKS.items()}
    assert set(owners.values()) == {f"{PACKAGE}.data.sources"}


def test_a_task_registered_in_a_test_runs_through_load_task():
    def toy_splits(*, dtype=torch.float32, offset: float = 0.0):
        """Three copies of one labelled pair of series, ``offset`` added to the values."""
        values = torch.tensor([[[1.0], [3.0]], [[2.0], [6.0]]], dtype=dtype) + offset
        data = IrregularDataset(
            times=torch.tensor([[0.0, 1.0]] * 2, dtype=dtype),
            values=values,
            lengths=torch.tensor([2, 2]),
            labels=torch.tensor([0, 1]),
            class_names=["a", "b"],
        )
        return DatasetSplits(data, data, data)

    register_task(Task("toy-in-a-test", "a toy", "accuracy", toy_splits))
    try:
        with pytest.raises(ValueError, match="a task named 'toy-in-a-test' is registered already"):
            register_task(Task("toy-in-a-test", "again", "accuracy", toy_splits))
        data = load_task("toy-in-a-test", dtype=torch.float64, offset=10.0)
        observed = torch.tensor([11.0, 13.0, 12.0, 16.0], dtype=torch.float64)
        mean, std = observed.mean(), observed.std(unbiased=False)
        expected = (torch.tensor([[11.0, 13.0], [12.0, 16.0]], dtype=torch.float64) - mean) / std
        assert torch.allclose(data.splits.test.values[..., 0], expected)
    finally:
        del TASKS["toy-in-a-test"]


# ------------------------------------------------------------------------------------ the rooms' order
ROOMS = ["io", "base", "formats", "transforms", "synthetic", "sources"]  # lowest first; protocols and __init__ on top


def _room(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != [PACKAGE, "data"]:
        return None
    if len(parts) == 2 or parts[2] == "protocols":
        return len(ROOMS)
    return ROOMS.index(parts[2])


def test_no_room_of_the_data_wing_imports_a_higher_room():
    graph = import_graph(ROOT / PACKAGE, PACKAGE)
    modules = [name for name in graph if name.startswith(f"{PACKAGE}.data.") or name == f"{PACKAGE}.data"]
    assert all(_room(name) is not None for name in modules)  # every module of the wing is in a room
    upward = [
        f"{name} imports {target} (line {line})"
        for name in modules
        for target, line in graph[name]
        if _room(target) is not None and _room(target) > _room(name)
    ]
    assert not upward, "\n".join(upward)
