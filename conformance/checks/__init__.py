"""The judges of the suite, one module per area: the live layer's ``stack``, ``async_walks``, ``buffers``,
``gc`` and ``hooks``, the emu columns' ``emu_walks`` and the hook checker's ``hook_abi``. Each module declares
its experiments and registers each judge with the decorator of :mod:`conformance.suite.registry`; importing
the module is all it takes (:data:`conformance.core.registry.RULE_MODULES` lists the modules of each layer).
"""

from __future__ import annotations

from conformance.suite.verdicts import LiveExperiment


def all_experiments() -> list[LiveExperiment]:
    """Every registered live experiment (see :func:`conformance.suite.registry.all_experiments`)."""
    from conformance.suite.registry import all_experiments as registered

    return registered()
