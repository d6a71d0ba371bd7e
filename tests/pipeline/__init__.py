"""Conformance tests for one call's trip through the pipeline (SPEC section 5)."""
