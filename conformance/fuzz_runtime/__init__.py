"""Fuzzing the runtimes with generated scenario programs (issue 12).

:mod:`.shapes` is the grammar of program shapes (data), :mod:`.strategies` the hypothesis strategies
and the known shapes beside it, :mod:`.render` turns a program into a scenario folder (``app.cs`` and
``plan.json``), :mod:`.differential` runs one program under the probe on live runtimes and judges its
traces with the suite's registered judges, :mod:`.search` drives hypothesis (known shapes first, then
generated ones, shrinking every finding to the smallest program that still shows it).
"""
