"""Backbones by name (see harness.models.backbones)."""
