# Vendored from pytorch/captum at commit faac08773131888714b15709b28494ebeea7f6eb:
# the pieces of captum/testing/helpers/basic.py and
# captum/testing/helpers/basic_models.py that the ported tests in this folder
# use (Captum's tests/helpers moved into the package as captum/testing/helpers).
#
# Changes: only the functions and models used are kept, unchanged, except that
# BaseTest.setUp no longer calls captum.log.patch_methods (Captum's internal
# usage logging; a no-op outside Meta), and the pyre comments are dropped.
# Vendored so that the ported tests import nothing from Captum's test helpers
# or captum._utils at runtime. lcg, rand_like, deep_copy_args and
# BasicModel_ConvNet (for test_targets/test_hook_removal/test_jit/test_llm_attr)
# are Captum 0.9.0's (the same code as at that commit).
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


import copy
import random
import unittest
from collections.abc import Callable, Generator
from typing import Any, no_type_check

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor
from torch.futures import Future

# --- captum/testing/helpers/basic.py -----------------------------------------


def deep_copy_args(func: Callable[..., Any]) -> Callable[..., Any]:
    def copy_args(*args: Any, **kwargs: Any) -> Any:
        return func(
            *(copy.deepcopy(x) for x in args),
            **{k: copy.deepcopy(v) for k, v in kwargs.items()},
        )

    return copy_args


def assertTensorAlmostEqual(
    test: unittest.TestCase,
    actual,
    expected,
    delta: float = 0.0001,
    mode: str = "sum",
) -> None:
    assert isinstance(actual, torch.Tensor), (
        "Actual parameter given for comparison must be a tensor."
    )
    if not isinstance(expected, torch.Tensor):
        expected = torch.tensor(expected, dtype=actual.dtype)
    assert actual.shape == expected.shape, (
        f"Expected tensor with shape: {expected.shape}. Actual shape {actual.shape}."
    )
    actual = actual.cpu()
    expected = expected.cpu()
    if mode == "sum":
        test.assertAlmostEqual(torch.sum(torch.abs(actual - expected)).item(), 0.0, delta=delta)
    elif mode == "max":
        # if both tensors are empty, they are equal but there is no max
        if actual.numel() == expected.numel() == 0:
            return

        if actual.size() == torch.Size([]):
            test.assertAlmostEqual(torch.max(torch.abs(actual - expected)).item(), 0.0, delta=delta)
        else:
            for index, (input, ref) in enumerate(zip(actual, expected)):
                almost_equal = abs(input - ref) <= delta
                if hasattr(almost_equal, "__iter__"):
                    almost_equal = almost_equal.all()
                assert almost_equal, (
                    f"Values at index {index}, {input} and {ref}, differ more than by {delta}"
                )
    else:
        raise ValueError("Mode for assertion comparison must be one of `max` or `sum`.")


def assertTensorTuplesAlmostEqual(
    test: unittest.TestCase,
    actual,
    expected,
    delta: float = 0.0001,
    mode: str = "sum",
) -> None:
    if isinstance(expected, tuple):
        assert len(actual) == len(expected), (
            f"the length of actual {len(actual)} != expected {len(expected)}"
        )

        for i in range(len(expected)):
            assertTensorAlmostEqual(test, actual[i], expected[i], delta, mode)
    else:
        assertTensorAlmostEqual(test, actual, expected, delta, mode)


def assertAttributionComparision(
    test: unittest.TestCase,
    attributions1: Tensor | tuple[Tensor, ...],
    attributions2: Tensor | tuple[Tensor, ...],
) -> None:
    for attribution1, attribution2 in zip(attributions1, attributions2):
        for attr_row1, attr_row2 in zip(attribution1, attribution2):
            assertTensorAlmostEqual(test, attr_row1, attr_row2, 0.05, "max")


def set_all_random_seeds(seed: int = 1234) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    torch.backends.cudnn.deterministic = True


def lcg(a: int = 16843009, b: int = 3014898611, m: int = 1 << 32) -> Generator[int, None, None]:
    """Linear congruential generator"""
    x = 1
    while True:
        x = (a * x + b) % m
        yield x


