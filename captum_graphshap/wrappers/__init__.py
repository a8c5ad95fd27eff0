"""Captum's wrappers, admitting this package's classes.

:class:`captum.attr.NoiseTunnel` and :class:`captum.attr.LLMAttribution`
accept our classes as they are (they derive from the Captum class of their
role). Captum's ``DataLoaderAttribution`` checks ``type(method) in
{FeatureAblation}``; :class:`DataLoaderAttribution` here is the same class
without that check.
"""

from .dataloader import DataLoaderAttribution

__all__ = ["DataLoaderAttribution"]
