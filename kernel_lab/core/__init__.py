"""The op contract, registry, plans and dispatch, custom ops (imports cuda)."""
