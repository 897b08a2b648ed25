"""mutations."""
