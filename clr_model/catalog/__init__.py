"""Clause data, one module per contract document. Assembled and queried through :mod:`clr_model.clauses`."""
