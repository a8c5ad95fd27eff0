"""Default explainer networks: inputs -> ``(N, d, outputs)`` raw per-feature values.

Built from the kind of the training inputs (:func:`default_explainer`):

* :class:`TabularMLP`: any float inputs, flattened and standardised (tabular
  data, tuples of tensors, images without a coarser mask);
* :class:`PatchCNN`: one float image ``(N, C, H, W)`` or ``(N, H, W)`` whose
  feature mask groups pixels (patches, superpixels): convolutions at full
  resolution, the feature map averaged over each feature's pixels, then an
  MLP over every feature's vector, so each value sees the whole image;
* :class:`TokenTransformer`: integer token ids ``(N, L)``: embeddings, a
  small transformer encoder, positions averaged per feature.

Each network's value for feature ``i`` is its output times a *gate* that is
zero exactly when the feature equals the baseline (a feature at its baseline
changes no coalition's value, so its Shapley value is 0): the signed
standardised difference ``x_i - b_i`` for one-element features (for a
linear model the value is then the gate times a constant), the root mean
square of the differences for grouped features, whether any token differs
for token ids. On the ReLU MLP of benchmarks/amortized.py (3,000 examples,
the same permutation labels) the gate took the held-out error from 0.254
to 0.225.

Every network takes the tuple of input tensors and returns the values before
the additive normalisation that makes them efficient (``training.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from .potential import ShapleyPotential

#: hidden width of the default networks
HIDDEN = 256
#: hidden width of each member of the tabular ensemble
TABULAR_HIDDEN = 128
#: independently trained members of the tabular explainer, whose mean is the
#: explainer: they fit the label noise differently, so the mean averages it
#: (ReLU MLP of benchmarks/amortized.py trained on exact values of 3,000
#: examples: one member 0.110 held-out error, the mean of four 0.095)
MEMBERS = 4
#: channels of the default CNN (its convolutions run at full resolution: kept small)
CHANNELS = 16
#: width of the token transformer
TOKEN_WIDTH = 64
#: hidden width of the default potential network (:class:`PotentialMLP`): on the ReLU
#: MLP of benchmarks/amortized.py (3,000 examples) 128 gave 0.083 held-out error in
#: 140 s, 192 0.079 in 230 s and 256 0.077 in about 330 s (one thread each); 128
#: explains twice as fast (200 examples in 5.6 ms against 7.7 ms, two threads)
POTENTIAL_HIDDEN = 128
#: the most input elements :class:`PotentialMLP` takes for an image; larger images get
#: :class:`PotentialCNN` (the MLP's first layer grows with the pixels)
MLP_ELEMENTS = 4096
#: from this many training examples the default :class:`PotentialMLP` body is a
#: :class:`BodyEnsemble` of :data:`POTENTIAL_MEMBERS`, trained apart on the same rows:
#: on the ReLU MLP of benchmarks/amortized.py at 20,000 examples one body had 0.054
#: held-out error, the mean of two 0.049 (their errors correlate at 0.62), where the
#: per-example default at twice the cost has 0.050; below it a fit of 3,000 examples,
#: already ahead of the default at equal cost, would take twice its 5-9 minutes.
#: Tabular inputs only: on 20,000 images one body had 0.26 against the default's 0.057
#: at 128, far beyond what a second one buys, in a fit of half an hour on a CPU
ENSEMBLE_EXAMPLES = 10_000
POTENTIAL_MEMBERS = 2


def feature_pooling(mask: Tensor, d: int) -> Tensor:
    """``(d, E)`` float: row ``i`` averages the ``E`` mask elements of feature ``i``."""
    flat = mask.reshape(-1)
    onehot = torch.zeros(d, flat.numel(), dtype=torch.float32, device=mask.device)
    onehot[flat, torch.arange(flat.numel(), device=mask.device)] = 1.0
    return onehot / onehot.sum(dim=1, keepdim=True).clamp_min(1.0)


def flatten(inputs: tuple[Tensor, ...] | list[Tensor]) -> Tensor:
    """The inputs as one float ``(N, E)`` matrix."""
    return torch.cat([t.reshape(t.shape[0], -1).float() for t in inputs], dim=1)


def difference_gate(differences: Tensor, pooling: Tensor) -> Tensor:
    """``(N, d)`` gates from ``(N, E)`` standardised differences from the baseline.

    Signed when every feature is one element, else the root mean square over
    each feature's elements.
    """
    ones = (pooling > 0).sum(dim=1)
    if bool((ones == 1).all()):
        return differences @ (pooling > 0).float().T
    return (differences.pow(2) @ pooling.T).sqrt()


class MemberLinear(nn.Module):
    """``members`` independent linear layers applied at once: ``(K, N, in) -> (K, N, out)``."""

    def __init__(self, members: int, inputs: int, outputs: int) -> None:
        super().__init__()
        bound = 1 / inputs**0.5  # nn.Linear's default initialisation
        self.weight = nn.Parameter(torch.empty(members, inputs, outputs).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(members, 1, outputs).uniform_(-bound, bound))

    def forward(self, x: Tensor) -> Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class TabularMLP(nn.Module):
    """Flattened, standardised inputs -> :data:`MEMBERS` MLPs -> ``(N, d, outputs)``, gated.

    ``forward`` is the members' mean; :meth:`member_values` gives each member's
    values, which training fits to the labels one by one.
    """

    pooling: Tensor
    baseline: Tensor
    shift: Tensor
    scale: Tensor

    def __init__(
        self,
        mask: Tensor,
        baseline: Tensor,
        d: int,
        outputs: int,
        hidden: int = TABULAR_HIDDEN,
        members: int = MEMBERS,
    ) -> None:
        super().__init__()
        self.config: dict[str, Any] = {"kind": "TabularMLP", "mask": mask.cpu()}
        self.config.update(baseline=baseline.cpu(), d=d, outputs=outputs, hidden=hidden)
        self.config.update(members=members)
        elements = mask.numel()
        self.d, self.outputs, self.members = d, outputs, members
        self.register_buffer("pooling", feature_pooling(mask.reshape(-1), d))
        self.register_buffer("baseline", baseline.reshape(-1).float())
        self.register_buffer("shift", torch.zeros(elements))
        self.register_buffer("scale", torch.ones(elements))
        self.body = nn.Sequential(
            MemberLinear(members, elements, hidden), nn.GELU(),
            MemberLinear(members, hidden, hidden), nn.GELU(),
            MemberLinear(members, hidden, hidden), nn.GELU(),
            MemberLinear(members, hidden, d * outputs),
        )  # fmt: skip

    def standardise(self, inputs: tuple[Tensor, ...]) -> None:
        """Set the input shift and scale from training inputs."""
        flat = flatten(inputs)
        self.shift.copy_(flat.mean(dim=0))
        self.scale.copy_(flat.std(dim=0).clamp_min(1e-6))

    def member_values(self, *inputs: Tensor) -> Tensor:
        """``(members, N, d, outputs)``: every member's gated values."""
        flat = flatten(inputs)
        gate = difference_gate((flat - self.baseline) / self.scale, self.pooling)
        standardised = ((flat - self.shift) / self.scale).expand(self.members, -1, -1)
        raw = self.body(standardised).view(self.members, -1, self.d, self.outputs)
        return raw * gate[None, :, :, None]

    def forward(self, *inputs: Tensor) -> Tensor:
        return self.member_values(*inputs).mean(dim=0)


