"""The rolling pool with exclusive barriers, and the native executor."""

from .executor import NativeExecutor

__all__ = ["NativeExecutor"]
