"""Jobs engine (DESIGN.md section 3): registry, enqueue, claims, worker loop, reconciler."""
