# Vendored from Captum 0.9.0 (the release's sdist): the entries of
# captum/testing/attr/helpers/test_config.py that list ShapleyValueSampling or
# KernelShap, and gen_test_name / parse_test_config of
# captum/testing/attr/helpers/gen_test_utils.py; the config drives the ported
# test_targets.py, test_hook_removal.py and test_jit.py.
#
# Changes:
# - In each entry's "algorithms", only ShapleyValueSampling and KernelShap are
#   kept, swapped: ShapleyValueSampling -> captum_graphshap.ShapleySampling,
#   KernelShap -> captum_graphshap.PairedKernelShap (Captum's config lists no
#   ShapleyValues, so ExactShapley has no entry). The other algorithms, the
#   entries without these two (noise tunnel, DeepLift SHAP, gradient SHAP,
#   occlusion, layer and neuron methods) and "dp_delta" (DataParallel tests,
#   not ported) are dropped.
# - The inputs are drawn under the same seed (1234) in the same order within
#   the kept entries; as the dropped entries draw nothing here, the random
#   tensors are not Captum's. Every test compares two runs on the same tensors.
# - should_create_generated_test (a scikit-learn check for Lime) is not needed;
#   typing.Dict/List/Tuple/Type are written dict/list/tuple/type (ruff).
#
# BSD 3-Clause License
#
# Copyright (c) 2019, PyTorch team
# All rights reserved.
#
# Redistribution and use in source and binary forms, with or without
# modification, are permitted provided that the following conditions are met:
#
# * Redistributions of source code must retain the above copyright notice, this
#   list of conditions and the following disclaimer.
#
# * Redistributions in binary form must reproduce the above copyright notice,
#   this list of conditions and the following disclaimer in the documentation
#   and/or other materials provided with the distribution.
#
# * Neither the name of the copyright holder nor the names of its
#   contributors may be used to endorse or promote products derived from
#   this software without specific prior written permission.
#
# THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS"
# AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE
# IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE
# DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR CONTRIBUTORS BE LIABLE
# FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL
# DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR
# SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER
# CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY,
# OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE
# OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.

from typing import Any, cast

import torch
from captum.attr import Attribution
from torch.nn import Module

from captum_graphshap import PairedKernelShap, ShapleySampling

from ._captum_helpers import (
    BasicModel_ConvNet,
    BasicModel_MultiLayer,
    BasicModel_MultiLayer_MultiInput,
    set_all_random_seeds,
)

# --- captum/testing/attr/helpers/gen_test_utils.py ---------------------------


def gen_test_name(
    prefix: str, test_name: str, algorithm: type[Attribution], noise_tunnel: bool
) -> str:
    # Generates test name for dynamically generated tests
    return (
        prefix
        + "_"
        + test_name
        + "_"
        + algorithm.__name__
        + ("NoiseTunnel" if noise_tunnel else "")
    )


def parse_test_config(
    test_config: dict,
) -> tuple[list[type[Attribution]], Module, dict[str, Any], Module, bool, bool]:
    algorithms = cast(list[type[Attribution]], test_config["algorithms"])
    model = test_config["model"]
    args = cast(dict[str, Any], test_config["attribute_args"])
    layer = test_config["layer"] if "layer" in test_config else None
    noise_tunnel = test_config["noise_tunnel"] if "noise_tunnel" in test_config else False
    baseline_distr = test_config["baseline_distr"] if "baseline_distr" in test_config else False
    return algorithms, model, args, layer, noise_tunnel, baseline_distr  # type: ignore


# --- captum/testing/attr/helpers/test_config.py ------------------------------

# Set random seeds to ensure deterministic behavior
set_all_random_seeds(1234)

