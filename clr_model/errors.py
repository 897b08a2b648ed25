"""Typed errors of the model. The model is total: for any input it returns a result or raises one of these."""

from __future__ import annotations


class ModelError(Exception):
    """Base of every error the model raises on purpose."""


class InvalidInput(ModelError):
    """An input the contract does not define (e.g. parallel arrays of different lengths)."""
