"""Jobs engine: registry, enqueue, claims, worker loop, reconciler (the promises they keep:
docs/explanation/design.md, "The jobs engine")."""
