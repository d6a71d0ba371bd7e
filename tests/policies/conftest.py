"""The ``otel`` fixture (``otel_helpers``) for the otel policy's tests."""

from otel_helpers import otel  # noqa: F401 - a fixture