def pooled_cnn_layers(
    channels_in: int, d: int, outputs: int
) -> tuple[nn.Sequential, nn.Sequential]:
    """Two full-resolution convolutions of :data:`CHANNELS` channels, and an MLP from
    their map pooled onto the ``d`` features to ``outputs`` values (:class:`PatchCNN`,
    :class:`PotentialCNN`)."""
    width = CHANNELS
    convolutions = nn.Sequential(
        nn.Conv2d(channels_in, width, 3, padding=1), nn.GELU(),
        nn.Conv2d(width, width, 3, padding=1), nn.GELU(),
    )  # fmt: skip
    head = nn.Sequential(
        nn.Linear(d * width, HIDDEN), nn.GELU(),
        nn.Linear(HIDDEN, HIDDEN), nn.GELU(),
        nn.Linear(HIDDEN, outputs),
    )  # fmt: skip
    return convolutions, head


class PatchCNN(nn.Module):
    """Convolutions, the map averaged over each feature's pixels, an MLP over all features."""

    pooling: Tensor
    baseline: Tensor
    shift: Tensor
    scale: Tensor

    def __init__(
        self, channels_in: int, mask: Tensor, baseline: Tensor, d: int, outputs: int
    ) -> None:
        super().__init__()
        self.config: dict[str, Any] = {"kind": "PatchCNN", "channels_in": channels_in}
        self.config.update(mask=mask.cpu(), baseline=baseline.cpu(), d=d, outputs=outputs)
        self.d, self.outputs = d, outputs
        self.register_buffer("pooling", feature_pooling(mask, d))
        self.register_buffer("baseline", baseline.float())
        self.register_buffer("shift", torch.zeros(()))
        self.register_buffer("scale", torch.ones(()))
        self.convolutions, self.head = pooled_cnn_layers(channels_in, d, d * outputs)

    def standardise(self, inputs: tuple[Tensor, ...]) -> None:
        """Set the pixel shift and scale from training images."""
        self.shift.copy_(inputs[0].float().mean())
        self.scale.copy_(inputs[0].float().std().clamp_min(1e-6))

    def forward(self, *inputs: Tensor) -> Tensor:
        image = inputs[0].float()
        if image.dim() == 3:
            image = image.unsqueeze(1)
        differences = (image - self.baseline.reshape(1, -1, *image.shape[2:])) / self.scale
        gate = (differences.pow(2).mean(dim=1).flatten(1) @ self.pooling.T).sqrt()  # (N, d)
        maps = self.convolutions((image - self.shift) / self.scale).flatten(2)  # (N, C, H W)
        per_feature = maps @ self.pooling.T  # (N, C, d)
        raw = self.head(per_feature.flatten(1)).view(-1, self.d, self.outputs)
        return raw * gate.unsqueeze(-1)


