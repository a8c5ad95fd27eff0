# %% [markdown]
# # Exact Shapley and Myerson values with captum-graphshap
#
# This walk-through explains a small text-like model three ways:
#
# 1. Captum's `ShapleyValues` (walks all d! orderings),
# 2. `ExactShapley` (evaluates each of the 2^d coalitions once, batched),
# 3. `MyersonValue` on a line graph (only the d(d+1)/2 connected coalitions).
#
# Run it as a script (`python tutorials/01_exact_and_myerson.py`) or open it
# as a notebook with jupytext.

# %%
import time

import torch
from captum.attr import ShapleyValues, visualization

from captum_graphshap import ExactShapley, LineGraph, MyersonValue

torch.manual_seed(0)

# %% [markdown]
# A toy "sentiment" model over token ids: an embedding, a width-2 convolution
# (neighbouring tokens interact, distant ones do not) and a linear head.
# Token id 0 is the pad token we use as the baseline.

# %%
words = ["the", "movie", "was", "not", "good", "at", "all"]
vocab = {w: i + 1 for i, w in enumerate(words)}
tokens = torch.tensor([[vocab[w] for w in words]])


class TokenCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(len(vocab) + 1, 8, padding_idx=0)
        self.conv = torch.nn.Conv1d(8, 8, kernel_size=2)
        self.head = torch.nn.Linear(8, 2)

    def forward(self, ids):
        h = torch.tanh(self.conv(self.embed(ids).transpose(1, 2)))
        return self.head(h.sum(dim=2))


model = TokenCNN().eval()

# %% [markdown]
# ## The same call as Captum
#
# `ExactShapley` takes Captum's arguments. Integer inputs work as they are:
# the baseline is the pad id.

# %%
t0 = time.perf_counter()
ours = ExactShapley(model).attribute(tokens, baselines=0, target=1)
t_ours = time.perf_counter() - t0

t0 = time.perf_counter()
captum = ShapleyValues(model).attribute(tokens, baselines=0, target=1, perturbations_per_eval=64)
t_captum = time.perf_counter() - t0

print(f"ExactShapley {t_ours * 1000:.0f} ms, Captum ShapleyValues {t_captum * 1000:.0f} ms")
print("max difference:", float((ours - captum).abs().max()))

# %% [markdown]
# ## Efficiency: the attributions add up to f(x) - f(baseline)

# %%
with torch.no_grad():
    gain = model(tokens)[0, 1] - model(torch.zeros_like(tokens))[0, 1]
print(f"sum of attributions {float(ours.sum()):+.5f}, f(x) - f(pad) {float(gain):+.5f}")

# %% [markdown]
# ## Myerson value on the line of tokens
#
# The Myerson value only lets contiguous runs of tokens cooperate. It needs
# the model on d(d+1)/2 + 1 = 29 coalitions instead of 2^7 = 128, and for
# long texts that is the difference between quadratic and exponential.

# %%
myerson = MyersonValue(model).attribute(tokens, baselines=0, target=1, graph=LineGraph(len(words)))
for word, a, b in zip(words, ours[0].tolist(), myerson[0].tolist()):
    print(f"{word:>6}  shapley {a:+.4f}  myerson {b:+.4f}")

# %% [markdown]
# Attributions come back in the input's shape, so Captum's visualisation
# helpers work on them unchanged.

# %%
html = visualization.format_word_importances(words, ours[0] / ours[0].abs().max())
print(html[:80], "...")
