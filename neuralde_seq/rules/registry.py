"""The rule registry: rules built by name (`make_rule`), added by `register_rule` (or `registered_rule` in a
``with`` block), listed by `rule_names`; the built-in rules are registered here at import. The model registry reads
it for its ``{rule}-{form}`` names.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable

from ..input_checks import unknown_name_message
from .base import LearningRule
from .delta import Delta
from .hebb import Hebb
from .oja import Oja

__all__ = ["RuleEntry", "register_rule", "unregister_rule", "registered_rule", "rule_names", "rule_title", "make_rule"]


@dataclasses.dataclass(frozen=True)
class RuleEntry:
    """A registered rule: how `make_rule` builds it.

    Attributes:
        factory: called with the options of `make_rule`, returns a `LearningRule`.
        title: how model descriptions name it ("Hebb", "post-Delta", ...).
    """

    factory: Callable[..., LearningRule]
    title: str


_RULES: dict[str, RuleEntry] = {}


def register_rule(name: str, factory: Callable[..., LearningRule], *, title: str | None = None) -> None:
    """Make a rule buildable by name: ``make_rule(name, **options)`` calls ``factory(**options)``, and every
    model taking ``rule=`` accepts the name (`FastWeightField`, `neuralde_seq.models.FastWeightNetwork`,
    `neuralde_seq.models.ODERFWP`, ``create_model("delta-cde", ..., rule=name)``). The model registry's
    ``{rule}-{form}`` names are made once at import for the rules registered then (the built-in ones).

    Arguments:
        name: the name, a non-empty string not yet registered.
        factory: a callable returning a `LearningRule` (e.g. the class).
        title: how descriptions name the rule (default: ``name``).

    Raises:
        ValueError: an empty or taken name; TypeError: a factory that is not callable.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a rule's name must be a non-empty string, got {name!r}")
    if name in _RULES:
        raise ValueError(f"rule name {name!r} is already registered (unregister_rule({name!r}) first to replace it)")
    if not callable(factory):
        raise TypeError(f"factory must be callable (a LearningRule class or a function returning one), got {factory!r}")
    _RULES[name] = RuleEntry(factory, name if title is None else str(title))


def unregister_rule(name: str) -> None:
    """Remove a registration made by `register_rule`.

    Arguments:
        name: a registered name.

    Raises:
        ValueError: the name is not registered.
    """
    if name not in _RULES:
        raise ValueError(unknown_name_message("rule", name, _RULES, listing="registered rules"))
    del _RULES[name]


@contextlib.contextmanager
def registered_rule(name: str, factory: Callable[..., LearningRule], *, title: str | None = None):
    """`register_rule` for the duration of a ``with`` block (e.g. a test), removed on leaving it.

    Arguments:
        name: the rule's name, as `register_rule`.
        factory: what builds the rule, as `register_rule`.
        title: its name in messages, as `register_rule`.

    Yields:
        ``name``.
    """
    register_rule(name, factory, title=title)
    try:
        yield name
    finally:
        _RULES.pop(name, None)


def rule_names() -> tuple[str, ...]:
    """The names `make_rule` accepts now, in registration order (the built-in ones first).

    Returns:
        The names.
    """
    return tuple(_RULES)


def rule_title(name: str) -> str:
    """How descriptions name a registered rule.

    Arguments:
        name: a registered name.

    Returns:
        The title given to `register_rule`.
    """
    if name not in _RULES:
        raise ValueError(unknown_name_message("rule", name, _RULES, listing="registered rules"))
    return _RULES[name].title


def make_rule(rule: str | LearningRule, **options) -> LearningRule:
    """A rule from its name or a rule object.

    Arguments:
        rule: a registered name (`rule_names`: "hebb", "oja", "delta", "delta-post" and those added by
            `register_rule`), or a `LearningRule` (returned unchanged; options are then refused).
        **options: arguments of the named rule's factory.

    Returns:
        The `LearningRule`.

    Raises:
        ValueError: an unknown name, options given with a rule object, or a factory that returned no
            `LearningRule`.
    """
    if isinstance(rule, LearningRule):
        if options:
            raise ValueError(f"options {sorted(options)} given together with a rule object {rule!r}")
        return rule
    if not isinstance(rule, str):
        raise ValueError(f"rule must be a rule name ({', '.join(_RULES)}) or a LearningRule, got {rule!r}")
    if rule not in _RULES:
        raise ValueError(
            unknown_name_message("rule", rule, _RULES, listing="registered rules")
            + " (or pass a LearningRule; neuralde_seq.rules.register_rule adds a name)"
        )
    built = _RULES[rule].factory(**options)
    if not isinstance(built, LearningRule):
        raise ValueError(f"the factory registered for rule {rule!r} returned {built!r}, not a LearningRule")
    return built


register_rule("hebb", Hebb, title="Hebb")
register_rule("oja", Oja, title="Oja")
register_rule("delta", lambda **options: Delta(post=False, **options), title="Delta")
register_rule("delta-post", lambda **options: Delta(post=True, **options), title="post-Delta")
