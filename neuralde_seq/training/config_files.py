"""Benchmark config files read safely: `read_yaml` parses a config or an override's value with bounded size and
alias expansion (at most `MAX_CONFIG_BYTES` bytes of UTF-8 and `MAX_CONFIG_NODES` YAML values with every alias
expanded: an alias bomb is refused before it is built), `load_config` reads a file or copies a mapping, and
`apply_overrides` applies ``--set key.path=value`` overrides. `ConfigError` is the error of every config check here and
in `neuralde_seq.training.config`, which checks what these read.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .spec import yaml_number

__all__ = ["ConfigError", "read_yaml", "load_config", "apply_overrides", "MAX_CONFIG_BYTES", "MAX_CONFIG_NODES"]


# Bounds of a config file (the largest shipped config is 14 kB and 521 YAML nodes): a file beyond them is
# refused before it is read whole or expanded (an alias bomb of a few hundred bytes expands to billions of strings).
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_NODES = 100_000  # counted with every alias expanded


class ConfigError(ValueError):
    """A benchmark config is invalid; the message names the offending key (e.g. ``models[1].training.lr``)."""


def _expanded_size(root, source: str) -> int:
    """The number of YAML nodes under ``root`` with every alias expanded; raises `ConfigError` beyond
    `MAX_CONFIG_NODES` or at an alias of a node that contains it (a recursive structure). Linear in the
    distinct nodes: each node's size is computed once."""
    import yaml

    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise ConfigError(
                f"{source}: a YAML alias refers to a node that contains it (a recursive structure); "
                "a config cannot hold one"
            )
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        open_nodes.add(key)
        total = 1
        for child in children:
            total += size(child)
            if total > MAX_CONFIG_NODES:  # stop at once: the full count may be astronomically large
                raise ConfigError(
                    f"{source}: the YAML expands to more than {MAX_CONFIG_NODES:,} values (aliases "
                    "expanded: nested aliases multiply); a config is far smaller, refused"
                )
        open_nodes.discard(key)
        sizes[key] = total
        return total

    return size(root)


def _yaml_message(err: Exception) -> str:
    """A YAML error in one line: the problem and where (PyYAML's own text spans several lines)."""
    import yaml

    if isinstance(err, yaml.reader.ReaderError):
        code = err.character if isinstance(err.character, int) else ord(err.character[:1] or " ")
        return f"character #x{code:04x} at position {err.position}: {err.reason}"
    problem = getattr(err, "problem", None)
    mark = getattr(err, "problem_mark", None)
    if problem and mark is not None:
        context = getattr(err, "context", None)
        return f"{(context + ': ') if context else ''}{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(err).split())


def read_yaml(text: str | bytes, source: str) -> Any:
    """Parse YAML ``text`` (a config or an override's value) with bounded size and alias expansion.

    Arguments:
        text: the YAML document, str or UTF-8 bytes (a UTF-8 byte order mark is allowed).
        source: what the text is, for error messages (a file name, ``override 'a.b=...'``).

    Returns:
        The document's plain data (PyYAML's safe types only).

    Raises:
        ConfigError: naming ``source``: more than `MAX_CONFIG_BYTES` bytes, not UTF-8, not valid YAML, more
            than `MAX_CONFIG_NODES` values with aliases expanded, a recursive alias or nesting too deep.
    """
    import yaml

    if isinstance(text, bytes):
        if len(text) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{source}: more than {MAX_CONFIG_BYTES:,} bytes; a config is far smaller, refused")
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise ConfigError(f"{source}: not UTF-8 text (byte {err.start}: {err.reason})") from None
    elif len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: more than {MAX_CONFIG_BYTES:,} characters; a config is far smaller, refused")

    class BoundedLoader(yaml.SafeLoader):
        def compose_document(self):
            node = super().compose_document()
            if node is not None:  # counted before anything is constructed, so nothing is expanded
                _expanded_size(node, source)
            return node

    loader = None
    try:
        loader = BoundedLoader(text)  # (its reader already refuses control characters)
        return loader.get_single_data()
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: not valid YAML: {_yaml_message(err)}") from None
    except RecursionError:
        raise ConfigError(f"{source}: the YAML is nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_config(config: Mapping | str | os.PathLike) -> dict:
    """A config as a dict: ``config`` itself (deep-copied) or the YAML file it names (read by `read_yaml`:
    bounded size and alias expansion).

    Raises:
        FileNotFoundError: the file does not exist.
        ConfigError: naming the file: it cannot be read (a folder, no permission), is too large, is not UTF-8
            or not YAML, expands beyond the bound, or does not hold a mapping.
    """
    if isinstance(config, Mapping):
        return copy.deepcopy(dict(config))
    path = Path(config)
    if not path.exists():
        raise FileNotFoundError(f"config file {path} does not exist")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)  # bounded, whatever the file is (a device, a pipe)
    except OSError as err:
        raise ConfigError(f"config file {path}: cannot be read: {err.strerror or err}") from None
    data = read_yaml(data, f"config file {path}")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: the config must be a YAML mapping, got {type(data).__name__}")
    return data


def _parse_value(text: str, source: str) -> Any:
    value = read_yaml(text, source) if text.strip() else None
    return yaml_number(value)


def apply_overrides(config: Mapping, overrides: Iterable[str]) -> dict:
    """Apply ``key.path=value`` overrides (values parsed as YAML) to a deep copy of ``config``.

    Path components index mappings by key and lists by position, e.g. ``training.epochs=1``,
    ``task_options.drop_rate=0.5``, ``models.0.options.d_model=64``, ``seeds=[0,1]``. Missing mapping keys
    are created (and then checked by `validate_config`).
    """
    out = copy.deepcopy(dict(config))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must have the form key.path=value")
        path, text = item.split("=", 1)
        keys = [k for k in path.strip().split(".")]
        if not path.strip() or any(not k for k in keys):
            raise ConfigError(f"override {item!r} has an empty key")
        node: Any = out
        for depth, key in enumerate(keys):
            last = depth == len(keys) - 1
            where = ".".join(keys[: depth + 1])
            if isinstance(node, list):
                if not re.fullmatch(r"\d+", key) or int(key) >= len(node):
                    raise ConfigError(f"override {item!r}: {where} is not an index of a list of {len(node)}")
                if last:
                    node[int(key)] = _parse_value(text, f"override {item!r}")
                else:
                    node = node[int(key)]
            elif isinstance(node, dict):
                if last:
                    node[key] = _parse_value(text, f"override {item!r}")
                else:
                    if node.get(key) is None:
                        node[key] = {}
                    node = node[key]
            else:
                raise ConfigError(f"override {item!r}: {'.'.join(keys[:depth])} is not a mapping or list")
    return out
