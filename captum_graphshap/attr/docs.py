"""What ``help()``, IDEs and type hints show of each class's ``attribute``.

The argument documentation is written once and composed into every
``attribute`` docstring: Captum's arguments mean what they mean in Captum, for
every class; each class adds its ``Options`` (documented in the dataclass's
docstring, ``Args:`` style) and a sentence on what it returns. The full
signature, every option with its default and type, is published on the class
(:func:`publish_signature`). Each entry is wrapped for ``help()``, and the
options are documented there once: the ``Options`` class's own docstring then
points to ``attribute`` (the full text stays readable as ``Options._args_doc``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import textwrap
import typing
from typing import Any

#: Width of the composed ``attribute`` docstring's lines (``help()`` indents them by 4 more).
DOC_WIDTH = 84

#: Captum's arguments, in Google style, one entry per name.
CAPTUM_ARGUMENTS: dict[str, str] = {
    "inputs": ("a tensor or a tuple of tensors, batch first; float, bool, or integer token ids."),
    "baselines": (
        "values of absent features, as in Captum: None (zero), a number, a tensor with "
        "batch size 1 or N, or a tuple of these; for token ids an integer id (pad or mask)."
    ),
    "target": "output index per example, as in Captum: an int, a tuple, a tensor or a list.",
    "additional_forward_args": (
        "further arguments of ``forward_func``; tensors with batch size N are expanded "
        "per perturbation."
    ),
    "feature_mask": (
        "integer ids grouping elements into features, as in Captum; batch size 1 (shared) "
        "or N (per example). An id that occurs nowhere is a dummy feature (attribution 0)."
    ),
    "n_samples": "see the class's options below; None takes the class's default.",
    "perturbations_per_eval": (
        "coalitions per forward call, each call holding this times the batch size rows "
        "(Captum's meaning), honoured exactly. None starts near 2^19 input elements per call "
        "and doubles the calls while they get faster (engine/batching.py)."
    ),
    "return_input_shape": (
        "True (default): attributions in the inputs' shapes; False: one value per feature, "
        "a ``(N, d)`` tensor, as Captum's ``KernelShap``."
    ),
    "show_progress": (
        "show a tqdm progress bar over the model evaluations: None (default) shows one when "
        "the first chunks forecast more than 5 s of work, True always, False never."
    ),
}

SHARED_OPTIONS: dict[str, str] = {
    "references": (
        "a background set ``(B, ...)`` replacing ``baselines``; a coalition's value is "
        "the mean output over the references."
    ),
    "value": (
        '``"output"`` (the model output at ``target``) or ``"log_prob"`` (its '
        "log-softmax; without a target, of the class predicted on the full input)."
    ),
    "on_nan": (
        '``"raise"`` (default): a model output that is NaN or infinite is an error naming '
        'the coalitions and examples; ``"propagate"``: it flows into the attributions.'
    ),
    "reuse_buffers": (
        "write every forward call's rows into one reused buffer per input: faster for "
        "large inputs, but a model or hook that stores its inputs sees them overwritten."
    ),
    "return_evaluations": (
        "also return ``n_evaluations``, the model evaluations made per example (after "
        "deduplication; derivative passes counted as forward equivalents)."
    ),
}


def attribute_doc(cls: type, arguments: list[str]) -> str:
    """The ``attribute`` docstring of ``cls``: Captum's arguments, then its options."""
    options = getattr(cls, "Options", None)
    documented = _options_doc(options)
    lines = [f"{cls.__name__} attributions of each feature.", "", "Args:"]
    for name in arguments:
        if name not in documented:
            lines.append(_entry(f"{name}: {CAPTUM_ARGUMENTS[name]}"))
    for name, text in {**SHARED_OPTIONS, **documented}.items():
        lines.append(_entry(f"{name}: {text}"))
    returns = getattr(cls, "returns", "") or (
        "Attributions with the shape, dtype and type of ``inputs``; integer inputs get "
        "the default float dtype."
    )
    lines += [
        "",
        "Returns:",
        _entry(returns, indent="    "),
        _entry(
            "With any ``return_*`` option, a named tuple whose first field is the "
            "attributions, followed by the extras asked for.",
            indent="    ",
        ),
    ]
    return "\n".join(lines)


