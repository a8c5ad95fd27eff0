"""Model guards: a model class for a model, integer inputs to a float model, a model in
train mode, and attributions that are not finite.

They run around every class's estimate, whatever the method: a model class
is refused at construction (:func:`check_model_instance`), torch's dtype
error of integer inputs gets the fix (:func:`integer_inputs_hint`), the
model's buffers are restored after the call (:func:`model_state_kept`), and
an estimator never hands NaN back silently (:func:`check_finite_result`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from .._warnings import warn_caller
from ..engine.coalition_game import CoalitionGame
from .result import Outcome


def check_model_instance(forward_func: Any, owner: str) -> None:
    """Refuse an ``nn.Module`` class where a model (an instance) is expected, with the fix."""
    if isinstance(forward_func, type) and issubclass(forward_func, torch.nn.Module):
        try:
            required = [
                p.name
                for p in inspect.signature(forward_func).parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
        except (TypeError, ValueError):  # no signature to read
            required = []
        call = f"{forward_func.__name__}({', '.join(required)})"
        raise TypeError(
            f"{owner} got the class {forward_func.__name__}, not a model: pass an instance, "
            f"built with its arguments: `{owner}({call})`, as in `{owner}(Linear(8, 3))`."
        )


#: Fragments of torch's messages when an integer tensor meets float weights.
_DTYPE_MISMATCH = (
    "must have the same dtype",
    "expected scalar type",
    "not implemented for 'Long'",
    "not implemented for 'Int'",
    "expected both inputs to have same dtype",
    "should be the same",
    "found dtype Long",
    "found dtype Int",
)


@contextlib.contextmanager
def integer_inputs_hint(inputs: Any) -> Iterator[None]:
    """Re-raise torch's dtype error of integer inputs to a float model with the fix.

    Integer inputs are token ids for an embedding; a model whose first layer
    is float (a ``Linear``, a ``Conv2d``) fails on them with torch's bare
    dtype message at the first model call, which this names.
    """
    tensors = inputs if isinstance(inputs, tuple) else (inputs,)
    integer = [
        str(t.dtype).removeprefix("torch.")
        for t in tensors
        if isinstance(t, torch.Tensor) and not t.is_floating_point() and not t.is_complex()
        and t.dtype != torch.bool
    ]  # fmt: skip
    try:
        yield
    except RuntimeError as error:
        if integer and any(fragment in str(error) for fragment in _DTYPE_MISMATCH):
            raise TypeError(
                f"integer inputs ({', '.join(sorted(set(integer)))}) to a float model: cast "
                "with `.float()` (pixels, measurements), or give token ids to a model that "
                f"starts with an embedding. Torch said: {error}"
            ) from error
        raise


def check_finite_result(explainer: object, game: CoalitionGame, outcome: Outcome) -> None:
    """Raise when the attributions are not finite although every model output was.

    The one guard for every class: an estimator that divides by a zero
    variance or solves a singular system must never hand NaN back silently.
    With ``on_nan="propagate"`` and a non-finite model output the NaN is the
    model's and is returned, as asked. Attributions too large for the inputs'
    half-precision dtype are refused here as well, with the fix.
    """
    values = outcome.attributions
    if not bool(torch.isfinite(values).all()):
        if game.nonfinite_outputs[0]:
            return
        bad = (~torch.isfinite(values)).reshape(values.shape[0], -1).any(dim=1)
        raise RuntimeError(
            f"internal error: {type(explainer).__name__} computed NaN or infinite attributions "
            f"for examples {bad.nonzero()[:, 0].tolist()[:20]} ({game.num_features} features) "
            "although every model output was finite. Please report it with the class, its "
            "options, the number of features and the budget; ExactShapley (small d) or "
            "ShapleySampling give finite values meanwhile."
        )
    dtype = game.attribution_dtype()
    if dtype in (torch.float16, torch.bfloat16):
        largest = float(values.abs().max()) if values.numel() else 0.0
        limit = float(torch.finfo(dtype).max)
        if largest > limit:
            raise ValueError(
                f"the attributions reach {largest:.4g}, beyond the largest {dtype} value "
                f"({limit:.4g}) of the inputs' dtype, so they would come back infinite. Pass "
                "inputs in float32 (inputs.float()), or scale the model's output down."
            )


#: An estimate is refused as an internal error when some ``|phi_i|`` exceeds this
#: many times the spread of the example's observed coalition values (see
#: :func:`check_attribution_scale`).
SCALE_BOUND = 100.0


def attribution_scale_excess(values: Tensor, attributions: Tensor) -> Tensor:
    """``(N,)`` bool: the examples whose attributions ``(N, ...)`` are larger than the
    observed values ``(N, M)`` can justify.

    A Shapley value is an average of marginal contributions, each at most the
    spread ``max v - min v`` of the game's values, so ``|phi_i|`` above
    :data:`SCALE_BOUND` times the spread over the evaluated rows (which hold
    ``v(empty)``) can only come from an estimator amplifying rounding, a
    null direction of its design say. A relative floor of ``1e-6 max |v|``
    keeps a constant game's rounding-level estimate from counting.
    """
    values = values.reshape(values.shape[0], -1).to(torch.float64)
    spread = values.amax(dim=1) - values.amin(dim=1)
    floor = 1e-6 * values.abs().amax(dim=1) + 1e-12
    largest = attributions.reshape(attributions.shape[0], -1).abs().amax(dim=1)
    return largest.to(torch.float64) > SCALE_BOUND * spread + floor


def check_attribution_scale(method: str, values: Tensor, attributions: Tensor) -> Tensor:
    """Return ``attributions`` ``(N, d)``, or raise when an example's exceed what its
    coalition values ``(N, M)`` justify (:func:`attribution_scale_excess`).

    The shared guard of the regression estimators: a blow-up there is finite
    and efficient, so no other check would see it; it is an internal error,
    raised, never returned.
    """
    if values.dim() != 2 or values.shape[0] != attributions.shape[0] or values.numel() == 0:
        return attributions  # per-example rows: no shared plan to bound by
    excess = attribution_scale_excess(values, attributions)
    finite = torch.isfinite(attributions.reshape(attributions.shape[0], -1)).all(dim=1)
    excess = excess & finite  # non-finite results are check_finite_result's
    if bool(excess.any()):
        bad = excess.nonzero()[:, 0].tolist()
        largest = float(attributions[excess].abs().max())
        raise RuntimeError(
            f"internal error: {method} estimated attributions up to {largest:.4g} for examples "
            f"{bad[:20]}, above {SCALE_BOUND:g} x the spread of their observed coalition "
            "values: the estimator amplified rounding error. Please report it with the class, "
            "its options, the number of features and the budget; a larger budget or "
            "ShapleySampling gives a sound estimate meanwhile."
        )
    return attributions


#: layers whose output depends on train mode (batch statistics, random drops)
TRAIN_MODE_LAYERS = (
    torch.nn.modules.batchnorm._NormBase,
    torch.nn.modules.dropout._DropoutNd,
)


def reachable_modules(forward_func: Any, depth: int = 2) -> list[torch.nn.Module]:
    """The ``nn.Module`` instances a forward function calls, found where it is cheap to look.

    ``forward_func`` itself; a bound method's ``__self__``; a function's closure
    cells, default arguments and the globals its code names (``lambda ids, mask:
    bert(ids, attention_mask=mask).logits`` written at a script's top level reads
    ``bert`` as a global); ``functools.partial``'s function and arguments; the
    attributes of a callable object or of a bound method's object. ``depth``
    references deep (two: a partial of a lambda, a method of a wrapper holding the
    model). Python modules and classes are not searched, nor anything the code
    reaches at run time: a model found nowhere here is not checked.
    """
    found: dict[int, torch.nn.Module] = {}
    seen: set[int] = set()

    def visit(obj: Any, level: int) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.nn.Module):
            found[id(obj)] = obj
        elif level < depth:
            for child in _references(obj):
                visit(child, level + 1)

    visit(forward_func, 0)
    modules = list(found.values())
    # a submodule of a module found too (the closure holds bert and bert.classifier)
    # is covered by its parent's check
    inside = {id(sub) for m in modules for sub in m.modules() if sub is not m}
    return [m for m in modules if id(m) not in inside]


def _references(obj: Any) -> list[Any]:
    """What :func:`reachable_modules` looks into, one step from ``obj``."""
    if isinstance(obj, functools.partial):
        return [obj.func, *obj.args, *obj.keywords.values()]
    if inspect.ismethod(obj):
        return [obj.__self__, obj.__func__]
    if inspect.isfunction(obj):
        cells = []
        for cell in obj.__closure__ or ():
            with contextlib.suppress(ValueError):  # a cell not filled yet
                cells.append(cell.cell_contents)
        named = [obj.__globals__[n] for n in obj.__code__.co_names if n in obj.__globals__]
        return [*cells, *(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values(), *named]
    if isinstance(obj, (type, types.ModuleType)) or not hasattr(obj, "__dict__"):
        return []
    return list(vars(obj).values())  # a callable object or a bound method's object


@contextlib.contextmanager
def model_state_kept(forward_func: Any) -> Iterator[None]:
    """Warn about a model in train mode, and leave its state as it was found.

    In train mode BatchNorm normalises by the batch (so attributions depend on
    what else is in the batch) and updates its running statistics, and
    Dropout is random: nearly always a mistake when explaining. The buffers
    (running statistics, counters) are restored afterwards, so explaining
    never changes the model. The models checked are those
    :func:`reachable_modules` finds: the module, or one a closure, bound method
    or ``functools.partial`` holds.
    """
    in_train = []
    for module in reachable_modules(forward_func):
        modes = list(module.modules()) if module.training else []
        affected = sorted(
            {type(m).__name__ for m in modes if m.training and isinstance(m, TRAIN_MODE_LAYERS)}
        )
        if not affected:
            continue
        in_train.append(module)
        warn_caller(  # at the caller's line, whatever the path (Captum's LLM wrappers)
            f"the model ({type(module).__name__}) is in train mode, where its "
            f"{', '.join(affected)} layers make outputs depend on the batch and on chance, so "
            "attributions are noisy. Call model.eval() before explaining. Its buffers are "
            "restored after the call.",
            UserWarning,
        )
    saved = [
        (module, {name: buffer.clone() for name, buffer in module.named_buffers()})
        for module in in_train
    ]
    try:
        yield
    finally:
        with torch.no_grad():
            for module, buffers in saved:
                for name, buffer in module.named_buffers():
                    if name in buffers:
                        buffer.copy_(buffers[name])
