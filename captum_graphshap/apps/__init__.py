"""Applications built on the library, kept behind this one boundary.

Nothing outside :mod:`captum_graphshap.apps` imports from here (a test checks
it), so the library is importable and usable without these modules and their
extras:

- :mod:`.demo` and :mod:`.cli`: the ``graphshap demo`` experiment (a CNN on
  scikit-learn's digits, the L-/C-Shapley paper's masking experiment, an HTML
  report) and the command line that runs it;
- :mod:`.minilm`: the offline all-MiniLM-L6-v2 model, a zero-shot sentiment
  classifier and :func:`~.minilm.explain_sentiment` (the ``text`` extra);
- :mod:`.toy_task`: a tiny GPT-2 trained in-process on a task with a known
  answer (tests, the LLM benchmark and tutorial 07).

Submodules are imported on use: ``import captum_graphshap.apps`` loads none
of them.
"""