class TokenTransformer(nn.Module):
    """Token and position embeddings, a 2-layer encoder, positions averaged per feature."""

    pooling: Tensor
    baseline: Tensor

    def __init__(
        self, vocabulary: int, mask: Tensor, baseline: Tensor, d: int, outputs: int
    ) -> None:
        super().__init__()
        self.config: dict[str, Any] = {"kind": "TokenTransformer", "vocabulary": vocabulary}
        self.config.update(mask=mask.cpu(), baseline=baseline.cpu(), d=d, outputs=outputs)
        self.d, self.outputs, self.vocabulary = d, outputs, vocabulary
        width = TOKEN_WIDTH
        self.register_buffer("pooling", feature_pooling(mask, d))
        self.register_buffer("baseline", baseline.reshape(-1).long())
        self.tokens = nn.Embedding(vocabulary, width)
        self.positions = nn.Parameter(torch.zeros(mask.shape[-1], width))
        layer = nn.TransformerEncoderLayer(width, 4, width * 4, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(width, outputs)

    def standardise(self, inputs: tuple[Tensor, ...]) -> None:
        """Nothing to standardise for token ids."""

    def forward(self, *inputs: Tensor) -> Tensor:
        ids = inputs[0].long()
        changed = torch.ne(ids, self.baseline).float() @ self.pooling.T
        gate = torch.gt(changed, 0).float()  # (N, d): any token of the feature differs
        hidden = self.encoder(self.tokens(ids) + self.positions)  # (N, L, C)
        per_feature = self.pooling @ hidden  # (N, d, C)
        return self.head(per_feature) * gate.unsqueeze(-1)


class PotentialMLP(nn.Module):
    """A potential body (``potential.py``): masked inputs, presence -> MLP -> ``(R, outputs)``.

    The inputs are flattened and their differences from the baseline
    standardised; the ``d`` presence indicators go beside them, so the network
    knows which features are at the baseline even where an input element
    happens to equal it.
    """

    baseline: Tensor
    scale: Tensor

    def __init__(
        self, baseline: Tensor, d: int, outputs: int, hidden: int = POTENTIAL_HIDDEN
    ) -> None:
        super().__init__()
        self.config: dict[str, Any] = {"kind": "PotentialMLP", "baseline": baseline.cpu()}
        self.config.update(d=d, outputs=outputs, hidden=hidden)
        elements = baseline.numel()
        self.register_buffer("baseline", baseline.reshape(-1).float())
        self.register_buffer("scale", torch.ones(elements))
        self.body = nn.Sequential(
            nn.Linear(elements + d, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(),
            nn.Linear(hidden, outputs),
        )  # fmt: skip

    def standardise(self, inputs: tuple[Tensor, ...]) -> None:
        """Set the input scale from training inputs."""
        self.scale.copy_(flatten(inputs).std(dim=0).clamp_min(1e-6))

    def forward(self, *inputs: Tensor) -> Tensor:
        *masked, present = inputs
        flat = (flatten(masked) - self.baseline) / self.scale
        return self.body(torch.cat([flat, present.to(flat.dtype)], dim=1))


class BodyEnsemble(nn.Module):
    """Potential bodies trained apart on the same coalition rows; the body is their mean.

    ``phi`` is linear in the potential, so the ensemble's Shapley values are the
    mean of its members'. ``members``: the bodies, or their configurations
    (:func:`network_config`, when a saved state is rebuilt).
    """

    def __init__(self, members: Sequence[nn.Module] | Sequence[dict[str, Any]]) -> None:
        super().__init__()
        modules = [build_network(m) if isinstance(m, dict) else m for m in members]
        self.members = nn.ModuleList(modules)
        self.config: dict[str, Any] = {
            "kind": "BodyEnsemble",
            "members": [network_config(m) for m in modules],
        }

    def standardise(self, inputs: tuple[Tensor, ...]) -> None:
        """Each member's input standardisation from training inputs."""
        for member in self.members:
            standardise = getattr(member, "standardise", None)
            if standardise is not None:
                standardise(inputs)

    def forward(self, *inputs: Tensor) -> Tensor:
        return torch.stack([member(*inputs) for member in self.members]).mean(dim=0)


class PotentialCNN(nn.Module):
    """A potential body for images above :data:`MLP_ELEMENTS` elements: the masked image's
    differences from the baseline and the presence map, convolutions at full
    resolution, the map averaged over each feature's pixels, an MLP -> ``(R, outputs)``."""

    pooling: Tensor
    mask: Tensor
    baseline: Tensor
    scale: Tensor

    def __init__(
        self, channels_in: int, mask: Tensor, baseline: Tensor, d: int, outputs: int
    ) -> None:
        super().__init__()
        self.config: dict[str, Any] = {"kind": "PotentialCNN", "channels_in": channels_in}
        self.config.update(mask=mask.cpu(), baseline=baseline.cpu(), d=d, outputs=outputs)
        self.register_buffer("pooling", feature_pooling(mask, d))
        self.register_buffer("mask", mask.reshape(-1).long())
        self.register_buffer("baseline", baseline.float())
        self.register_buffer("scale", torch.ones(()))
        # the image's channels and its presence map
        self.convolutions, self.head = pooled_cnn_layers(channels_in + 1, d, outputs)

    def standardise(self, inputs: tuple[Tensor, ...]) -> None:
        """Set the pixel scale from training images."""
        self.scale.copy_(inputs[0].float().std().clamp_min(1e-6))

    def forward(self, *inputs: Tensor) -> Tensor:
        image, present = inputs[0].float(), inputs[-1]
        if image.dim() == 3:
            image = image.unsqueeze(1)
        differences = (image - self.baseline.reshape(1, -1, *image.shape[2:])) / self.scale
        presence = present[:, self.mask].view(-1, 1, *image.shape[2:]).to(image.dtype)
        maps = self.convolutions(torch.cat([differences, presence], dim=1)).flatten(2)
        return self.head((maps @ self.pooling.T).flatten(1))


class PotentialTransformer(nn.Module):
    """A potential body for token ids: embeddings, a 2-layer encoder, the mean over
    positions -> ``(R, outputs)``. Masked tokens hold the baseline id; each
    position also gets a learnt vector where its feature is absent."""

    pooling: Tensor
    positions_feature: Tensor

    def __init__(self, vocabulary: int, mask: Tensor, d: int, outputs: int) -> None:
        super().__init__()
        self.config: dict[str, Any] = {"kind": "PotentialTransformer", "vocabulary": vocabulary}
        self.config.update(mask=mask.cpu(), d=d, outputs=outputs)
        self.vocabulary = vocabulary
        width = TOKEN_WIDTH
        self.register_buffer("positions_feature", mask.reshape(-1).long())
        self.tokens = nn.Embedding(vocabulary, width)
        self.positions = nn.Parameter(torch.zeros(mask.shape[-1], width))
        self.absent = nn.Parameter(torch.zeros(width))
        layer = nn.TransformerEncoderLayer(width, 4, width * 4, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(width, outputs)

    def standardise(self, inputs: tuple[Tensor, ...]) -> None:
        """Nothing to standardise for token ids."""

    def forward(self, *inputs: Tensor) -> Tensor:
        ids, present = inputs[0].long(), inputs[-1]
        absent = 1 - present[:, self.positions_feature]  # (R, L)
        hidden = self.tokens(ids) + self.positions + absent[..., None] * self.absent
        return self.head(self.encoder(hidden).mean(dim=1))


def token_vocabulary(inputs: tuple[Tensor, ...], baseline: Tensor) -> int | None:
    """The vocabulary to embed for one ``(N, L)`` tensor of token ids (the ids and
    the baseline's), or None: not token inputs."""
    first = inputs[0]
    if len(inputs) == 1 and not first.is_floating_point() and first.dim() == 2:
        return max(int(first.max()), int(baseline.max())) + 1
    return None


def grouped_image(inputs: tuple[Tensor, ...], mask: Tensor) -> tuple[int, Tensor] | None:
    """``(channels, (H, W) mask)`` for one float image batch ``(N, H, W)`` or
    ``(N, C, H, W)`` whose channels are grouped as one feature (``mask``, one
    example's, the same in every channel); else None."""
    first = inputs[0]
    if len(inputs) != 1 or not first.is_floating_point() or first.dim() not in (3, 4):
        return None
    if first.dim() == 3:
        return 1, mask
    if not bool((mask == mask[0]).all()):
        return None
    return first.shape[1], mask[0]


def default_potential(
    inputs: tuple[Tensor, ...],
    masks: tuple[Tensor, ...],
    baselines: tuple[Tensor, ...],
    d: int,
    outputs: int,
) -> ShapleyPotential:
    """The default :class:`~.potential.ShapleyPotential` for training inputs of this kind:
    :class:`PotentialTransformer` for token ids, :class:`PotentialCNN` for one image of
    more than :data:`MLP_ELEMENTS` elements whose channels share the mask,
    :class:`PotentialMLP` otherwise (for inputs other than images, a
    :class:`BodyEnsemble` of them from :data:`ENSEMBLE_EXAMPLES` training examples);
    bound to the fit's masks ``(1, *S)`` and baselines ``(1, 1, *S)``."""
    first = inputs[0]
    shapes = [tuple(t.shape[1:]) for t in inputs]
    mask, baseline = masks[0][0].expand(shapes[0]), baselines[0][0, 0].expand(shapes[0])
    body: nn.Module
    vocabulary = token_vocabulary(inputs, baseline)
    image = grouped_image(inputs, mask)
    if vocabulary is not None:
        body = PotentialTransformer(vocabulary, mask, d, outputs)
    elif image is not None and MLP_ELEMENTS < first[0].numel():
        channels, image_mask = image
        body = PotentialCNN(channels, image_mask, baseline.to(torch.float32), d, outputs)
    else:
        baseline = torch.cat(
            [b[0, 0].expand(s).reshape(-1).float() for b, s in zip(baselines, shapes)]
        )
        tabular = image is None  # an image's limit is the body over its pixels (the guide)
        members = POTENTIAL_MEMBERS if tabular and len(first) >= ENSEMBLE_EXAMPLES else 1
        bodies = [PotentialMLP(baseline, d, outputs) for _ in range(members)]
        body = bodies[0] if members == 1 else BodyEnsemble(bodies)
    potential = ShapleyPotential(body)
    potential.bind(list(masks), list(baselines), shapes, d)
    return potential


def default_explainer(
    inputs: tuple[Tensor, ...],
    masks: tuple[Tensor, ...],
    baselines: tuple[Tensor, ...],
    d: int,
    outputs: int,
) -> nn.Module:
    """The default network for training inputs of this kind (see the module's notes).

    ``masks`` are the fit's shared feature masks ``(1, *S)``, ``baselines``
    its shared baselines ``(1, 1, *S)``, one per input.
    """
    first = inputs[0]
    shapes = [t.shape[1:] for t in inputs]
    mask = [m[0].expand(s) for m, s in zip(masks, shapes)]
    baseline = [b[0, 0].expand(s).to(t.dtype) for b, s, t in zip(baselines, shapes, inputs)]
    vocabulary = token_vocabulary(inputs, baseline[0])
    if vocabulary is not None:
        return TokenTransformer(vocabulary, mask[0], baseline[0], d, outputs)
    image = grouped_image(inputs, mask[0])
    if image is not None and d < first[0].numel():
        channels, image_mask = image
        return PatchCNN(channels, image_mask, baseline[0], d, outputs)
    flat_mask = torch.cat([m.reshape(-1) for m in mask])
    return TabularMLP(flat_mask, flatten([b[None] for b in baseline])[0], d, outputs)


#: the default networks by name (:func:`build_network`)
NETWORKS: dict[str, type[nn.Module]] = {
    "TabularMLP": TabularMLP,
    "PatchCNN": PatchCNN,
    "TokenTransformer": TokenTransformer,
    "PotentialMLP": PotentialMLP,
    "PotentialCNN": PotentialCNN,
    "PotentialTransformer": PotentialTransformer,
    "BodyEnsemble": BodyEnsemble,
}


def network_config(network: nn.Module) -> dict[str, Any]:
    """How to rebuild ``network``: a default network's arguments, or ``{"kind": "custom"}``."""
    if isinstance(network, ShapleyPotential):
        body = network_config(network.body)
        return (
            {"kind": "custom"}
            if body["kind"] == "custom"
            else {"kind": "ShapleyPotential", "body": body}
        )
    config = getattr(network, "config", None)
    if isinstance(config, dict) and config.get("kind") in NETWORKS:
        return dict(config)
    return {"kind": "custom"}


def build_network(config: dict[str, Any]) -> nn.Module:
    """A default network from :func:`network_config` (untrained)."""
    kind = config.get("kind")
    if kind == "ShapleyPotential":  # bound to the fit's masks by the caller
        return ShapleyPotential(build_network(config["body"]))
    if kind not in NETWORKS:
        raise ValueError(
            "the state holds a custom explainer network: pass one of the same architecture "
            "as AmortizedShapley(model, explainer=...) before load_state_dict."
        )
    arguments = {k: v for k, v in config.items() if k != "kind"}
    return NETWORKS[kind](**arguments)
