"""Cognito JWT verification, the local token issuer and membership checks (section 6)."""
