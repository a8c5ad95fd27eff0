"""Captum's ``DataLoaderAttribution`` with any perturbation method of this package."""

from __future__ import annotations

from copy import copy
from typing import Any

import captum.attr as captum_attr
from captum.attr import Attribution, PerturbationAttribution
from torch import Tensor


class DataLoaderAttribution(captum_attr.DataLoaderAttribution):
    """Captum's dataset-level attribution with a Shapley method of this package.

    Identical to :class:`captum.attr.DataLoaderAttribution` except that the
    method may be any :class:`~captum.attr.PerturbationAttribution` (Captum's
    accepts only ``FeatureAblation``, by exact type). The wrapped method sees
    one "example" whose features are the dataset's features and whose output
    is the reduced metric, a vector when ``reduce`` concatenates: without a
    target it is explained per output, as Captum does.

    Example:
        >>> import torch
        >>> from torch.utils.data import DataLoader, TensorDataset
        >>> from captum_graphshap import ExactShapley
        >>> from captum_graphshap.wrappers import DataLoaderAttribution
        >>> model = torch.nn.Linear(3, 1)
        >>> data = DataLoader(TensorDataset(torch.ones(4, 3)), batch_size=2)
        >>> attr = DataLoaderAttribution(ExactShapley(model)).attribute(
        ...     data, reduce=lambda acc, out, _: out.sum() if acc is None else acc + out.sum()
        ... )
        >>> attr[0].shape
        torch.Size([1, 3])
    """

    def __init__(self, attr_method: Attribution) -> None:
        """
        Args:
            attr_method: an instance of a perturbation method (ours or Captum's).
        """
        if not isinstance(attr_method, PerturbationAttribution):
            raise TypeError(
                "DataLoaderAttribution needs a perturbation method (e.g. ExactShapley, "
                f"ShapleySampling), got {type(attr_method).__name__}."
            )
        Attribution.__init__(self, attr_method.forward_func)
        # a shallow copy, so the user's instance keeps its forward_func
        method = copy(attr_method)
        method.forward_func = self._forward_with_dataloader
        attribute = method.attribute

        def per_output(inputs: Tensor, *args: Any, **kwargs: Any) -> Tensor:
            # FeatureAblation's layout, which the wrapper reshapes: (outputs, features)
            attributions = attribute(inputs, *args, **kwargs)
            return attributions.reshape(-1, inputs.shape[-1])

        method.attribute = per_output
        self.attr_method = method
