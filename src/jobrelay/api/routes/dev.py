"""Development-only routes, mounted only when the local token issuer is in use."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from jobrelay.api.deps import ServicesDep
from jobrelay.auth.local_issuer import JWKS_PATH

router = APIRouter(tags=["dev"])


@router.get(JWKS_PATH, summary="JWKS of the local token issuer (development only)")
async def local_jwks(services: ServicesDep) -> dict[str, Any]:
    assert services.local_issuer is not None
    return services.local_issuer.jwks()
