"""Test-only hooks (fault injection), outside every public signature."""
