"""conformance."""
