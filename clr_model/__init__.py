"""clr_model."""
