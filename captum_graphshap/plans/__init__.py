"""Coalition plans and their estimators (stages 1 and 3), one module per method family.

Pure tensor functions: no model is called here, so every plan and estimator
is tested against brute force on synthetic games.
"""
