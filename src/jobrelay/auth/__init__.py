"""Authentication and tenancy (docs/explanation/design.md, the API's conventions).

- `tokens`: Cognito-style JWT verification (RS256 from a JWKS, issuer, client id, token_use,
  exp/nbf/iat). One code path for Amazon Cognito and the local issuer; settings differ.
- `local_issuer`: a key pair in the data directory that mints tokens for development/tests.
- `tenancy`: organizations, projects, membership, and the project scope check every
  resource endpoint goes through (a resource the caller cannot see is a 404).
"""

from jobrelay.auth.tokens import Caller, TokenPolicy, TokenVerifier

__all__ = ["Caller", "TokenPolicy", "TokenVerifier"]