config: list[dict[str, Any]] = [
    # Attribution Method Configs
    # Primary Methods (Generic Configs)
    {
        "name": "basic_single_target",
        "algorithms": [ShapleySampling, PairedKernelShap],
        "model": BasicModel_MultiLayer(),
        "attribute_args": {"inputs": torch.randn(4, 3), "target": 1},
    },
    {
        "name": "basic_multi_input",
        "algorithms": [ShapleySampling, PairedKernelShap],
        "model": BasicModel_MultiLayer_MultiInput(),
        "attribute_args": {
            "inputs": (10 * torch.randn(12, 3), 5 * torch.randn(12, 3)),
            "additional_forward_args": (2 * torch.randn(12, 3), 5),
            "target": 0,
        },
    },
    {
        "name": "basic_multi_target",
        "algorithms": [ShapleySampling, PairedKernelShap],
        "model": BasicModel_MultiLayer(),
        "attribute_args": {"inputs": torch.randn(4, 3), "target": [0, 1, 1, 0]},
    },
    {
        "name": "basic_multi_input_multi_target",
        "algorithms": [ShapleySampling, PairedKernelShap],
        "model": BasicModel_MultiLayer_MultiInput(),
        "attribute_args": {
            "inputs": (10 * torch.randn(6, 3), 5 * torch.randn(6, 3)),
            "additional_forward_args": (2 * torch.randn(6, 3), 5),
            "target": [0, 1, 1, 0, 0, 1],
        },
    },
    {
        "name": "basic_multiple_tuple_target",
        "algorithms": [ShapleySampling, PairedKernelShap],
        "model": BasicModel_MultiLayer(),
        "attribute_args": {
            "inputs": torch.randn(4, 3),
            "target": [(1, 0, 0), (0, 1, 1), (1, 1, 1), (0, 0, 0)],
            "additional_forward_args": (None, True),
        },
    },
    {
        "name": "basic_tensor_single_target",
        "algorithms": [ShapleySampling, PairedKernelShap],
        "model": BasicModel_MultiLayer(),
        "attribute_args": {"inputs": torch.randn(4, 3), "target": torch.tensor([0])},
    },
    {
        "name": "basic_tensor_multi_target",
        "algorithms": [ShapleySampling, PairedKernelShap],
        "model": BasicModel_MultiLayer(),
        "attribute_args": {
            "inputs": torch.randn(4, 3),
            "target": torch.tensor([1, 1, 0, 0]),
        },
    },
    # Primary Configs with Baselines
    {
        "name": "basic_multiple_tuple_target_with_baselines",
        "algorithms": [ShapleySampling, PairedKernelShap],
        "model": BasicModel_MultiLayer(),
        "attribute_args": {
            "inputs": torch.randn(4, 3),
            "baselines": 0.5 * torch.randn(4, 3),
            "target": [(1, 0, 0), (0, 1, 1), (1, 1, 1), (0, 0, 0)],
            "additional_forward_args": (None, True),
        },
    },
    {
        "name": "basic_tensor_single_target_with_baselines",
        "algorithms": [ShapleySampling, PairedKernelShap],
        "model": BasicModel_MultiLayer(),
        "attribute_args": {
            "inputs": torch.randn(4, 3),
            "baselines": 0.5 * torch.randn(4, 3),
            "target": torch.tensor([0]),
        },
    },
    # Perturbation-Specific Configs
    {
        "name": "conv_with_perturbations_per_eval",
        "algorithms": [ShapleySampling, PairedKernelShap],
        "model": BasicModel_ConvNet(),
        "attribute_args": {
            "inputs": torch.arange(400).view(4, 1, 10, 10).float(),
            "target": 0,
            "perturbations_per_eval": 20,
        },
    },
    {
        "name": "basic_multiple_tuple_target_with_perturbations_per_eval",
        "algorithms": [ShapleySampling, PairedKernelShap],
        "model": BasicModel_MultiLayer(),
        "attribute_args": {
            "inputs": torch.randn(4, 3),
            "target": [(1, 0, 0), (0, 1, 1), (1, 1, 1), (0, 0, 0)],
            "additional_forward_args": (None, True),
            "perturbations_per_eval": 2,
        },
    },
]
