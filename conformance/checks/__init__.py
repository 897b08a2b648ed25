"""The judges of the live layer, one module per area (``stack``, ``async_walks``, ``buffers``, ``gc``,
``hooks``). Each module declares its experiments and registers each judge with the decorator of
:mod:`conformance.suite.registry`; importing the module is all it takes (the registry lists the areas).
"""

from __future__ import annotations

from conformance.suite.verdicts import LiveExperiment


def all_experiments() -> list[LiveExperiment]:
    """Every registered live experiment (see :func:`conformance.suite.registry.all_experiments`)."""
    from conformance.suite.registry import all_experiments as registered

    return registered()
