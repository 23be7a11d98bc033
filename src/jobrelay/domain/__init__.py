"""Pure domain logic (stdlib only): states, transitions, policies, errors."""