def rand_like(a: Tensor) -> Tensor:
    """Random tensors (for dependency-free version-agnostic reproducibility).
    PyTorch does not guarantee reproducible numbers across PyTorch releases,
    individual commits, or different platforms. See:
    https://pytorch.org/docs/stable/notes/randomness.html"""
    g = lcg()
    nums = [next(g) / (1 << 32) for _ in range(a.numel())]
    return torch.tensor(nums, dtype=a.dtype, device=a.device).reshape(a.shape)


class BaseTest(unittest.TestCase):
    """
    This class provides a basic framework for all Captum tests by providing
    a set up fixture, which sets a fixed random seed. Since many torch
    initializations are random, this ensures that tests run deterministically.
    """

    def setUp(self) -> None:
        set_all_random_seeds(1234)


# --- captum/testing/helpers/basic_models.py ----------------------------------


class BasicLinearModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(7, 1)

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return self.linear(torch.cat((x1, x2), dim=-1))


class MultiRelu(nn.Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.relu1 = nn.ReLU(inplace=inplace)
        self.relu2 = nn.ReLU(inplace=inplace)

    @no_type_check
    def forward(self, arg1: Tensor, arg2: Tensor) -> tuple[Tensor, Tensor]:
        return (self.relu1(arg1), self.relu2(arg2))


class BasicModel_MultiLayer(nn.Module):
    def __init__(
        self,
        inplace: bool = False,
        multi_input_module: bool = False,
    ) -> None:
        super().__init__()
        # Linear 0 is simply identity transform
        self.multi_input_module = multi_input_module
        self.linear0 = nn.Linear(3, 3)
        self.linear0.weight = nn.Parameter(torch.eye(3))
        self.linear0.bias = nn.Parameter(torch.zeros(3))
        self.linear1 = nn.Linear(3, 4)
        self.linear1.weight = nn.Parameter(torch.ones(4, 3))
        self.linear1.bias = nn.Parameter(torch.tensor([-10.0, 1.0, 1.0, 1.0]))

        self.linear1_alt = nn.Linear(3, 4)
        self.linear1_alt.weight = nn.Parameter(torch.ones(4, 3))
        self.linear1_alt.bias = nn.Parameter(torch.tensor([-10.0, 1.0, 1.0, 1.0]))
        self.multi_relu = MultiRelu(inplace=inplace)
        self.relu = nn.ReLU(inplace=inplace)

        self.linear2 = nn.Linear(4, 2)
        self.linear2.weight = nn.Parameter(torch.ones(2, 4))
        self.linear2.bias = nn.Parameter(torch.tensor([-1.0, 1.0]))

    @no_type_check
    def forward(
        self,
        x: Tensor,
        add_input: Tensor | None = None,
        multidim_output: bool = False,
    ) -> Tensor:
        input = x if add_input is None else x + add_input
        lin0_out = self.linear0(input)
        lin1_out = self.linear1(lin0_out)

        if self.multi_input_module:
            relu_out1, relu_out2 = self.multi_relu(lin1_out, self.linear1_alt(input))
            relu_out = relu_out1 + relu_out2
            # relu is not used when multi_input_module set to True,
            # so this is to set an unsued layer intentionally for testing
            # and it won't be part of return
            self.relu(lin1_out)
        else:
            relu_out = self.relu(lin1_out)
        lin2_out = self.linear2(relu_out)
        if multidim_output:
            stack_mid = torch.stack((lin2_out, 2 * lin2_out), dim=2)
            return torch.stack((stack_mid, 4 * stack_mid), dim=3)
        else:
            return lin2_out


class BasicModel_MultiLayer_with_Future(nn.Module):
    # This model is used to test the case where the model returns a future
    def __init__(self, inplace: bool = False, multi_input_module: bool = False) -> None:
        super().__init__()
        # Linear 0 is simply identity transform
        self.multi_input_module = multi_input_module
        self.linear0 = nn.Linear(3, 3)
        self.linear0.weight = nn.Parameter(torch.eye(3))
        self.linear0.bias = nn.Parameter(torch.zeros(3))
        self.linear1 = nn.Linear(3, 4)
        self.linear1.weight = nn.Parameter(torch.ones(4, 3))
        self.linear1.bias = nn.Parameter(torch.tensor([-10.0, 1.0, 1.0, 1.0]))

        self.linear1_alt = nn.Linear(3, 4)
        self.linear1_alt.weight = nn.Parameter(torch.ones(4, 3))
        self.linear1_alt.bias = nn.Parameter(torch.tensor([-10.0, 1.0, 1.0, 1.0]))
        self.multi_relu = MultiRelu(inplace=inplace)
        self.relu = nn.ReLU(inplace=inplace)

        self.linear2 = nn.Linear(4, 2)
        self.linear2.weight = nn.Parameter(torch.ones(2, 4))
        self.linear2.bias = nn.Parameter(torch.tensor([-1.0, 1.0]))

    @no_type_check
    def forward(
        self,
        x: Tensor,
        add_input: Tensor | None = None,
        multidim_output: bool = False,
    ) -> Future[Tensor]:
        input = x if add_input is None else x + add_input
        lin0_out = self.linear0(input)
        lin1_out = self.linear1(lin0_out)
        if self.multi_input_module:
            relu_out1, relu_out2 = self.multi_relu(lin1_out, self.linear1_alt(input))
            relu_out = relu_out1 + relu_out2
            # relu is not used when multi_input_module set to True,
            # so this is to set an unsued layer intentionally for testing
            # and it won't be part of return
            self.relu(lin1_out)
        else:
            relu_out = self.relu(lin1_out)
        # pyre-fixme [29]: `typing.Type[Future]` is not a function
        result = Future()
        lin2_out = self.linear2(relu_out)
        if multidim_output:
            stack_mid = torch.stack((lin2_out, 2 * lin2_out), dim=2)
            result.set_result(torch.stack((stack_mid, 4 * stack_mid), dim=3))
            return result
        else:
            result.set_result(lin2_out)
            return result


class BasicModelBoolInput_with_Future(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mod = BasicModel_MultiLayer_with_Future()

    def forward(
        self,
        x: Tensor,
        add_input: Tensor | None = None,
        mult: float = 10.0,
    ) -> Future[Tensor]:
        assert x.dtype is torch.bool, "Input must be boolean"
        return self.mod(x.float() * mult, add_input)


class BasicModelBoolInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mod = BasicModel_MultiLayer()

    def forward(
        self,
        x: Tensor,
        add_input: Tensor | None = None,
        mult: float = 10.0,
    ) -> Tensor:
        assert x.dtype is torch.bool, "Input must be boolean"
        return self.mod(x.float() * mult, add_input)


class BasicModel_MultiLayer_MultiInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = BasicModel_MultiLayer()

    @no_type_check
    def forward(self, x1: Tensor, x2: Tensor, x3: Tensor, scale: int) -> Tensor:
        return self.model(scale * (x1 + x2 + x3))


class BasicModel_MultiLayer_MultiInput_with_Future(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = BasicModel_MultiLayer_with_Future()

    @no_type_check
    def forward(self, x1: Tensor, x2: Tensor, x3: Tensor, scale: int) -> Future[Tensor]:
        return self.model(scale * (x1 + x2 + x3))


class BasicModel_ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 2, 3, 1)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(2, 4, 3, 1)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(4, 8)
        self.relu3 = nn.ReLU()
        self.fc2 = nn.Linear(8, 10)
        self.softmax = nn.Softmax(dim=1)

        self.fc1.weight = nn.Parameter(torch.ones(8, 4))
        self.fc2.weight = nn.Parameter(torch.ones(10, 8))

    @no_type_check
    def forward(self, x: Tensor) -> Tensor:
        x = self.relu1(self.conv1(x))
        x = self.pool1(x)
        x = self.relu2(self.conv2(x))
        x = self.pool2(x)
        x = x.view(-1, 4)
        x = self.relu3(self.fc1(x))
        x = self.fc2(x)
        return self.softmax(x)
