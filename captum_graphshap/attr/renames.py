"""Old option spellings, accepted for one release with a ``FutureWarning``.

One vocabulary across the classes: ``estimator=`` chooses an estimator
everywhere (``method=`` did for ``CShapley`` and ``BivariateShapley``), and an
estimator has one name in every class (``"cubic"``, not also ``"regression"``
in ``Shear``; ``"permutation"``, not ``"sampling"``; ``"kernel"`` for a
Shapley-kernel-weighted linear fit, C-Shapley's Sec. 4.3.2 variant included).
A class lists what it renamed in :class:`Renames`; the base adapter applies
them to the keyword arguments before the options are built, so the options
and their checks only ever see the new names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from .._warnings import warn_caller

#: an option whose meaning depends on another: ``(options) -> options``, may warn
Adjust = Callable[[dict[str, Any]], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Renames:
    """What a class renamed: options, option values, and any class-specific move."""

    #: old option name -> new option name
    options: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: option -> {old value -> new value}
    values: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)
    #: a last step after the renames above (e.g. CShapley's ``k`` of the kernel variant)
    adjust: Adjust | None = None


NO_RENAMES = Renames()


def deprecated(message: str) -> None:
    """Warn that an old spelling was used (``FutureWarning``: meant for users)."""
    warn_caller(f"{message} The old spelling goes in the next release.", FutureWarning)


def apply_renames(who: str, options: Mapping[str, Any], renames: Renames) -> dict[str, Any]:
    """``options`` with the old spellings replaced by the new ones, each with a warning."""
    out = dict(options)
    for old, new in renames.options.items():
        if old not in out:
            continue
        if new in out:
            raise TypeError(
                f"{who}.attribute got both {old}= (its old name) and {new}=; pass {new}= only."
            )
        deprecated(f"{who}.attribute: {old}= is now called {new}=.")
        out[new] = out.pop(old)
    for option, mapping in renames.values.items():
        value = out.get(option)
        if isinstance(value, str) and value in mapping:
            deprecated(f"{who}.attribute: {option}={value!r} is now {option}={mapping[value]!r}.")
            out[option] = mapping[value]
    return renames.adjust(out) if renames.adjust is not None else out
