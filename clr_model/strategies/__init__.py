"""Hypothesis strategies for every model input, beside the types they generate (one module per area)."""