def _entry(text: str, indent: str = "        ") -> str:
    """One ``Args:`` entry (or a paragraph of ``Returns:``), wrapped at :data:`DOC_WIDTH`."""
    return textwrap.fill(
        text,
        DOC_WIDTH,
        initial_indent="    ",
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def _options_doc(options: Any) -> dict[str, str]:
    """``name: text`` of the ``Args:`` sections of an Options class and its bases."""
    if options is None:
        return {}
    entries: dict[str, str] = {}
    for klass in reversed(options.__mro__):
        entries.update(
            _args_section(klass.__dict__.get("_args_doc", klass.__dict__.get("__doc__")))
        )
    return entries


def _args_section(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    doc = inspect.cleandoc(text)
    if "Args:" not in doc:
        return {}
    entries: dict[str, str] = {}
    current = None
    for line in doc.split("Args:", 1)[1].splitlines():
        if not line.strip():
            continue
        if line.startswith("    ") and not line.startswith("        ") and ":" in line:
            name, text = line.strip().split(":", 1)
            current = name.strip()
            entries[current] = text.strip()
        elif current is not None and line.startswith("        "):
            entries[current] += " " + line.strip()
        elif not line.startswith(" "):
            break
    return entries


def publish_signature(cls: Any) -> None:
    """Give ``cls.attribute`` the full signature: Captum's arguments and the options.

    ``cls`` is a ``GameAttribution`` subclass that defines no ``attribute``.
    ``help()``, IDEs and :func:`inspect.signature` then show every keyword
    option with its default and type, and :func:`typing.get_type_hints` the
    types of every argument and of the result, although the base class takes
    the options as ``**options``.
    """
    if "attribute" in cls.__dict__:
        return
    base = next(
        klass.__dict__["attribute"]
        for klass in cls.__mro__
        if "attribute" in klass.__dict__
        and not getattr(klass.__dict__["attribute"], "_published", False)
    )
    signature = inspect.signature(base)
    hints = _resolved_hints(base)
    head = [
        p.replace(annotation=hints.get(p.name, p.annotation))
        for p in signature.parameters.values()
        if p.kind is not p.VAR_KEYWORD
    ]
    present = {p.name for p in head}
    option_hints = _resolved_hints(cls.Options)
    options = [
        inspect.Parameter(
            f.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=f.default,
            annotation=option_hints.get(f.name, f.type),
        )
        for f in dataclasses.fields(cls.Options)
        if f.name not in present
    ]
    returns = hints.get("return", signature.return_annotation)

    @functools.wraps(base)
    def bound(self: Any, *args: Any, **kwargs: Any) -> Any:
        return base(self, *args, **kwargs)

    parameters = [*head, *options]
    bound.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=parameters, return_annotation=returns
    )
    # a dict of its own: functools.wraps shares the base's
    bound.__annotations__ = {
        **{p.name: p.annotation for p in parameters if p.annotation is not p.empty},
        "return": returns,
    }
    bound.__doc__ = attribute_doc(cls, [p.name for p in head[1:]])
    _point_options_to_attribute(cls)
    bound.__qualname__ = f"{cls.__qualname__}.attribute"
    bound._published = True  # type: ignore[attr-defined]
    cls.attribute = bound


def _resolved_hints(obj: Any) -> dict[str, Any]:
    """``typing.get_type_hints(obj)``; empty where a name does not resolve (raw ones kept).

    Resolved here, as the class is created, so that the published signature
    holds types rather than strings of another module's names; an annotation
    naming what its module imports only for type checkers stays a string (a
    test asks every class's hints to resolve).
    """
    try:
        return typing.get_type_hints(obj)
    except NameError:
        return {}


def _point_options_to_attribute(cls: Any) -> None:
    """Leave the options' text in ``attribute`` alone, so ``help(cls)`` shows it once."""
    options = cls.Options
    if "_args_doc" in options.__dict__:  # shared with a class published before
        return
    options._args_doc = options.__doc__
    options.__doc__ = textwrap.fill(
        f"The keyword-only options of :class:`~{cls.__module__}.{cls.__qualname__}`, checked "
        f"before any model call; each is documented in ``{cls.__name__}.attribute``.",
        DOC_WIDTH,
        break_long_words=False,
    )


class HidesCaptumInternals(type):
    """A metaclass whose ``dir()`` leaves out Captum methods the class never calls.

    ``help()`` and IDEs list what ``dir()`` gives; Captum's ``KernelShap`` adds
    its sampler (``kernel_shap_perturb_generator``) and kernel weight, which a
    class that plans its own coalitions does not use. They stay reachable as
    attributes (Captum's code may still look them up).
    """

    def __dir__(cls) -> list[str]:
        hidden: frozenset[str] = getattr(cls, "_unused_captum_methods", frozenset())
        return [name for name in super().__dir__() if name not in hidden]
