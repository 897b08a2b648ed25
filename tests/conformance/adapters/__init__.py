"""Tests of the trace-to-model adapters (conformance.adapters)."""
