"""The registry as actors: scopes, restrictions, guards, executors,
conditional activation (SPEC section 4)."""
